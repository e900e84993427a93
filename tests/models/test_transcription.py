"""Transcription through the transport: real litellm.atranscription posting multipart audio to
the fake Groq and OpenAI endpoints, with the same error table, chain walk, keys and breakers.

The audio is tests/data/voice_en.ogg (espeak-ng speech, Ogg/Opus as Telegram sends it)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from models.calls import CallOptions
from models.types import Outcome, Spend, TransportError, Usage
from tests.fakes.providers import Fault, Reply
from tests.support.e2e_bot import MEDIA, wait_until
from tests.support.transport import TEST_KEYS, make_transport

VOICE = (MEDIA / "voice_en.ogg").read_bytes()
SPOKEN = (MEDIA / "voice_en.txt").read_text(encoding="utf-8").strip()
GROQ_PER_SECOND = 0.04 / 3600


async def transcribe(transport, *, duration_s: float = 3.0, **overrides):
    options = CallOptions(**{"timeout": 5, **overrides})
    return await transport.transcribe(
        "whisper-large-v3-turbo",
        VOICE,
        options,
        filename="voice.ogg",
        mime_type="audio/ogg",
        duration_s=duration_s,
    )


async def test_groq_transcribes_the_upload_and_the_catalog_prices_it(transport, fake_groq) -> None:
    fake_groq.hears(VOICE, SPOKEN)
    spends: list[Spend] = []
    result = await transcribe(transport, on_spend=spends.append)
    assert result.text == SPOKEN and result.model_id == "whisper-large-v3-turbo"
    assert result.usage.audio_seconds == 3.0
    assert result.usage.cost_usd == pytest.approx(3 * GROQ_PER_SECOND)
    assert spends == [Spend("whisper-large-v3-turbo", "groq", result.usage, "success")]
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
    spends: list[Spend] = []
    result = await transcribe(transport, on_spend=spends.append)
    assert result.text == SPOKEN and result.model_id == "gpt-4o-mini-transcribe"
    assert result.attempts[0].outcome is outcome
    assert [(r.path, r.model) for r in fake_openai.requests] == [
        ("/v1/audio/transcriptions", "gpt-4o-mini-transcribe")
    ]
    # A refusal costs nothing: only the answer is billed, once.
    assert spends == [Spend("gpt-4o-mini-transcribe", "openai", result.usage, "success")]


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
    spends: list[Spend] = []
    with pytest.raises(TransportError) as caught:
        await transcribe(transport, on_spend=spends.append)
    models = [a.model_id for a in caught.value.attempts]
    assert models[-2:] == ["gpt-4o-mini-transcribe", "whisper-1"]
    assert spends == []  # every provider refused: nothing was transcribed


async def test_a_timed_out_attempt_is_billed(fake_openai, fake_groq, fake_anthropic) -> None:
    transport = make_transport(fake_openai, fake_groq, fake_anthropic, timeout_grace=0.1)
    try:
        fake_groq.script("whisper-large-v3-turbo", *[Reply("late", delay=2.0)] * 4)
        fake_openai.hears(VOICE, SPOKEN)
        spends: list[Spend] = []
        result = await transcribe(transport, timeout=0.3, on_spend=spends.append)
        assert result.model_id == "gpt-4o-mini-transcribe"
        timed_out = [a for a in result.attempts if a.outcome is Outcome.TIMEOUT]
        assert timed_out and {a.model_id for a in timed_out} == {"whisper-large-v3-turbo"}
        # The provider may have done the work before we gave up: each timeout is billed, once,
        # at the duration given; then the answer, once.
        groq = Usage(cost_usd=3 * GROQ_PER_SECOND, audio_seconds=3.0)
        assert spends == [
            *[Spend("whisper-large-v3-turbo", "groq", groq, "failed")] * len(timed_out),
            Spend("gpt-4o-mini-transcribe", "openai", result.usage, "success"),
        ]
    finally:
        await transport.aclose()


async def test_a_transcription_cancelled_while_the_provider_holds_it_is_billed(
    transport, fake_groq, fake_openai
) -> None:
    """The upload reached the provider, which may transcribe (and bill) it whatever we do:
    the cancelled attempt is told to `on_spend` at the duration given, and nothing else is."""
    fake_groq.script("whisper-large-v3-turbo", Fault("hang"))
    spends: list[Spend] = []
    call = asyncio.create_task(transcribe(transport, duration_s=2.5, on_spend=spends.append))
    await wait_until(lambda: bool(fake_groq.transcription_requests()), "the upload to arrive")
    call.cancel()  # the caller gives up mid-upload: its spend is what is tested
    with pytest.raises(asyncio.CancelledError):
        await call
    billed = Usage(cost_usd=2.5 * GROQ_PER_SECOND, audio_seconds=2.5)
    assert spends == [Spend("whisper-large-v3-turbo", "groq", billed, "cancelled")]
    assert len(fake_groq.transcription_requests()) == 1 and not fake_openai.requests


async def test_an_empty_transcript_is_a_success(transport, fake_groq) -> None:
    fake_groq.script("whisper-large-v3-turbo", Reply(""))
    result = await transcribe(transport)
    assert result.text == "" and result.model_id == "whisper-large-v3-turbo"
