"""Transcription through the transport: real litellm.atranscription posting multipart audio to
the fake Groq and OpenAI endpoints, with the same error table, chain walk, keys and breakers.

The audio is tests/data/voice_en.ogg (espeak-ng speech, Ogg/Opus as Telegram sends it)."""

from __future__ import annotations

import hashlib

import pytest

from models.types import Outcome, TransportError
from tests.conftest import TEST_KEYS, make_transport
from tests.e2e_bot import MEDIA
from tests.fakes.providers import Fault, Reply

VOICE = (MEDIA / "voice_en.ogg").read_bytes()
SPOKEN = (MEDIA / "voice_en.txt").read_text(encoding="utf-8").strip()


async def transcribe(transport, **overrides):
    options = {
        "filename": "voice.ogg",
        "mime_type": "audio/ogg",
        "duration_s": 3.0,
        "timeout": 5,
        **overrides,
    }
    return await transport.transcribe("whisper-large-v3-turbo", VOICE, **options)


async def test_groq_transcribes_the_upload_and_the_catalog_prices_it(transport, fake_groq) -> None:
    fake_groq.hears(VOICE, SPOKEN)
    result = await transcribe(transport)
    assert result.text == SPOKEN and result.model_id == "whisper-large-v3-turbo"
    assert result.usage.audio_seconds == 3.0
    assert result.usage.cost_usd == pytest.approx(3 * 0.04 / 3600)
    assert result.billed == [("whisper-large-v3-turbo", result.usage)]
    [request] = fake_groq.requests
    assert request.path == "/openai/v1/audio/transcriptions"
    assert request.api_key == TEST_KEYS["groq"]
    assert request.body["file"]["sha256"] == hashlib.sha256(VOICE).hexdigest()
    assert request.body["file"]["filename"] == "voice.ogg"


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        (Fault("rate_limit_429", retry_after=30), Outcome.RATE_LIMIT),
        (Fault("groq_tpd_429"), Outcome.QUOTA),  # Groq's daily cap: its quota
        (Fault("unauthorized_401"), Outcome.AUTH),
        (Fault("throttling_in_200"), Outcome.RATE_LIMIT),
        (Fault("arrearage_in_200"), Outcome.QUOTA),
        (Fault("bad_request_400"), Outcome.BAD_REQUEST),
    ],
)
async def test_a_groq_fault_falls_back_to_openai_classified_from_the_real_body(
    transport, fake_groq, fake_openai, fault, outcome
) -> None:
    # Retryable faults are retried on Groq first (1 + 3 retries): script enough of them.
    fake_groq.script("whisper-large-v3-turbo", *[fault] * 4)
    fake_openai.hears(VOICE, SPOKEN)
    result = await transcribe(transport)
    assert result.text == SPOKEN and result.model_id == "gpt-4o-mini-transcribe"
    assert result.attempts[0].outcome is outcome
    assert [(r.path, r.model) for r in fake_openai.requests] == [
        ("/v1/audio/transcriptions", "gpt-4o-mini-transcribe")
    ]
    assert result.billed == [("gpt-4o-mini-transcribe", result.usage)]  # failures cost nothing


async def test_whisper_1_last_in_the_chain_parses_its_verbose_json(
    transport, fake_groq, fake_openai
) -> None:
    fake_groq.set_default("*", Fault("server_500"))
    fake_openai.script("gpt-4o-mini-transcribe", Fault("server_500"))
    fake_openai.hears(VOICE, SPOKEN)
    result = await transcribe(transport)
    assert result.model_id == "whisper-1" and result.text == SPOKEN
    # litellm asks whisper-1 for verbose_json (to learn the duration); the fake answers it.
    assert fake_openai.requests[-1].body["response_format"] == "verbose_json"
    # phase 1 on the head (1 + 3 retries), then each fallback once
    assert [r.model for r in fake_groq.requests] == ["whisper-large-v3-turbo"] * 4


async def test_every_model_failing_raises_with_the_attempts(
    transport, fake_groq, fake_openai
) -> None:
    fake_groq.set_default("*", Fault("bad_gateway_502"))
    fake_openai.set_default("*", Fault("server_500"))
    with pytest.raises(TransportError) as caught:
        await transcribe(transport)
    models = [a.model_id for a in caught.value.attempts]
    assert models[-2:] == ["gpt-4o-mini-transcribe", "whisper-1"]
    assert caught.value.billed == []


async def test_a_timed_out_attempt_is_billed(fake_openai, fake_groq, fake_anthropic) -> None:
    transport = make_transport(fake_openai, fake_groq, fake_anthropic, timeout_grace=0.1)
    try:
        fake_groq.script("whisper-large-v3-turbo", *[Reply("late", delay=2.0)] * 4)
        fake_openai.hears(VOICE, SPOKEN)
        result = await transcribe(transport, timeout=0.3)
        assert result.model_id == "gpt-4o-mini-transcribe"
        timed_out = [a for a in result.attempts if a.outcome is Outcome.TIMEOUT]
        assert timed_out
        # The provider may have done the work before we gave up: each timeout is billed.
        groq_billed = [m for m, _ in result.billed if m == "whisper-large-v3-turbo"]
        assert len(groq_billed) == len(timed_out)
    finally:
        await transport.aclose()


async def test_an_empty_transcript_is_a_success(transport, fake_groq) -> None:
    fake_groq.script("whisper-large-v3-turbo", Reply(""))
    result = await transcribe(transport)
    assert result.text == "" and result.model_id == "whisper-large-v3-turbo"
