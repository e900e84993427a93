"""The whole bot, in-process, against the fakes: real PTB polling the fake Bot API, real litellm
talking HTTP to the fake providers, a real SQLite file. Nothing of ours is mocked.

Used as `async with bot_under_test(tmp_path) as bot: ...`; `bot.restart()` stops and starts the
application on the same database, like a service restart. The pieces are shared with the tests
that serve the bot themselves (`FakeServers`, `fake_settings`) and with those that run
`python -m bot` as a subprocess (`subprocess_env`, `bot_process`, `wait_until`, `query`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.app import build_application, prepare, running
from bot.config import Settings, load_settings
from bot.services import MemoryFeature, Prepared, ReminderFeature, Services
from primitives.litellm_env import LITELLM_FLAGS
from tests.fakes.providers import FakeProvider
from tests.fakes.telegram import BotMessage, FakeTelegram
from tests.support.paths import DATA, REPO, TESTDATA
from tests.support.shared_workers import shared_workers

# Media fixtures made with real tools (TTS, LibreOffice, img2pdf): see tests/data/SOURCE.md.
MEDIA = DATA

TOKEN = "987654:SECRET-BOT-TOKEN-e2e"
OWNER = 100  # in ALLOWED_USER_IDS
FRIEND = 101  # in ALLOWED_USER_IDS
STRANGER = 555
KEYS = {
    "openai": "sk-openai-e2e-key-1",
    "anthropic": "sk-ant-e2e-key-1",
    "groq": "gsk-groq-e2e-key-1",
}

# Fast retries so fault tests take fractions of a second; the logic is the production one.
FAST_TRANSPORT = {
    "backoff": (0.02, 0.04, 0.08),
    "retry_after_cap": 0.2,
    "rate_limit_cooldown": 0.05,
    "breaker_cooldown": 0.5,
}


class _ProviderShortcuts:
    """`.openai`, `.anthropic`, `.groq` for anything holding the three fake gateways."""

    providers: dict[str, FakeProvider]

    @property
    def openai(self) -> FakeProvider:
        return self.providers["openai"]

    @property
    def anthropic(self) -> FakeProvider:
        return self.providers["anthropic"]

    @property
    def groq(self) -> FakeProvider:
        return self.providers["groq"]


class FakeServers(_ProviderShortcuts):
    """The fake Bot API and the three fake providers on 127.0.0.1, and the keys the bot uses."""

    def __init__(self, token: str = TOKEN, keys: Mapping[str, str] = KEYS) -> None:
        self.tg = FakeTelegram(token=token)
        self.providers = {name: FakeProvider(name) for name in ("openai", "anthropic", "groq")}
        self.keys = keys

    async def __aenter__(self) -> FakeServers:
        await self.tg.start()
        for provider in self.providers.values():
            await provider.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.tg.stop()
        for provider in self.providers.values():
            await provider.stop()

    def pointing_here(self) -> dict[str, Any]:
        """The settings that send the bot's Telegram and provider traffic to these fakes."""
        values: dict[str, Any] = {
            "TELEGRAM_BOT_TOKEN": self.tg.token,
            "TELEGRAM_BASE_URL": self.tg.base_url,
            # One provider worker whatever the machine, so what a test costs does not depend on
            # the CPUs of the machine running it (tests/models/test_worker.py runs two).
            "PROVIDER_WORKERS": "1",
        }
        for name, provider in self.providers.items():
            values[f"{name.upper()}_API_KEY"] = self.keys[name]
            values[f"{name.upper()}_API_BASE"] = provider.base_url
        return values


def fake_settings(fakes: FakeServers, **values: Any) -> Settings:
    """Settings for the bot in this process against the fakes; `values` add or override."""
    merged: dict[str, Any] = {
        **fakes.pointing_here(),
        "ALLOWED_USER_IDS": f"{OWNER},{FRIEND}",
        "DEFAULT_MODEL": "gpt-5",
        "LOG_FORMAT": "json",
        # As for the bots run as processes: one worker, whatever the machine, so a bot that
        # builds its own pool does not grow a second one on its own under CI's load.
        "PROVIDER_WORKERS": "1",
        **values,
    }
    return load_settings(**{k: v for k, v in merged.items() if v is not None})


