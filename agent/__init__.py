"""The chat agent: one turn of the chat model with the memory tools, free of Telegram.

Import direction: `bot → agent → web, mcp_client → reminders, media → memory → models → primitives`.
"""
