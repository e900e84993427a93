"""The chat agent: one turn of the chat model with the memory tools, free of Telegram.

Import direction: `bot → agent → web → reminders, media → memory → models`.
"""