_MEMORY_BLOCK = re.compile(r"<(long_term_memory_[0-9a-f]{16})>\n(.*?)\n</\1>", re.S)


def memory_block(system_text: str) -> str | None:
    """The long-term memory the model was given: the body of the nonce-tagged frame, or None
    when the prompt holds no memory frame at all. The tag carries a random nonce, so a test must
    look for the frame itself, never for a fixed tag name."""
    found = _MEMORY_BLOCK.findall(system_text)
    assert len(found) <= 1, "one memory frame at most"
    return found[0][1] if found else None


def showing(tg: FakeTelegram, chat_id: int) -> list[str]:
    """The texts the chat shows of the bot now: its messages, then its drafts. An answer
    streams as a draft in a private chat (TELEGRAM_DRAFT_STREAMING, on by default) and as a
    message elsewhere; a test waiting for it to appear looks at both."""
    drafts = [d["parsed_text"] for d in tg.current_drafts(chat_id).values()]
    return [m.text for m in tg.bot_messages(chat_id)] + drafts


def confirmed(tg: FakeTelegram, update_id: int) -> bool:
    """Telegram forgets an update once getUpdates is called with a higher offset."""
    return any(
        call.method == "getUpdates" and int(call.params.get("offset") or 0) > update_id
        for call in tg.calls
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# How long a test waits for the bot by default: a bound for a hang, not a speed requirement.
# A first turn starts a provider worker (seconds of CPU for litellm's import), and under a
# loaded machine (the suite under `nice`, other processes busy) 15 s were seen to run out.
WAIT_S = 60.0


@dataclass
class BotUnderTest(_ProviderShortcuts):
    tg: FakeTelegram
    providers: dict[str, FakeProvider]
    settings: Settings
    prepared: Prepared
    tmp_path: Path
    transport_options: dict[str, Any] = field(default_factory=dict)
    edit_interval: float = 0.2
    # The time the store and the consolidation worker go by (None: the wall clock).
    clock: Callable[[], datetime] | None = None
    _stack: AsyncExitStack | None = None
    _application: Any = None

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self._stack = AsyncExitStack()
        application = build_application(
            self.prepared,
            transport_options=self.transport_options,
            edit_interval=self.edit_interval,
            clock=self.clock,
            workers=shared_workers(),
        )
        self._application = await self._stack.enter_async_context(
            running(application, poll_timeout=1)
        )

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    @property
    def application(self) -> Any:
        """The running PTB Application (its handlers, its bot)."""
        return self._application

    @property
    def services(self) -> Services:
        return self._application.bot_data.services

    @property
    def memory(self) -> MemoryFeature:
        """The memory feature: its repository and the consolidation worker."""
        return self.services.memory

    @property
    def reminders(self) -> ReminderFeature:
        """The reminder book and scheduler (a test with a settable clock wakes the scheduler
        after moving the time: it sleeps by the event loop's clock, not by `clock`)."""
        return self.services.reminders

    async def consolidations_settled(self, chat_id: int, timeout: float = WAIT_S) -> None:  # noqa: ASYNC109
        """Until the chat has no consolidation job left open and the worker runs none."""
        worker = self.memory.worker
        deadline = time.monotonic() + timeout
        while await worker.queue.open_jobs(chat_id) or worker.busy:
            if time.monotonic() > deadline:
                raise AssertionError("consolidation did not settle")
            await asyncio.sleep(0.02)

    # ---- providers ----------------------------------------------------------------------

    def chat_requests(self) -> list[tuple[str, Any]]:
        """(gateway, request) of every chat request: streamed ones (consolidation never streams)."""
        found = [(name, r) for name, fp in self.providers.items() for r in fp.requests if r.stream]
        return sorted(found, key=lambda pair: pair[1].at)

    def model_requests(self) -> list[tuple[str, Any]]:
        """(gateway, request) of every request to any provider, streamed or not: what a test
        that claims "no model call" must look at (chat_requests() sees streamed ones only)."""
        found = [(name, r) for name, fp in self.providers.items() for r in fp.requests]
        return sorted(found, key=lambda pair: pair[1].at)

    # ---- Telegram side ------------------------------------------------------------------

    def say(self, chat_id: int, text: str, *, user_id: int = OWNER, **kwargs: Any) -> int:
        """Push a user's text message; returns its message_id."""
        update = self.tg.make_text_update(chat_id, user_id, text, **kwargs)
        self.tg.push(update)
        return int(update["message"]["message_id"])

    def send_media(
        self, chat_id: int, media: dict[str, Any], *, user_id: int = OWNER, **kwargs: Any
    ) -> int:
        """Push a user's voice note / photo / document update; returns its update_id.
        `media` is the message field as Telegram sends it (see FakeTelegram.make_media_update)."""
        return self.tg.push(self.tg.make_media_update(chat_id, user_id, media, **kwargs))

    def voice(self, data: bytes, duration: int, *, size: int | None = None) -> dict[str, Any]:
        """The `voice` field of an update for an Ogg/Opus note the fake Bot API serves."""
        stored = self.tg.add_file(data, file_path=f"voice/file_{len(data)}.oga", size=size)
        return {"voice": {**self.tg.file_fields(stored), "duration": duration,
                          "mime_type": "audio/ogg"}}  # fmt: skip

    def document(
        self, data: bytes, file_name: str, mime_type: str, *, size: int | None = None
    ) -> dict[str, Any]:
        stored = self.tg.add_file(data, file_path=f"documents/{file_name}", size=size)
        fields = self.tg.file_fields(stored)
        return {"document": {**fields, "file_name": file_name, "mime_type": mime_type}}

    def downloads_and_file_calls(self) -> tuple[list[str], list[Any]]:
        """Files served and getFile calls: both must stay empty when nothing may be downloaded."""
        return list(self.tg.downloads), self.tg.calls_of("getFile")

    def transcription_requests(self) -> list[tuple[str, Any]]:
        """(gateway, request) of every transcription request, in order."""
        found = [
            (name, r) for name, fp in self.providers.items() for r in fp.transcription_requests()
        ]
        return sorted(found, key=lambda pair: pair[1].at)

    def messages(self, chat_id: int) -> list[BotMessage]:
        return self.tg.bot_messages(chat_id)

    def texts(self, chat_id: int) -> list[str]:
        return [m.text for m in self.tg.bot_messages(chat_id)]

    def showing(self, chat_id: int) -> list[str]:
        """Messages and drafts the chat shows now (see `showing`)."""
        return showing(self.tg, chat_id)

    async def wait(self, predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:  # noqa: ASYNC109
        await self.tg.wait_for(predicate, timeout=timeout)

    async def wait_messages(self, chat_id: int, count: int, timeout: float = WAIT_S) -> None:  # noqa: ASYNC109
        await self.wait(lambda: len(self.messages(chat_id)) >= count, timeout)

    async def wait_idle(self, chat_id: int, timeout: float = WAIT_S) -> None:  # noqa: ASYNC109
        """Until no turn of this chat runs or waits (its reply is finished)."""
        turns = self.services.turns
        await self.wait(lambda: turns.waiting(chat_id) == 0, timeout)

    async def wait_handled(self, update_id: int) -> None:
        """Until the update was fetched (confirmed by a later getUpdates) and none is in work."""
        tracker = self.services.lifecycle.tracker
        await self.wait(lambda: confirmed(self.tg, update_id) and tracker.in_progress == 0)

    async def ask(self, chat_id: int, text: str, **kwargs: Any) -> list[BotMessage]:
        """Send a message and wait until the bot's turn for it is over; the new messages."""
        before = len(self.messages(chat_id))
        calls_before = len(self.tg.calls)
        self.say(chat_id, text, **kwargs)
        # The turn is over when the update was handled: the lock is free again and some call
        # was made after the push (a reply, at least one sendMessage).
        await self.wait(
            lambda: (
                len(self.tg.calls) > calls_before
                and len(self.messages(chat_id)) > before
                and self.services.turns.waiting(chat_id) == 0
            )
        )
        return self.messages(chat_id)[before:]

    async def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.services.db.fetchall(sql, params)]

    async def set_memory(self, chat_id: int, content: str) -> None:
        """Give a chat a long-term memory directly, as a consolidation would have written it."""
        from memory.longterm import write_memory
        from memory.store import to_iso
        from primitives.clock import utc_now

        now = to_iso(utc_now())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(chat_id) DO NOTHING",
                (chat_id, now, now),
            )
            write_memory(conn, chat_id, content, over_budget=False, now=now)

        await self.services.db.run_in_transaction(write)


