"""Telegram's 429 (RetryAfter) handled two ways, measured on the whole bot against the fake
Bot API: ours (PTB's AIORateLimiter with `max_retries=0`; a streamed reply skips updates until
the penalty ends and sends its final text once after it; the reminder scheduler reschedules),
and PTB's (the same limiter retrying each refused request after `retry_after`).

(stream) three groups at once, each reply streaming ~1,200 characters over ~3.5 s with edits
    every 0.3 s, the fake enforcing Telegram's one message per second per chat and one edit
    per second per message with 429s (a request during a penalty is refused again and counted
    as "into_penalty"): the time until every reply is final, Bot API calls, 429s, requests
    made during a penalty, duplicated messages, and whether every final text is whole.
(command) a /help whose reply Telegram refuses once with retry_after=2, and then, while that
    penalty runs, another chat's /help: whether the first reply arrives, and how long the
    other chat waits for its own.

    python -m benchmarks.telegram_429 [--mode ours|ptb|both]

Last lines, one per mode: `telegram_429[MODE]: stream_s=… calls=… r429=… into_penalty=…
dup=… whole=N/3 | command_delivered=… other_chat_wait_s=…`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import structlog
from telegram.ext import AIORateLimiter

import bot.app as composition
from bot.ui.i18n import t
from tests.fakes.providers import Reply
from tests.support.e2e_bot import FRIEND, OWNER, BotUnderTest, bot_under_test

# Groups: their replies are edited in place as they stream (a private chat shows a draft).
CHATS = (-2001, -2002, -2003)
ANSWER = " ".join(f"word{n:04d}" for n in range(130))  # ~1,200 characters
PTB_RETRIES = 3


def _limiter(mode: str) -> type:
    """The rate limiter `build_application` makes, for this mode."""

    class Limiter(AIORateLimiter):
        def __init__(self, max_retries: int = 0) -> None:
            super().__init__(max_retries=PTB_RETRIES if mode == "ptb" else max_retries)

    return Limiter


def _whole(bot: BotUnderTest, chat: int) -> bool:
    return any(m.text.rstrip() == ANSWER for m in bot.messages(chat))


async def stream_part(tmp: Path) -> dict[str, object]:
    async with bot_under_test(tmp, edit_interval=0.3) as bot:
        bot.tg.enforce_flood_limits = True
        bot.openai.set_default("gpt-5", Reply(ANSWER, chunk_chars=20, chunk_delay=0.06))
        calls_before = len(bot.tg.calls)
        started = time.monotonic()
        for chat in CHATS:
            bot.say(chat, "@mnemo_test_bot tell me a long one", chat_type="group")
        await bot.wait(
            lambda: (
                all(any(m.text.rstrip() == ANSWER for m in bot.messages(c)) for c in CHATS)
                and all(bot.services.turns.waiting(c) == 0 for c in CHATS)
            ),
            timeout=120,
        )
        took = time.monotonic() - started
        sent = [c for c in bot.tg.calls[calls_before:] if c.method in ("sendMessage",
                "editMessageText", "sendMessageDraft")]  # fmt: skip
        texts = Counter((c, m.text) for c in CHATS for m in bot.messages(c))
        return {
            "stream_s": round(took, 2),
            "calls": len(sent),
            "r429": len(bot.tg.flood_violations),
            "into_penalty": sum(v.during_penalty for v in bot.tg.flood_violations),
            "dup": sum(n - 1 for n in texts.values() if n > 1),
            "whole": f"{sum(_whole(bot, c) for c in CHATS)}/{len(CHATS)}",
        }


async def command_part(tmp: Path) -> dict[str, object]:
    async with bot_under_test(tmp) as bot:
        bot.tg.inject_error("sendMessage", count=1, retry_after=2)
        bot.say(OWNER, "/help")
        await bot.wait(lambda: any(not c.ok for c in bot.tg.calls_of("sendMessage")))
        asked = time.monotonic()
        bot.say(FRIEND, "/help", user_id=FRIEND)
        await bot.wait_messages(FRIEND, 1)
        other_wait = time.monotonic() - asked
        with contextlib.suppress(AssertionError):  # retried, the first reply comes by then
            await bot.wait_messages(OWNER, 1, timeout=5)
        delivered = [m.text for m in bot.messages(OWNER)]
        return {
            "command_delivered": bool(delivered)
            and delivered[0].startswith(t("help", commands="")[:20]),
            "other_chat_wait_s": round(other_wait, 2),
        }


async def measure(mode: str) -> str:
    composition.AIORateLimiter = _limiter(mode)  # type: ignore[misc]
    with tempfile.TemporaryDirectory() as tmp:
        stream = await stream_part(Path(tmp) / "s")
        command = await command_part(Path(tmp) / "c")
    fields = " ".join(f"{k}={v}" for k, v in stream.items())
    more = " ".join(f"{k}={v}" for k, v in command.items())
    return f"telegram_429[{mode}]: {fields} | {more}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ours", "ptb", "both"), default="both")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    modes = ("ours", "ptb") if args.mode == "both" else (args.mode,)
    lines = [asyncio.run(measure(mode)) for mode in modes]
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
