"""web_read's path end to end below the agent: the guarded fetch from a fake site on loopback,
decoding and extraction in the reader child, the source line and the cut.

Real text throughout: a page of the extraction benchmark with its human-annotated body, and
oasst2 messages in Russian, Japanese and Spanish encoded as a server of their language would.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from media.document_reader import ReaderSlots
from media.page_charset import choose_charset, decode_body
from tests.fakes.web import FakeSite, benchmark_page
from tests.support.e2e_bot import MEDIA, TESTDATA
from tests.support.paths import REPO
from web.addresses import parse_allowance
from web.errors import EmptyTextError, TooLargeError, UnsupportedTypeError
from web.read import cut_text, page_block, read_url

LOOPBACK = parse_allowance("127.0.0.1")
GUARD = 60


def oasst2_text(lang: str, least: int = 200) -> str:
    """The first oasst2 prompt in `lang` at least `least` characters long."""
    with (TESTDATA / "oasst2" / "oasst2_filtered.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            prompt = json.loads(line)["prompt"]
            if prompt["lang"] == lang and len(prompt["text"]) >= least:
                return str(prompt["text"])
    raise LookupError(lang)


@pytest.fixture
async def site() -> AsyncIterator[FakeSite]:
    async with FakeSite() as fake:
        yield fake


async def _read(url: str, **kwargs: object):
    async with asyncio.timeout(GUARD):
        return await read_url(url, allowance=LOOPBACK, slots=ReaderSlots(), **kwargs)  # type: ignore[arg-type]


def _words(text: str) -> list[str]:
    return text.split()


async def test_an_article_is_read_without_its_navigation_with_the_final_url(
    site: FakeSite,
) -> None:
    html, body = benchmark_page()
    page = await _read(site.url("/redirect?to=/article"))
    assert page.url == site.url("/article") and page.kind == "html" and not page.cut
    # The annotated article body is there, paragraph by paragraph.
    paragraphs = [p for p in body.split("\n") if len(p) > 80]
    assert paragraphs and all(
        " ".join(_words(p)) in " ".join(_words(page.text)) for p in paragraphs
    )
    # and little else: the page's own text is many times longer.
    assert len(page.text) < 1.3 * len(body) < len(html) / 10
    block = page_block(page)
    assert block.startswith(f"Source: {site.url('/article')}\n")


async def test_a_long_text_is_cut_at_the_limit_with_a_marker(site: FakeSite) -> None:
    page = await _read(site.url("/article"), max_chars=1000)
    assert page.cut and page.total_chars > 1000
    head, marker = page.text.rsplit("\n\n", 1)
    assert len(head) <= 1000 and marker.startswith("[… cut here: ")
    assert f"{page.total_chars - len(head)} more characters" in marker
    assert cut_text("short", 1000) == "short"


async def test_a_page_without_text_is_an_error_not_an_empty_success(site: FakeSite) -> None:
    site.pages["app"] = (
        "text/html; charset=utf-8",
        b"<html><head><title>App</title><script>render()</script></head>"
        b"<body><div id=root></div><noscript></noscript></body></html>",
    )
    with pytest.raises(EmptyTextError) as caught:
        await _read(site.url("/page/app"))
    assert "JavaScript" in str(caught.value)


@pytest.mark.parametrize(
    ("lang", "codec", "declared"),
    [
        ("ru", "cp1251", "header"),
        ("ja", "shift_jis", "meta"),
        ("es", "cp1252", "detected"),
    ],
)
async def test_pages_in_other_charsets_are_decoded(
    site: FakeSite, lang: str, codec: str, declared: str
) -> None:
    text = oasst2_text(lang)
    html = (
        "<html><head>{meta}<title>t</title></head>"
        f"<body><article><p>{text}</p></article></body></html>"
    )
    meta = f'<meta http-equiv="Content-Type" content="text/html; charset={codec}">'
    content_type = "text/html"
    if declared == "header":
        content_type += f"; charset={codec}"
    body = html.replace("{meta}", meta if declared == "meta" else "").encode(codec)
    site.pages[lang] = (content_type, body)
    assert choose_charset(body, content_type, "html")[1] == declared
    page = await _read(site.url(f"/page/{lang}"))
    assert _words(text)[:20] == _words(page.text)[:20]


def test_the_header_beats_the_meta_tag_and_a_bom_beats_both() -> None:
    text = "Ação “quoted” – naïve"
    cp1252 = f'<meta charset="utf-8"><p>{text}</p>'.encode("cp1252")
    assert text in decode_body(cp1252, "text/html; charset=windows-1252", "html")
    assert text in decode_body(cp1252, "text/html; charset=ISO-8859-1", "html")  # as browsers do
    utf8 = b"\xef\xbb\xbf" + f'<meta charset="koi8-r"><p>{text}</p>'.encode()
    assert text in decode_body(utf8, "text/html; charset=cp1251", "html")


async def test_text_json_and_pdf_are_read_too(site: FakeSite) -> None:
    site.pages["txt"] = ("text/plain; charset=utf-8", oasst2_text("pt-BR").encode())
    assert (await _read(site.url("/page/txt"))).text == oasst2_text("pt-BR").strip()
    site.pages["json"] = ("application/json", json.dumps({"city": "Porto", "°C": 21}).encode())
    assert '"Porto"' in (await _read(site.url("/page/json"))).text
    site.pages["pdf"] = ("application/pdf", (MEDIA / "multilingual.pdf").read_bytes())
    page = await _read(site.url("/page/pdf"))
    assert page.kind == "pdf" and "[page 1]" in page.text
    first_line = (MEDIA / "multilingual.txt").read_text(encoding="utf-8").splitlines()[0]
    assert "".join(first_line.split()) in "".join(page.text.split())


async def test_each_bound_holds_through_read_url(site: FakeSite) -> None:
    with pytest.raises(TooLargeError):
        await _read(site.url("/big"))
    site.pages["zip"] = ("application/zip", b"PK\x03\x04")
    with pytest.raises(UnsupportedTypeError):
        await _read(site.url("/page/zip"))


READ_IN_A_FRESH_PROCESS = """
import asyncio, sys
from tests.fakes.web import FakeSite
from web.addresses import parse_allowance
from media.document_reader import ReaderSlots
from web.read import read_url

async def main():
    async with FakeSite() as site:
        page = await read_url(
            site.url("/article"), allowance=parse_allowance("127.0.0.1"), slots=ReaderSlots()
        )
    assert len(page.text) > 1000
    print(sorted(m for m in ("trafilatura", "readability", "lxml", "charset_normalizer")
                 if m in sys.modules))

asyncio.run(main())
"""


def test_decoding_and_extraction_never_run_in_the_bots_process() -> None:
    """The parsers are loaded by the reader child only: the process that read the page (the
    bot's, in real use) never imported them, so it never ran them on its loop."""
    done = subprocess.run(
        [sys.executable, "-c", READ_IN_A_FRESH_PROCESS],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
