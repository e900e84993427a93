"""The allowlist is checked once, by the guard in handler group -1 (bot/handlers/guard.py),
and every handler the application registers is behind it.

The handlers are read from the running application, not listed here: a command added later
is refused to strangers by the same test, and a handler no stranger's update below reaches
fails the test by name until a sample for it is added. Each stranger's update then gets the
one refusal line (or alert) and nothing else: no handler's own answer, no model call, no row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from telegram import Update
from telegram.ext import BaseHandler

from bot.handlers.guard import ACCESS_GROUP, StrangerHandler
from bot.handlers.media.voice import RETRY_PREFIX
from bot.handlers.reminders import CANCEL_PREFIX, PAGE_PREFIX, ZONE_PREFIX
from bot.handlers.tasks import RESUME_PREFIX
from bot.ui.commands import registered_commands
from bot.ui.i18n import t
from bot.ui.keyboards import model_callback_data
from bot.ui.pending_texts import DROP_PREFIX, KEEP_PREFIX
from tests.support.e2e_bot import STRANGER, BotUnderTest, bot_under_test, real_update

GROUP = -100777

# Handlers that run before the guard, each with the reason a stranger's update is safe there.
BEFORE_THE_GUARD: dict[str, str] = {
    "stop_generation": (
        "a Stop press on a draft names no sender: it stops only the reply this bot is"
        " streaming into that draft (the draft id is the reply's own), and answers nothing"
    ),
}
# Handlers a stranger's update may reach: a group's move to a supergroup is followed whoever
# made it (nothing is answered), and the chat's language is written only for allowed senders.
REACHABLE_BY_STRANGERS = {"migration_message", "remember_language"}

PRESSES = [
    model_callback_data("gpt-5"),
    "fg:y:555",
    "fg:n:555",
    f"{CANCEL_PREFIX}1",
    f"{PAGE_PREFIX}1",
    f"{ZONE_PREFIX}UTC",
    f"{KEEP_PREFIX}1",
    f"{DROP_PREFIX}1",
    f"{RETRY_PREFIX}1",
    f"{RESUME_PREFIX}1",
    "no handler knows this",
]


def _name(handler: BaseHandler[Any, Any, Any]) -> str:
    return getattr(handler.callback, "__name__", repr(handler.callback))


def _stranger_updates(bot: BotUnderTest) -> list[dict[str, Any]]:
    """One update of each kind a stranger can send, each from a stranger of its own (so the
    hourly refusal throttle tells every one of them): every registered command, text, a
    sticker, a command the bot does not have, and a press on each kind of button."""
    tg = bot.tg
    updates: list[dict[str, Any]] = []

    def stranger() -> int:
        return STRANGER * 1000 + len(updates)

    for command in sorted(registered_commands(bot.application)):
        user = stranger()
        updates.append(tg.make_text_update(user, user, f"/{command}"))
    for text in ("hello, can I use you?", "/no_such_command"):
        user = stranger()
        updates.append(tg.make_text_update(user, user, text))
    user = stranger()
    updates.append(real_update("message_with_sticker.json", user, user))
    for data in PRESSES:
        user = stranger()
        updates.append(tg.make_callback_update(user, user, data, message_id=1))
    return updates


def _matches(handler: BaseHandler[Any, Any, Any], update: Update) -> bool:
    return bool(handler.check_update(update))


async def test_every_registered_handler_is_behind_the_guard(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        application = bot.application
        [guard] = [h for h in application.handlers[ACCESS_GROUP] if isinstance(h, StrangerHandler)]
        samples = [
            Update.de_json({"update_id": n, **u}, application.bot)
            for n, u in enumerate(_stranger_updates(bot), start=1)
        ]
        assert all(_matches(guard, update) for update in samples)
        unreached: list[str] = []
        for group in sorted(application.handlers):
            handlers = application.handlers[group]
            for index, handler in enumerate(handlers):
                if handler is guard:
                    continue
                before = group < ACCESS_GROUP or (
                    group == ACCESS_GROUP and index < handlers.index(guard)
                )
                if before:
                    assert _name(handler) in BEFORE_THE_GUARD, (
                        f"{_name(handler)} (group {group}) runs before the access guard"
                    )
                elif _name(handler) in REACHABLE_BY_STRANGERS:
                    continue  # what it takes from a stranger: below
                elif not any(_matches(handler, update) for update in samples):
                    unreached.append(_name(handler))
        # Every handler is shown to be guarded by some stranger's update it would take.
        assert unreached == [], f"add a stranger's update these handlers take: {unreached}"

        # A group's move is let through, to the handlers that expect anyone's.
        moved = bot.tg.make_text_update(GROUP, STRANGER, "x", chat_type="group")
        del moved["message"]["text"]
        moved["message"]["migrate_to_chat_id"] = GROUP - 1
        update = Update.de_json({"update_id": 1, **moved}, application.bot)
        assert not _matches(guard, update)
        reached = {
            _name(h)
            for handlers in application.handlers.values()
            for h in handlers
            if h is not guard and _matches(h, update)
        }
        assert reached <= REACHABLE_BY_STRANGERS | BEFORE_THE_GUARD.keys()


async def test_a_stranger_gets_the_refusal_from_every_handler_and_nothing_else(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        updates = _stranger_updates(bot)
        assert len(updates) > 20  # 12 commands, text, a sticker, unknown, 10 kinds of press
        pushed = [bot.tg.push(update) for update in updates]
        for update_id in pushed:
            await bot.wait_handled(update_id)
        answers = {
            c.params["callback_query_id"]: c.params for c in bot.tg.calls_of("answerCallbackQuery")
        }
        for update in updates:
            if "callback_query" in update:
                press = update["callback_query"]
                user, lang = press["from"]["id"], press["from"].get("language_code")
                answer = answers[press["id"]]
                assert answer.get("text") == t("not_allowed", lang, user_id=user), press["data"]
                assert str(answer.get("show_alert")).lower() == "true"
                assert bot.texts(user) == []
            else:
                message = update["message"]
                user = message["from"]["id"]
                lang = message["from"].get("language_code")
                assert bot.texts(user) == [t("not_allowed", lang, user_id=user)], message.get(
                    "text"
                )
        assert len(answers) == len(PRESSES)
        assert not bot.tg.calls_of("editMessageText")
        assert not bot.model_requests()
        assert await bot.rows("SELECT * FROM messages") == []
        assert await bot.rows("SELECT * FROM chats") == []


async def test_in_a_group_a_stranger_is_told_only_for_what_asks_the_bot(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        group = {"chat_type": "supergroup"}
        quiet = [
            bot.tg.make_text_update(GROUP, STRANGER, "just chatting", **group),
            bot.tg.make_text_update(GROUP, STRANGER + 1, "/no_such_command", **group),
            bot.tg.make_text_update(GROUP, STRANGER + 2, "/new@some_other_bot", **group),
        ]
        told = [
            bot.tg.make_text_update(GROUP, STRANGER + 3, "/new", **group),
            bot.tg.make_text_update(GROUP, STRANGER + 4, "/help@mnemo_test_bot", **group),
            bot.tg.make_text_update(GROUP, STRANGER + 5, "@mnemo_test_bot hi", **group),
        ]
        # The one who is told last chatted first: chatter spends no refusal of theirs.
        quiet.append(bot.tg.make_text_update(GROUP, STRANGER + 5, "hm", **group))
        await bot.wait_handled(bot.tg.push(quiet[-1]))
        pushed = [bot.tg.push(update) for update in quiet[:-1] + told]
        for update_id in pushed:
            await bot.wait_handled(update_id)
        expected = [t("not_allowed", user_id=u["message"]["from"]["id"]) for u in told]
        assert sorted(bot.texts(GROUP)) == sorted(expected)
        assert not bot.model_requests()
