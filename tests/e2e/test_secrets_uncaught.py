"""Uncaught exceptions never print a secret.

PTB's InvalidToken names the token ("The token `123:ABC` was rejected by the server."); as a raw
traceback on stderr of `python -m bot` it would stay in what journald and Docker keep. Recipe:
TELEGRAM_BASE_URL without its /bot suffix, against any HTTP server answering 404 (here the
fake Bot API, whose routes all start with /bot). The other ways an exception reaches
stderr — another thread, the event loop's "exception was never retrieved" — are checked too.
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
from pathlib import Path

from models.logging_setup import (
    configure_logging,
    install_exception_hooks,
    loop_exception_handler,
)
from tests.support.e2e_bot import OWNER, FakeServers, bot_process, subprocess_env
from tests.support.waits import within

SECRET = "424242:AAH-uncaught-secret-token"


async def test_rejected_token_at_start_up_is_not_printed(tmp_path: Path) -> None:
    async with FakeServers() as fakes:
        token = fakes.tg.token
        env = subprocess_env(fakes, tmp_path / "db.sqlite3", user=OWNER)
        env["TELEGRAM_BASE_URL"] = f"http://127.0.0.1:{fakes.tg.port}/"  # no /bot: every call 404s
        log_path = tmp_path / "bot.log"
        async with bot_process(env, cwd=tmp_path, log_path=log_path) as proc:
            code = await within(proc.wait(), 60)
    output = log_path.read_text(encoding="utf-8", errors="replace")
    secret_part = token.split(":", 1)[1]
    assert token not in output and secret_part not in output, output
    assert code == 2, output
    assert "TELEGRAM_BOT_TOKEN" in output and "rejected" in output


def test_exception_in_a_thread_is_scrubbed() -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", fmt="json", stream=stream, secrets=[SECRET])
    saved = (sys.excepthook, threading.excepthook)
    install_exception_hooks()
    try:

        def fail() -> None:
            raise RuntimeError(f"bot{SECRET}/getMe failed")

        worker = threading.Thread(target=fail, name="worker")
        worker.start()
        worker.join()
    finally:
        sys.excepthook, threading.excepthook = saved
    text = stream.getvalue()
    assert "uncaught_thread_exception" in text and "getMe failed" in text
    assert SECRET not in text


def test_main_thread_excepthook_is_scrubbed() -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", fmt="json", stream=stream, secrets=[SECRET])
    saved = sys.excepthook
    install_exception_hooks()
    try:
        try:
            raise ValueError(f"token {SECRET} rejected")
        except ValueError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        sys.excepthook = saved
    text = stream.getvalue()
    assert "uncaught_exception" in text and "rejected" in text and SECRET not in text


async def test_event_loop_exception_is_scrubbed() -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", fmt="json", stream=stream, secrets=[SECRET])
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(loop_exception_handler)
    try:
        exc = RuntimeError(f"https://api.telegram.org/bot{SECRET}/getUpdates")
        loop.call_exception_handler(
            {"message": "Task exception was never retrieved", "exception": exc}
        )
    finally:
        loop.set_exception_handler(previous)
    text = stream.getvalue()
    assert "event_loop_exception" in text and "getUpdates" in text and SECRET not in text
