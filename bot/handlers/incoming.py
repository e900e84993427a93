"""What an incoming message says and whom it is for: group or private, addressed to the bot,
its text without the bot's mention, and the text it quotes.

Telegram-specific reading only; who may talk at all is bot/handlers/access.py.
"""

from __future__ import annotations

import re

from telegram import Message, MessageEntity

GROUP_TYPES = ("group", "supergroup")

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with lone UTF-16 surrogates replaced by U+FFFD.

    Telegram's JSON may carry a lone "\\ud83d" (a client cut an emoji in half); Python keeps it
    as a lone surrogate, which UTF-8 and UTF-16 encoders (SQLite, offsets) refuse. U+FFFD is
    one UTF-16 unit like the surrogate, so entity offsets stay right.
    """
    return _LONE_SURROGATE.sub("\ufffd", text)


def is_group(message: Message) -> bool:
    return message.chat.type in GROUP_TYPES


def _entities(message: Message) -> tuple[list[MessageEntity], str]:
    if message.text is not None:
        return list(message.entities), clean_text(message.text)
    return list(message.caption_entities), clean_text(message.caption or "")


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


def quoted_text(message: Message) -> str | None:
    """The text the user replied to: the part they quoted (Telegram's `quote`), else the whole
    replied-to message's text or caption. None for a plain message, and for the implicit
    "reply" to the topic-creation message that every message in a forum topic carries."""
    if message.quote is not None and message.quote.text:
        return message.quote.text
    replied = message.reply_to_message
    if replied is None or replied.forum_topic_created is not None:
        return None
    return replied.text or replied.caption or None
