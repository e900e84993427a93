"""Images made fit for a provider: the format from the bytes, the size and dimensions bounded.

What a sender declares (the MIME type of an image document) is a claim: the format is read from
the file's magic bytes, and a file that is none of JPEG, PNG, WebP or GIF is refused. Providers
refuse images past their own limits ("bad request" for the user): Anthropic takes at most 5 MB
per image (counted on the base64 text) and scales anything over 1568 px on its long edge down
anyway; OpenAI takes 20 MB and fits images into 2048 px; Groq takes 4 MB of base64. An image
within the limits of the chat model's chain goes as it is; a larger one is scaled down and
re-encoded as JPEG; one that cannot be made to fit (or is too many pixels to even decode
safely) is refused with a clear line. Decoding runs in a thread (Pillow releases the GIL
while it decodes and resamples) and never on more than MAX_PIXELS pixels.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from media import MediaError

MAX_PIXELS = 50_000_000  # what we decode at most (Pillow's own bomb check is at 89 MP)
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
    """The image cannot be sent; `reason` is "not_an_image" or "too_big"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


def fit_image(data: bytes, limit: ImageLimit) -> FittedImage:
    """`data` as it is when it fits `limit`, else scaled down and re-encoded as JPEG; raises
    ImageError. CPU-bound: call it in a thread."""
    mime = sniff_image(data)
    if mime is None:
        raise ImageError("not_an_image")
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise ImageError("too_big")
            if len(data) <= limit.max_bytes and max(width, height) <= limit.max_edge:
                return FittedImage(data, mime)
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
