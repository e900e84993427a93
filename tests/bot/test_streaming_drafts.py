"""StreamingReply's native drafts against the fake Bot API, with the real PTB Bot: the Stop
button, text past one message, a seal at a tool round, a refused or rate-limited draft, and the
one real message every draft ends in."""

from __future__ import annotations

from telegram import Bot

from bot.ui.render import utf16_len
from bot.ui.streaming import StreamingReply
from tests.fakes.telegram import FakeTelegram
from tests.support.streamed_text import content, stream_into

CHAT = 4343
FAST = 0.1


def _private(tg: FakeTelegram, chat_id: int = CHAT) -> None:
    """The chat is a private one, as Telegram knows it from the user's message."""
    tg.push(tg.make_text_update(chat_id, chat_id, "hi"))


async def _drafting(
    bot: Bot, tg: FakeTelegram, text: str, *, chunk: int, pause: float
) -> StreamingReply:
    """A reply in a private chat that has streamed `text` and shows it as a draft."""
    _private(tg)
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, use_drafts=True)
    await reply.start()
    await stream_into(reply, text, chunk=chunk, pause=pause)
    await tg.wait_for(lambda: bool(tg.current_drafts(CHAT)))
    return reply


async def test_drafts_offer_a_stop_button_and_end_in_one_sent_message(
    bot: Bot, tg: FakeTelegram
) -> None:
    _private(tg)
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, use_drafts=True)
    await reply.start()
    answer = "A drafted answer, growing word by word. " * 6
    await stream_into(reply, answer, chunk=15, pause=0.02)
    await tg.wait_for(lambda: len(tg.drafts(CHAT)) >= 2)
    draft_ids = {d["draft_id"] for d in tg.drafts(CHAT)}
    assert len(draft_ids) == 1
    assert all(d["can_stop"] is True and d["keep_on_stop"] is True for d in tg.drafts(CHAT))
    [draft_id] = draft_ids
    assert reply.owns_draft(None, draft_id)
    assert not reply.owns_draft(None, draft_id + 1)  # another reply's draft
    assert not reply.owns_draft(77, draft_id)  # the same id in another topic
    reply.ended()
    assert not reply.owns_draft(None, draft_id)  # the answer is complete: a late Stop is moot
    await reply.finish(answer)
    [send] = tg.calls_of("sendMessage")
    assert send.params["parse_mode"] == "HTML"
    assert not tg.calls_of("editMessageText")
    assert tg.current_drafts(CHAT) == {}  # the sent message replaced the draft
    assert [m.text for m in tg.bot_messages(CHAT)] == [answer.strip()]


async def test_text_past_one_message_goes_out_as_real_messages_while_drafting(
    bot: Bot, tg: FakeTelegram
) -> None:
    _private(tg)
    reply = StreamingReply(bot, CHAT, edit_interval=0.05, use_drafts=True)
    await reply.start()
    answer = "".join(f"Sentence number {i:04d} of a long drafted answer.\n" for i in range(260))
    await stream_into(reply, answer, chunk=400, pause=0.03)
    # Full segments became real messages while the model was still writing; the draft holds
    # only the text after them.
    await tg.wait_for(lambda: len(tg.bot_messages(CHAT)) >= 2)
    assert all(utf16_len(d["parsed_text"]) <= 4096 for d in tg.drafts(CHAT))
    assert len({d["draft_id"] for d in tg.drafts(CHAT)}) >= 2  # a new id after each message
    await tg.wait_for(lambda: bool(tg.current_drafts(CHAT)))
    reply.ended()
    await reply.finish(answer)
    messages = tg.bot_messages(CHAT)
    assert content("".join(m.text for m in messages)) == content(answer)
    assert all(utf16_len(m.text) <= 4096 for m in messages)
    # The last piece was sent after the last draft, so no draft repeats the end.
    assert tg.calls_of("sendMessage")[-1].at > tg.drafts(CHAT)[-1]["at"]
    assert tg.current_drafts(CHAT) == {}


async def test_a_final_text_shorter_than_the_stream_is_still_sent_not_edited_in(
    bot: Bot, tg: FakeTelegram
) -> None:
    """Markup makes the streamed plain text longer than the formatted answer: the stream
    needed a real message and a draft, the answer fits one message. Editing that message
    would leave the draft on screen, repeating the answer's end; it is sent instead."""
    _private(tg)
    reply = StreamingReply(bot, CHAT, edit_interval=0.05, use_drafts=True)
    await reply.start()
    answer = "**bold** " * 500  # 4,500 characters streamed, 2,500 formatted
    await stream_into(reply, answer, chunk=500, pause=0.03)
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)) and bool(tg.current_drafts(CHAT)))
    reply.ended()
    await reply.finish(answer)
    [message] = tg.bot_messages(CHAT)
    assert message.text == ("bold " * 500).strip()
    assert tg.current_drafts(CHAT) == {}
    assert tg.calls_of("sendMessage")[-1].params["parse_mode"] == "HTML"


