"""Images made fit for a provider: the format from the bytes, the size and dimensions bounded.

What a sender declares (the MIME type of an image document) is a claim: the format is read from
the file's magic bytes, and a file that is none of JPEG, PNG, WebP or GIF is refused. Providers
refuse images past their own limits ("bad request" for the user): Anthropic takes at most 5 MB
per image (counted on the base64 text) and scales anything over 1568 px on its long edge down
anyway; OpenAI takes 20 MB and fits images into 2048 px; Groq takes 4 MB of base64. An image
within the limits of the chat model's chain goes as it is; a larger one is scaled down and
re-encoded as JPEG; one that cannot be made to fit (or is too many pixels to even decode
safely) is refused with a clear line.

Decoding is the dangerous part: a 37 KB GIF of 7070×7070 px decodes to ~700 MiB. So the pixel
count is checked from the header first (`image_header`: Pillow's Image.open reads the header
only), against a bound per format (`max_pixels`), and the decode itself runs in a bounded child
process (media/image_reader.py, media/image_child.py), never in the bot.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from media import MediaError

# Pixels an image may have, read from its header before any decode. A JPEG is decoded at a
# reduced scale (Image.draft: 1/2 to 1/8, to about the edge we send), so a 100 MP camera JPEG
# costs ~12 MP of memory. Other formats (PNG, GIF, WebP) decode whole: 25 MP (5000×5000) cost
# ~300 MiB at the peak of the RGBA/RGB conversions, inside the child's memory limit.
MAX_JPEG_PIXELS = 100_000_000
MAX_PIXELS = 25_000_000
_MAGIC = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


@dataclass(frozen=True)
class ImageLimit:
    """What one provider protocol takes: raw bytes (its base64 limit × 3/4) and the long edge
    worth sending (larger images are scaled down by the provider anyway)."""

    max_bytes: int
    max_edge: int


IMAGE_LIMITS = {
    "anthropic": ImageLimit(max_bytes=5 * 1024 * 1024 * 3 // 4, max_edge=1568),
    "openai": ImageLimit(max_bytes=20 * 1024 * 1024 * 3 // 4, max_edge=2048),
    "groq": ImageLimit(max_bytes=4 * 1024 * 1024 * 3 // 4, max_edge=2048),
}
STRICTEST = ImageLimit(
    max_bytes=min(limit.max_bytes for limit in IMAGE_LIMITS.values()),
    max_edge=min(limit.max_edge for limit in IMAGE_LIMITS.values()),
)


class ImageError(MediaError):
    """The image cannot be sent; `reason` is "not_an_image", "too_big" or "busy" (no reader
    slot came free in time)."""


@dataclass(frozen=True)
class FittedImage:
    data: bytes
    mime_type: str
    scaled: bool = False


def limit_for(protocols: Iterable[str]) -> ImageLimit:
    """The limit every protocol of a fallback chain accepts."""
    limits = [IMAGE_LIMITS.get(protocol, STRICTEST) for protocol in protocols] or [STRICTEST]
    return ImageLimit(
        max_bytes=min(limit.max_bytes for limit in limits),
        max_edge=min(limit.max_edge for limit in limits),
    )


def sniff_image(data: bytes) -> str | None:
    """The image format the bytes are in (their magic number), or None."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def max_pixels(mime: str) -> int:
    """The most pixels an image of this format may have (see MAX_PIXELS)."""
    return MAX_JPEG_PIXELS if mime == "image/jpeg" else MAX_PIXELS


@dataclass(frozen=True)
class ImageHeader:
    mime: str
    width: int
    height: int

    def fits(self, data: bytes, limit: ImageLimit) -> bool:
        """Whether the file goes as it is: no decode at all."""
        return len(data) <= limit.max_bytes and max(self.width, self.height) <= limit.max_edge


def image_header(data: bytes) -> ImageHeader:
    """The format and size of an image from its magic bytes and header, decoding no pixel;
    raises ImageError: "not_an_image", or "too_big" past `max_pixels`. Cheap: safe in the bot."""
    mime = sniff_image(data)
    if mime is None:
        raise ImageError("not_an_image")
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            width, height = image.size
    except Image.DecompressionBombError:  # Pillow's own check, past 2 × 89 MP
        raise ImageError("too_big") from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise ImageError("not_an_image") from None
    if width * height > max_pixels(mime):
        raise ImageError("too_big")
    return ImageHeader(mime, width, height)


def fit_image(data: bytes, limit: ImageLimit) -> FittedImage:
    """`data` as it is when it fits `limit`, else scaled down and re-encoded as JPEG; raises
    ImageError. Decodes: run it in the bounded child (media/image_reader.fit_image_bounded)."""
    header = image_header(data)
    if header.fits(data, limit):
        return FittedImage(data, header.mime)
    try:
        with Image.open(io.BytesIO(data)) as image:
            return FittedImage(_scaled_jpeg(image, limit), "image/jpeg", scaled=True)
    except ImageError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise ImageError("not_an_image") from None


def _scaled_jpeg(image: Image.Image, limit: ImageLimit) -> bytes:
    """The image within `limit.max_edge` as JPEG, smaller steps until it fits the bytes."""
    edge = limit.max_edge
    image.draft("RGB", (edge, edge))  # JPEG: decode at a reduced scale already
    frame = image.convert("RGBA") if image.mode in ("P", "LA", "PA") else image
    if frame.mode in ("RGBA", "LA"):
        flat = Image.new("RGB", frame.size, "white")
        flat.paste(frame, mask=frame.getchannel("A"))
        frame = flat
    frame = frame.convert("RGB")
    for _ in range(4):
        scaled = frame.copy()
        scaled.thumbnail((edge, edge), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        scaled.save(out, "JPEG", quality=85, optimize=True)
        if out.tell() <= limit.max_bytes:
            return out.getvalue()
        edge = edge * 3 // 4
    raise ImageError("too_big")
