"""What a turn answers: the request a handler reads from a Telegram message, with what it says
about whose words it holds."""

from __future__ import annotations

from dataclasses import dataclass

from telegram import Bot, Message, User
from telegram.constants import ChatType

from agent.record import Question
from bot.incoming import (
    forward_origin_of,
    is_group,
    plain_name,
    quoted_author,
    quoted_text,
    quotes_others,
    replies_to,
)
from memory.messages import QUOTE_KEY
from memory.provenance import FORWARD, QUOTE, Provenance


@dataclass(frozen=True)
class TurnRequest:
    """What a handler extracted from an update; no Telegram objects beyond the Bot."""

    chat_id: int
    user_id: int
    text: str
    language: str | None
    reply_to_message_id: int | None
    private: bool
    message_thread_id: int | None = None
    # How the message came if not as text (kind, Telegram file id, caption): stored with it.
    media: dict[str, object] | None = None
    # A photo for this turn only, as a data URL: sent as an image part, never stored.
    image_url: str | None = None
    # The text of the message this one replies to (or the part the user quoted), plain text.
    quoted_text: str | None = None
    # Identifies the input across deliveries (a replayed update); the turn runs once per key.
    turn_key: str | None = None
    # Who wrote it, in a group ("Ana (id 101)"): stored beside the text, so the consolidation
    # transcript names the speaker and memory lines can say whom they are about.
    speaker: str | None = None
    # The sender's name as Telegram shows it (a reminder set in a group mentions them).
    user_name: str | None = None
    # A forwarded message: whose words it holds (bot.incoming.forward_origin_of),
    # stored with it and shown as theirs, never as the sender's own statement.
    forward_origin: dict[str, object] | None = None
    # The message quotes words that are not the sender's own (another member's, the bot's).
    quotes_others: bool = False
    # ... and they are not the bot's either: stored as a quote of others (stored_provenance).
    quotes_people: bool = False
    # Who wrote the quoted message, as a stub names them ("Ana (id 101)").
    quoted_author: str | None = None
    # Where the message's words came from when they are not the sender's (a document, a photo,
    # an audio file: set by the media handler that read it). A forward or a quote of others
    # is recorded from the fields above (stored_provenance).
    provenance: Provenance | None = None

    @property
    def others_words(self) -> bool:
        """This turn's message carries words of others: forwarded, or quoting someone else.
        Such content writes nothing by itself (see AgentTurn.others_words)."""
        return self.forward_origin is not None or self.quotes_others

    def question(self) -> Question:
        """The message as the agent stores it (agent/record.py): the text as it arrived, how it
        came, what it quoted and whose words it holds. The prompt frames a forward and a quote
        from these (agent/prompt.py `user_text`); nothing is framed before it is stored."""
        return Question(
            self.chat_id,
            self.user_id,
            self.text,
            key=self.turn_key,
            media=self.stored_media(),
            forward_origin=self.forward_origin,
            provenance=self.stored_provenance(),
        )

    def stored_media(self) -> dict[str, object] | None:
        """The JSON stored beside the text: how it came, who said it in a group, and the text
        it quoted."""
        media = dict(self.media or {})
        if self.speaker is not None:
            media["speaker"] = self.speaker
        if self.quoted_text and self.quoted_text.strip():
            media[QUOTE_KEY] = self.quoted_text
        return media or None

    def stored_provenance(self) -> Provenance | None:
        """Where the stored words came from, when not from the sender: a forward is its
        origin's words whatever it holds; then a document, photo or audio file; then a quote
        of someone else, whose reply is the sender's own. Kept with the message: while it stays
        in the model's view, later turns' writes wait for a ✅ too (agent/untrusted.py), and the
        memory writer sees a stub. Not for a quote of the bot's own answer: what that answer
        read from the web stays in view as its tool round, which counts already, and a group
        that talks to the bot by replying would otherwise confirm every write."""
        if self.forward_origin is not None:
            origin = str(self.forward_origin.get("name") or "someone else")
            return Provenance(FORWARD, origin)
        if self.provenance is not None:
            return self.provenance
        if self.quotes_people and self.quoted_text and self.quoted_text.strip():
            author = self.quoted_author or "someone else"
            return Provenance(QUOTE, author, own=self.text)
        return None


def speaker_label(user: User) -> str:
    """A group member as the transcript names them: the name they chose (one line, no
    brackets or colons, which the transcript's own lines use) and their id, which is unique."""
    name = plain_name(user.full_name)
    return f"{name} (id {user.id})" if name else f"id {user.id}"


def turn_request_for(
    message: Message, user_id: int, bot: Bot, update_id: int, *, text: str, lang: str | None
) -> TurnRequest:
    """The turn a user's message asks for, text or media alike: in groups the answer replies to
    the message, in forum topics it stays in the topic, a quote travels along, and the update's
    id keys the turn so a replay is answered once."""
    group = is_group(message)
    return TurnRequest(
        chat_id=message.chat_id,
        user_id=user_id,
        text=text,
        language=lang,
        reply_to_message_id=message.message_id if group else None,
        private=message.chat.type == ChatType.PRIVATE,
        message_thread_id=message.message_thread_id if message.is_topic_message else None,
        quoted_text=quoted_text(message),
        forward_origin=forward_origin_of(message),
        quotes_others=quotes_others(message),
        quotes_people=quotes_others(message) and not replies_to(message, bot.id),
        quoted_author=quoted_author(message),
        turn_key=f"tg:{bot.id}:{update_id}",
        speaker=speaker_label(message.from_user) if group and message.from_user else None,
        user_name=message.from_user.first_name if message.from_user else None,
    )
