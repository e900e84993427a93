"""What an incoming message says and whom it is for: group or private, addressed to the bot,
its text without the bot's mention, and the text it quotes.

Telegram-specific reading only; who may talk at all is
bot/handlers/access.py (applied by bot/handlers/guard.py).
"""

from __future__ import annotations

import re

from telegram import (
    Message,
    MessageEntity,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
)

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


def plain_name(name: str) -> str:
    """A name as the transcript and the prompt show it: one line, without the brackets, colons
    and angle brackets their own lines use, at most 64 characters (Telegram names are chosen
    by their owners and may hold anything)."""
    return " ".join(re.sub(r"[\[\]:<>]", " ", clean_text(name)).split())[:64]


def forward_origin_of(message: Message) -> dict[str, object] | None:
    """Whose words a forwarded message holds (Bot API 7.0 `forward_origin`), as stored with
    it: {"type", "name", "date"} ("id" too when Telegram gives one). None when not forwarded.

    The four origins: a user ("Ana (id 101)"), a user who hides their account (only the name
    they chose), a group writing as itself (anonymous admins) and a channel post; the last two
    name the chat and, when Telegram gives it, the author's signature."""
    origin = message.forward_origin
    if origin is None:
        return None
    date = int(origin.date.timestamp())
    if isinstance(origin, MessageOriginUser):
        user = origin.sender_user
        name = plain_name(user.full_name)
        label = f"{name} (id {user.id})" if name else f"id {user.id}"
        return {"type": "user", "name": label, "id": user.id, "date": date}
    if isinstance(origin, MessageOriginHiddenUser):
        name = plain_name(origin.sender_user_name) or "someone"
        return {"type": "hidden_user", "name": f"{name} (hidden account)", "date": date}
    if isinstance(origin, MessageOriginChat | MessageOriginChannel):
        chat = origin.sender_chat if isinstance(origin, MessageOriginChat) else origin.chat
        kind = "chat" if isinstance(origin, MessageOriginChat) else "channel"
        label = f"the {kind} {plain_name(chat.title or '') or chat.id} (id {chat.id})"
        if origin.author_signature and (signed := plain_name(origin.author_signature)):
            label += f", signed {signed}"
        return {"type": kind, "name": label, "id": chat.id, "date": date}
    return {"type": str(origin.type), "name": "someone else", "date": date}


def quoted_author(message: Message) -> str | None:
    """Who wrote the message this one quotes, as a stub names them ("Ana (id 101)"); None
    when it quotes nothing or Telegram does not say (a quote of another chat's message)."""
    if quoted_text(message) is None:
        return None
    replied = message.reply_to_message
    user = replied.from_user if replied is not None else None
    if user is None:
        chat = replied.sender_chat if replied is not None else None
        if chat is None:
            return None
        return plain_name(chat.title or "") or None
    name = plain_name(user.full_name)
    return f"{name} (id {user.id})" if name else f"id {user.id}"


def quotes_others(message: Message) -> bool:
    """Whether the message quotes (replies to) words that are not its sender's own: another
    member's, a channel's, or the bot's (whose answer may repeat a web page)."""
    if quoted_text(message) is None:
        return False
    replied = message.reply_to_message
    if replied is None or message.from_user is None:
        return True  # a quote of an external chat's message, or no sender to compare
    return replied.from_user is None or replied.from_user.id != message.from_user.id


def replies_to(message: Message, user_id: int) -> bool:
    """Whether the message replies to one written by `user_id` (the bot, say)."""
    replied = message.reply_to_message
    return replied is not None and replied.from_user is not None and replied.from_user.id == user_id
