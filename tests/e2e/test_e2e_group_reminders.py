"""Reminders in a group: a member cancels only the reminders they set (an admin cancels any),
and only admins change the group's time zone. Admins are asked of the fake Bot API through
getChatMember, which answers in the Bot API's exact ChatMember shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.ui.i18n import t
from tests.support.e2e_bot import FRIEND, OWNER, BotUnderTest, bot_under_test

GROUP = -100777002
IN_GROUP = {"chat_type": "supergroup"}
ADMIN = 102
MEMBERS = {"ALLOWED_USER_IDS": f"{OWNER},{FRIEND},{ADMIN}"}


async def press(bot: BotUnderTest, user_id: int, data: str, message_id: int) -> dict[str, Any]:
    """Press a button as `user_id`; the answer to that very press."""
    update = bot.tg.make_callback_update(GROUP, user_id, data, message_id=message_id)
    bot.tg.push(update)
    press_id = update["callback_query"]["id"]

    def answers() -> list[dict[str, Any]]:
        return [c.params for c in bot.tg.calls_of("answerCallbackQuery")
                if c.params.get("callback_query_id") == press_id]  # fmt: skip

    await bot.wait(lambda: bool(answers()))
    return answers()[0]


async def states(bot: BotUnderTest) -> list[str]:
    return [r["state"] for r in await bot.rows("SELECT state FROM reminders ORDER BY id")]


async def test_only_the_setter_or_a_group_admin_cancels_a_reminder(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, **MEMBERS) as bot:
        bot.tg.member_status[(GROUP, ADMIN)] = "administrator"
        book = bot.services.reminders.book
        tomorrow = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
        for text in ("standup notes", "book the room"):
            await book.schedule(GROUP, when=tomorrow.isoformat(), text=text,
                                user_id=OWNER, user_name="Ann")  # fmt: skip
        [listing] = await bot.ask(GROUP, "/reminders", **IN_GROUP)
        first, second = [row[0]["callback_data"] for row in listing.reply_markup["inline_keyboard"]]

        # Another member: refused, twice; Telegram is asked once (the answer is kept).
        for data in (first, second):
            answer = await press(bot, FRIEND, data, listing.message_id)
            assert (answer["text"], answer["show_alert"]) == (t("reminder_cancel_not_yours"), True)
        assert await states(bot) == ["pending", "pending"]
        assert len(bot.tg.calls_of("getChatMember")) == 1

        # An admin cancels a reminder someone else set; the setter cancels their own, without
        # a look-up.
        answer = await press(bot, ADMIN, first, listing.message_id)
        assert answer["text"] == "Cancelled: standup notes"
        answer = await press(bot, OWNER, second, listing.message_id)
        assert answer["text"] == "Cancelled: book the room"
        assert await states(bot) == ["cancelled", "cancelled"]
        assert [c.params["user_id"] for c in bot.tg.calls_of("getChatMember")] == [FRIEND, ADMIN]


async def test_only_group_admins_change_the_group_time_zone(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, **MEMBERS) as bot:
        bot.tg.member_status[(GROUP, ADMIN)] = "creator"

        async def zone() -> str | None:
            rows = await bot.rows("SELECT time_zone FROM chats WHERE chat_id = ?", (GROUP,))
            return rows[0]["time_zone"] if rows else None

        [refused] = await bot.ask(GROUP, "/timezone Europe/Lisbon", user_id=FRIEND, **IN_GROUP)
        assert refused.text == t("timezone_admins_only")
        assert await zone() is None

        # Bare /timezone shows the zone to anyone; its buttons too are for admins only.
        [shown] = await bot.ask(GROUP, "/timezone", user_id=FRIEND, **IN_GROUP)
        tokyo = next(b["callback_data"] for row in shown.reply_markup["inline_keyboard"]
                     for b in row if b["text"] == "Asia/Tokyo")  # fmt: skip
        answer = await press(bot, FRIEND, tokyo, shown.message_id)
        assert (answer["text"], answer["show_alert"]) == (t("timezone_admins_only"), True)
        assert await zone() is None

        [done] = await bot.ask(GROUP, "/timezone Europe/Lisbon", user_id=ADMIN, **IN_GROUP)
        assert done.text.startswith("Time zone set: Europe/Lisbon.")
        await press(bot, ADMIN, tokyo, shown.message_id)
        assert await zone() == "Asia/Tokyo"

        # A private chat is its user's own: no one is asked.
        calls = len(bot.tg.calls_of("getChatMember"))
        [private] = await bot.ask(FRIEND, "/timezone Europe/Berlin", user_id=FRIEND)
        assert private.text.startswith("Time zone set: Europe/Berlin.")
        assert len(bot.tg.calls_of("getChatMember")) == calls
