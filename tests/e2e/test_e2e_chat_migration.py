"""Where the bot's words go in a group, end to end (real PTB against the fake Bot API, real
litellm against the fake providers, a real SQLite file):

- a group upgraded to a supergroup keeps its memory, settings and reminders under the new id,
  from Telegram's own service messages (the real payloads of ../shared/testdata) or from the
  ChatMigrated a reminder's send meets;
- a reminder set in a forum topic fires in that topic, or in the chat when the topic is gone.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from tests.e2e.test_e2e_reminders import (
    WrittenWhen,
    fall_due,
    in_an_hour,
    local_when,
    marked,
    reminder_call,
    schedule,
    wait_until_async,
)
from tests.fakes.providers import Reply
from tests.fakes.telegram import BotMessage
from tests.support.e2e_bot import OWNER, TESTDATA, BotUnderTest, bot_under_test
from tests.support.memory_sessions import SettableClock

ASSETS = TESTDATA / "tg-updates" / "telegram-rs_update_assets"
TELOXIDE = TESTDATA / "tg-updates" / "teloxide_test_payloads.json"
MIGRATED = "Bad Request: group chat was upgraded to a supergroup chat"


def asset(name: str) -> dict[str, Any]:
    update = json.loads((ASSETS / name).read_text(encoding="utf-8"))
    update.pop("update_id")  # the fake numbers it after the updates already sent
    return update


def teloxide_migration() -> tuple[dict[str, Any], dict[str, Any]]:
    """The other real pair (issue_427): the new chat's message sent by GroupAnonymousBot."""
    payloads = json.loads(TELOXIDE.read_text(encoding="utf-8"))
    [to] = [p["json"] for p in payloads if "migrate_to_chat_id" in p["json"]]
    [came] = [p["json"] for p in payloads if "migrate_from_chat_id" in p["json"]]
    return {"message": to}, {"message": came}


def fired(bot: BotUnderTest, chat_id: int, text: str) -> list[BotMessage]:
    """The fired reminder's messages: "⏰ text", in a group followed by a line naming its setter
    (the receipt "⏰ Reminder set: …" is the answer's last line, never its first)."""
    return [m for m in bot.messages(chat_id) if m.text.split("\n")[0] == f"⏰ {text}"]


async def rows_under(bot: BotUnderTest, chat_id: int) -> dict[str, int]:
    """Rows with this chat_id in every table of the schema that has the column."""
    tables = await bot.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
    counts = {}
    for table in tables:
        name = table["name"]
        if any(c["name"] == "chat_id" for c in await bot.rows(f"PRAGMA table_info({name})")):
            [row] = await bot.rows(f"SELECT COUNT(*) AS n FROM {name} WHERE chat_id = ?",
                                   (chat_id,))  # fmt: skip
            counts[name] = row["n"]
    return counts


async def set_up_group(bot: BotUnderTest, group: int) -> None:
    """A group with a time zone, a model, a memory, a fired reminder and a pending one."""
    in_group = {"chat_type": "group"}
    bot.tg.member_status[(group, OWNER)] = "creator"  # only admins set a group's time zone
    [zone] = await bot.ask(group, "/timezone Europe/Lisbon", **in_group)
    assert zone.text.startswith("Time zone set: Europe/Lisbon.")
    await bot.services.store.set_chat_model(group, "claude-sonnet-4-5")
    await bot.set_memory(group, "- the group meets on Fridays in room 4B")
    lisbon = ZoneInfo("Europe/Lisbon")
    schedule_claude(bot, WrittenWhen(3, lisbon), "stretch")
    await bot.ask(group, "@mnemo_test_bot remind us to stretch", **in_group)
    await bot.wait(lambda: bool(fired(bot, group, "stretch")), timeout=30)
    await marked(bot)
    schedule_claude(bot, local_when(3600, lisbon), "book the room")
    await bot.ask(group, "@mnemo_test_bot remind us in an hour to book the room", **in_group)


def schedule_claude(bot: BotUnderTest, when: datetime | WrittenWhen, text: str) -> None:
    bot.anthropic.script("claude-sonnet-4-5", reminder_call(when, text), Reply("Done."))