def real_update(name: str, chat_id: int, user_id: int) -> dict[str, Any]:
    """A real payload from the shared test data with our chat and user ids (and no update_id).

    The payloads date from 2017 (Bot API 3.x). Fields Telegram has sent on every file and
    sticker since then, and that PTB 22 requires, are filled in: `file_unique_id` (API 4.5),
    a sticker's `type`, `is_animated` and `is_video` (API 5.x/6.x).
    """
    path = TESTDATA / "tg-updates" / "illemius_telegram_types" / name
    update = json.loads(path.read_text(encoding="utf-8"))
    update.pop("update_id", None)
    message = update["message"]
    message["chat"]["id"] = chat_id
    message["from"]["id"] = user_id
    message["date"] = int(time.time())
    _modernise(message)
    if "sticker" in message:
        message["sticker"].setdefault("type", "regular")
        message["sticker"].setdefault("is_animated", False)
        message["sticker"].setdefault("is_video", False)
    return update


def _modernise(value: Any) -> None:
    if isinstance(value, dict):
        if "file_id" in value:
            value.setdefault("file_unique_id", value["file_id"][-16:])
        for inner in value.values():
            _modernise(inner)
    elif isinstance(value, list):
        for inner in value:
            _modernise(inner)


@asynccontextmanager
async def bot_under_test(
    tmp_path: Path,
    *,
    start: bool = True,
    transport_options: dict[str, Any] | None = None,
    clock: Callable[[], datetime] | None = None,
    edit_interval: float = 0.2,
    **settings: Any,
) -> AsyncIterator[BotUnderTest]:
    """Fakes on 127.0.0.1, settings pointing at them, the bot running (unless start=False)."""
    async with FakeServers() as fakes:
        loaded = fake_settings(
            fakes,
            **{"DATABASE_PATH": tmp_path / "mnemobot.sqlite3", "CHAT_TIMEOUT": 10, **settings},
        )
        options = {**FAST_TRANSPORT, **(transport_options or {})}
        bot = BotUnderTest(
            tg=fakes.tg,
            providers=fakes.providers,
            settings=loaded,
            prepared=prepare(loaded),
            tmp_path=tmp_path,
            transport_options=options,
            clock=clock,
            edit_interval=edit_interval,
        )
        try:
            if start:
                await bot.start()
            yield bot
        finally:
            await bot.stop()


