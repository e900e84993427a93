"""StreamingReply against the fake Bot API with the real python-telegram-bot Bot.

Timing claims are checked on the fake's own receipt times (gaps between the requests it saw),
as counts and ratios, never as assertions on how fast our code runs.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest
from telegram import Bot

import bot.ui.segments as segmenting
import bot.ui.streaming as streaming
from bot.ui.render import plain_text, split_for_telegram, utf16_len
from bot.ui.segments import plain_segments
from bot.ui.streaming import StreamingReply
from models.streamtext import MAX_CLUSTER_CODEPOINTS
from primitives.backoff import Backoff
from tests.fakes.telegram import DRAFT_PEER_INVALID, NOT_MODIFIED, FakeTelegram
from tests.support.call_count import count_calls
from tests.support.paths import TESTDATA
from tests.support.streamed_text import content, stream_into
from tests.support.testdata_texts import endless_cluster
from tests.support.waits import within

MARKDOWN_DIR = TESTDATA / "tg-markdown" / "telegramify-markdown"
CHAT = 4242
FAST = 0.15  # edit interval for tests that are not about the 1 s limit itself


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def test_streamed_reply_types_then_edits_then_formats(bot: Bot, tg: FakeTelegram) -> None:
    reply = StreamingReply(bot, CHAT, reply_to_message_id=7, edit_interval=FAST)
    await reply.start()
    await tg.wait_for(lambda: bool(tg.calls_of("sendChatAction")))
    assert not tg.calls_of("sendMessage")  # nothing is sent before the first text
    await stream_into(reply, "Hello **world**, this is a streamed answer.", chunk=4, pause=0.03)
    await tg.wait_for(lambda: bool(tg.calls_of("editMessageText")))
    ids = await reply.finish("Hello **world**, this is a streamed answer.")

    [message] = tg.bot_messages(CHAT)
    assert ids == [message.message_id]
    assert message.text == "Hello world, this is a streamed answer."
    assert message.parse_mode == "HTML"
    assert [e["type"] for e in message.entities] == ["bold"]
    assert message.reply_to_message_id == 7
    first_send = tg.calls_of("sendMessage")[0]
    assert "parse_mode" not in first_send.params  # streamed as plain text
    assert tg.calls_of("sendChatAction")[0].at < first_send.at
    assert len(tg.calls_of("sendMessage")) == 1


async def test_edits_are_throttled_per_message(bot: Bot, tg: FakeTelegram) -> None:
    """Many appends, few edits, and edits of one message spaced by the interval."""
    interval = 0.3
    reply = StreamingReply(bot, CHAT, edit_interval=interval)
    await reply.start()
    # Append a word every few milliseconds until three edits have been seen (however slow
    # the machine), then finish.
    appends = 0
    while len(tg.calls_of("editMessageText")) < 3:
        assert appends < 2000, "no third edit"
        await reply.append("word ")
        appends += 1
        await asyncio.sleep(0.01)
    await reply.finish("word " * appends)
    edits = tg.calls_of("editMessageText")
    assert len(edits) <= appends // 4  # far fewer edits than appends
    gaps = _gaps([tg.calls_of("sendMessage")[0].at] + [e.at for e in edits])
    # Receipt times may jitter a little; the spacing must still be about the interval.
    assert min(gaps) >= interval * 0.8


async def test_one_edit_per_second_passes_telegrams_flood_control(
    bot: Bot, tg: FakeTelegram
) -> None:
    tg.enforce_flood_limits = True
    # No first-message hold: this test is about the spacing of the edits that follow it.
    reply = StreamingReply(bot, CHAT, edit_interval=1.0, first_hold=0.0)
    await reply.start()
    answer = " ".join(f"token{i}" for i in range(120))
    await stream_into(reply, answer, chunk=12, pause=0.025)
    await reply.finish(answer)
    assert tg.flood_violations == []
    assert tg.bot_messages(CHAT)[0].text == answer
    assert tg.bot_messages(CHAT)[0].edits >= 2


async def test_short_answer_is_one_message_sent_when_complete(bot: Bot, tg: FakeTelegram) -> None:
    """An answer that ends within the first-message hold: typing, then ONE formatted message,
    no plain-text message before it and no edit (which would wait an edit interval)."""
    reply = StreamingReply(bot, CHAT, edit_interval=1.0)  # hold: 1.5 s after the first text
    await reply.start()
    await stream_into(reply, "A **short** answer.", chunk=4, pause=0.01)
    reply.ended()
    await reply.finish("A **short** answer.")

    assert tg.calls_of("sendChatAction")
    [send] = tg.calls_of("sendMessage")
    assert send.params.get("parse_mode") == "HTML"
    assert not tg.calls_of("editMessageText")
    [message] = tg.bot_messages(CHAT)
    assert message.text == "A short answer."


async def test_slow_answer_is_shown_after_the_hold(bot: Bot, tg: FakeTelegram) -> None:
    """Still streaming when the hold is over: the text so far appears (plain) and is edited
    into the final answer; the first message never came before the hold."""
    hold = 0.3
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, first_hold=hold)
    await reply.start()
    first_text_at = asyncio.get_running_loop().time()
    await reply.append("Thinking out loud")
    await tg.wait_for(lambda: bool(tg.calls_of("sendMessage")))
    [first] = tg.calls_of("sendMessage")
    assert "parse_mode" not in first.params and first.params["text"] == "Thinking out loud"
    assert first.at - first_text_at >= hold
    await reply.finish("Thinking out loud, then the answer.")
    [message] = tg.bot_messages(CHAT)
    assert message.text == "Thinking out loud, then the answer."
    assert len(tg.calls_of("sendMessage")) == 1


async def test_long_text_is_shown_without_waiting_for_the_hold(bot: Bot, tg: FakeTelegram) -> None:
    """Text worth reading at once (FIRST_SEND_CHARS) does not wait for the hold."""
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, first_hold=3600.0)
    await reply.start()
    await reply.append("x" * (streaming.FIRST_SEND_CHARS - 1))
    await reply.append(" and more")
    await tg.wait_for(lambda: bool(tg.calls_of("sendMessage")))  # long before an hour
    await reply.finish("done")
    assert tg.bot_messages(CHAT)[0].text == "done"


async def test_no_update_after_the_model_ended(bot: Bot, tg: FakeTelegram) -> None:
    """Between the model's end and the final text (the answer is being stored), the flusher
    sends nothing: an edit then would only delay the final one."""
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, first_hold=0.0)
    await reply.start()
    await reply.append("first words")
    await tg.wait_for(lambda: bool(tg.calls_of("sendMessage")))
    reply.ended()
    await reply.append(" and the rest")  # e.g. a last piece flushed by the transport
    calls = len(tg.calls)
    await asyncio.sleep(4 * FAST)  # several intervals in which an edit would have been due
    assert len(tg.calls) == calls
    await reply.finish("first words and the rest")
    assert [m.text for m in tg.bot_messages(CHAT)] == ["first words and the rest"]


async def test_flood_penalties_are_waited_out_not_extended(bot: Bot, tg: FakeTelegram) -> None:
    """Editing faster than Telegram allows earns penalties; the reply must never call again
    inside one (which would extend it), and the answer must still arrive whole, once."""
    tg.enforce_flood_limits = True
    reply = StreamingReply(bot, CHAT, edit_interval=0.25)  # deliberately too fast
    await reply.start()
    answer = "\n".join(f"line {i}: " + "abc " * 30 for i in range(60))  # > 1 message
    await stream_into(reply, answer, chunk=160, pause=0.05)
    ids = await reply.finish(answer)

    assert tg.flood_violations, "the test must provoke flood control"
    assert not [v for v in tg.flood_violations if v.during_penalty]
    messages = tg.bot_messages(CHAT)
    assert [m.message_id for m in messages] == ids
    assert content("".join(m.text for m in messages)) == content(answer)


async def test_retry_after_on_intermediate_edit_is_not_retried_early(
    bot: Bot, tg: FakeTelegram
) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=FAST)
    await reply.start()
    await reply.append("first part")
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))
    tg.inject_error("editMessageText", retry_after=1)
    await stream_into(reply, " and more text" * 10, chunk=7, pause=0.02)
    await tg.wait_for(lambda: any(not c.ok for c in tg.calls_of("editMessageText")))
    await reply.finish("first part" + " and more text" * 10)

    edits = tg.calls_of("editMessageText")
    refused = next(c for c in edits if not c.ok)
    later = [c for c in edits if c.at > refused.at]
    assert later, "the final text must still arrive"
    assert min(c.at for c in later) - refused.at >= 0.95  # waited out the whole penalty
    [message] = tg.bot_messages(CHAT)
    assert message.text == "first part" + " and more text" * 10


async def test_retry_after_on_final_send_waits_and_sends_once(bot: Bot, tg: FakeTelegram) -> None:
    """A reply whose final messages meet a flood penalty: no duplicate, nothing lost."""
    markdown = (MARKDOWN_DIR / "t_longtext.md").read_text()
    reply = StreamingReply(bot, CHAT, edit_interval=FAST)
    await reply.start()
    tg.inject_error("sendMessage", count=2, retry_after=1)
    ids = await reply.finish(markdown)

    sends = tg.calls_of("sendMessage")
    assert [c.ok for c in sends[:2]] == [False, False]
    assert sends[2].at - sends[1].at >= 0.95
    assert sends[1].at - sends[0].at >= 0.95
    messages = tg.bot_messages(CHAT)
    assert [m.message_id for m in messages] == ids
    assert len(ids) == len({c.params["text"] for c in sends if c.ok})  # each piece once
    assert content("".join(m.text for m in messages)) == content(plain_text(markdown))


async def test_retry_after_on_final_edit(bot: Bot, tg: FakeTelegram) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=FAST)
    await reply.start()
    await reply.append("partial *text")
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))
    tg.inject_error("editMessageText", count=1, retry_after=1)
    ids = await reply.finish("partial *text* done")
    [message] = tg.bot_messages(CHAT)
    assert ids == [message.message_id]
    assert message.text == "partial text done"
    refused, accepted = tg.calls_of("editMessageText")
    assert accepted.at - refused.at >= 0.95


async def test_long_reply_continues_in_new_messages(bot: Bot, tg: FakeTelegram) -> None:
    markdown = "\n\n".join(
        (MARKDOWN_DIR / name).read_text() for name in ("exp2.md", "t_longtext.md")
    )
    assert utf16_len(markdown) > 4 * 4096
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await stream_into(reply, markdown, chunk=600, pause=0.01)
    await tg.wait_for(lambda: len(tg.bot_messages(CHAT)) >= 3)  # grew past the limit
    streamed = [m.text for m in tg.bot_messages(CHAT)]
    assert all(utf16_len(t) <= 4096 for t in streamed)
    ids = await reply.finish(markdown)

    messages = tg.bot_messages(CHAT)
    assert [m.message_id for m in messages] == ids
    assert len(ids) >= 4
    assert all(utf16_len(m.text) <= 4096 for m in messages)
    shown = "".join(m.text for m in messages)
    # Every word arrives, in order (pieces refused as HTML arrive as plain text).
    expected = "".join(plain_text(piece) for piece in split_for_telegram(markdown))
    assert content(shown) == content(expected)


async def test_parse_error_falls_back_to_plain_text(bot: Bot, tg: FakeTelegram) -> None:
    """exp1.md (real MarkdownV2 stress input) renders to HTML Telegram refuses."""
    markdown = (MARKDOWN_DIR / "exp1.md").read_text()
    reply = StreamingReply(bot, CHAT, edit_interval=FAST)
    await reply.start()
    await reply.append(markdown[:200])
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))
    ids = await reply.finish(markdown)

    refused = [c for c in tg.calls if c.error and "can't parse entities" in c.error]
    assert refused
    [message] = tg.bot_messages(CHAT)
    assert ids == [message.message_id]
    assert message.parse_mode is None
    assert message.text == plain_text(markdown)


async def test_not_modified_counts_as_success(bot: Bot, tg: FakeTelegram) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=FAST)
    await reply.start()
    await reply.append("plain words only")
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))
    ids = await reply.finish("plain words only")
    [message] = tg.bot_messages(CHAT)
    assert ids == [message.message_id]
    assert [c.error for c in tg.calls_of("editMessageText")] == [NOT_MODIFIED]
    assert len(tg.calls_of("sendMessage")) == 1


async def test_restart_discards_shown_text_and_stale_messages(bot: Bot, tg: FakeTelegram) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await stream_into(reply, "first model text " * 600, chunk=500, pause=0.01)  # > 2 messages
    await tg.wait_for(lambda: len(tg.bot_messages(CHAT)) >= 2)
    await reply.restart("⚠️ The model failed; continuing with another one.")
    await reply.append("second model answer")
    await tg.wait_for(lambda: len(tg.bot_messages(CHAT)) == 1)
    await tg.wait_for(lambda: "second model answer" in tg.bot_messages(CHAT)[0].text)
    assert tg.bot_messages(CHAT)[0].text.startswith("⚠️ The model failed")
    ids = await reply.finish("second model **answer**", footer="answered by Claude (fallback)")
    [message] = tg.bot_messages(CHAT)
    assert ids == [message.message_id]
    assert message.text == "second model answer\n\nanswered by Claude (fallback)"
    italic = [e for e in message.entities if e["type"] == "italic"]
    assert italic and italic[0]["length"] == utf16_len("answered by Claude (fallback)")


async def test_restart_before_the_first_send_landed_still_shows_the_note(
    bot: Bot, tg: FakeTelegram
) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await reply.append("text of the model that is about to fail")
    # No await in between lets the first sendMessage finish: the restart races it.
    await reply.restart("⚠️ The model failed; continuing with another one.")
    await reply.append("second model answer")
    await tg.wait_for(lambda: any("second model answer" in m.text for m in tg.bot_messages(CHAT)))
    streamed = [m for m in tg.bot_messages(CHAT) if "second model answer" in m.text]
    assert streamed[0].text.startswith("⚠️ The model failed")
    await reply.finish("second model answer")
    assert [m.text for m in tg.bot_messages(CHAT)] == ["second model answer"]


async def test_footer_goes_on_the_last_piece_within_the_limit(bot: Bot, tg: FakeTelegram) -> None:
    paragraph = "A reasonably long paragraph of model output. " * 20
    markdown = "\n\n".join([paragraph] * 12)
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    footer = "answered by GPT-4.1 (fallback) 🤖"
    ids = await reply.finish(markdown, footer=footer)
    messages = tg.bot_messages(CHAT)
    assert len(ids) >= 2
    assert messages[-1].text.endswith(footer)
    assert all(not m.text.endswith(footer) for m in messages[:-1])
    assert all(utf16_len(m.text) <= 4096 for m in messages)


async def test_drafts_stream_then_one_final_message(bot: Bot, tg: FakeTelegram) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, use_drafts=True)
    await reply.start()
    await stream_into(reply, "drafted answer text " * 10, chunk=20, pause=0.03)
    await tg.wait_for(lambda: len(tg.drafts(CHAT)) >= 2)
    assert tg.bot_messages(CHAT) == []
    ids = await reply.finish("drafted answer text " * 10)
    drafts = tg.drafts(CHAT)
    assert len({d["draft_id"] for d in drafts}) == 1
    assert not tg.calls_of("editMessageText")
    [message] = tg.bot_messages(CHAT)
    assert ids == [message.message_id]
    assert message.text == ("drafted answer text " * 10).strip()


async def test_drafts_refused_fall_back_to_edits(bot: Bot, tg: FakeTelegram) -> None:
    group = -100555
    reply = StreamingReply(bot, group, edit_interval=FAST, use_drafts=True)
    await reply.start()
    await stream_into(reply, "group answer " * 10, chunk=13, pause=0.03)
    await tg.wait_for(lambda: bool(tg.calls_of("editMessageText")))
    await reply.finish("group answer " * 10)
    [draft] = tg.calls_of("sendMessageDraft")
    # Telegram's refusal of a draft (with its Stop button) outside a private chat.
    assert draft.error == DRAFT_PEER_INVALID and draft.params["can_stop"] is True
    assert tg.bot_messages(group)[0].text == ("group answer " * 10).strip()
    assert len(tg.bot_messages(group)) == 1


async def test_network_errors_on_intermediate_edits_are_skipped(bot: Bot, tg: FakeTelegram) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await reply.append("start")
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))
    tg.inject_error("editMessageText", count=2, status=502)
    await stream_into(reply, " more" * 30, chunk=5, pause=0.02)
    await reply.finish("start" + " more" * 30)
    assert [c.ok for c in tg.calls_of("editMessageText")][:2] == [False, False]
    assert tg.bot_messages(CHAT)[0].text == "start" + " more" * 30


async def test_final_text_retries_network_errors_a_bounded_number_of_times(
    bot: Bot, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streaming, "FINAL_BACKOFF", Backoff((0.05, 0.1)))
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    tg.inject_error("sendMessage", count=2, status=502)
    assert await reply.finish("arrives after two failures")
    assert [c.ok for c in tg.calls_of("sendMessage")] == [False, False, True]

    other = StreamingReply(bot, CHAT + 1, edit_interval=0.05)
    await other.start()
    tg.inject_error("sendMessage", count=10, status=502)
    assert await other.finish("never arrives") == []
    assert len(tg.calls_of("sendMessage")) == 3 + streaming.FINAL_ATTEMPTS


async def test_fail_and_cancel_keep_shown_text_and_add_a_note(bot: Bot, tg: FakeTelegram) -> None:
    for chat, method, note in ((1, "fail", "All models failed."), (2, "cancelled", "Stopped.")):
        reply = StreamingReply(bot, chat, edit_interval=0.05)
        await reply.start()
        await reply.append("half an answer with *unclosed")
        await tg.wait_for(lambda c=chat: bool(tg.bot_messages(c)))
        await getattr(reply, method)(note)
        [message] = tg.bot_messages(chat)
        assert message.text == f"half an answer with *unclosed\n\n{note}"
        assert message.parse_mode is None

    quiet = StreamingReply(bot, 3, edit_interval=0.05)
    await quiet.start()
    await quiet.fail("Nothing shown yet.")
    assert [m.text for m in tg.bot_messages(3)] == ["Nothing shown yet."]


async def test_typing_repeats_until_the_first_text(
    bot: Bot, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streaming, "TYPING_REPEAT_S", 0.05)
    reply = StreamingReply(bot, CHAT, edit_interval=FAST)
    await reply.start()
    await tg.wait_for(lambda: len(tg.calls_of("sendChatAction")) >= 3)
    await reply.append("now text")
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))
    typed = len(tg.calls_of("sendChatAction"))
    # The repeat loop ends by itself once text is there (it was repeating every 0.05 s).
    await tg.wait_for(lambda: not reply.typing)
    assert len(tg.calls_of("sendChatAction")) <= typed + 1
    await reply.finish("now text")


def test_plain_segments_are_stable_as_text_grows() -> None:
    text = (MARKDOWN_DIR / "t_longtext.md").read_text()
    final = plain_segments(text, 1000)
    assert "".join(final) == text
    assert all(utf16_len(s) <= 1000 for s in final)
    for end in range(1000, len(text), 777):
        growing = plain_segments(text[:end], 1000)
        # Every segment but the last (still filling) is already final.
        assert growing[:-1] == final[: len(growing) - 1]


async def test_naughty_strings_arrive_whole(bot: Bot, tg: FakeTelegram) -> None:
    """All 500+ naughty strings as one answer: RTL, zalgo, emoji, injections, control chars."""
    strings = json.loads((TESTDATA / "blns" / "blns.json").read_text())
    answer = "\n\n".join(s for s in strings if s.strip())
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await stream_into(reply, answer, chunk=2000, pause=0.01)
    ids = await reply.finish(answer)
    messages = tg.bot_messages(CHAT)
    assert [m.message_id for m in messages] == ids
    expected = "".join(plain_text(piece) for piece in split_for_telegram(answer))
    assert content("".join(m.text for m in messages)) == content(expected)


async def test_forum_topic_replies_stay_in_their_thread(bot: Bot, tg: FakeTelegram) -> None:
    forum = -100999
    reply = StreamingReply(bot, forum, edit_interval=0.05, message_thread_id=77)
    await reply.start()
    await stream_into(reply, "topic answer " * 400, chunk=900, pause=0.01)  # two messages
    ids = await reply.finish("topic answer " * 400)
    assert len(ids) == 2
    assert [m.message_thread_id for m in tg.bot_messages(forum)] == [77, 77]
    assert all(c.params.get("message_thread_id") == 77 for c in tg.calls_of("sendChatAction"))


def test_an_endless_grapheme_cluster_is_cut_where_the_window_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model's zalgo answer ("a" + 6000 marks, one cluster): 2 full segments, each found by a
    bounded look back for a boundary, not ~1900 one-character ones found by a walk back over the
    whole window each (2 s of event-loop CPU per call, twice per flush)."""
    looks = count_calls(monkeypatch, segmenting, "is_grapheme_boundary")
    text = endless_cluster(6000)
    segments = plain_segments(text, 4096)
    assert len(segments) == 2
    assert "".join(segments) == text
    assert all(utf16_len(s) <= 4096 for s in segments)
    assert looks() <= 2 * (MAX_CLUSTER_CODEPOINTS + 2)


