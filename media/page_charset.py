"""Bytes of a page to text: the charset the server sends, then the page's own, then a guess.

The order is the one browsers use (WHATWG "encoding sniffing", simplified): a byte order mark
first, then the Content-Type header's charset, then a `<meta charset>` or `<meta http-equiv>`
in the page's first bytes, then detection by charset_normalizer (already installed with httpx's
dependencies), then UTF-8. Labels are read as browsers read them: "iso-8859-1" and "ascii"
mean windows-1252, and a page cannot declare UTF-16 in a meta tag it wrote in ASCII.
Undecodable bytes become U+FFFD; decoding never fails.

Runs in the reader child (media/document_child.py; detection on megabytes is CPU work),
never on the chat loop.
"""

from __future__ import annotations

import codecs
import re

# How far into a page its meta charset is looked for (browsers: 1024 bytes; real pages put it
# after long scripts, so a little further).
META_SCAN_BYTES = 16_384
# Bytes charset_normalizer looks at: enough to tell encodings apart, bounded in time.
DETECT_BYTES = 262_144
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([\w.:+-]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(
    rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([\w.:+-]+)""", re.IGNORECASE
)
# WHATWG maps these labels to windows-1252, a superset browsers decode them as.
_AS_WINDOWS_1252 = frozenset({"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "ascii",
                              "us-ascii", "iso-ir-100", "cp819", "ibm819"})  # fmt: skip


def charset_label(label: str | None) -> str | None:
    """A Python codec name for a charset label, or None when the label names no codec."""
    if not label:
        return None
    name = label.strip().strip("\"'").lower()
    if name in _AS_WINDOWS_1252:
        return "cp1252"
    if name in ("x-user-defined", "replacement"):
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def header_charset(content_type: str) -> str | None:
    match = _HEADER_CHARSET.search(content_type or "")
    return charset_label(match.group(1)) if match else None


def meta_charset(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:META_SCAN_BYTES])
    if not match:
        return None
    name = charset_label(match.group(1).decode("ascii", "replace"))
    if name and name.startswith("utf-16"):
        return "utf-8"  # a meta tag readable as ASCII was not written in UTF-16
    return name


def detected_charset(body: bytes) -> str | None:
    from charset_normalizer import from_bytes

    best = from_bytes(body[:DETECT_BYTES]).best()
    return charset_label(best.encoding) if best else None


def choose_charset(body: bytes, content_type: str, kind: str) -> tuple[str, str]:
    """(codec, where it came from: "bom", "header", "meta", "detected" or "default")."""
    for bom, bom_name in _BOMS:
        if body.startswith(bom):
            return bom_name, "bom"
    name = header_charset(content_type)
    if name:
        return name, "header"
    if kind == "html":
        name = meta_charset(body)
        if name:
            return name, "meta"
    if kind == "json":
        return "utf-8", "default"  # RFC 8259: JSON between systems is UTF-8
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        name = detected_charset(body)
        if name:
            return name, "detected"
    return "utf-8", "default"


def decode_body(body: bytes, content_type: str, kind: str) -> str:
    codec, _ = choose_charset(body, content_type, kind)
    for bom, _name in _BOMS:
        if body.startswith(bom):
            body = body[len(bom) :]
            break
    return body.decode(codec, errors="replace")
