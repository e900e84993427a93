"""Reminders end to end: real PTB against the fake Bot API, real litellm over HTTP against the
fake providers (the fake model calls `schedule_reminder` as a real one would), a real SQLite
file. Near-future times; every test waits for the event, never for a fixed time."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import structlog

from tests.fakes.providers import RecordedRequest, Reply, ToolCallReply
from tests.support.e2e_bot import (
    FRIEND,
    OWNER,
    BotUnderTest,
    FakeServers,
    bot_under_test,
    query,
    restartable_bot,
    wait_until,
)
from tests.support.memory_sessions import SettableClock

CHAT = OWNER  # a private chat's id is its user's id
NEW_YORK = ZoneInfo("America/New_York")


def local_when(seconds: float, tz: ZoneInfo, now: datetime | None = None) -> datetime:
    """A naive local wall time `seconds` from now, whole seconds (what a model would write)."""
    moment = (now or datetime.now(UTC)) + timedelta(seconds=seconds)
    return moment.astimezone(tz).replace(tzinfo=None, microsecond=0)


def english_date(local: datetime) -> str:
    """The receipt's date as the issue writes it: 'Tue 2 Dec, 09:00'."""
    return f"{local:%a} {local.day} {local:%b}, {local:%H:%M}"


class WrittenWhen:
    """A reminder time `seconds` after the model answers, written when it answers (as a real
    model writes it from the time in its prompt), so no worker start or load before the answer
    can make it a past time. `local` is the naive local time it wrote, for the receipt."""

    def __init__(self, seconds: float, tz: ZoneInfo) -> None:
        self.seconds, self.tz = seconds, tz
        self._local: datetime | None = None

    def write(self) -> str:
        self._local = local_when(self.seconds, self.tz)
        return self._local.isoformat()

    @property
    def local(self) -> datetime:
        if self._local is None:
            raise AssertionError("the model has not answered with this time")
        return self._local

    @property
    def utc(self) -> datetime:
        return self.local.replace(tzinfo=self.tz).astimezone(UTC)


def reminder_call(when: datetime | WrittenWhen, text: str, **more: str) -> ToolCallReply:
    """The model's `schedule_reminder` call; a WrittenWhen is written as the model answers."""

    def arguments() -> dict[str, str]:
        written = when.write() if isinstance(when, WrittenWhen) else when.isoformat()
        return {"when": written, "text": text, **more}

    return ToolCallReply("schedule_reminder", arguments)


def schedule(
    bot: BotUnderTest, when: datetime | WrittenWhen, text: str, repeat: str = "none"
) -> None:
    bot.openai.script(
        "gpt-5", reminder_call(when, text, repeat=repeat), Reply("Done, I will remind you.")
    )


def schedule_soon(
    bot: BotUnderTest, seconds: float, tz: ZoneInfo, text: str, repeat: str = "none"
) -> WrittenWhen:
    """The model's next answer sets `text` for `seconds` after that answer."""
    when = WrittenWhen(seconds, tz)
    schedule(bot, when, text, repeat)
    return when


def chat_requests(bot: BotUnderTest) -> list[RecordedRequest]:
    return [r for _, r in bot.chat_requests()]


async def wait_until_async(check: object, timeout: float = 30.0) -> None:  # noqa: ASYNC109
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.02)


async def marked(bot: BotUnderTest, count: int = 1) -> None:
    """Until `count` deliveries have their outcome written (the mark follows the send)."""

    async def done() -> bool:
        rows = await bot.rows("SELECT 1 FROM reminder_deliveries WHERE outcome IS NOT NULL")
        return len(rows) >= count

    await wait_until_async(done)


def in_an_hour(clock: SettableClock, tz: ZoneInfo) -> datetime:
    """A naive local time an hour ahead of the bot's clock: nothing a test does before it
    moves the clock (cancel, block, inject a fault, migrate the chat) can be outrun by it,
    however slow the machine."""
    return local_when(3600, tz, clock.now)


