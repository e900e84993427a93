"""Reminders: when one falls due (rules), the book of reminders in the database, the scheduler.

Import direction: `bot → agent → reminders, media → memory → models`; reminders and media do
not import each other.
"""
