"""Voice notes, photos and documents end to end: real PTB polling the fake Bot API (getFile and
file downloads), real litellm posting multipart audio and image parts to the fake providers.

Inputs are real (tests/data/SOURCE.md): `voice_en.ogg` is espeak-ng speech of an oasst2 prompt,
encoded as Telegram encodes voice notes (Ogg/Opus, mono, 48 kHz); `multilingual.pdf` was written
by LibreOffice from real oasst2 Portuguese and Japanese messages; `scanned.pdf` is an image-only
PDF made with img2pdf; `rose.jpg` is ImageMagick's sample photograph. The fake providers cannot
listen, so each test tells them what the audio says (`hears`): the words the TTS was given.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from bot.handlers.media.voice import RETRY_PREFIX
from bot.ui.i18n import t
from bot.ui.keyboards import model_callback_data
from models.types import Usage
from tests.fakes.providers import Fault
from tests.support.consolidation_stack import good_call
from tests.support.e2e_bot import (
    FRIEND,
    MEDIA,
    OWNER,
    STRANGER,
    TESTDATA,
    BotUnderTest,
    bot_under_test,
    real_update,
)
from tests.support.hostile_pdfs import pdf_bomb, surrogate_pdf

VOICE = (MEDIA / "voice_en.ogg").read_bytes()
SPOKEN = (MEDIA / "voice_en.txt").read_text(encoding="utf-8").strip()
PDF = (MEDIA / "multilingual.pdf").read_bytes()
SCANNED = (MEDIA / "scanned.pdf").read_bytes()
ROSE = (MEDIA / "rose.jpg").read_bytes()
# voice_en.ogg's own length: its last Ogg page's granule position (115714 samples at 48 kHz)
# minus the Opus pre-skip (312). The updates below announce 3 s: the sender's word.
VOICE_SECONDS = (115_714 - 312) / 48_000
GROQ_PER_SECOND = 0.04 / 3600
MINI_TRANSCRIBE_PER_SECOND = 0.003 / 60


async def wait_for_rows(bot: BotUnderTest, sql: str, limit_s: float = 15.0) -> None:
    """Poll the database until `sql` returns a row (a background job committed)."""
    for _ in range(int(limit_s / 0.02)):
        if await bot.rows(sql):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no row for {sql!r} within {limit_s}s")


def consolidation_requests(bot: BotUnderTest) -> list[Any]:
    """Chat requests that are not streamed: consolidation (the chat streams)."""
    return [r for r in bot.groq.requests if not r.stream and not r.is_transcription]


def answered(bot: BotUnderTest, chat_id: int, prefix: str = "echo:") -> bool:
    """The model's reply is on screen and the chat's turn is over."""
    return (
        any(text.startswith(prefix) for text in bot.texts(chat_id))
        and bot.services.turns.waiting(chat_id) == 0
    )


async def test_voice_note_is_transcribed_answered_stored_and_recalled(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.groq.hears(VOICE, SPOKEN)
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: answered(bot, OWNER))

        # The audio reached Groq's transcription endpoint as a multipart upload, byte for byte.
        [(gateway, upload)] = bot.transcription_requests()
        assert gateway == "groq" and upload.path == "/openai/v1/audio/transcriptions"
        assert upload.model == "whisper-large-v3-turbo"
        assert upload.body["file"]["sha256"] == hashlib.sha256(VOICE).hexdigest()
        assert upload.body["file"]["filename"] == "voice.ogg"

        # The transcript is shown quoted, then answered as if typed.
        shown = bot.messages(OWNER)
        assert shown[0].text == f"{t('transcript_heading')}\n{SPOKEN}"
        assert [e["type"] for e in shown[0].entities] == ["blockquote"]
        [(_, chat)] = bot.chat_requests()
        assert chat.body["messages"][-1] == {"role": "user", "content": SPOKEN}
        assert shown[-1].text == f"echo: {SPOKEN}"

        # The transcript is what the session stores, with the note's file id beside it.
        [user_row] = await bot.rows("SELECT * FROM messages WHERE role = 'user'")
        assert user_row["content"] == SPOKEN
        media = json.loads(user_row["media"])
        assert media["kind"] == "voice" and media["duration"] == 3
        [inbox] = await bot.rows("SELECT state, message_id FROM media_inbox")
        assert inbox == {"state": "done", "message_id": user_row["id"]}

        # Billed per second of the recording's real length (not the 3 s announced) at the
        # catalog's Groq price, under its own purpose.
        [usage] = await bot.rows(
            "SELECT model_id, cost_usd, audio_seconds FROM usage WHERE purpose = 'transcription'"
        )
        assert usage["model_id"] == "whisper-large-v3-turbo"
        assert usage["audio_seconds"] == pytest.approx(VOICE_SECONDS)
        assert usage["cost_usd"] == pytest.approx(VOICE_SECONDS * GROQ_PER_SECOND)
        usage_reply = await bot.ask(OWNER, "/usage")
        assert t("usage_purpose_transcription") in usage_reply[-1].text

        # After /new the consolidation model reads the transcript, marked as spoken; the
        # history entry it writes (scripted: the fake cannot summarise) is found by /recall.
        entry = "[2026-11-30 16:00] By voice, the user asked for a vegan pancake recipe."
        bot.groq.script("llama-3.3-70b-versatile", good_call(history_entry=entry))
        await bot.ask(OWNER, "/new")
        await bot.wait(lambda: bool(consolidation_requests(bot)))
        consolidation = consolidation_requests(bot)[0]
        transcript = consolidation.body["messages"][-1]["content"]
        assert f"user: [voice note, transcribed] {SPOKEN}" in transcript
        await wait_for_rows(bot, "SELECT id FROM history_entries")
        found = await bot.ask(OWNER, "/recall pancake")
        assert "By voice, the user asked for a vegan pancake recipe." in found[-1].text


async def test_a_voice_notes_length_is_bounded_by_its_size_and_its_own_bytes(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path, MAX_VOICE_SECONDS=2) as bot:
        # "1 s" in 19 MB: at the most bits a voice note carries, at least 1,246 s. Refused from
        # the update alone: nothing is downloaded, no row is written.
        big = bot.tg.add_file(VOICE, file_path="voice/big.oga", size=19 * 1024 * 1024)
        fields = {**bot.tg.file_fields(big), "duration": 1, "mime_type": "audio/ogg"}
        bot.send_media(OWNER, {"voice": fields})
        refused = t("voice_too_long_for_size", size="19.0 MB", seconds=1246, limit=2)
        await bot.wait(lambda: bot.texts(OWNER) == [refused])
        assert bot.downloads_and_file_calls() == ([], [])
        assert await bot.rows("SELECT * FROM media_inbox") == []
        # "1 s" in the real 7.9 KB file: its own Ogg pages say 2.4 s, over the limit. Refused
        # after the download, before any transcription.
        bot.send_media(OWNER, bot.voice(VOICE, duration=1))
        await bot.wait(lambda: len(bot.texts(OWNER)) == 2)
        await bot.wait_idle(OWNER)
        assert bot.texts(OWNER)[1] == t("voice_too_long", seconds=3, limit=2)
        assert not bot.transcription_requests() and not bot.chat_requests()
        assert await bot.rows("SELECT * FROM usage") == []


async def test_transcription_is_billed_by_the_duration_the_provider_reports(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path, TRANSCRIPTION_MODEL="whisper-1") as bot:
        bot.openai.hears(VOICE, SPOKEN, seconds=2.41)  # Whisper's verbose_json `duration`
        bot.send_media(OWNER, bot.voice(VOICE, duration=1))
        await bot.wait(lambda: answered(bot, OWNER))
        [(_, upload)] = bot.transcription_requests()
        assert upload.body["response_format"] == "verbose_json"
        [usage] = await bot.rows(
            "SELECT model_id, audio_seconds FROM usage WHERE purpose = 'transcription'"
        )
        assert usage == {"model_id": "whisper-1", "audio_seconds": 2.41}


async def test_a_long_transcript_is_trimmed_like_a_typed_message(tmp_path: Path) -> None:
    first = (TESTDATA / "oasst2" / "oasst2_filtered.jsonl").open(encoding="utf-8").readline()
    replies = json.loads(first)["prompt"]["replies"]
    spoken = "\n".join(reply["text"] for reply in replies)  # real multi-paragraph answers
    assert len(spoken) > 1500
    async with bot_under_test(tmp_path, MAX_INPUT_CHARS=1000) as bot:
        bot.groq.hears(VOICE, spoken)
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: answered(bot, OWNER))
        [row] = await bot.rows("SELECT content FROM messages WHERE role = 'user'")
        content = row["content"]
        assert len(content) <= 1000
        found = re.fullmatch(r"(.*)\n\n\[… (\d+) characters cut …\]\n\n(.*)", content, re.S)
        assert found is not None
        head, cut, tail = found.group(1), int(found.group(2)), found.group(3)
        assert spoken.startswith(head) and spoken.endswith(tail)
        assert len(head) + cut + len(tail) == len(spoken)
        kept = f"{len(spoken) - cut:,}"
        assert t("transcript_trimmed", kept=kept, total=f"{len(spoken):,}") in bot.texts(OWNER)


async def test_transcription_falls_back_from_groq_to_openai(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        # Groq's real 429 asks for 30 s: more than the transport waits, so it falls back.
        bot.groq.script("whisper-large-v3-turbo", Fault("rate_limit_429", retry_after=30))
        bot.openai.hears(VOICE, SPOKEN)
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: answered(bot, OWNER))

        uploads = [(g, r.path, r.model) for g, r in bot.transcription_requests()]
        assert uploads == [
            ("groq", "/openai/v1/audio/transcriptions", "whisper-large-v3-turbo"),
            ("openai", "/v1/audio/transcriptions", "gpt-4o-mini-transcribe"),
        ]
        assert bot.texts(OWNER)[-1] == f"echo: {SPOKEN}"
        # Only the attempt that transcribed is billed (a 429 costs nothing).
        rows = await bot.rows(
            "SELECT model_id, cost_usd FROM usage WHERE purpose = 'transcription'"
        )
        assert [r["model_id"] for r in rows] == ["gpt-4o-mini-transcribe"]
        assert rows[0]["cost_usd"] == pytest.approx(VOICE_SECONDS * MINI_TRANSCRIBE_PER_SECOND)


async def test_a_transcription_that_timed_out_and_its_fallback_are_each_billed_once(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path, TRANSCRIPTION_TIMEOUT=1.0) as bot:
        # Groq takes the upload and never answers: each attempt times out (the provider may
        # still transcribe and bill it), then OpenAI transcribes.
        bot.groq.set_default("whisper-large-v3-turbo", Fault("hang"))
        bot.openai.hears(VOICE, SPOKEN)
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: answered(bot, OWNER))

        groq_uploads = [r for g, r in bot.transcription_requests() if g == "groq"]
        assert groq_uploads and [g for g, _ in bot.transcription_requests()][-1] == "openai"
        rows = await bot.rows(
            "SELECT model_id, cost_usd, audio_seconds FROM usage"
            " WHERE purpose = 'transcription' ORDER BY id"
        )
        # One row per upload that may cost money, none twice: each timed-out one at the
        # recording's measured length (not the 3 s announced), then the transcript.
        timed_out = {
            "model_id": "whisper-large-v3-turbo",
            "cost_usd": pytest.approx(VOICE_SECONDS * GROQ_PER_SECOND),
            "audio_seconds": pytest.approx(VOICE_SECONDS),
        }
        assert rows == [
            *[timed_out] * len(groq_uploads),
            {
                "model_id": "gpt-4o-mini-transcribe",
                "cost_usd": pytest.approx(VOICE_SECONDS * MINI_TRANSCRIBE_PER_SECOND),
                "audio_seconds": pytest.approx(VOICE_SECONDS),
            },
        ]


async def test_a_transcription_cancelled_while_the_provider_holds_it_is_billed_once(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.groq.script("whisper-large-v3-turbo", Fault("hang"))
        update_id = bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: bool(bot.transcription_requests()))
        # The upload is at the provider, which holds it: the task handling the note is
        # cancelled there (as asyncio.run cancels what still runs when the bot's loop ends).
        [handling] = [
            task
            for task in asyncio.all_tasks()
            if task.get_name().endswith(":process_concurrent_update")
        ]
        handling.cancel()  # PTB's update task cut as a stop cuts it: the case tested
        await bot.wait_handled(update_id)
        assert handling.cancelled()

        [(gateway, upload)] = bot.transcription_requests()
        assert (gateway, upload.model) == ("groq", "whisper-large-v3-turbo")
        # The provider may have transcribed (and billed) the whole upload: one row, at the
        # recording's measured length, not the 3 s its sender announced.
        rows = await bot.rows(
            "SELECT model_id, purpose, cost_usd, audio_seconds, user_id, chat_id FROM usage"
        )
        assert rows == [
            {
                "model_id": "whisper-large-v3-turbo",
                "purpose": "transcription",
                "cost_usd": pytest.approx(VOICE_SECONDS * GROQ_PER_SECOND),
                "audio_seconds": pytest.approx(VOICE_SECONDS),
                "user_id": OWNER,
                "chat_id": OWNER,
            }
        ]
        assert not bot.chat_requests()


async def test_every_transcription_model_failing_keeps_the_note_for_a_retry(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.groq.script("whisper-large-v3-turbo", *[Fault("server_500")] * 4)
        bot.openai.script("gpt-4o-mini-transcribe", Fault("bad_gateway_502"))
        bot.openai.script("whisper-1", Fault("server_500"))
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        failed = t("transcription_failed", reason=t("reason_unavailable"))
        await bot.wait(lambda: failed in bot.texts(OWNER))
        await bot.wait(lambda: bot.services.turns.waiting(OWNER) == 0)

        # Told, nothing answered, nothing in the session, but the note is kept with its file id.
        assert not bot.chat_requests()
        assert await bot.rows("SELECT * FROM messages") == []
        [inbox] = await bot.rows("SELECT id, state, file_id FROM media_inbox")
        assert inbox["state"] == "failed" and inbox["file_id"]
        [notice] = [m for m in bot.messages(OWNER) if m.text == failed]
        [[button]] = notice.reply_markup["inline_keyboard"]  # type: ignore[index]
        assert button["callback_data"] == f"{RETRY_PREFIX}{inbox['id']}"

        # The providers are back: Retry, pressed twice in a row (both presses arrive in one
        # batch), transcribes, stores, bills and answers the same note once.
        bot.groq.hears(VOICE, SPOKEN)
        before = len(bot.transcription_requests())
        presses = [
            bot.tg.push(
                bot.tg.make_callback_update(
                    OWNER, OWNER, button["callback_data"], message_id=notice.message_id
                )
            )
            for _ in range(2)
        ]
        await bot.wait(lambda: answered(bot, OWNER))
        for update_id in presses:
            await bot.wait_handled(update_id)
        await bot.wait_idle(OWNER)
        [user_row] = await bot.rows("SELECT content FROM messages WHERE role = 'user'")
        assert user_row["content"] == SPOKEN
        [state] = await bot.rows("SELECT state FROM media_inbox")
        assert state["state"] == "done"
        assert [g for g, _ in bot.transcription_requests()[before:]] == ["groq"]
        assert len(await bot.rows("SELECT id FROM usage WHERE purpose = 'chat'")) == 1
        assert [m.text for m in bot.messages(OWNER)].count(f"echo: {SPOKEN}") == 1
        alerts = [c.params.get("text") for c in bot.tg.calls_of("answerCallbackQuery")]
        assert sorted(alerts, key=str) == sorted([None, t("retry_gone")], key=str)


async def test_photo_reaches_a_vision_model_as_an_image_part(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:  # gpt-5: vision
        update = real_update("message_with_photo.json", OWNER, OWNER)  # 4 sizes, a caption
        largest = update["message"]["photo"][-1]["file_id"]
        bot.tg.add_file(ROSE, file_path="photos/file_0.jpg", file_id=largest)
        bot.tg.push(update)
        await bot.wait(lambda: answered(bot, OWNER))

        assert [c.params["file_id"] for c in bot.tg.calls_of("getFile")] == [largest]
        [(gateway, chat)] = bot.chat_requests()
        assert gateway == "openai"
        assert chat.image_parts() == [
            {"media_type": "image/jpeg", "data": base64.b64encode(ROSE).decode()}
        ]
        [text_part] = [p for p in chat.body["messages"][-1]["content"] if p["type"] == "text"]
        assert text_part["text"] == "[photo: photo description]"
        # Stored: the caption and the file id, never the bytes.
        [row] = await bot.rows("SELECT content, media FROM messages WHERE role = 'user'")
        assert row["content"] == "[photo: photo description]"
        assert json.loads(row["media"])["file_id"] == largest
        assert base64.b64encode(ROSE).decode()[:40] not in row["media"]


async def test_photo_to_an_anthropic_vision_model(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, DEFAULT_MODEL="claude-sonnet-4-5") as bot:
        stored = bot.tg.add_file(ROSE, file_path="photos/rose.jpg")
        sizes = [{**bot.tg.file_fields(stored), "width": 70, "height": 46}]
        bot.send_media(OWNER, {"photo": sizes})
        await bot.wait(lambda: answered(bot, OWNER))
        [(gateway, chat)] = bot.chat_requests()
        assert gateway == "anthropic"
        assert chat.image_parts() == [
            {"media_type": "image/jpeg", "data": base64.b64encode(ROSE).decode()}
        ]


def large_photo_png() -> bytes:
    """The real rose photograph blown up to 2000×1314 with noise (which PNG cannot compress):
    a ~6 MB image file, as a phone's screenshot or a camera's PNG export can be."""
    with Image.open(io.BytesIO(ROSE)) as rose:
        big = rose.convert("RGB").resize((2000, 1314))
    noise = Image.effect_noise(big.size, 80).convert("RGB")
    out = io.BytesIO()
    Image.blend(big, noise, 0.5).save(out, "PNG")
    return out.getvalue()


async def test_a_large_image_is_scaled_to_fit_anthropic(tmp_path: Path) -> None:
    png = large_photo_png()
    assert len(base64.b64encode(png)) > 5 * 1024 * 1024  # Anthropic would refuse it as is
    async with bot_under_test(tmp_path, DEFAULT_MODEL="claude-sonnet-4-5") as bot:
        bot.send_media(OWNER, bot.document(png, "screen.png", "image/png"), caption="what?")
        await bot.wait(lambda: answered(bot, OWNER))
        [(gateway, chat)] = bot.chat_requests()
        [part] = chat.image_parts()
        assert gateway == "anthropic" and part["media_type"] == "image/jpeg"
        sent = base64.b64decode(part["data"])
        assert len(part["data"]) <= 5 * 1024 * 1024
        with Image.open(io.BytesIO(sent)) as image:
            assert image.format == "JPEG" and image.size == (1568, 1030)


async def test_an_image_file_is_what_its_bytes_say_not_its_mime_type(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        # A JPEG sent as "image/png": the model is told it is a JPEG.
        bot.send_media(OWNER, bot.document(ROSE, "rose.png", "image/png"))
        await bot.wait(lambda: answered(bot, OWNER))
        [(_, chat)] = bot.chat_requests()
        assert chat.image_parts() == [
            {"media_type": "image/jpeg", "data": base64.b64encode(ROSE).decode()}
        ]
        # A PDF sent as "image/png": refused with a clear line, no model called.
        bot.send_media(OWNER, bot.document(PDF, "fake.png", "image/png"))
        await bot.wait(lambda: t("image_not_an_image") in bot.texts(OWNER))
        await bot.wait_idle(OWNER)
        assert len(bot.chat_requests()) == 1


async def test_an_image_of_unknown_size_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    png = large_photo_png()
    async with bot_under_test(tmp_path, MAX_DOCUMENT_BYTES=1024 * 1024) as bot:
        stored = bot.tg.add_file(png, file_path="documents/big.png", size_unknown=True)
        fields = {**bot.tg.file_fields(stored), "file_name": "big.png", "mime_type": "image/png"}
        assert "file_size" not in fields
        bot.send_media(OWNER, {"document": fields})
        await bot.wait(lambda: bool(bot.texts(OWNER)))
        await bot.wait_idle(OWNER)
        assert bot.texts(OWNER) == [t("file_too_big", size="> 1.0 MB", limit="1.0 MB")]
        assert not bot.chat_requests()


async def test_photo_to_a_model_that_cannot_see_gets_a_polite_line_and_no_call(
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": [{"id": "gpt-5", "vision": False}]}))
    async with bot_under_test(tmp_path, MODEL_CATALOG_FILE=catalog) as bot:
        update = real_update("message_with_photo.json", OWNER, OWNER)
        bot.tg.push(update)
        await bot.wait(lambda: len(bot.messages(OWNER)) == 1)
        await bot.wait(lambda: bot.services.turns.waiting(OWNER) == 0)

        [line] = bot.messages(OWNER)
        seeing = [e for e in bot.services.available_models() if e.vision]
        assert line.text == t(
            "vision_unsupported", label="GPT-5", models=", ".join(e.label for e in seeing)
        )
        buttons = [row[0]["callback_data"] for row in line.reply_markup["inline_keyboard"]]  # type: ignore[index]
        assert buttons == [model_callback_data(e.id) for e in seeing]
        assert bot.downloads_and_file_calls() == ([], [])
        assert not bot.chat_requests()
        assert await bot.rows("SELECT * FROM messages") == []

        # One tap switches to a model that can see (the /model keyboard's own callback).
        bot.tg.push(bot.tg.make_callback_update(OWNER, OWNER, buttons[0], message_id=1))
        await bot.wait(lambda: bool(bot.tg.calls_of("answerCallbackQuery")))
        chosen = await bot.rows("SELECT model_id FROM chats WHERE chat_id = ?", (OWNER,))
        assert chosen == [{"model_id": seeing[0].id}]


async def test_real_pdf_text_reaches_the_model_with_the_caption(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        media = bot.document(PDF, "oasst2.pdf", "application/pdf")
        bot.send_media(OWNER, media, caption="What is this document about?")
        await bot.wait(lambda: answered(bot, OWNER))

        [(_, chat)] = bot.chat_requests()
        prompt = chat.body["messages"][-1]["content"]
        assert prompt.startswith("[document: oasst2.pdf]\nWhat is this document about?")
        # Text from both pages and both languages, as LibreOffice laid it out.
        assert "sabonetes orgânicos" in prompt
        assert "卵焼き" in prompt and "[page 2]" in prompt
        # Stored with the file name, so the document can be recalled later.
        [row] = await bot.rows("SELECT content, media FROM messages WHERE role = 'user'")
        assert row["content"] == prompt
        assert json.loads(row["media"])["file_name"] == "oasst2.pdf"
        # Consolidation reads the document's name and text, so memory can keep it.
        await bot.ask(OWNER, "/new")
        await bot.wait(lambda: bool(consolidation_requests(bot)))
        consolidation = consolidation_requests(bot)[0]
        transcript = consolidation.body["messages"][-1]["content"]
        assert "[document: oasst2.pdf]" in transcript and "卵焼き" in transcript


async def test_long_document_is_trimmed_with_a_note(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, DOCUMENT_TOKEN_BUDGET=500) as bot:
        bot.send_media(OWNER, bot.document(PDF, "oasst2.pdf", "application/pdf"))
        await bot.wait(lambda: answered(bot, OWNER))
        assert bot.texts(OWNER)[0].startswith("Note: oasst2.pdf is long.")
        [(_, chat)] = bot.chat_requests()
        prompt = chat.body["messages"][-1]["content"]
        assert "characters cut …]" in prompt
        assert "OpenAssistant conversations" in prompt  # the head is kept


async def test_scanned_pdf_without_text_layer_gets_a_clear_line(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.send_media(OWNER, bot.document(SCANNED, "scan.pdf", "application/pdf"))
        await bot.wait(lambda: t("document_no_text") in bot.texts(OWNER))
        await bot.wait(lambda: bot.services.turns.waiting(OWNER) == 0)
        assert not bot.chat_requests()
        assert await bot.rows("SELECT * FROM messages") == []


BOMB_PAGES = 1000  # ~0.6 s of CPU each: ten minutes of a frozen loop without a bound


async def test_a_pdf_bomb_gets_a_clear_answer_and_never_holds_other_chats(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, DOCUMENT_TIMEOUT=8) as bot:
        bot.send_media(OWNER, bot.document(pdf_bomb(BOMB_PAGES), "bomb.pdf", "application/pdf"))
        await bot.wait(lambda: bool(bot.tg.downloads))  # the bomb is being read now
        # Another chat is answered meanwhile, before the bomb's sender hears anything.
        bot.say(FRIEND, "hello", user_id=FRIEND)
        await bot.wait(lambda: answered(bot, FRIEND))
        assert bot.texts(OWNER) == []
        # The sender gets a clear line, not a stall; nothing is stored, no model called.
        too_complex = t("document_too_complex", name="bomb.pdf", seconds="8")
        await bot.wait(lambda: bot.texts(OWNER) == [too_complex], timeout=30)
        await bot.wait_idle(OWNER)
        assert [g for g, _ in bot.chat_requests()] == ["openai"]  # FRIEND's hello only
        assert await bot.rows("SELECT content FROM messages WHERE chat_id = ?", (OWNER,)) == []


async def test_a_pdf_whose_text_holds_a_lone_surrogate_is_answered(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.send_media(OWNER, bot.document(surrogate_pdf(), "s.pdf", "application/pdf"))
        await bot.wait(lambda: answered(bot, OWNER))
        [row] = await bot.rows("SELECT content FROM messages WHERE role = 'user'")
        # The frame's tag carries a nonce: the lone surrogate became U+FFFD inside it.
        assert re.search(r"\[page 1\]\nAA\ufffd\n</document_[0-9a-f]+>$", row["content"])


async def test_oversize_files_are_refused_without_a_download(tmp_path: Path) -> None:
    mib = 1024 * 1024
    async with bot_under_test(tmp_path, MAX_DOCUMENT_BYTES=2 * mib, MAX_VOICE_SECONDS=60) as bot:
        # A 3 MB PDF (the update announces its size) over MAX_DOCUMENT_BYTES.
        bot.send_media(OWNER, bot.document(PDF, "big.pdf", "application/pdf", size=3 * mib))
        # A 25 MB voice note: over Telegram's 20 MB bot download limit.
        bot.send_media(OWNER, bot.voice(VOICE, duration=30, size=25 * mib))
        # A voice note longer than MAX_VOICE_SECONDS.
        bot.send_media(OWNER, bot.voice(VOICE, duration=61))
        await bot.wait(lambda: len(bot.messages(OWNER)) == 3)
        assert bot.texts(OWNER) == [
            t("file_too_big", size="3.0 MB", limit="2.0 MB"),
            t("file_too_big", size="25.0 MB", limit="20.0 MB"),
            t("voice_too_long", seconds=61, limit=60),
        ]
        assert bot.downloads_and_file_calls() == ([], [])
        assert not bot.transcription_requests() and not bot.chat_requests()
        assert await bot.rows("SELECT * FROM media_inbox") == []


async def test_unsupported_document_and_sticker_are_answered_without_a_download(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.tg.push(real_update("message_with_document.json", OWNER, OWNER))  # a .docx
        await bot.wait(lambda: len(bot.messages(OWNER)) == 1)
        assert bot.texts(OWNER) == [t("document_unsupported", name="test.docx")]
        bot.tg.push(real_update("message_with_sticker.json", OWNER, OWNER))
        await bot.wait(lambda: len(bot.messages(OWNER)) == 2)
        assert bot.texts(OWNER)[1] == t("text_only")
        assert bot.downloads_and_file_calls() == ([], [])


async def test_strangers_voice_note_costs_nothing(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        update = real_update("message_with_voice.json", STRANGER, STRANGER)
        bot.tg.add_file(
            VOICE, file_path="voice/x.oga", file_id=update["message"]["voice"]["file_id"]
        )
        bot.tg.push(update)
        await bot.wait(lambda: len(bot.messages(STRANGER)) == 1)
        assert bot.texts(STRANGER) == [t("not_allowed", user_id=STRANGER)]
        assert bot.downloads_and_file_calls() == ([], [])
        assert not bot.transcription_requests() and not bot.chat_requests()
        assert await bot.rows("SELECT * FROM media_inbox") == []
        assert await bot.rows("SELECT * FROM usage") == []


async def test_voice_note_over_the_budget_is_not_downloaded(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, USER_DAILY_BUDGET_USD=0.01) as bot:
        await bot.services.store.record_usage(OWNER, OWNER, "gpt-5", "chat", Usage(cost_usd=0.02))
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: len(bot.messages(OWNER)) == 1)
        assert bot.texts(OWNER) == [t("budget_user_daily", limit="$0.0100")]
        assert bot.downloads_and_file_calls() == ([], [])
        assert not bot.transcription_requests()


async def test_in_a_group_only_voice_notes_replying_to_the_bot_are_read(tmp_path: Path) -> None:
    group = -1001
    async with bot_under_test(tmp_path) as bot:
        bot.groq.hears(VOICE, SPOKEN)
        # Group chatter: not for the bot, so not downloaded (checked once it was handled).
        chatter = bot.send_media(group, bot.voice(VOICE, duration=3), chat_type="supergroup")
        await bot.ask(group, "@mnemo_test_bot hi", chat_type="supergroup")
        await bot.wait_handled(chatter)
        await bot.wait_idle(group)
        assert bot.downloads_and_file_calls() == ([], [])
        assert not bot.transcription_requests()
        # A voice note replying to the bot is addressed to it: transcribed, answered as a reply,
        # with the bot's message it replies to given to the model as a quote.
        update_id = bot.send_media(
            group, bot.voice(VOICE, duration=3), chat_type="supergroup", reply_to_bot=True
        )
        await bot.wait(lambda: answered(bot, group, "echo: [The user is replying"))
        assert bot.texts(group)[-1].endswith(f"\n{SPOKEN}")
        await bot.wait_handled(update_id)
        assert [g for g, _ in bot.transcription_requests()] == ["groq"]
        replies = [m.reply_to_message_id for m in bot.messages(group)[-2:]]
        assert all(r is not None for r in replies)


async def test_without_any_transcription_key_the_user_is_told_plainly(tmp_path: Path) -> None:
    # Only an Anthropic key: chat works, but no transcription model has a key.
    async with bot_under_test(
        tmp_path, OPENAI_API_KEY="", GROQ_API_KEY="", DEFAULT_MODEL="claude-sonnet-4-5"
    ) as bot:
        bot.send_media(OWNER, bot.voice(VOICE, duration=3))
        await bot.wait(lambda: t("transcription_unavailable") in bot.texts(OWNER))
        await bot.wait(lambda: bot.services.turns.waiting(OWNER) == 0)
        assert not bot.transcription_requests() and not bot.chat_requests()
        [line] = bot.messages(OWNER)
        assert line.reply_markup is None  # no Retry: it could not help
        assert await bot.rows("SELECT * FROM messages") == []