async def test_a_seal_makes_the_round_a_real_message_and_starts_a_new_draft(
    bot: Bot, tg: FakeTelegram
) -> None:
    _private(tg)
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, use_drafts=True)
    await reply.start()
    first = "Let me look that up for **you** first, one moment please."
    await stream_into(reply, first, chunk=10, pause=0.03)
    await tg.wait_for(lambda: bool(tg.current_drafts(CHAT)))
    [first_draft] = tg.current_drafts(CHAT)
    ids = await reply.seal()
    [sealed] = tg.bot_messages(CHAT)
    assert ids == [sealed.message_id]
    assert sealed.text == "Let me look that up for you first, one moment please."
    assert [e["type"] for e in sealed.entities] == ["bold"]  # finished text: formatted
    assert tg.current_drafts(CHAT) == {}
    second = "\n\nFound it: the library opens at nine."
    await stream_into(reply, second, chunk=10, pause=0.03)
    await tg.wait_for(lambda: bool(tg.current_drafts(CHAT)))
    [second_draft] = tg.current_drafts(CHAT)
    assert second_draft != first_draft
    assert "look that up" not in tg.current_drafts(CHAT)[second_draft]["parsed_text"]
    assert reply.owns_draft(None, first_draft) and reply.owns_draft(None, second_draft)
    reply.ended()
    await reply.finish(first + second)  # the whole answer, as the agent loop gives it
    texts = [m.text for m in tg.bot_messages(CHAT)]
    assert texts == [sealed.text, "Found it: the library opens at nine."]
    assert sealed.edits == 0
    assert tg.current_drafts(CHAT) == {}


async def test_a_stop_right_after_a_seal_notes_it_under_the_sealed_text(
    bot: Bot, tg: FakeTelegram
) -> None:
    reply = await _drafting(bot, tg, "Reading the page now.", chunk=7, pause=0.03)
    await reply.seal()
    await reply.cancelled("(stopped)")
    [message] = tg.bot_messages(CHAT)
    assert message.text == "Reading the page now.\n\n(stopped)"
    assert len(tg.calls_of("sendMessage")) == 1


async def test_a_cancel_while_a_draft_shows_sends_the_text_once(bot: Bot, tg: FakeTelegram) -> None:
    partial = "partial words of an answer that was stopped"
    reply = await _drafting(bot, tg, partial, chunk=6, pause=0.03)
    await reply.cancelled("(stopped)")
    [message] = tg.bot_messages(CHAT)
    assert message.text == "partial words of an answer that was stopped\n\n(stopped)"
    assert tg.current_drafts(CHAT) == {}
    assert not tg.calls_of("editMessageText")


async def test_a_draft_refused_mid_answer_falls_back_to_edits_without_a_duplicate(
    bot: Bot, tg: FakeTelegram
) -> None:
    reply = await _drafting(bot, tg, "first words ", chunk=6, pause=0.03)
    tg.inject_error("sendMessageDraft", description="Bad Request: TEXTDRAFT_ID_INVALID")
    await stream_into(reply, "and the rest of the answer " * 4, chunk=9, pause=0.03)
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))  # it streams as a real message now
    assert tg.current_drafts(CHAT) == {}  # which hid the draft
    drafts_after = len(tg.calls_of("sendMessageDraft"))
    await stream_into(reply, "more ", chunk=5, pause=0.03)
    full = "first words " + "and the rest of the answer " * 4 + "more "
    reply.ended()
    await reply.finish(full)
    assert len(tg.calls_of("sendMessageDraft")) == drafts_after  # no draft after the refusal
    assert [m.text for m in tg.bot_messages(CHAT)] == [full.strip()]


async def test_a_429_on_a_draft_is_waited_out_then_drafting_goes_on(
    bot: Bot, tg: FakeTelegram
) -> None:
    _private(tg)
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, use_drafts=True)
    await reply.start()
    tg.inject_error("sendMessageDraft", retry_after=1)
    answer = "a draft that met a flood wait " * 8
    await stream_into(reply, answer, chunk=12, pause=0.05)
    await tg.wait_for(lambda: bool(tg.current_drafts(CHAT)))
    refused, *accepted = tg.calls_of("sendMessageDraft")
    assert not refused.ok and accepted and all(c.ok for c in accepted)
    assert accepted[0].at - refused.at >= 0.9  # not retried during the penalty
    reply.ended()
    await reply.finish(answer)
    assert [m.text for m in tg.bot_messages(CHAT)] == [answer.strip()]
    assert not tg.calls_of("editMessageText")
