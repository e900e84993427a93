"""Hostile PDFs made in code (nothing binary is committed), for tests and benchmarks/pdf_bomb.py.

- `pdf_bomb`: many pages sharing one compressed content stream of text operators. The file is
  small (the stream compresses to a few KB and every page points at the same object), but a
  text extractor parses the whole stream again for every page.
- `surrogate_pdf`: a font whose ToUnicode map sends a character code to `<D800>`, a lone
  surrogate: pypdf decodes it with `surrogatepass`, and the string cannot be encoded later.
"""

from __future__ import annotations

import io

from pypdf import PdfWriter
from pypdf.generic import (
    DecodedStreamObject,
    DictionaryObject,
    NameObject,
)

SURROGATE_CMAP = b"""/CIDInit /ProcSet findresource begin
12 dict begin
begincmap
/CMapName /Adobe-Identity-UCS def
/CMapType 2 def
1 begincodespacerange
<00> <FF>
endcodespacerange
2 beginbfchar
<41> <0041>
<42> <D800>
endbfchar
endcmap
CMapName currentdict /CMap defineresource pop
end
end
"""


def content_stream(operators: int, text: bytes = b"") -> bytes:
    """`operators` text-showing lines: a move and `text` (empty: nothing to show), over and
    over."""
    line = b"0 0 Td (" + text + b") Tj\n"
    return b"BT /F1 1 Tf\n" + line * operators + b"ET\n"


def pdf_bomb(pages: int, operators: int = 40_000, text: bytes = b"") -> bytes:
    """A valid PDF of `pages` pages that all draw the same (Flate-compressed) content stream.

    With the defaults a page shows nothing and costs pypdf ~0.6 s of CPU; 1,000 pages fit in
    ~160 KB."""
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    font_ref = writer._add_object(font)
    stream = DecodedStreamObject()
    stream.set_data(content_stream(operators, text))
    stream = stream.flate_encode(level=9)
    stream_ref = writer._add_object(stream)
    resources = DictionaryObject(
        {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
    )
    for _ in range(pages):
        page = writer.add_blank_page(width=200, height=200)
        page[NameObject("/Resources")] = resources
        page[NameObject("/Contents")] = stream_ref
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def surrogate_pdf() -> bytes:
    """One page showing "AAB", where the font's ToUnicode map turns B into U+D800."""
    writer = PdfWriter()
    cmap = DecodedStreamObject()
    cmap.set_data(SURROGATE_CMAP)
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
            NameObject("/ToUnicode"): writer._add_object(cmap),
        }
    )
    content = DecodedStreamObject()
    content.set_data(b"BT /F1 12 Tf 10 100 Td (AAB) Tj ET\n")
    page = writer.add_blank_page(width=200, height=200)
    fonts = DictionaryObject({NameObject("/F1"): writer._add_object(font)})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
    page[NameObject("/Contents")] = writer._add_object(content)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()
