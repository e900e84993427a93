"""Who may talk to the bot, and whether a group message is meant for it.

Both checks run before anything is stored or any model is called: a stranger costs nothing,
and group chatter the bot was not asked about is never read into a session.
"""

from __future__ import annotations

from collections.abc import Collection

from telegram import Message, MessageEntity

GROUP_TYPES = ("group", "supergroup")


def is_allowed(user_id: int | None, allowed: Collection[int], admins: Collection[int]) -> bool:
    """An empty allowlist means nobody: a fresh bot must not answer (and bill) the world."""
    return user_id is not None and (user_id in allowed or user_id in admins)


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
