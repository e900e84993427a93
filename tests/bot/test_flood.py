"""A reply Telegram refuses with a flood penalty is sent once more after the penalty, in that
chat alone (bot/ui/flood.py); another chat's reply does not wait for it."""

from __future__ import annotations

from pathlib import Path

from bot.ui.i18n import t
from tests.support.e2e_bot import FRIEND, OWNER, bot_under_test


async def test_a_reply_refused_with_a_penalty_is_sent_once_after_it(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.tg.inject_error("sendMessage", count=1, retry_after=1)
        bot.say(OWNER, "/cancel")
        await bot.wait(lambda: any(not c.ok for c in bot.tg.calls_of("sendMessage")))
        # While the first chat sits out its penalty, another chat is answered.
        [other] = await bot.ask(FRIEND, "/cancel", user_id=FRIEND)
        assert other.text == t("nothing_to_cancel")
        await bot.wait_messages(OWNER, 1)
        assert bot.texts(OWNER) == [t("nothing_to_cancel")]  # once: no duplicate
        refused, sent = [
            c for c in bot.tg.calls_of("sendMessage") if int(c.params["chat_id"]) == OWNER
        ]
        assert (refused.ok, sent.ok) == (False, True)
        assert sent.at - refused.at >= 1.0  # not retried into the penalty
        friend = [c for c in bot.tg.calls_of("sendMessage") if int(c.params["chat_id"]) == FRIEND]
        assert friend[0].at < sent.at  # the other chat did not wait for the penalty
