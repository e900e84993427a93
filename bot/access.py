"""Who may talk to the bot, and whether a group message is meant for it.

Both checks run before anything is stored or any model is called: a stranger costs nothing,
and group chatter the bot was not asked about is never read into a session. `admit` is the one
preamble every handler module runs, so all commands refuse strangers the same way.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import structlog
from telegram import Message, MessageEntity, Update
from telegram.error import TelegramError

from bot.i18n import t

if TYPE_CHECKING:
    from bot.config import Settings

log = structlog.get_logger("bot.access")

GROUP_TYPES = ("group", "supergroup")


def is_allowed(user_id: int | None, allowed: Collection[int], admins: Collection[int]) -> bool:
    """An empty allowlist means nobody: a fresh bot must not answer (and bill) the world."""
    return user_id is not None and (user_id in allowed or user_id in admins)


def user_allowed(settings: Settings, user_id: int | None) -> bool:
    return is_allowed(user_id, settings.ALLOWED_USER_IDS, settings.ADMIN_USER_IDS)


def user_language(update: Update) -> str | None:
    """The sender's Telegram language, which every reply is written in."""
    user = update.effective_user
    return user.language_code if user else None


async def say(message: Message, text: str, **kwargs: Any) -> None:
    """A short plain-text reply. A failure to send is logged, never raised into PTB."""
    try:
        await message.reply_text(text, do_quote=False, **kwargs)
    except TelegramError as exc:
        log.warning("reply_failed", chat_id=message.chat_id, error=str(exc))


async def admit(update: Update, settings: Settings, *, addressed: bool = True) -> bool:
    """True if the sender may use the bot; a stranger gets one polite line with their id.

    A button press is answered with an alert. In groups a stranger is told only when they
    addressed the bot, so group chatter does not make the bot talk.
    """
    user = update.effective_user
    if user_allowed(settings, user.id if user else None):
        return True
    refusal = t("not_allowed", user_language(update), user_id=user.id if user else "?")
    message = update.effective_message
    if update.callback_query is not None:
        await update.callback_query.answer(refusal, show_alert=True)
    elif user is not None and message is not None and addressed:
        log.info("stranger_refused", user_id=user.id, chat_id=message.chat_id)
        await say(message, refusal)
    return False


def is_group(message: Message) -> bool:
    return message.chat.type in GROUP_TYPES


def _entities(message: Message) -> tuple[list[MessageEntity], str]:
    if message.text is not None:
        return list(message.entities), message.text
    return list(message.caption_entities), message.caption or ""


def _mentions_bot(entity: MessageEntity, text: str, bot_username: str, bot_id: int) -> bool:
    if entity.type == MessageEntity.MENTION:
        mention = _utf16_slice(text, entity.offset, entity.length)
        return mention.lstrip("@").lower() == bot_username.lower()
    if entity.type == MessageEntity.TEXT_MENTION:
        return entity.user is not None and entity.user.id == bot_id
    return False


def is_addressed_to_bot(message: Message, bot_username: str, bot_id: int) -> bool:
    """In groups the bot answers only when mentioned or when a user replies to it."""
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot_id:
        return True
    entities, text = _entities(message)
    return any(_mentions_bot(e, text, bot_username, bot_id) for e in entities)


def strip_bot_mentions(message: Message, bot_username: str, bot_id: int) -> str:
    """The message text without the mentions of the bot, which the model need not see.

    Entity offsets count UTF-16 code units, so the cut is done on the UTF-16 encoding.
    """
    entities, text = _entities(message)
    units = text.encode("utf-16-le")
    for entity in sorted(entities, key=lambda e: e.offset, reverse=True):
        if _mentions_bot(entity, text, bot_username, bot_id):
            start, end = entity.offset * 2, (entity.offset + entity.length) * 2
            units = units[:start] + units[end:]
    stripped = units.decode("utf-16-le")
    return stripped.strip().lstrip(",:").strip()


def _utf16_slice(text: str, offset: int, length: int) -> str:
    units = text.encode("utf-16-le")
    return units[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")
