"""`python -m bot export CHAT_ID --out DIR`: one chat's MEMORY.md and HISTORY.md from the database.

An operator's tool: it opens the database file itself and needs neither Telegram nor a
provider, so it lives beside `backup`, apart from the handlers that serve chats.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from memory.longterm import MemoryRepository


def add_export_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = subparsers.add_parser(
        "export", help="write MEMORY.md and HISTORY.md of one chat from the database"
    )
    export.add_argument("chat_id", type=int, help="Telegram chat id")
    export.add_argument("--out", type=Path, required=True, help="output directory")
    export.add_argument(
        "--db", type=Path, default=None, help="SQLite file (default: DATABASE_PATH)"
    )
    export.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from memory.db import Database
    from memory.export import export_chat

    db_path: Path = args.db or load_settings().DATABASE_PATH
    if not db_path.exists():
        raise SystemExit(f"mnemobot: database {db_path} does not exist")

    async def export() -> int:
        db = await Database.open(db_path)
        try:
            result = await export_chat(MemoryRepository(db), args.chat_id, args.out)
        finally:
            await db.close()
        print(
            f"wrote {result.memory_path} ({result.memory_chars} chars) and "
            f"{result.history_path} ({result.history_entries} entries)"
        )
        return 0

    return asyncio.run(export())
