"""The child process that decodes and scales one image (started by `media/image_reader.py`).

It limits itself first (RLIMIT_CPU, RLIMIT_AS, a lower scheduling priority) through
media/child_limits.py, as the document child does, reads a JSON header line and the image's bytes
from stdin, and writes one JSON line and then the scaled image's bytes to stdout. An image whose
decode needs more memory than the limit ends here (MemoryError, or the kernel's kill), never in
the bot. It imports only Pillow, media/images.py and media/child_limits.py.
"""

from __future__ import annotations

import json
import sys

from media.child_limits import limited_request
from media.images import ImageError, ImageLimit, fit_image


def main() -> None:
    header, data = limited_request()
    body = b""
    try:
        limit = ImageLimit(max_bytes=int(header["max_bytes"]), max_edge=int(header["max_edge"]))
        fitted = fit_image(data, limit)
        answer: dict[str, object] = {"mime_type": fitted.mime_type, "scaled": fitted.scaled}
        body = fitted.data
    except ImageError as exc:
        answer = {"error": exc.reason}
    except MemoryError:
        answer = {"error": "too_big"}
    sys.stdout.buffer.write(json.dumps(answer).encode("utf-8") + b"\n" + body)
    sys.stdout.buffer.flush()