async def test_the_upgrade_service_messages_move_everything_to_the_supergroup(
    tmp_path: Path,
) -> None:
    """The supergroup remembers what the group did, and its reminders follow it to the new id."""
    to_update, from_update = asset("migrate_to_chat_id.json"), asset("migrate_from_chat_id.json")
    old = to_update["message"]["chat"]["id"]
    new = to_update["message"]["migrate_to_chat_id"]
    assert from_update["message"]["migrate_from_chat_id"] == old
    async with bot_under_test(tmp_path) as bot:
        await set_up_group(bot, old)
        before = await rows_under(bot, old)
        for table in ("chats", "sessions", "messages", "usage", "long_term_memory", "reminders",
                      "reminder_deliveries", "turn_keys"):  # fmt: skip
            assert before[table] > 0, table

        with structlog.testing.capture_logs() as logs:
            ids = [bot.tg.push(copy.deepcopy(u)) for u in (to_update, from_update, from_update)]
            for update_id in ids:
                await bot.wait_handled(update_id)
        assert set((await rows_under(bot, old)).values()) == {0}
        after = await rows_under(bot, new)
        assert {t: n for t, n in after.items() if n} == {t: n for t, n in before.items() if n}
        moves = [e for e in logs if e["event"].startswith("chat_migrat")]
        assert [(e["event"], e["via"]) for e in moves] == [
            ("chat_migrated", "migrate_to_chat_id"),
            ("chat_migration_nothing_left", "migrate_from_chat_id"),
            ("chat_migration_nothing_left", "migrate_from_chat_id"),
        ]
        assert moves[0]["old_chat_id"] == old and moves[0]["new_chat_id"] == new

        [pending] = await bot.rows("SELECT chat_id, text, state FROM reminders "
                                   "WHERE state = 'pending'")  # fmt: skip
        assert pending == {"chat_id": new, "text": "book the room", "state": "pending"}
        # In the supergroup: its model, its zone and its memory, with the session it had.
        bot.anthropic.script("claude-sonnet-4-5", Reply("Fridays, room 4B."))
        [answer] = await bot.ask(new, "@mnemo_test_bot where do we meet?",
                                 chat_type="supergroup")  # fmt: skip
        assert answer.text == "Fridays, room 4B."
        _, request = bot.chat_requests()[-1]
        system = request.system_text()
        assert "- the group meets on Fridays in room 4B" in system
        assert "(Europe/Lisbon)" in system
        said = [m for m in request.body["messages"] if m["role"] == "user"]
        assert "remind us in an hour to book the room" in json.dumps(said)
        assert set((await rows_under(bot, old)).values()) == {0}


async def test_teloxide_payloads_with_the_new_chat_first_and_the_supergroup_used_already(
    tmp_path: Path,
) -> None:
    """Both service messages in the other order, after the supergroup got a message of its own:
    nothing stays under the old id, the supergroup's open session stays open."""
    to_update, from_update = teloxide_migration()
    old = to_update["message"]["chat"]["id"]
    new = from_update["message"]["chat"]["id"]
    async with bot_under_test(tmp_path) as bot:
        await set_up_group(bot, old)
        bot.anthropic.script("claude-sonnet-4-5", Reply("Hello, new group."))
        await bot.ask(new, "@mnemo_test_bot hello", chat_type="supergroup")
        [new_session] = await bot.rows(
            "SELECT id FROM sessions WHERE chat_id = ? AND closed_at IS NULL", (new,)
        )
        for update in (from_update, to_update):
            await bot.wait_handled(bot.tg.push(copy.deepcopy(update)))
        assert set((await rows_under(bot, old)).values()) == {0}
        open_sessions = await bot.rows(
            "SELECT id FROM sessions WHERE chat_id = ? AND closed_at IS NULL", (new,)
        )
        assert open_sessions == [new_session]
        [chat] = await bot.rows("SELECT model_id, time_zone FROM chats WHERE chat_id = ?", (new,))
        assert chat == {"model_id": "claude-sonnet-4-5", "time_zone": "Europe/Lisbon"}


async def test_a_reminder_that_meets_chat_migrated_is_sent_to_the_supergroup(
    tmp_path: Path,
) -> None:
    """A reminder whose chat migrated is sent to the new id, not given up."""
    old, new = -216055857, -1001113717682
    clock = SettableClock(datetime.now(UTC))
    utc = ZoneInfo("UTC")
    async with bot_under_test(tmp_path, clock=clock) as bot:
        in_group = {"chat_type": "group"}
        bot.tg.member_status[(old, OWNER)] = "creator"  # only admins set a group's time zone
        await bot.ask(old, "/timezone UTC", **in_group)
        due = in_an_hour(clock, utc)
        schedule(bot, due, "water the office plants")
        await bot.ask(old, "@mnemo_test_bot remind us to water the office plants", **in_group)
        # Upgraded without the bot hearing of it (the service messages were lost).
        bot.tg.migrated_chats[old] = new
        fall_due(bot, clock, due, utc)
        await bot.wait(lambda: bool(fired(bot, new, "water the office plants")), timeout=30)
        await marked(bot)
        refused = [c for c in bot.tg.calls_of("sendMessage")
                   if c.params["chat_id"] == old and not c.ok]  # fmt: skip
        assert [c.error for c in refused] == [MIGRATED]
        [sent] = fired(bot, new, "water the office plants")
        [delivery] = await bot.rows("SELECT chat_id, outcome, message_id FROM reminder_deliveries")
        assert delivery == {"chat_id": new, "outcome": "sent", "message_id": sent.message_id}
        assert set((await rows_under(bot, old)).values()) == {0}
        # The session holds it under the new id: the supergroup's next turn sees it.
        [last] = await bot.rows("SELECT chat_id, content FROM messages ORDER BY id DESC LIMIT 1")
        assert last == {"chat_id": new, "content": "⏰ water the office plants"}


