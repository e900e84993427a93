"""Hardening, end to end: privacy of admin views, anonymous senders, strangers, honest error
replies and bad input. Real PTB against the fake Bot API, real litellm against the fake
providers, a real SQLite file; nothing of ours is mocked.
"""

from __future__ import annotations

import base64
import copy
import json
import sqlite3
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import structlog
from telegram import Update
from telegram.ext import ContextTypes, MessageHandler, filters

from bot.ui.i18n import t
from tests.fakes.providers import Reply
from tests.support.clocks import SettableClock
from tests.support.e2e_bot import FRIEND, OWNER, STRANGER, TESTDATA, BotUnderTest, bot_under_test

GROUP = -100777000
IN_GROUP = {"chat_type": "supergroup"}
ANONYMOUS_IDS = ("1087968824", "136817688")


# --- item 4: admin views only in private chats --------------------------------------------------


async def test_admin_views_are_answered_only_in_private(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, ADMIN_USER_IDS=str(OWNER)) as bot:
        await bot.ask(FRIEND, "hello", user_id=FRIEND)  # someone else's spend exists
        private_line = t("admin_private_only")

        [stats] = await bot.ask(GROUP, "/stats", **IN_GROUP)
        assert stats.text == private_line
        [usage] = await bot.ask(GROUP, "/usage", **IN_GROUP)
        assert usage.text.endswith(private_line)
        assert t("usage_everyone_title") not in usage.text and str(FRIEND) not in usage.text
        [other] = await bot.ask(GROUP, f"/usage {FRIEND}", **IN_GROUP)
        assert other.text == private_line

        # In the admin's private chat, the same commands show the admin views.
        [stats] = await bot.ask(OWNER, "/stats")
        assert stats.text.startswith(t("stats_title"))
        [usage] = await bot.ask(OWNER, "/usage")
        assert t("usage_everyone_title") in usage.text and f"• {FRIEND}:" in usage.text


# --- item 5: anonymous group admins and channels ------------------------------------------------


def _anonymous_admin_update(text: str, sender_id: int, sender_type: str) -> dict[str, Any]:
    """Teloxide's real GroupAnonymousBot message (from its bug tracker, #419), re-addressed to
    our group."""
    payloads = json.loads(
        (TESTDATA / "tg-updates" / "teloxide_test_payloads.json").read_text(encoding="utf-8")
    )
    [real] = [p for p in payloads if p.get("test_fn") == "issue_419"]
    message = copy.deepcopy(real["json"])
    message.pop("forward_origin", None)
    message["chat"] = {"id": GROUP, "title": "a", "type": "supergroup"}
    message["sender_chat"] = (
        {"id": GROUP, "title": "a", "type": "supergroup"}
        if sender_type == "supergroup"
        else {"id": -1002236736395, "title": "Test", "type": "channel"}
    )
    message["from"]["id"] = sender_id
    message["date"] = int(time.time())
    message["text"] = text
    message["entities"] = [{"type": "mention", "offset": 0, "length": len("@mnemo_test_bot")}]
    return {"message": message}


@pytest.mark.parametrize(
    ("sender_id", "sender_type"),
    [(1087968824, "supergroup"), (136817688, "channel")],
    ids=["anonymous-admin", "channel"],
)
async def test_anonymous_senders_are_asked_to_write_as_themselves(
    tmp_path: Path, sender_id: int, sender_type: str
) -> None:
    # Even an owner who once added the shared id is not letting every anonymous admin in.
    allowed = f"{OWNER},{sender_id}"
    async with bot_under_test(tmp_path, ALLOWED_USER_IDS=allowed) as bot:
        update = _anonymous_admin_update("@mnemo_test_bot what is 2+2?", sender_id, sender_type)
        bot.tg.push(update)
        await bot.wait_messages(GROUP, 1)
        [refusal] = bot.texts(GROUP)
        assert refusal == t("anonymous_refused")
        assert not any(i in refusal for i in ANONYMOUS_IDS)
        assert not any(fp.requests for fp in bot.providers.values())
        assert await bot.rows("SELECT * FROM messages") == []


# --- item 6: strangers told at most once an hour; honest error replies ---------------------------


