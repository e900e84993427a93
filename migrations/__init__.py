"""The database schema as numbered SQL files (memory/db.py applies them at start).

A package only so the files travel with the bot when it is installed (`pip install .`, as the
image does): they are package data and land beside memory/, where memory/db.py looks for them.
"""
