"""`python -m bot backup PATH`: a consistent copy of the live database, safe while the bot runs.

Copying the file with `cp` while the bot writes can capture half a transaction, or miss the
part still in the -wal file. SQLite's backup API reads the database in one read transaction, so
the copy is exactly the state after some commit. It runs on its own connection: in WAL mode the
bot keeps writing meanwhile and is never blocked. The copy is written beside PATH and renamed
into place only after it passes `PRAGMA integrity_check`, so PATH never holds half a backup.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bot import BotError


class BackupError(BotError):
    """The backup could not be made; the message says why in one line."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size_bytes: int
    schema_version: int
    messages: int


def _connect_existing(path: Path) -> sqlite3.Connection:
    """Open a database that must already exist (plain connect would create an empty one)."""
    if not path.is_file():
        raise BackupError(f"database {path} does not exist")
    conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30)
    conn.execute("PRAGMA secure_delete=ON")  # as every connection of ours (memory/db.py)
    return conn


def resolve_target(target: Path, now: datetime | None = None) -> Path:
    """A directory gets a timestamped file inside it; anything else is the file itself."""
    if target.is_dir():
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
        return target / f"mnemobot-{stamp}.sqlite3"
    return target


def backup_database(source: Path, target: Path) -> BackupResult:
    """Copy `source` to `target` consistently; blocking, so call it in a thread from async code."""
    target = resolve_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    src = _connect_existing(source)
    try:
        dst = sqlite3.connect(partial)
        dst.execute("PRAGMA secure_delete=ON")
        try:
            # pages=-1: one step inside one read transaction. A stepped backup restarts whenever
            # another connection writes, which on a busy bot could mean never finishing.
            src.backup(dst, pages=-1)
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal
            check = dst.execute("PRAGMA integrity_check").fetchall()
            if check != [("ok",)]:
                raise BackupError(f"copy failed integrity_check: {check[:3]}")
            version = int(dst.execute("PRAGMA user_version").fetchone()[0])
            has_messages = dst.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='messages'"
            ).fetchone()
            messages = (
                int(dst.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
                if has_messages
                else 0
            )
        finally:
            dst.close()
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(f"backup of {source} failed: {exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    with partial.open("rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, target)
    return BackupResult(target, target.stat().st_size, version, messages)


def _default_database() -> Path:
    """DATABASE_PATH from the environment or .env, without requiring the bot's other settings."""
    if os.environ.get("DATABASE_PATH"):
        return Path(os.environ["DATABASE_PATH"])
    from bot.config import ConfigError, load_settings

    try:
        return load_settings().DATABASE_PATH
    except ConfigError:
        return Path("data/mnemobot.sqlite3")


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="file (or directory) to write the copy to")
    parser.add_argument(
        "--database", type=Path, default=None, help="database to copy (default: DATABASE_PATH)"
    )


def run_backup(args: argparse.Namespace) -> int:
    source = args.database or _default_database()
    try:
        result = backup_database(source, args.path)
    except BackupError as exc:
        print(f"backup failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"backup written to {result.path} ({result.size_bytes} bytes, schema "
        f"{result.schema_version}, {result.messages} messages, integrity ok)"
    )
    return 0


def add_backup_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `python -m bot backup PATH [--database DB]`."""
    parser = subparsers.add_parser(
        "backup", help="make a consistent copy of the database while the bot runs"
    )
    _configure(parser)
    parser.set_defaults(func=run_backup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bot.cli.backup",
        description="Make a consistent copy of the database while the bot runs.",
    )
    _configure(parser)
    return run_backup(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