async def test_a_zalgo_answer_is_two_messages_not_thousands(bot: Bot, tg: FakeTelegram) -> None:
    text = endless_cluster(6000)
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await stream_into(reply, text, chunk=1000, pause=0.01)
    async with asyncio.timeout(30):
        ids = await reply.finish(text)
    messages = tg.bot_messages(CHAT)
    assert [m.message_id for m in messages] == ids
    assert len(ids) == 2
    assert "".join(m.text for m in messages) == text


async def test_a_chat_that_keeps_migrating_is_followed_a_bounded_number_of_times(
    bot: Bot, tg: FakeTelegram
) -> None:
    """Answers that move the chat back and forth between two ids (a proxy, a broken server):
    the typing loop and the final send each follow a few moves, then give up. They followed
    every one, one request each, for as long as the answers came."""
    tg.migrated_chats.update({CHAT: CHAT + 1, CHAT + 1: CHAT})
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await tg.wait_for(lambda: not reply.typing, timeout=20)  # it stops by itself
    assert len(tg.calls_of("sendChatAction")) == streaming.MAX_MIGRATIONS + 1
    async with asyncio.timeout(20):
        ids = await reply.finish("An answer with nowhere to go.")
    assert ids == []
    # The typing loop used up the moves: the final text is tried at most once more.
    assert len(tg.calls_of("sendMessage")) <= 1


