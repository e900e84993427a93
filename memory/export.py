"""Export a chat's memory as two Markdown files, MEMORY.md and HISTORY.md, and its archive
(the words of consolidated sessions, memory/recall/archive.py) as TRANSCRIPT.md.

A self-hoster can read, grep and back up what the bot remembers without SQL. The files are
generated from the database (the single source of truth) and written atomically, so a reader
never sees half a file.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from memory.longterm import HistoryEntry, MemoryRepository
from memory.recall.archive import ArchivedMessage, archived_messages


@dataclass(frozen=True)
class ExportResult:
    memory_path: Path
    history_path: Path
    memory_chars: int
    history_entries: int
    transcript_path: Path
    archived_messages: int


def render_memory(content: str) -> str:
    """The memory exactly as the model maintains it (markdown), newline-terminated."""
    return content.strip() + "\n" if content.strip() else ""


def render_history(entries: list[HistoryEntry]) -> str:
    """One entry per paragraph, oldest first, each starting with its [YYYY-MM-DD HH:MM]."""
    return "".join(entry.entry.strip() + "\n\n" for entry in entries)


def render_transcript(messages: list[ArchivedMessage]) -> str:
    """One heading per session, then one `[YYYY-MM-DD HH:MM] role: text` line per message."""
    parts: list[str] = []
    session = None
    for message in messages:
        if message.session_id != session:
            session = message.session_id
            parts.append(f"\n## Session {session}\n\n" if parts else f"## Session {session}\n\n")
        stamp = message.created_at[:16].replace("T", " ")
        parts.append(f"[{stamp}] {message.role}: {message.content.strip()}\n")
    return "".join(parts)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


def write_export(out_dir: Path, files: dict[str, str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        _write_atomically(out_dir / name, text)
        paths.append(out_dir / name)
    return paths


async def export_chat(repo: MemoryRepository, chat_id: int, out_dir: Path) -> ExportResult:
    """Write DIR/MEMORY.md, DIR/HISTORY.md and DIR/TRANSCRIPT.md for `chat_id`."""
    memory = await repo.get(chat_id)
    history = await repo.history(chat_id)
    archived = await archived_messages(repo.db, chat_id)
    files = {
        "MEMORY.md": render_memory(memory.content),
        "HISTORY.md": render_history(history),
        "TRANSCRIPT.md": render_transcript(archived),
    }
    memory_path, history_path, transcript_path = await asyncio.to_thread(
        write_export, out_dir, files
    )
    return ExportResult(
        memory_path,
        history_path,
        len(memory.content),
        len(history),
        transcript_path,
        len(archived),
    )
