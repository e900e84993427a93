"""Content-Encoding undone in bounded pieces (web/decoding.py): one coding at most, each zlib
call producing at most PIECE_BYTES, so a bomb never inflates past its cap in one call."""

from __future__ import annotations

import gzip
import zlib

import pytest

from web.decoding import PIECE_BYTES, Decoder, coding_of
from web.errors import UnsupportedTypeError

MIB = 1024 * 1024


def bomb(decoded: int = 64 * MIB) -> bytes:
    """`decoded` zero bytes, deflated (zlib-wrapped, as Content-Encoding: deflate means)."""
    return zlib.compress(b"\0" * decoded, 9)


def decode(decoder: Decoder, body: bytes, chunk: int = 65536) -> list[bytes]:
    pieces: list[bytes] = []
    for start in range(0, len(body), chunk):
        pieces.extend(decoder.feed(body[start : start + chunk]))
    pieces.extend(decoder.finish())
    return pieces


@pytest.mark.parametrize("header", ["gzip, gzip", "gzip,deflate", "deflate, gzip", "GZIP , gzip"])
def test_a_stacked_encoding_is_refused(header: str) -> None:
    with pytest.raises(UnsupportedTypeError) as caught:
        coding_of(header, "evil.test")
    assert "several times" in str(caught.value) and "evil.test" in str(caught.value)


@pytest.mark.parametrize("header", ["br", "zstd", "compress", "x-custom"])
def test_an_encoding_without_a_bounded_decoder_is_refused(header: str) -> None:
    with pytest.raises(UnsupportedTypeError) as caught:
        coding_of(header, "evil.test")
    assert header in str(caught.value)


def test_one_coding_or_none_is_read() -> None:
    assert coding_of("", "x") is None
    assert coding_of("identity", "x") is None
    assert coding_of("gzip, identity", "x") == "gzip"
    assert coding_of("X-Gzip", "x") == "x-gzip"
    assert coding_of("deflate", "x") == "deflate"


def test_a_64_kib_deflate_bomb_comes_out_one_small_piece_per_call() -> None:
    """Asked for pieces until 5 MB, the decoder made no piece over PIECE_BYTES and stopped
    inflating as soon as the caller stopped asking."""
    body = bomb()
    assert len(body) <= 66 * 1024
    decoder = Decoder("deflate")
    seen = 0
    pieces = decoder.feed(body)
    for piece in pieces:
        assert len(piece) <= PIECE_BYTES
        seen += len(piece)
        if seen > 5 * MIB:
            break
    assert 5 * MIB < seen <= 5 * MIB + PIECE_BYTES


def test_the_whole_bomb_decodes_to_its_size_in_pieces() -> None:
    pieces = decode(Decoder("deflate"), bomb(8 * MIB))
    assert sum(map(len, pieces)) == 8 * MIB
    assert max(map(len, pieces)) <= PIECE_BYTES


def test_a_stream_ending_on_a_full_piece_is_drained_by_finish() -> None:
    """zlib may still hold output when the last input chunk is consumed: finish() gets it
    in pieces, never with an unbounded flush()."""
    text = bytes(range(256)) * (3 * PIECE_BYTES // 256)
    pieces = decode(Decoder("gzip"), gzip.compress(text), chunk=len(gzip.compress(text)))
    assert b"".join(pieces) == text
    assert max(map(len, pieces)) <= PIECE_BYTES


def test_gzip_members_raw_deflate_and_trailing_bytes() -> None:
    two = gzip.compress(b"<p>one</p>") + gzip.compress(b"<p>two</p>")
    assert b"".join(decode(Decoder("gzip"), two, chunk=7)) == b"<p>one</p><p>two</p>"
    raw = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = raw.compress(b"<p>raw deflate</p>") + raw.flush()
    assert b"".join(decode(Decoder("deflate"), body)) == b"<p>raw deflate</p>"
    padded = gzip.compress(b"<p>padded</p>") + b"\0" * 64
    assert b"".join(decode(Decoder("gzip"), padded)) == b"<p>padded</p>"
    assert b"".join(decode(Decoder(None), b"plain")) == b"plain"


def test_a_broken_body_is_refused() -> None:
    with pytest.raises(UnsupportedTypeError):
        decode(Decoder("gzip"), b"\x1f\x8bnot gzip at all" * 10)