async def test_a_final_text_whose_chat_keeps_migrating_gives_up(bot: Bot, tg: FakeTelegram) -> None:
    reply = StreamingReply(bot, CHAT, edit_interval=0.05)
    await reply.start()
    await reply.append("The first words")
    await tg.wait_for(lambda: bool(tg.bot_messages(CHAT)))
    tg.migrated_chats.update({CHAT: CHAT + 1, CHAT + 1: CHAT})  # from now on, back and forth
    tries = len(tg.calls_of("sendMessage")) + len(tg.calls_of("editMessageText"))
    async with asyncio.timeout(20):
        ids = await reply.finish("The first words, and the rest of the answer.")
    assert ids == []
    tries = len(tg.calls_of("sendMessage")) + len(tg.calls_of("editMessageText")) - tries
    assert 1 <= tries <= streaming.MAX_MIGRATIONS + 1


def test_the_bounded_look_back_still_keeps_every_real_emoji_sequence_whole() -> None:
    """The look back for a boundary stops after MAX_CLUSTER_CODEPOINTS: every real sequence
    (ZWJ families, skin tones, flags, keycaps, tag flags: Unicode's emoji-test.txt) is far
    shorter, so a line of them all, with no space to cut at, is still cut only between them."""
    data = json.loads((TESTDATA / "unicode" / "emoji_sequences_derived.json").read_text())
    sequences = [
        e["s"] if isinstance(e, dict) else e
        for kind in ("zwj_sequences", "skin_tone_modified", "flags", "keycaps")
        for e in data[kind]
    ]
    line = "".join(sequences)
    ends = set(itertools.accumulate(len(s) for s in sequences))
    segments = plain_segments(line, 300)
    assert len(segments) > 10
    assert "".join(segments) == line
    assert all(utf16_len(s) <= 300 for s in segments)
    assert set(itertools.accumulate(len(s) for s in segments)) <= ends


async def test_a_cancel_while_the_last_edit_is_in_flight_reaches_the_caller(
    bot: Bot, tg: FakeTelegram
) -> None:
    """`finish` lets an in-flight edit end rather than cut it (a cut send may leave a message
    we do not know about), but a /cancel of the turn meanwhile is the turn's, not the edit's:
    it must end `finish` at once instead of being swallowed while the edit hangs."""
    reply = StreamingReply(bot, CHAT, edit_interval=FAST, first_hold=0.0)
    await reply.start()
    await reply.append("first words")
    await tg.wait_for(lambda: bool(tg.calls_of("sendMessage")))
    tg.hold("editMessageText")
    await reply.append(" and more")
    await tg.wait_for(lambda: bool(tg.calls_of("editMessageText")))  # held, unanswered
    finishing = asyncio.create_task(reply.finish("first words and more"))
    await asyncio.sleep(0)  # finish is now waiting for the flusher's held edit
    finishing.cancel()
    await within(asyncio.wait({finishing}), 5)
    assert finishing.cancelled()
    assert tg.holds_cut == 0  # the edit itself was left alone, still in flight
