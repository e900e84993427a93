"""A voice note being transcribed is the chat's turn in progress: /cancel and /new stop it (the
note stays, with its Retry button), and a graceful stop gives it the grace of a reply, cancels
it, and holds its update, so the next start transcribes and answers it. Real PTB and litellm
against the fakes; the fake Groq holds the upload (`Fault("hang")`) until the client hangs up.
A document being read is a turn's preparation too: the last test holds one across a stop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.handlers.media.voice import RETRY_PREFIX
from bot.ui.i18n import t
from tests.bot.test_shutdown_replay import Served
from tests.e2e.test_e2e_media import (
    BOMB_PAGES,
    GROQ_PER_SECOND,
    SPOKEN,
    VOICE,
    VOICE_SECONDS,
    answered,
)
from tests.fakes.providers import Fault
from tests.fakes.telegram import FakeTelegram
from tests.support.e2e_bot import OWNER, FakeServers, bot_under_test, fake_settings, query
from tests.support.hostile_pdfs import pdf_bomb

WHISPER = "whisper-large-v3-turbo"
# The one attempt the provider held when it was cut off: billed at the recording's length.
CANCELLED_ATTEMPT = {
    "model_id": WHISPER,
    "purpose": "transcription",
    "cost_usd": pytest.approx(VOICE_SECONDS * GROQ_PER_SECOND),
    "audio_seconds": pytest.approx(VOICE_SECONDS),
}


def push_voice_note(tg: FakeTelegram) -> int:
    """The owner sends VOICE as a voice note (to a bot run by `Served`); its update id."""
    stored = tg.add_file(VOICE, file_path="voice/file_1.oga")
    media = {"voice": {**tg.file_fields(stored), "duration": 3, "mime_type": "audio/ogg"}}
    return tg.push(tg.make_media_update(OWNER, OWNER, media))


@pytest.mark.parametrize(("command", "reply"), [("/cancel", "cancelled"), ("/new", "new_session")])
async def test_cancel_or_new_stops_a_transcription_and_keeps_the_note(
    tmp_path: Path, command: str, reply: str
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.groq.script(WHISPER, Fault("hang"))  # the first upload is held; then it hears
        bot.groq.hears(VOICE, SPOKEN)
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: bool(bot.transcription_requests()))

        bot.say(OWNER, command)
        stopped = t("transcription_cancelled")
        await bot.wait(lambda: {t(reply), stopped} <= set(bot.texts(OWNER)))
        # The upload the provider held was given up: the fake saw the client hang up.
        await bot.wait(lambda: bot.groq.hangs_cut == 1)
        assert t("nothing_to_cancel") not in bot.texts(OWNER)

        # The chat is free at once: the next message is answered, and no other model was
        # asked to transcribe the note meanwhile (the chain stopped with its first attempt).
        await bot.ask(OWNER, "still there?")
        assert bot.texts(OWNER)[-1] == "echo: still there?"
        assert [(g, r.model) for g, r in bot.transcription_requests()] == [("groq", WHISPER)]
        rows = await bot.rows("SELECT model_id, purpose, cost_usd, audio_seconds FROM usage")
        assert [r for r in rows if r["purpose"] == "transcription"] == [CANCELLED_ATTEMPT]

        # Nothing of the note was stored, but it is kept with its Retry button.
        [inbox] = await bot.rows("SELECT id, state FROM media_inbox")
        assert inbox["state"] == "failed"
        [note] = [m for m in bot.messages(OWNER) if m.text == stopped]
        [[button]] = note.reply_markup["inline_keyboard"]  # type: ignore[index]
        assert button["callback_data"] == f"{RETRY_PREFIX}{inbox['id']}"

        # Retry transcribes, stores and answers the same note.
        bot.tg.push(
            bot.tg.make_callback_update(
                OWNER, OWNER, button["callback_data"], message_id=note.message_id
            )
        )
        await bot.wait(lambda: answered(bot, OWNER, f"echo: {SPOKEN}"))
        assert await bot.rows("SELECT state FROM media_inbox") == [{"state": "done"}]
        assert len(bot.transcription_requests()) == 2


async def test_forget_stops_a_transcription_and_offers_no_retry_of_what_it_deletes(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.groq.script(WHISPER, Fault("hang"))
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: bool(bot.transcription_requests()))

        bot.say(OWNER, "/forget")  # answered while the note's turn holds the chat
        await bot.wait(lambda: any(m.reply_markup for m in bot.messages(OWNER)))
        [prompt] = bot.messages(OWNER)
        yes = prompt.button_data()[0]
        bot.tg.push(bot.tg.make_callback_update(OWNER, OWNER, yes, message_id=prompt.message_id))
        await bot.wait(lambda: bot.texts(OWNER)[-1] == t("forget_done"))
        await bot.wait(lambda: bot.groq.hangs_cut == 1)
        await bot.wait_idle(OWNER)

        # The note is gone with the rest, and no Retry button points at it; its attempt is
        # billed (the ledger outlives /forget).
        # (The one message is the prompt, edited to its answer, its buttons gone.)
        assert bot.texts(OWNER) == [t("forget_done")]
        assert bot.messages(OWNER)[0].reply_markup is None
        assert await bot.rows("SELECT * FROM media_inbox") == []
        rows = await bot.rows("SELECT model_id, purpose, cost_usd, audio_seconds FROM usage")
        assert rows == [CANCELLED_ATTEMPT]
        assert len(bot.transcription_requests()) == 1


async def test_a_graceful_stop_cuts_a_transcription_short_and_the_next_start_answers_it(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers() as fakes:
        tg, groq = fakes.tg, fakes.groq
        settings = fake_settings(
            fakes,
            ALLOWED_USER_IDS=str(OWNER),
            DATABASE_PATH=db_path,
            SHUTDOWN_GRACE_SECONDS=0.2,
            TRANSCRIPTION_TIMEOUT=60,  # past the test's bound on the stop: the stop cuts it
        )
        groq.script(WHISPER, Fault("hang"))  # held until the client hangs up
        groq.hears(VOICE, SPOKEN)

        # Run 1: the note's upload is at the provider, which holds it; stop.
        bot = Served(settings)
        update_id = push_voice_note(tg)
        await tg.wait_for(lambda: bool(groq.transcription_requests()), timeout=30)
        assert groq.hangs_cut == 0
        await bot.stop()  # bounded: the provider never answers of its own accord
        # It was the bot that gave the upload up, within the grace: nothing else ends the hold.
        await tg.wait_for(lambda: groq.hangs_cut == 1, timeout=30)
        assert len(groq.transcription_requests()) == 1
        rows = query(db_path, "SELECT model_id, purpose, cost_usd, audio_seconds FROM usage")
        assert [dict(r) for r in rows] == [CANCELLED_ATTEMPT]
        # The note is kept as its update, and no row is left behind to be orphaned.
        assert [r[0] for r in query(db_path, "SELECT update_id FROM held_updates")] == [update_id]
        assert query(db_path, "SELECT * FROM media_inbox") == []
        assert tg.bot_messages(OWNER) == []

        # Run 2, on the same database: the held note is transcribed and answered once.
        bot = Served(settings)
        await tg.wait_for(
            lambda: any(m.text == f"echo: {SPOKEN}" for m in tg.bot_messages(OWNER)), timeout=30
        )
        await bot.stop()
        assert len(groq.transcription_requests()) == 2
        assert [tuple(r) for r in query(db_path, "SELECT state FROM media_inbox")] == [("done",)]
        assert query(db_path, "SELECT update_id FROM held_updates") == []
        [(content,)] = query(db_path, "SELECT content FROM messages WHERE role = 'user'")
        assert content == SPOKEN
        rows = query(
            db_path,
            "SELECT model_id, purpose, cost_usd, audio_seconds FROM usage"
            " WHERE purpose = 'transcription' ORDER BY id",
        )
        # The cancelled attempt, then the one that transcribed: each billed once.
        cancelled, transcribed = (dict(r) for r in rows)
        assert cancelled == CANCELLED_ATTEMPT
        assert transcribed["model_id"] == WHISPER


async def test_a_retry_cut_short_by_a_stop_gets_a_new_retry_button(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers() as fakes:
        tg, groq, openai = fakes.tg, fakes.groq, fakes.openai
        settings = fake_settings(
            fakes, ALLOWED_USER_IDS=str(OWNER), DATABASE_PATH=db_path, SHUTDOWN_GRACE_SECONDS=0.2
        )
        # Every transcription model fails: the note is kept with a Retry button.
        groq.script(WHISPER, *[Fault("server_500")] * 4)
        openai.script("gpt-4o-mini-transcribe", Fault("bad_gateway_502"))
        openai.script("whisper-1", Fault("server_500"))
        bot = Served(settings)
        push_voice_note(tg)
        await tg.wait_for(lambda: any(m.reply_markup for m in tg.bot_messages(OWNER)), timeout=30)
        [failed] = tg.bot_messages(OWNER)
        [[button]] = failed.reply_markup["inline_keyboard"]  # type: ignore[index]

        # Retry is pressed; the provider holds the upload; the bot stops.
        groq.script(WHISPER, Fault("hang"))
        before = len(groq.transcription_requests())
        tg.push(
            tg.make_callback_update(
                OWNER, OWNER, button["callback_data"], message_id=failed.message_id
            )
        )
        await tg.wait_for(lambda: len(groq.transcription_requests()) > before, timeout=30)
        await bot.stop()
        await tg.wait_for(lambda: groq.hangs_cut == 1, timeout=30)

        # A press is not replayed: the user is told, with a new button for the same row.
        assert query(db_path, "SELECT update_id FROM held_updates") == []
        [(inbox_id, state)] = query(db_path, "SELECT id, state FROM media_inbox")
        assert state == "failed"
        interrupted = tg.bot_messages(OWNER)[-1]
        assert interrupted.text == t("transcription_interrupted")
        [[again]] = interrupted.reply_markup["inline_keyboard"]  # type: ignore[index]
        assert again["callback_data"] == f"{RETRY_PREFIX}{inbox_id}"
        rows = query(db_path, "SELECT model_id, purpose, cost_usd, audio_seconds FROM usage")
        assert [dict(r) for r in rows] == [CANCELLED_ATTEMPT]


async def test_a_document_being_read_when_the_bot_stops_is_read_again_at_the_next_start(
    tmp_path: Path,
) -> None:
    """Every turn's preparation is the chat's running work, not only a transcription: a PDF
    bomb being read in its child process gets the grace, then the read is cut off and the
    message held; the next start reads it again and answers it."""
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers() as fakes:
        tg = fakes.tg
        settings = {"ALLOWED_USER_IDS": str(OWNER), "DATABASE_PATH": db_path}
        bomb = tg.add_file(pdf_bomb(BOMB_PAGES), file_path="documents/bomb.pdf")
        fields = {**tg.file_fields(bomb), "file_name": "bomb.pdf", "mime_type": "application/pdf"}

        # Run 1: the read would take minutes (DOCUMENT_TIMEOUT past the test's bound on the stop).
        bot = Served(
            fake_settings(fakes, **settings, SHUTDOWN_GRACE_SECONDS=0.2, DOCUMENT_TIMEOUT=120)
        )
        update_id = tg.push(tg.make_media_update(OWNER, OWNER, {"document": fields}))
        await tg.wait_for(lambda: bool(tg.downloads), timeout=30)  # the bomb is being read
        await bot.stop()
        assert [r[0] for r in query(db_path, "SELECT update_id FROM held_updates")] == [update_id]
        assert tg.bot_messages(OWNER) == []

        # Run 2: read again, under a bound that answers it.
        bot = Served(fake_settings(fakes, **settings, DOCUMENT_TIMEOUT=2))
        too_complex = t("document_too_complex", name="bomb.pdf", seconds="2")
        await tg.wait_for(
            lambda: [m.text for m in tg.bot_messages(OWNER)] == [too_complex], timeout=60
        )
        await bot.stop()
        assert len(tg.downloads) == 2
        assert query(db_path, "SELECT update_id FROM held_updates") == []


async def test_a_stop_after_the_transcript_came_back_never_transcribes_the_note_again(
    tmp_path: Path,
) -> None:
    """The provider answered (and billed); the stop cuts in while the transcript is being shown
    (Telegram holds that message). The transcript was kept with the note's row the moment it
    came back: the next start answers from it, with no second upload and no second bill."""
    db_path = tmp_path / "bot.sqlite3"
    async with FakeServers() as fakes:
        tg, groq = fakes.tg, fakes.groq
        settings = fake_settings(
            fakes, ALLOWED_USER_IDS=str(OWNER), DATABASE_PATH=db_path, SHUTDOWN_GRACE_SECONDS=0.2
        )
        groq.hears(VOICE, SPOKEN)
        tg.hold("sendMessage")  # the transcript's message: the first the bot sends

        # Run 1: transcribed, then stopped while the transcript is on its way to the chat.
        bot = Served(settings)
        update_id = push_voice_note(tg)
        await tg.wait_for(lambda: bool(tg.calls_of("sendMessage")), timeout=60)
        assert len(groq.transcription_requests()) == 1
        await bot.stop()
        await tg.wait_for(lambda: tg.holds_cut == 1, timeout=30)
        assert [r[0] for r in query(db_path, "SELECT update_id FROM held_updates")] == [update_id]
        [(state, transcript)] = query(db_path, "SELECT state, transcript FROM media_inbox")
        assert (state, transcript) == ("pending", SPOKEN)

        # Run 2: the held note is answered from the kept transcript.
        bot = Served(settings)
        await tg.wait_for(
            lambda: any(m.text == f"echo: {SPOKEN}" for m in tg.bot_messages(OWNER)), timeout=60
        )
        await bot.stop()
        assert len(groq.transcription_requests()) == 1  # uploaded once, in run 1
        rows = query(db_path, "SELECT model_id FROM usage WHERE purpose = 'transcription'")
        assert [r[0] for r in rows] == [WHISPER]  # billed once
        assert [tuple(r) for r in query(db_path, "SELECT state FROM media_inbox")] == [("done",)]
        [(content,)] = query(db_path, "SELECT content FROM messages WHERE role = 'user'")
        assert content == SPOKEN


async def test_a_cancel_after_the_transcript_came_back_retries_from_the_kept_words(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.groq.hears(VOICE, SPOKEN)
        bot.tg.hold("sendMessage")  # the transcript's message: the /cancel cuts in there
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: bool(bot.tg.calls_of("sendMessage")), timeout=60)
        assert len(bot.transcription_requests()) == 1
        bot.say(OWNER, "/cancel")
        stopped = t("transcription_cancelled")
        await bot.wait(lambda: stopped in bot.texts(OWNER))
        await bot.wait(lambda: bot.tg.holds_cut == 1)
        [inbox] = await bot.rows("SELECT id, state, transcript FROM media_inbox")
        assert (inbox["state"], inbox["transcript"]) == ("failed", SPOKEN)

        # Retry answers from the kept words: no second upload, no second bill.
        [note] = [m for m in bot.messages(OWNER) if m.text == stopped]
        [[button]] = note.reply_markup["inline_keyboard"]  # type: ignore[index]
        bot.tg.push(
            bot.tg.make_callback_update(
                OWNER, OWNER, button["callback_data"], message_id=note.message_id
            )
        )
        await bot.wait(lambda: answered(bot, OWNER, f"echo: {SPOKEN}"))
        assert len(bot.transcription_requests()) == 1
        rows = await bot.rows("SELECT model_id FROM usage WHERE purpose = 'transcription'")
        assert rows == [{"model_id": WHISPER}]
        assert await bot.rows("SELECT state FROM media_inbox") == [{"state": "done"}]
