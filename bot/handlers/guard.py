"""The allowlist, applied once, for every update, before any handler that answers.

`StrangerHandler` in handler group `ACCESS_GROUP` (-1) matches every message and button press
from someone the allowlist does not name, tells them no (with their id, so the owner can add
them) and stops the update there with `ApplicationHandlerStop`. A stranger costs nothing and
leaves no row; group chatter the bot was not asked about is never read into a session; and a
handler added later is behind the guard without a line of its own (tests/bot/test_access_guard.py
walks every registered handler).
"""

from __future__ import annotations

from collections.abc import Collection

import structlog
from telegram import MessageEntity, Update
from telegram.error import TelegramError
from telegram.ext import ApplicationHandlerStop, BaseHandler, filters

from bot.config import Settings
from bot.handlers.access import is_allowed, is_anonymous, say, user_language
from bot.incoming import is_addressed_to_bot, is_group
from bot.services import App, Context
from bot.ui.commands import registered_commands
from bot.ui.i18n import t

log = structlog.get_logger("bot.access")

# The guard's handler group: before group 0, where every handler that answers is registered.
# Within a group only the first handler that matches runs, and the guard matches strangers
# only, so the group's other handlers (the chat's language, bot/handlers/ops.py) still see
# everyone else.
ACCESS_GROUP = -1


class StrangerHandler(BaseHandler[Update, Context, None]):
    """Matches a message or a button press whose sender may not use the bot: someone not in
    ALLOWED_USER_IDS or ADMIN_USER_IDS, or someone writing as a group or channel.

    A group's move to a supergroup is let through whoever made it: the chat's data follows
    the move (bot/handlers/migration.py) and nothing is answered. Updates that are neither
    messages nor presses (a Stop press on a draft names no sender) are not judged here."""

    def __init__(self, allowed: Collection[int], admins: Collection[int]) -> None:
        super().__init__(refuse_stranger)
        self._allowed = frozenset(allowed)
        self._admins = frozenset(admins)

    def check_update(self, update: object) -> bool:
        if not isinstance(update, Update):
            return False
        if update.message is None and update.callback_query is None:
            return False
        if update.message is not None and filters.StatusUpdate.MIGRATE.check_update(update):
            return False
        user = update.effective_user
        if is_anonymous(update):
            return True
        return not is_allowed(user.id if user else None, self._allowed, self._admins)


def register_access_guard(application: App, settings: Settings) -> None:
    """The guard goes first, before any feature registers its handlers."""
    guard = StrangerHandler(settings.ALLOWED_USER_IDS, settings.ADMIN_USER_IDS)
    application.add_handler(guard, group=ACCESS_GROUP)


async def refuse_stranger(update: Update, context: Context) -> None:
    """One polite line with the stranger's id, then no handler sees the update.

    A button press is answered with an alert (a press must be answered, or the client
    spins). In groups a stranger is told only when they addressed the bot, so group chatter
    does not make the bot talk; and at most once an hour each. Someone writing as a group or
    channel is asked to write as themselves: their id is Telegram's shared stand-in, which
    must never be suggested to the owner."""
    user = update.effective_user
    anonymous = is_anonymous(update)
    lang = user_language(update)
    if anonymous:
        refusal = t("anonymous_refused", lang)
    else:
        refusal = t("not_allowed", lang, user_id=user.id if user else "?")
    message = update.effective_message
    sender = _sender_id(update)
    refusals = context.bot_data.services.refusals

    def tell() -> bool:  # counted only when there is something to tell
        return sender is None or refusals.allow(sender)

    if update.callback_query is not None:
        told = tell()
        try:
            await update.callback_query.answer(refusal if told else None, show_alert=told)
        except TelegramError as exc:  # too old to answer: nothing a stranger waits for
            log.info("stranger_press_not_answered", error=str(exc))
    elif message is not None and (user is not None or anonymous) and _addressed(update, context):
        told = tell()
        log.info("stranger_refused", user_id=sender, told=told, anonymous=anonymous)
        if told:
            await say(message, refusal)
    raise ApplicationHandlerStop


def _addressed(update: Update, context: Context) -> bool:
    """Whether a stranger's message asked the bot something: always in a private chat; in a
    group when it mentions or replies to the bot, or is one of the bot's commands (written
    `/cmd@bot`, or `/cmd` for a command the bot has; another bot's commands are not ours)."""
    message = update.effective_message
    if message is None:
        return False
    if not is_group(message):
        return True
    bot = context.bot
    if is_addressed_to_bot(message, bot.username, bot.id):
        return True
    entities = message.parse_entities([MessageEntity.BOT_COMMAND])
    first = next((text for entity, text in entities.items() if entity.offset == 0), None)
    if first is None:
        return False
    command, _, addressee = first[1:].partition("@")
    if addressee:
        return addressee.lower() == bot.username.lower()
    return command.lower() in registered_commands(context.application)


def _sender_id(update: Update) -> int | None:
    """Who a refusal is counted against: the chat written as, else the person."""
    message = update.effective_message
    if message is not None and message.sender_chat is not None:
        return message.sender_chat.id
    user = update.effective_user
    return user.id if user is not None else None
