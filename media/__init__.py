"""Media made readable for a model: voice (Ogg length), images, documents and their bounded
reader child, and the inbox of files waiting for a turn. No Telegram here.

Import direction: `bot → agent → reminders, media → memory → models`; media and reminders do
not import each other.
"""
