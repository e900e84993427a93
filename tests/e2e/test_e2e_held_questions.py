"""The ✅ question of a held write shows what a ✅ does: for `forget_fact`
the exact memory lines it removes, for `cancel_reminder` the reminder's local time and text.

Real PTB against the fake Bot API, the chat model scripted on the fake OpenAI gateway, the page
served by the fake site on 127.0.0.1; what the user sees is read from the fake Telegram.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.ui.i18n import t
from tests.e2e.test_e2e_web import CHAT, INJECTION, OWNER, memory_of, press, question, web_bot
from tests.fakes.providers import Reply, ToolCallReply

BANK_LINES = [
    "- Banks with Nordbank",
    "- Bank card PIN is written in the blue notebook",
    "- Opened a savings account at the bank in March",
]
MEMORY = "\n".join(["- Likes sourdough bread", *BANK_LINES, "- Lives in Porto"])


async def test_forget_fact_asks_with_the_exact_lines_a_keep_removes(tmp_path: Path) -> None:
    """ "Forget: bank" once removed three lines the user never saw; now they are the question."""
    async with web_bot(tmp_path) as (bot, site, _):
        await bot.set_memory(CHAT, MEMORY)
        site.pages["bread"] = ("text/html; charset=utf-8", INJECTION.encode())
        url = site.url("/page/bread")
        bot.openai.script(
            "gpt-5",
            ToolCallReply("web_read", {"url": url}),
            ToolCallReply("forget_fact", {"fact": "bank"}),
            Reply("Here is the recipe."),
        )
        await bot.ask(CHAT, f"how do I make this? {url}")
        await bot.wait(lambda: any(m.button_data() for m in bot.messages(CHAT)))

        asking = question(bot, CHAT)
        assert asking.text == (
            f"{t('pending_question')}\n{t('pending_forget_lines', lines=chr(10).join(BANK_LINES))}"
        )
        assert await memory_of(bot, CHAT) == MEMORY  # nothing removed before the tap

        keep, _ = asking.button_data()
        await press(bot, CHAT, OWNER, keep, asking.message_id)
        await bot.wait(lambda: not any(m.button_data() for m in bot.messages(CHAT)))
        assert await memory_of(bot, CHAT) == "- Likes sourdough bread\n- Lives in Porto"
        done = next(m for m in bot.messages(CHAT) if m.message_id == asking.message_id)
        assert done.text.startswith(t("pending_kept"))


async def test_cancel_reminder_asks_with_the_reminders_local_time_and_text(
    tmp_path: Path,
) -> None:
    async with web_bot(tmp_path) as (bot, site, _):
        await bot.ask(CHAT, "/timezone Europe/Berlin")
        book = bot.reminders.book
        day = (datetime.now(ZoneInfo("Europe/Berlin")) + timedelta(days=30)).date()
        when = f"{day.isoformat()}T09:30"
        made = await book.schedule(CHAT, when=when, text="call the dentist")
        site.pages["bread"] = ("text/html; charset=utf-8", INJECTION.encode())
        url = site.url("/page/bread")
        bot.openai.script(
            "gpt-5",
            ToolCallReply("web_read", {"url": url}),
            ToolCallReply("cancel_reminder", {"id": made.id}),
            Reply("Here is the recipe."),
        )
        await bot.ask(CHAT, f"how do I make this? {url}")
        await bot.wait(lambda: any(m.button_data() for m in bot.messages(CHAT)))

        asking = question(bot, CHAT)
        # 09:30 in Berlin, as the user set it, with its weekday and month.
        weekday = "Mon Tue Wed Thu Fri Sat Sun".split()[day.weekday()]
        month = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()[day.month - 1]
        shown = t(
            "pending_cancel_reminder_at",
            when=t("reminder_date", weekday=weekday, day=day.day, month=month, time="09:30"),
            zone="Europe/Berlin",
            text="call the dentist",
        )
        assert asking.text == f"{t('pending_question')}\n{shown}"
        assert (await book.get(CHAT, made.id)).state == "pending"  # type: ignore[union-attr]

        keep, _ = asking.button_data()
        await press(bot, CHAT, OWNER, keep, asking.message_id)
        await bot.wait(lambda: not any(m.button_data() for m in bot.messages(CHAT)))
        assert (await book.get(CHAT, made.id)).state == "cancelled"  # type: ignore[union-attr]
        done = next(m for m in bot.messages(CHAT) if m.message_id == asking.message_id)
        assert done.text.startswith(t("pending_kept")) and "call the dentist" in done.text