async def test_a_stranger_is_refused_once_however_often_they_write(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        update_ids = [
            bot.tg.push(bot.tg.make_text_update(STRANGER, STRANGER, text))
            for text in ("hi", "/model", "/memory", "/usage", "are you there?")
        ]
        for update_id in update_ids:
            await bot.wait_handled(update_id)
        assert bot.texts(STRANGER) == [t("not_allowed", user_id=STRANGER)]
        sends = [c for c in bot.tg.calls_of("sendMessage") if c.params["chat_id"] == STRANGER]
        assert len(sends) == 1


def test_refusal_throttle_is_hourly_and_bounded() -> None:
    from bot.handlers.access import RefusalThrottle

    clock = SettableClock(1000.0)
    throttle = RefusalThrottle(capacity=3, clock=clock)
    assert throttle.allow(1) and not throttle.allow(1)
    clock.advance(3599)
    assert not throttle.allow(1)
    clock.advance(1)
    assert throttle.allow(1)  # an hour later: told again
    for sender in range(2, 10):
        throttle.allow(sender)
    assert len(throttle) == 3  # memory stays bounded however many strangers write


async def _full_disk(bot: BotUnderTest) -> None:
    """No page may be added to the database file: the next large write fails (SQLITE_FULL).
    Set on the writer connection (reads have their own connections, which never write)."""
    [row] = await bot.rows("PRAGMA page_count")

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA max_page_count = {int(row['page_count'])}")

    await bot.services.db.run_in_transaction(write)


async def test_error_reply_claims_the_message_saved_only_when_it_was(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        await bot.ask(OWNER, "warm up")
        await _full_disk(bot)
        long_text = "Here is my whole diary. " * 600  # needs new pages: the store fails
        [reply] = await bot.ask(OWNER, long_text)
        assert reply.text == t("internal_error_unsaved")
        stored = await bot.rows("SELECT content FROM messages WHERE role = 'user'")
        assert [r["content"] for r in stored] == ["warm up"]
        assert len(bot.chat_requests()) == 1

    async with bot_under_test(tmp_path / "saved") as bot:

        async def fail_after_the_turn(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            raise RuntimeError("a later handler broke")

        # Runs after the chat turn (group 0) stored and answered the message.
        bot._application.add_handler(MessageHandler(filters.TEXT, fail_after_the_turn), group=1)
        bot.say(OWNER, "remember this")
        await bot.wait(lambda: t("internal_error") in bot.texts(OWNER))
        assert bot.texts(OWNER) == ["echo: remember this", t("internal_error")]
        stored = await bot.rows("SELECT content FROM messages WHERE role = 'user'")
        assert [r["content"] for r in stored] == ["remember this"]


async def test_a_turn_that_breaks_after_storing_says_the_message_is_saved(
    tmp_path: Path,
) -> None:
    """The turn raises MessageSavedError when it broke after storing the question: here the
    answer needs more pages than the database file may grow by, the question did not."""
    async with bot_under_test(tmp_path) as bot:
        await bot.ask(OWNER, "warm up")
        [row] = await bot.rows("PRAGMA page_count")

        def cap(conn: sqlite3.Connection) -> None:
            conn.execute(f"PRAGMA max_page_count = {int(row['page_count']) + 4}")

        await bot.services.db.run_in_transaction(cap)
        bot.openai.script("*", Reply("A long answer. " * 4000, chunk_chars=4000))
        bot.say(OWNER, "hi")
        await bot.wait(
            lambda: bot.texts(OWNER)[-1] in (t("internal_error"), t("internal_error_unsaved"))
        )
        assert bot.texts(OWNER)[-1] == t("internal_error")
        stored = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert [(r["role"], r["content"]) for r in stored][-1] == ("user", "hi")


# --- item 11: bad input gets a clear answer, and the bot stays up --------------------------------


def _naughty_with_control_characters() -> list[str]:
    encoded = json.loads((TESTDATA / "blns" / "blns.base64.json").read_text(encoding="utf-8"))
    found = []
    for item in encoded:
        try:
            text = base64.b64decode(item).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text):
            found.append(text)
    return found


async def test_recall_with_nul_or_control_characters_answers(tmp_path: Path) -> None:
    naughty = _naughty_with_control_characters()
    assert len(naughty) >= 3
    async with bot_under_test(tmp_path) as bot:
        for query in ["report\x00 2026", "\x00", *naughty]:
            [reply] = await bot.ask(OWNER, f"/recall {query}")
            assert reply.text in (t("recall_bad_query"), t("recall_usage")), (query, reply.text)
        [fine] = await bot.ask(OWNER, "/recall PostgreSQL")
        assert fine.text == t("recall_none", query="PostgreSQL")
        # The search itself (also a chat tool's) takes such input without raising.
        from memory.recall.search import Recall

        for hostile in ["a\x00b\udc80cde", "\x00\x00\x00", "\udc80"]:
            assert await Recall(bot.services.db).search(OWNER, hostile) == [], hostile


async def test_lone_surrogates_are_answered_and_stored(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        # A client cut an emoji in half: JSON "\ud83d" arrives as a lone surrogate.
        [private] = await bot.ask(OWNER, "half an emoji \ud83d here")
        assert private.text == "echo: half an emoji \ufffd here"
        group_text = "@mnemo_test_bot broken \udc80 tail"
        [group] = await bot.ask(GROUP, group_text, **IN_GROUP)
        assert group.text == "echo: broken \ufffd tail"
        stored = await bot.rows("SELECT content FROM messages WHERE role = 'user' ORDER BY id")
        assert [r["content"] for r in stored] == ["half an emoji \ufffd here", "broken \ufffd tail"]


@pytest.mark.parametrize("argument", ["²", "١٢٣", "99999999999999999999999", "12a"])
async def test_usage_with_a_bad_user_id_says_how_to_use_it(tmp_path: Path, argument: str) -> None:
    async with bot_under_test(tmp_path, ADMIN_USER_IDS=str(OWNER)) as bot:
        [reply] = await bot.ask(OWNER, f"/usage {argument}")
        assert reply.text == t("usage_bad_args")
        [still_up] = await bot.ask(OWNER, "still there?")
        assert still_up.text == "echo: still there?"


# --- item 10: /memory parts fit Telegram's 4096 UTF-16 units; no failed send is silent ------------


async def test_memory_of_emoji_lines_arrives_whole(tmp_path: Path) -> None:
    # 250 lines of 📌 facts: cut at 4000 code points, a part held ~4470 UTF-16 units.
    lines = [f"📌 fact {i:03d} 📌📌📌📌📌📌📌📌" for i in range(250)]
    async with bot_under_test(tmp_path) as bot:
        await bot.set_memory(OWNER, "\n".join(lines))
        bot.say(OWNER, "/memory")
        await bot.wait(lambda: lines[-1] in "\n".join(bot.texts(OWNER)))
        sends = [c for c in bot.tg.calls_of("sendMessage") if c.params["chat_id"] == OWNER]
        assert all(c.ok for c in sends) and len(sends) >= 2
        shown = "\n".join(bot.texts(OWNER))
        assert all(line in shown for line in lines)


async def test_a_refused_reply_is_logged_and_the_user_told(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        await bot.set_memory(OWNER, "- likes tea")
        bot.tg.inject_error("sendMessage", description="Bad Request: message is too long")
        with structlog.testing.capture_logs() as logs:
            bot.say(OWNER, "/memory")
            await bot.wait_messages(OWNER, 1)
        assert bot.texts(OWNER) == [t("send_failed")]
        [refused] = [e for e in logs if e["event"] == "reply_failed"]
        assert refused["chat_id"] == OWNER
        assert refused["error"] == "Message is too long"
        # The refused text is the /memory reply: its size is logged, never its words.
        assert refused["units"] > len("- likes tea") and "likes tea" not in str(refused)


# --- items 9 and 12: split messages in groups; the joiner's caps --------------------------------


async def test_a_long_group_message_is_answered_whole(tmp_path: Path) -> None:
    from tests.bot.test_joiner import TELEGRAM_TEXT_LIMIT, _long_real_text, client_split

    original = _long_real_text("en", 2 * TELEGRAM_TEXT_LIMIT + 500)
    # Only the first part carries the mention: the client cut the message the user wrote.
    parts = client_split("@mnemo_test_bot " + original, keep_space=True)
    assert len(parts) >= 3 and "@mnemo_test_bot" not in "".join(parts[1:])
    settings = {"SPLIT_MESSAGE_WINDOW": 5, "MAX_INPUT_CHARS": 100_000}
    async with bot_under_test(tmp_path, **settings) as bot:
        ids = [bot.tg.push(bot.tg.make_text_update(GROUP, OWNER, p, **IN_GROUP)) for p in parts]
        await bot.wait(lambda: len(bot.openai.requests) >= 1)
        await bot.wait_handled(ids[-1])
        await bot.wait_idle(GROUP)
        [request] = bot.openai.requests
        asked = request.body["messages"][-1]["content"]
        assert asked.split() == original.split()  # every word of every part, in order
        stored = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert [r["role"] for r in stored] == ["user", "assistant"]
        assert stored[0]["content"].split() == original.split()


async def test_a_flood_of_full_parts_is_stopped_at_the_cap(tmp_path: Path) -> None:
    from bot.turns.joiner import MAX_SPLIT_PARTS
    from tests.bot.test_joiner import TELEGRAM_TEXT_LIMIT, _long_real_text, client_split

    text = _long_real_text("en", (MAX_SPLIT_PARTS + 4) * TELEGRAM_TEXT_LIMIT)
    parts = client_split(text, keep_space=True)[: MAX_SPLIT_PARTS + 3]
    # A window long enough that only the caps can end the group during the test.
    settings = {"SPLIT_MESSAGE_WINDOW": 60, "MAX_INPUT_CHARS": 1_000_000}
    async with bot_under_test(tmp_path, **settings) as bot:
        for part in parts[: MAX_SPLIT_PARTS + 1]:
            bot.tg.push(bot.tg.make_text_update(OWNER, OWNER, part))
        refusal = t("input_too_long", length=0, limit=1_000_000).split("0")[0]
        await bot.wait(lambda: any(m.startswith(refusal) for m in bot.texts(OWNER)))
        # The rest of the same message is dropped, not answered part by part.
        ids = [bot.tg.push(bot.tg.make_text_update(OWNER, OWNER, p)) for p in parts[-2:]]
        for update_id in ids:
            await bot.wait_handled(update_id)
        assert len(bot.texts(OWNER)) == 1 and not bot.openai.requests
        assert await bot.rows("SELECT * FROM messages") == []
