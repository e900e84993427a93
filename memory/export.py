"""Export a chat's memory as the seed's two files: MEMORY.md and HISTORY.md.

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


@dataclass(frozen=True)
class ExportResult:
    memory_path: Path
    history_path: Path
    memory_chars: int
    history_entries: int


def render_memory(content: str) -> str:
    """The memory exactly as the model maintains it (markdown), newline-terminated."""
    return content.strip() + "\n" if content.strip() else ""


def render_history(entries: list[HistoryEntry]) -> str:
    """One entry per paragraph, oldest first, each starting with its [YYYY-MM-DD HH:MM]."""
    return "".join(entry.entry.strip() + "\n\n" for entry in entries)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


def write_export(out_dir: Path, memory_text: str, history_text: str) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    memory_path = out_dir / "MEMORY.md"
    history_path = out_dir / "HISTORY.md"
    _write_atomically(memory_path, memory_text)
    _write_atomically(history_path, history_text)
    return memory_path, history_path


async def export_chat(repo: MemoryRepository, chat_id: int, out_dir: Path) -> ExportResult:
    """Write DIR/MEMORY.md and DIR/HISTORY.md for `chat_id`."""
    memory = await repo.get(chat_id)
    history = await repo.history(chat_id)
    memory_path, history_path = await asyncio.to_thread(
        write_export, out_dir, render_memory(memory.content), render_history(history)
    )
    return ExportResult(memory_path, history_path, len(memory.content), len(history))
