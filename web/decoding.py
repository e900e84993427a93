"""Content-Encoding undone in small, counted pieces, from the raw stream.

httpx decodes a body with one `decompress(chunk)` per network chunk and no output bound, and
stacks one decoder per listed coding: a 1 KiB body sent as `gzip, gzip` inflated to 512 MiB in
one call on the chat loop, before any byte was counted. Here:

- one coding at most (gzip or deflate; `identity` is none): a stacked value such as
  `gzip, gzip` or a coding we cannot bound (br, zstd, compress, …) is refused before the body;
- each call to zlib produces at most PIECE_BYTES (`max_length`), the input it did not consume
  waits in `unconsumed_tail`, and the caller (web/fetch.py) counts every piece against the cap
  before asking for the next one — so memory stays within the cap plus one piece, and no single
  call on the loop inflates more than PIECE_BYTES (well under a millisecond of CPU);
- the end of the stream is drained the same way (zlib's `flush()` would inflate everything
  left in one call).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from web.errors import UnsupportedTypeError

# The most bytes one zlib call may produce: small enough that a call is a fraction of a
# millisecond, large enough that a 5 MB page takes about 80 calls.
PIECE_BYTES = 64 * 1024
# What the client asks for: only codings this module decodes with a bound.
ACCEPT_ENCODING = "gzip, deflate"
_GZIP = frozenset({"gzip", "x-gzip"})
_CODINGS = _GZIP | {"deflate"}


class Decoder:
    """Undoes one Content-Encoding (or none). A generator: the caller counts each piece and
    stops asking at its cap, so no piece past the cap is ever inflated."""

    def __init__(self, coding: str | None) -> None:
        self._coding = coding
        self._zlib = self._fresh() if coding else None
        self._tried_raw = False  # deflate: a zlib header first, raw deflate if it has none
        self._done = False  # the stream ended; bytes after it are ignored, as browsers do
        self._started = False

    def _fresh(self) -> zlib._Decompress:
        if self._coding in _GZIP:
            return zlib.decompressobj(zlib.MAX_WBITS | 16)
        return zlib.decompressobj(zlib.MAX_WBITS)

    def feed(self, raw: bytes) -> Iterator[bytes]:
        """The decoded pieces of the next raw chunk, each at most PIECE_BYTES, counted."""
        if self._zlib is None:
            yield raw
            return
        data = raw
        while data and not self._done:
            try:
                piece = self._zlib.decompress(data, PIECE_BYTES)
            except zlib.error:
                if self._coding == "deflate" and not self._tried_raw and not self._started:
                    # Some servers send raw deflate under "deflate": start again without a header.
                    self._tried_raw = True
                    self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise UnsupportedTypeError("the page's compressed body is broken") from None
            self._started = True
            data = self._zlib.unconsumed_tail
            if self._zlib.eof:
                rest = self._zlib.unused_data
                if self._coding in _GZIP and rest.startswith(b"\x1f\x8b"):
                    # A gzip body may hold several members one after another (RFC 1952).
                    data, self._zlib = rest, self._fresh()
                else:
                    self._done = True
            if piece:
                yield piece
            elif not data:
                return

    def finish(self) -> Iterator[bytes]:
        """Whatever zlib still holds once the stream ended, in pieces like the rest."""
        if self._zlib is None or self._zlib.eof or self._done:
            return
        while True:
            piece = self._zlib.decompress(b"", PIECE_BYTES)
            if not piece:
                return
            yield piece


def coding_of(header: str, host: str | None) -> str | None:
    """The one coding `header` (a Content-Encoding value) names, or None for none; raises
    UnsupportedTypeError for a stacked value or a coding with no bounded decoder here."""
    codings = [part.strip().lower() for part in header.split(",")]
    codings = [coding for coding in codings if coding and coding != "identity"]
    if not codings:
        return None
    shown = header.strip()[:60]
    if len(codings) > 1:
        raise UnsupportedTypeError(
            f"{host} sent its body encoded several times ({shown}); web_read decodes one layer"
        )
    if codings[0] not in _CODINGS:
        raise UnsupportedTypeError(
            f"{host} sent its body encoded as {shown}; web_read decodes gzip and deflate"
        )
    return codings[0]
