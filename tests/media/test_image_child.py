"""Images are decoded in a bounded child, never in the bot.

A 37 KB GIF of 7070×7070 px decodes to ~700 MiB, although it is under the 50 MP bound: decoded
in the bot's own process, a few at once could get the bot OOM-killed. The header is checked
first (Pillow's Image.open reads only the header) and the decode runs in a child with
RLIMIT_AS, a timeout and the document reader's slots.

Memory is compared, never timed: the peak resident size of this process (VmHWM) is reset
through /proc/self/clear_refs before each call and read after it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

import media.image_reader
from bot.ui.i18n import t
from media.document_reader import ReaderSlots
from media.image_reader import fit_image_bounded
from media.images import STRICTEST, ImageError
from tests.support.e2e_bot import OWNER, bot_under_test
from tests.support.process_memory import current_mib, peak_mib, peak_reset

MIB = 1024 * 1024
# Far below what a decode of these images costs in-process (24 MP GIF: ~300 MiB; the bomb:
# ~700 MiB), far above the noise of a child's pipes and buffers.
RISE_BOUND_MIB = 60


def gif(side: int) -> bytes:
    """A GIF of side×side pixels of one colour: LZW packs it into a few dozen KB."""
    out = io.BytesIO()
    with Image.new("P", (side, side), 0) as image:
        image.save(out, "GIF")
    return out.getvalue()


async def rise_of(data: bytes, **options: int) -> tuple[int, object]:
    """How far this process's peak memory rose while the image was fitted; the outcome."""
    peak_reset()
    before = current_mib()
    try:
        outcome: object = await fit_image_bounded(data, STRICTEST, slots=ReaderSlots(), **options)
    except ImageError as exc:
        outcome = exc
    return peak_mib() - before, outcome


async def test_the_bomb_gif_is_refused_from_its_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before any decode: no child is even started."""

    async def no_child(*args: object, **kwargs: object) -> tuple[bytes, int]:
        raise AssertionError("a child was started for an image refused by its header")

    monkeypatch.setattr(media.image_reader, "in_child", no_child)
    bomb = gif(7070)
    assert len(bomb) < 40_000  # the 37 KB
    rise, outcome = await rise_of(bomb)
    assert isinstance(outcome, ImageError) and outcome.reason == "too_big"
    assert rise < RISE_BOUND_MIB


async def test_an_image_that_must_be_scaled_is_decoded_in_the_child() -> None:
    """24 MP (under the bound): scaled down to a JPEG within the strictest provider's limit,
    while this process's memory stays where it was."""
    large = gif(4900)
    rise, outcome = await rise_of(large)
    assert not isinstance(outcome, ImageError), outcome
    with Image.open(io.BytesIO(outcome.data)) as sent:  # type: ignore[attr-defined]
        assert sent.format == "JPEG" and max(sent.size) == STRICTEST.max_edge
    assert rise < RISE_BOUND_MIB


async def test_a_child_past_its_memory_limit_is_stopped_and_reported_politely() -> None:
    rise, outcome = await rise_of(gif(4900), memory_bytes=200 * MIB)
    assert isinstance(outcome, ImageError) and outcome.reason == "too_big"
    assert rise < RISE_BOUND_MIB


async def test_the_bomb_sent_as_a_file_gets_a_polite_refusal(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.send_media(OWNER, bot.document(gif(7070), "cat.gif", "image/gif"))
        await bot.wait(lambda: t("image_too_big") in bot.texts(OWNER))
        await bot.wait_idle(OWNER)
        assert bot.texts(OWNER) == [t("image_too_big")]
        assert not bot.chat_requests()
