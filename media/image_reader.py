"""Images fitted for a provider without decoding a pixel in the bot.

The header is read here (`image_header`: the format, the size, the pixel bound), so a bomb is
refused before anything is decoded and an image that fits as it is goes without any decode.
Only an image that must be scaled is decoded, in a child process (media/image_child.py) with
the document reader's bounds (media/document_reader.py `in_child`: RLIMIT_AS, RLIMIT_CPU, a
wall-clock timeout, on the user's files' share of reader slots, with documents). A child that
runs out of memory or time is the image's failure ("too_big"), answered politely; no slot free
in time is "busy", answered politely too.
"""

from __future__ import annotations

import json
import math

import structlog

from media.document_reader import ReaderSlots, in_child
from media.documents import DocumentError
from media.images import FittedImage, ImageError, ImageLimit, image_header

log = structlog.get_logger("media.image_reader")

# Address space the image child may map: the interpreter and Pillow map ~100 MiB, a 25 MP
# PNG/GIF/WebP peaks near 300 MiB while it is converted and scaled (media/images.MAX_PIXELS).
MEMORY_LIMIT_BYTES = 768 * 1024 * 1024
# Wall clock for one image: decoding and scaling 25 MP takes about a second on one slow core.
TIMEOUT_S = 20.0


async def fit_image_bounded(
    data: bytes,
    limit: ImageLimit,
    *,
    slots: ReaderSlots,
    timeout: float = TIMEOUT_S,  # noqa: ASYNC109 - the wall-clock bound of the child
    memory_bytes: int | None = None,
) -> FittedImage:
    """`data` as it is when it fits `limit`, else scaled down (and re-encoded as JPEG) in the
    bounded child; raises ImageError ("not_an_image", "too_big")."""
    header = image_header(data)  # no decode: a bomb is refused here
    if header.fits(data, limit):
        return FittedImage(data, header.mime)
    request = {
        "max_bytes": limit.max_bytes,
        "max_edge": limit.max_edge,
        "cpu_seconds": math.ceil(timeout) + 1,
        "memory_bytes": memory_bytes or MEMORY_LIMIT_BYTES,
    }
    line = json.dumps(request).encode("utf-8") + b"\n"
    try:
        output, returncode = await in_child(
            line + data, timeout, slots=slots, child="media.image_child"
        )
    except DocumentError as exc:
        if exc.reason == "busy":  # every reader of the user's files stayed busy
            raise ImageError("busy") from None
        raise ImageError("too_big") from None  # its time ran out (it was killed and reaped)
    answer_line, _, body = output.partition(b"\n")
    try:
        answer = json.loads(answer_line)
    except ValueError:
        # Killed by a limit outside Python's reach (SIGKILL, SIGXCPU): nothing written.
        log.warning("image_child_died", returncode=returncode, size=len(data))
        raise ImageError("too_big") from None
    if "error" in answer:
        raise ImageError(str(answer["error"]))
    return FittedImage(body, str(answer["mime_type"]), scaled=bool(answer["scaled"]))