# ---- the bot as a subprocess (`python -m bot`) ------------------------------------------------


def subprocess_env(
    fakes: FakeServers, db_path: Path, *, user: int, **values: str
) -> dict[str, str]:
    """The environment of `python -m bot` against the fakes. Of this process's environment only
    PATH, HOME, LANG and TMPDIR pass, so no real key or setting leaks in."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env |= {
        "PYTHONPATH": str(REPO),
        **LITELLM_FLAGS,
        "ALLOWED_USER_IDS": str(user),
        "DATABASE_PATH": str(db_path),
        "LOG_FORMAT": "json",
        **fakes.pointing_here(),
        **values,
    }
    return env


@asynccontextmanager
async def bot_process(
    env: dict[str, str], *, cwd: Path, log_path: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m bot` with its output appended to `log_path`; killed on exit if still running.
    Run it in an empty `cwd`, so no stray .env is read."""
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bot"),
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own process group: a test can signal the whole group
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def restartable_bot(
    fakes: FakeServers, db_path: Path, *, user: int, **values: str
) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    """`python -m bot` for stop and restart tests: gpt-5, consolidation retried after 1 s (its
    timeout 60 s), a 1 s shutdown grace; `values` override any of these."""
    settings = {
        "DEFAULT_MODEL": "gpt-5",
        "CONSOLIDATION_TIMEOUT": "60",
        "CONSOLIDATION_RETRY_DELAYS": "1",
        "SHUTDOWN_GRACE_SECONDS": "1",
    }
    env = subprocess_env(fakes, db_path, user=user, **(settings | values))
    return bot_process(env, cwd=db_path.parent, log_path=db_path.with_suffix(".log"))


async def wait_until(predicate: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    for _ in range(int(limit_s / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def query(db_path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    """Plain sqlite3, to look at the database of a bot running in another process."""
    conn = sqlite3.connect(db_path, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()