async def test_a_reminder_set_in_a_forum_topic_fires_there_or_in_the_chat_once_it_is_gone(
    tmp_path: Path,
) -> None:
    """A reminder goes back to the forum topic it was set in, not to the forum's General."""
    forum = -1001555296434
    in_topic = {"chat_type": "supergroup"}
    clock = SettableClock(datetime.now(UTC))
    utc = ZoneInfo("UTC")
    async with bot_under_test(tmp_path, clock=clock) as bot:
        bot.tg.forum_topics[forum] = {7, 9}
        bot.tg.member_status[(forum, OWNER)] = "creator"  # only admins set a group's time zone
        await bot.ask(forum, "/timezone UTC", topic_id=7, **in_topic)
        standup = in_an_hour(clock, utc)
        schedule(bot, standup, "standup in here")
        await bot.ask(forum, "@mnemo_test_bot remind us", topic_id=7, **in_topic)
        fall_due(bot, clock, standup, utc)
        await bot.wait(lambda: bool(fired(bot, forum, "standup in here")), timeout=30)
        [standup] = fired(bot, forum, "standup in here")
        assert standup.message_thread_id == 7
        [row] = await bot.rows("SELECT topic_id FROM reminders")
        assert row["topic_id"] == 7

        # Both topics go before the clock reaches the two reminders.
        with structlog.testing.capture_logs() as logs:
            schedule(bot, in_an_hour(clock, utc), "topic 9 thing")
            await bot.ask(forum, "@mnemo_test_bot remind us", topic_id=9, **in_topic)
            last = in_an_hour(clock, utc)
            schedule(bot, last, "closed topic thing")
            await bot.ask(forum, "@mnemo_test_bot remind us too", topic_id=7, **in_topic)
            bot.tg.forum_topics[forum] = {7}  # topic 9 deleted
            bot.tg.closed_topics.add((forum, 7))  # topic 7 closed
            fall_due(bot, clock, last, utc)
            await bot.wait(
                lambda: (
                    bool(fired(bot, forum, "topic 9 thing"))
                    and bool(fired(bot, forum, "closed topic thing"))
                ),
                timeout=30,
            )
            await marked(bot, 3)
        for text in ("topic 9 thing", "closed topic thing"):
            [sent] = fired(bot, forum, text)
            assert sent.message_thread_id is None, text  # the chat's General
        gone = sorted(
            (e["topic_id"], e["error"]) for e in logs
            if e["event"] == "reminder_topic_gone_sent_to_chat"
        )  # fmt: skip
        assert gone == [(7, "Topic_closed"), (9, "Message thread not found")]
        outcomes = await bot.rows("SELECT outcome FROM reminder_deliveries")
        assert [o["outcome"] for o in outcomes] == ["sent"] * 3


async def test_a_reply_that_meets_chat_migrated_goes_to_the_supergroup_and_the_data_follows(
    tmp_path: Path,
) -> None:
    """A question asked just before the upgrade: its answer is shown in the supergroup, and
    the chat's data (the question and answer included) moves there once the turn is over:
    neither the answer is lost nor anything left under the old id."""
    old, new = -216055857, -1001113717682
    async with bot_under_test(tmp_path) as bot:
        await bot.set_memory(old, "- the group meets on Fridays in room 4B")
        bot.tg.migrated_chats[old] = new
        bot.openai.script("gpt-5", Reply("On Fridays, in room 4B."))
        with structlog.testing.capture_logs() as logs:
            bot.say(old, "@mnemo_test_bot when do we meet?", chat_type="group")
            await bot.wait(lambda: [m.text for m in bot.messages(new)] == [
                "On Fridays, in room 4B."
            ])  # fmt: skip

            async def moved() -> bool:
                return set((await rows_under(bot, old)).values()) == {0}

            await wait_until_async(moved)
        [shown] = bot.messages(new)
        assert shown.reply_to_message_id is None  # the question's id belongs to the old chat
        assert bot.messages(old) == []
        [event] = [e for e in logs if e["event"] == "chat_migrated"]
        assert (event["via"], event["old_chat_id"], event["new_chat_id"]) == ("reply", old, new)
        said = await bot.rows("SELECT chat_id, role, content FROM messages ORDER BY id")
        assert [(m["chat_id"], m["role"]) for m in said] == [(new, "user"), (new, "assistant")]
        assert said[1]["content"] == "On Fridays, in room 4B."
        [memory] = await bot.rows("SELECT chat_id, content FROM long_term_memory")
        assert memory == {"chat_id": new, "content": "- the group meets on Fridays in room 4B"}