def wake_at(bot: BotUnderTest, clock: SettableClock, moment: datetime) -> None:
    """Set the bot's clock to `moment` (aware; never backwards) and wake the scheduler, which
    sleeps by the event loop's clock and would otherwise look again only minutes later."""
    clock.now = max(clock.now, moment)
    bot.reminders.scheduler.notify()


def fall_due(bot: BotUnderTest, clock: SettableClock, local: datetime, tz: ZoneInfo) -> None:
    """The moment a reminder set for `local` falls due (a second past it) comes now."""
    wake_at(bot, clock, local.replace(tzinfo=tz).astimezone(UTC) + timedelta(seconds=1))


def fired(bot: BotUnderTest, chat_id: int, text: str) -> list[str]:
    return [t for t in bot.texts(chat_id) if t.startswith("⏰") and t.endswith(text)
            and not t.startswith("⏰ Reminder set")]  # fmt: skip


async def test_set_by_the_model_with_a_local_receipt_then_fired_on_time(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        [zone_reply] = await bot.ask(CHAT, "/timezone america/new_york")
        assert zone_reply.text.startswith("Time zone set: America/New_York.")
        # Due 10 s after the model answers, on the real clock: the turn (a tool round, a second
        # model call, the receipt) is over well before, or the reminder would join its reply.
        due = schedule_soon(bot, 10, NEW_YORK, "call the dentist")
        [shown] = await bot.ask(CHAT, "remind me in a few seconds to call the dentist")
        assert shown.text.splitlines()[-1] == (
            f"⏰ Reminder set: {english_date(due.local)} (America/New_York) — call the dentist"
        )
        # The model was told the local date, time and zone.
        first = chat_requests(bot)[0]
        assert re.search(
            r"Local date and time for the user: \w+day \d{4}-\d\d-\d\d \d\d:\d\d "
            r"\(America/New_York\)",
            first.system_text(),
        )
        requests_before = len(bot.model_requests())

        await bot.wait(lambda: bool(fired(bot, CHAT, "call the dentist")), timeout=30)
        assert fired(bot, CHAT, "call the dentist") == ["⏰ call the dentist"]
        await marked(bot)
        [message] = [m for m in bot.messages(CHAT) if m.text == "⏰ call the dentist"]
        [delivery] = await bot.rows(
            "SELECT due_at, finished_at, outcome, late, message_id FROM reminder_deliveries"
        )
        assert delivery["message_id"] == message.message_id
        assert (delivery["outcome"], delivery["late"]) == ("sent", 0)
        assert datetime.fromisoformat(delivery["finished_at"]) >= due.utc  # never early
        assert len(bot.model_requests()) == requests_before  # firing costs no model call
        # The session holds it as the bot's message: the next turn's model sees it.
        rows = await bot.rows("SELECT role, content FROM messages ORDER BY id")
        assert rows[-1] == {"role": "assistant", "content": "⏰ call the dentist"}


async def test_without_a_time_zone_the_model_is_told_and_the_receipt_says_utc(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        due = local_when(3600, ZoneInfo("UTC"))
        schedule(bot, due, "water the plants")
        [shown] = await bot.ask(
            CHAT, "remind me in an hour to water the plants", language_code="pt"
        )
        assert shown.text.splitlines()[-1] == (
            f"⏰ Lembrete marcado: {_pt_date(due)} (UTC: o seu fuso horário não está definido, "
            "envie /timezone Área/Cidade) — water the plants"
        )
        system = chat_requests(bot)[0].system_text()
        assert "The user's time zone is unknown" in system and "ask once" in system
        [result] = chat_requests(bot)[1].tool_results()
        assert "time zone is not set, so this time is UTC" in result["content"]


def _pt_date(local: datetime) -> str:
    weekdays = "seg ter qua qui sex sáb dom".split()
    months = "jan fev mar abr mai jun jul ago set out nov dez".split()
    return f"{weekdays[local.weekday()]}, {local.day} {months[local.month - 1]}, {local:%H:%M}"


async def test_due_while_the_bot_was_stopped_is_sent_once_after_start_marked_late(
    tmp_path: Path,
) -> None:
    clock = SettableClock(datetime.now(UTC))
    lisbon = ZoneInfo("Europe/Lisbon")
    async with bot_under_test(tmp_path, clock=clock) as bot:
        await bot.ask(CHAT, "/timezone Europe/Lisbon")
        due_local = local_when(600, lisbon, clock.now)
        schedule(bot, due_local, "take the cake out", repeat="daily")
        await bot.ask(CHAT, "remind me in 10 minutes, every day, to take the cake out")
        await bot.stop()
        # Down for three days: three occurrences pass while nobody runs.
        clock.advance(3 * 86400 + 3600)
        await bot.start()
        await bot.wait(lambda: bool(fired(bot, CHAT, "take the cake out")), timeout=30)
        expected = f"⏰ (late, was due {english_date(due_local)}) take the cake out"
        await marked(bot)
        assert fired(bot, CHAT, "take the cake out") == [expected]
        # One late message, then the next occurrence on time: still pending, tomorrow-ish.
        [pending] = await bot.rows("SELECT state, next_at FROM reminders")
        next_at = datetime.fromisoformat(pending["next_at"])
        assert pending["state"] == "pending" and clock.now < next_at <= clock.now + timedelta(1)
        # A restart resends nothing already sent: the next message is the next occurrence,
        # on time, once its moment comes (an event the test waits for, not a moment after the
        # start: whatever a restart resends is sent before it).
        await bot.restart()
        wake_at(bot, clock, next_at + timedelta(seconds=1))
        await bot.wait(lambda: len(fired(bot, CHAT, "take the cake out")) >= 2, timeout=30)
        await marked(bot, 2)
        assert fired(bot, CHAT, "take the cake out") == [expected, "⏰ take the cake out"]
        deliveries = await bot.rows("SELECT outcome, late FROM reminder_deliveries ORDER BY id")
        assert [(d["outcome"], d["late"]) for d in deliveries] == [("sent", 1), ("sent", 0)]


async def test_cancelled_from_the_list_never_fires_and_other_chats_cannot_cancel(
    tmp_path: Path,
) -> None:
    clock = SettableClock(datetime.now(UTC))
    utc = ZoneInfo("UTC")
    async with bot_under_test(tmp_path, clock=clock) as bot:
        await bot.ask(CHAT, "/timezone UTC")
        schedule(bot, in_an_hour(clock, utc), "cancelled one")
        await bot.ask(CHAT, "remind me of the cancelled one")
        [listing] = await bot.ask(CHAT, "/reminders")
        assert listing.text.splitlines()[0] == "Pending reminders (1); press ❌ to cancel one:"
        [[button]] = listing.reply_markup["inline_keyboard"]
        assert button["text"] == "❌ cancelled one"
        [reminder] = await bot.rows("SELECT id FROM reminders")
        assert button["callback_data"] == f"rm:x:{reminder['id']}"

        # Another allowed user's chat forges the same button: nothing is cancelled.
        [other_listing] = await bot.ask(FRIEND, "/reminders", user_id=FRIEND)
        assert other_listing.text.startswith("No pending reminders.")
        bot.tg.push(bot.tg.make_callback_update(FRIEND, FRIEND, button["callback_data"],
                                                message_id=other_listing.message_id))  # fmt: skip
        await bot.wait(lambda: len(bot.tg.calls_of("answerCallbackQuery")) == 1)
        answer = bot.tg.calls_of("answerCallbackQuery")[0].params
        assert answer["text"] == "That reminder is no longer pending."
        [state] = await bot.rows("SELECT state FROM reminders")
        assert state["state"] == "pending"

        bot.tg.push(bot.tg.make_callback_update(CHAT, OWNER, button["callback_data"],
                                                message_id=listing.message_id))  # fmt: skip
        await bot.wait(lambda: len(bot.tg.calls_of("answerCallbackQuery")) == 2)
        assert bot.tg.calls_of("answerCallbackQuery")[1].params["text"] == (
            "Cancelled: cancelled one"
        )
        await bot.wait(lambda: bot.messages(CHAT)[-1].text.startswith("No pending reminders."))

        # A reminder due after the cancelled one fires: the clock passed both, and the
        # cancelled one, first in line, would have been sent before it.
        witness = local_when(3700, utc, clock.now)
        schedule(bot, witness, "witness")
        await bot.ask(CHAT, "remind me of the witness")
        fall_due(bot, clock, witness, utc)
        await bot.wait(lambda: bool(fired(bot, CHAT, "witness")), timeout=30)
        assert fired(bot, CHAT, "cancelled one") == []
        rows = await bot.rows("SELECT reminder_id FROM reminder_deliveries")
        assert reminder["id"] not in [r["reminder_id"] for r in rows]


async def test_long_reminders_are_listed_in_pages_and_every_cancel_button_works(
    tmp_path: Path,
) -> None:
    """Five reminders of 1,000 characters passed 4,096 units in one message, which Telegram
    refused: /reminders showed nothing. Now: pages under the limit, ◀ ▶ between them, every ❌
    cancelling its own reminder on whichever page it is."""
    async with bot_under_test(tmp_path) as bot:
        book = bot.services.reminders.book
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
        for n in range(5):
            text = f"reminder {n} " + "ü" * 989  # 1,000 characters, each reminder
            when = (start + timedelta(hours=n)).isoformat()
            await book.schedule(CHAT, when=when, text=text)
        [listing] = await bot.ask(CHAT, "/reminders")
        pages: list[list[str]] = []
        message = listing
        while True:
            assert len(message.text.encode("utf-16-le")) // 2 <= 4096
            assert message.text.splitlines()[0] == "Pending reminders (5); press ❌ to cancel one:"
            rows = message.reply_markup["inline_keyboard"]
            *cancels, nav = rows
            pages.append([row[0]["callback_data"] for row in cancels])
            forward = [b for b in nav if b["text"] == "▶"]
            if not forward:
                break
            edits = len(bot.tg.calls_of("editMessageText"))
            bot.tg.push(bot.tg.make_callback_update(CHAT, OWNER, forward[0]["callback_data"],
                                                    message_id=listing.message_id))  # fmt: skip
            await bot.wait(lambda e=edits: len(bot.tg.calls_of("editMessageText")) > e)
            [message] = [m for m in bot.messages(CHAT) if m.message_id == listing.message_id]
        ids = [r["id"] for r in await bot.rows("SELECT id FROM reminders ORDER BY id")]
        assert len(pages) > 1
        assert sorted(d for page in pages for d in page) == sorted(f"rm:x:{i}" for i in ids)

        # The last page's ❌ cancels its reminder; the message stays on that page.
        last = pages[-1][0]
        answers = len(bot.tg.calls_of("answerCallbackQuery"))
        bot.tg.push(bot.tg.make_callback_update(CHAT, OWNER, last, message_id=listing.message_id))
        await bot.wait(lambda: len(bot.tg.calls_of("answerCallbackQuery")) > answers)
        assert bot.tg.calls_of("answerCallbackQuery")[-1].params["text"].startswith("Cancelled")
        cancelled = int(last.removeprefix("rm:x:"))
        [state] = await bot.rows("SELECT state FROM reminders WHERE id = ?", (cancelled,))
        assert state["state"] == "cancelled"

        def shown() -> str:
            [now] = [m for m in bot.messages(CHAT) if m.message_id == listing.message_id]
            return now.text

        await bot.wait(lambda: shown().startswith("Pending reminders (4)"))
        # Still the last page (reminder 0 is on the first), without the one cancelled.
        assert "reminder 0 " not in shown()
        assert f"reminder {ids.index(cancelled)} " not in shown()


@pytest.mark.parametrize(
    "data",
    [
        "rm:x:" + "9" * 25,  # past SQLite's integers: OverflowError when bound
        "rm:x:9223372036854775808",  # one past the largest row id
        "mr:²",  # a digit to str.isdigit(), not to int()
        "mr:" + "1" * 40,
        "rm:x:-1",
        "mr:",
        "zz:no handler of ours",  # no handler at all: the client's spinner must stop too
    ],
)
async def test_forged_callback_data_is_answered_quietly(tmp_path: Path, data: str) -> None:
    async with bot_under_test(tmp_path) as bot:
        [listing] = await bot.ask(CHAT, "/reminders")
        with structlog.testing.capture_logs() as logs:
            bot.tg.push(bot.tg.make_callback_update(CHAT, OWNER, data,
                                                    message_id=listing.message_id))  # fmt: skip
            await bot.wait(lambda: len(bot.tg.calls_of("answerCallbackQuery")) == 1)
        assert [e for e in logs if e["log_level"] in ("error", "critical")] == []
        # Nothing but the answer: no "something went wrong" message in the chat.
        assert bot.messages(CHAT)[-1].message_id == listing.message_id


async def test_a_chat_that_blocked_the_bot_stops_its_reminders(tmp_path: Path) -> None:
    clock = SettableClock(datetime.now(UTC))
    utc = ZoneInfo("UTC")
    async with bot_under_test(tmp_path, clock=clock, ADMIN_USER_IDS=str(OWNER)) as bot:
        await bot.ask(FRIEND, "/timezone UTC", user_id=FRIEND)
        schedule(bot, local_when(7 * 86400, utc, clock.now), "next week", repeat="weekly")
        await bot.ask(FRIEND, "remind me next week", user_id=FRIEND)
        soon = in_an_hour(clock, utc)
        schedule(bot, soon, "soon")
        await bot.ask(FRIEND, "and soon", user_id=FRIEND)
        bot.tg.blocked_chats.add(FRIEND)
        fall_due(bot, clock, soon, utc)

        async def stopped() -> bool:
            rows = await bot.rows("SELECT outcome FROM reminder_deliveries")
            return [r["outcome"] for r in rows] == ["stopped"]

        await wait_until_async(stopped)
        rows = await bot.rows("SELECT text, state, stop_reason FROM reminders ORDER BY id")
        assert rows == [
            {"text": "next week", "state": "stopped", "stop_reason": "blocked"},
            {"text": "soon", "state": "stopped", "stop_reason": "blocked"},
        ]
        refused = [c for c in bot.tg.calls_of("sendMessage") if c.params["chat_id"] == FRIEND
                   and not c.ok]  # fmt: skip
        assert [c.error for c in refused] == ["Forbidden: bot was blocked by the user"]
        [stats] = await bot.ask(CHAT, "/stats")
        assert (
            "Reminders: 0 pending, 0 sent today (0 late), 2 stopped in 1 chat(s) that blocked "
            "the bot or are gone"
        ) in stats.text


def texts_of(fakes: FakeServers, user: int) -> list[str]:
    return [m.text for m in fakes.tg.bot_messages(user)]


def fired_in(fakes: FakeServers, user: int, text: str) -> list[str]:
    return [t for t in texts_of(fakes, user) if t.startswith("⏰") and t.endswith(text)]


def outcomes(db_path: Path) -> list[str | None]:
    return [r["outcome"] for r in query(db_path, "SELECT outcome FROM reminder_deliveries")]


@pytest.mark.slow
async def test_kill_9_between_set_and_due_fires_once_after_restart(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    user = 4242
    async with FakeServers() as fakes:
        async with restartable_bot(fakes, db_path, user=user) as proc:
            fakes.tg.push(fakes.tg.make_text_update(user, user, "/timezone Asia/Tokyo"))
            await wait_until(
                lambda: any(
                    t.startswith("Time zone set: Asia/Tokyo") for t in texts_of(fakes, user)
                ),
                "the zone",
            )
            # 10 s after the model answers: the receipt and the kill must come first, and on a
            # loaded machine the turn's second model round alone has taken several seconds.
            due = WrittenWhen(10, ZoneInfo("Asia/Tokyo"))
            fakes.openai.script("gpt-5", reminder_call(due, "feed the cat"), Reply("Sure."))
            fakes.tg.push(fakes.tg.make_text_update(user, user, "remind me to feed the cat"))
            await wait_until(
                lambda: any("⏰ Reminder set" in t for t in texts_of(fakes, user)), "the receipt"
            )
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert [r["state"] for r in query(db_path, "SELECT state FROM reminders")] == ["pending"]

        async with restartable_bot(fakes, db_path, user=user) as proc:
            await wait_until(lambda: bool(fired_in(fakes, user, "feed the cat")), "it", 120)
            await wait_until(lambda: outcomes(db_path) == ["sent"], "the mark")
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        sent = fired_in(fakes, user, "feed the cat")
        # Once; on time, or marked late if the restart itself outlasted the due time.
        assert len(sent) == 1 and sent[0].startswith("⏰ ")
        [delivery] = query(db_path, "SELECT message_id FROM reminder_deliveries")
        [message] = [m for m in fakes.tg.bot_messages(user) if m.text == sent[0]]
        assert delivery["message_id"] == message.message_id


async def test_flood_control_is_waited_out_and_a_502_after_delivery_is_not_sent_again(
    tmp_path: Path,
) -> None:
    """Flood control's 429 with retry_after 5: retried after exactly the 5 s Telegram asked
    for. Then a 502 that Telegram answered after it delivered the message: the reminder is in
    the chat once, and it is not sent again (its outcome is recorded as unknown), because a
    retry would have put it there twice. The clock moves only when the test has seen each retry
    planned, so no fault can come too late."""
    clock = SettableClock(datetime.now(UTC))
    utc = ZoneInfo("UTC")
    async with bot_under_test(tmp_path, clock=clock) as bot:
        await bot.ask(CHAT, "/timezone UTC")
        due = in_an_hour(clock, utc)
        schedule(bot, due, "stand up")
        await bot.ask(CHAT, "remind me to stand up")
        sends_before = len(bot.tg.calls_of("sendMessage"))

        def failed() -> list[str | None]:
            calls = bot.tg.calls_of("sendMessage")[sends_before:]
            return [c.error for c in calls if not c.ok]

        with structlog.testing.capture_logs() as logs:

            def events(name: str) -> list[dict[str, Any]]:
                return [e for e in logs if e["event"] == name]

            bot.tg.inject_error("sendMessage", retry_after=5)
            fall_due(bot, clock, due, utc)
            await bot.wait(lambda: len(events("reminder_retry")) == 1, timeout=30)
            bot.tg.inject_error("sendMessage", status=502, description="Bad Gateway",
                                delivered_every=1)  # fmt: skip
            wake_at(
                bot, clock, clock.now + timedelta(seconds=events("reminder_retry")[0]["after_s"])
            )
            await bot.wait(lambda: bool(events("reminder_outcome_unknown")), timeout=30)
            # Long past every back-off step: nothing more is sent.
            wake_at(bot, clock, clock.now + timedelta(hours=1))
            await bot.wait(lambda: bot.reminders.scheduler.in_flight == 0)
        assert [e["after_s"] for e in events("reminder_retry")] == [5.0]
        assert failed() == ["Too Many Requests: retry after 5", "Bad Gateway"]
        assert [m.text for m in bot.tg.bot_messages(CHAT) if m.text.startswith("⏰ stand")] == [
            "⏰ stand up"
        ]
        [delivery] = await bot.rows("SELECT outcome FROM reminder_deliveries")
        assert delivery["outcome"] == "unknown"
