"""Held turns across several stops, in-process (`serve()` with a stop event instead of SIGTERM):
a split message held during a stop is replayed whole, and a replayed turn cut short by a second
stop is not replayed a third time."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.app import build_application, prepare
from bot.runner import serve
from bot.ui.render import TELEGRAM_TEXT_LIMIT
from tests.bot.test_joiner import _long_real_text, client_split
from tests.fakes.providers import Reply
from tests.support.e2e_bot import OWNER, FakeServers, confirmed, fake_settings, query, showing
from tests.support.shared_workers import shared_workers
from tests.support.waits import within

INTERRUPTED = "(interrupted: the bot restarted; please ask again)"
SLOW = " ".join(f"word{i}" for i in range(300))


class Served:
    """The real app served by `serve()` until `stop()`, which stops it gracefully."""

    def __init__(self, settings: Any) -> None:
        self._stop = asyncio.Event()
        self.application = build_application(prepare(settings), workers=shared_workers())
        self._task = asyncio.create_task(serve(self.application, settings, stop=self._stop))

    async def stop(self) -> None:
        self._stop.set()
        await within(self._task, timeout=30)


async def test_held_split_message_is_replayed_whole_and_only_once(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    long_text = _long_real_text("en", TELEGRAM_TEXT_LIMIT + 800)
    parts = client_split(long_text, keep_space=True)
    assert len(parts) >= 2
    async with FakeServers() as fakes:
        tg, openai = fakes.tg, fakes.openai
        settings = fake_settings(
            fakes,
            ALLOWED_USER_IDS=str(OWNER),
            DATABASE_PATH=db_path,
            SHUTDOWN_GRACE_SECONDS=0.2,
            SPLIT_MESSAGE_WINDOW=5,
            MAX_INPUT_CHARS=100_000,
        )
        openai.set_default("*", Reply(SLOW, chunk_chars=4, chunk_delay=0.1))

        # Run 1: a reply streams; a split long message queues behind it; stop.
        bot = Served(settings)
        tg.push(tg.make_text_update(OWNER, OWNER, "first"))
        await tg.wait_for(
            lambda: any(text.startswith("word0") for text in showing(tg, OWNER)), timeout=30
        )
        ids = [tg.push(tg.make_text_update(OWNER, OWNER, part)) for part in parts]
        await tg.wait_for(lambda: confirmed(tg, ids[-1]), timeout=30)
        await bot.stop()
        assert tg.bot_messages(OWNER)[-1].text.endswith(INTERRUPTED)
        assert len(openai.requests) == 1
        assert [row[0] for row in query(db_path, "SELECT update_id FROM held_updates")] == ids

        # Run 2: the held parts come back as one turn; a second stop cuts its reply short.
        bot = Served(settings)
        await tg.wait_for(
            lambda: (
                len(openai.requests) == 2
                and any(
                    d["parsed_text"].startswith("word0") for d in tg.current_drafts(OWNER).values()
                )
            ),
            timeout=30,
        )
        await bot.stop()
        assert openai.requests[1].body["messages"][-1]["content"] == long_text
        assert tg.bot_messages(OWNER)[-1].text.endswith(INTERRUPTED)
        assert query(db_path, "SELECT update_id FROM held_updates") == []

        # Run 3: nothing is replayed again (replay happens before the first poll).
        polls = len([c for c in tg.calls if c.method == "getUpdates"])
        bot = Served(settings)
        await tg.wait_for(
            lambda: len([c for c in tg.calls if c.method == "getUpdates"]) > polls, timeout=30
        )
        assert bot.application.bot_data.services.lifecycle.tracker.in_progress == 0
        await bot.stop()
        assert len(openai.requests) == 2
        users = query(db_path, "SELECT content FROM messages WHERE role = 'user' ORDER BY id")
        assert [row[0] for row in users] == ["first", long_text]
