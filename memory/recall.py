"""`recall`: search a chat's past conversations for the chat model (and anyone else).

Two sources: the history entries consolidation wrote (FTS5 trigram index), and the stored
messages not consolidated yet (closed sessions waiting for their job, and the part of the open
session left out of the prompt). Candidates come from the index (3+ character terms) and from a
LIKE scan (two-character CJK terms, which trigrams cannot match); every candidate is then scored
the same way, a BM25 over the query's terms, so entries and raw messages rank on one scale.
Ties go to the newer conversation.

Query terms: words of 3+ letters minus common function words (en, pt, id, tr and a few more),
with plural and tense endings cut so "trips" finds "trip"; runs of Han, kana or Hangul are split
at particles and cut into overlapping character pairs, because those scripts put no spaces
between words and most of their words are two characters long.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from memory.db import Database

DEFAULT_LIMIT = 5
MAX_LIMIT = 10
SNIPPET_CHARS = 600
MESSAGE_SNIPPET_CHARS = 320
_CANDIDATES = 200
_MESSAGE_SCAN = 3000  # newest unconsolidated messages scored per query

_STOPWORDS = frozenset(
    """
    the and for are was were you your yours our ours they them their this that these those
    what when where which who whom whose why how with from into about over under again than
    then there here have has had having does did doing done can could should would will shall
    may might must not but all any some such only own same very just also too more most other
    each few both nor off out onto upon its it's i'm i've we're you're he's she's let's did
    tell said say says talk talked talking told remember recall earlier before last time ago
    discuss discussed mention mentioned decide decided anything something thing things
    que com para por uma das dos nas nos não sim foi era são ser ter tem isso isto esse essa
    ele ela eles elas você vocês nós quando onde como qual quais sobre mais muito pela pelo
    yang dan dengan untuk dari ini itu ada tidak akan sudah bisa juga saya kamu kita kami
    mereka apa kapan dimana bagaimana tentang pada dalam oleh atau karena
    bir bu şu ve ile için ama gibi daha çok ne neden nasıl nerede hangi kim mı mi mu mü
    der die das und mit für von den dem ein eine ist war sind wie was wer wann
    les des une est pour avec dans sur pas par qui quoi
    yesterday previously conversation chatted
    falamos falar conversamos lembra lembro ontem disse dissemos passado passada
    kemarin bahas dibahas ngobrol ngomong bilang ingat inget tadi soal lalu pernah dong sih kok
    konuştuk hatırlıyor musun dün hakkında neydi
    """.split()
)
# Two-character CJK words that only carry the question ("we", "before", "talked about", …):
# they occur in most conversations in these languages and would drown the real terms.
_CJK_STOP = frozenset(
    """
    我们 你们 他们 之前 以前 什么 怎么 聊过 说过 讨论 关于 记得 上次 的话 一下 这个 那个 是不 不是
    我的 你的 一个 没有 可以 时候 有没 提到
    우리 얘기 이야기 했었 했던 기억 예전 지난
    """.split()
)
_SUFFIXES = ("'s", "ings", "ing", "ied", "ies", "es", "ed")
_VOWELS = frozenset("aeiouy")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Control characters (a NUL ends SQLite's parse of an FTS5 phrase: "unterminated string") and
# lone surrogates (SQLite cannot encode them) are no search terms.
_UNSEARCHABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x3400 <= cp <= 0x9FFF  # CJK ideographs
        or 0xF900 <= cp <= 0xFAFF
        or 0x20000 <= cp <= 0x2FFFF
        or 0x30A0 <= cp <= 0x30FF  # katakana
        or 0xAC00 <= cp <= 0xD7AF  # hangul syllables
        or 0x3040 <= cp <= 0x309F  # hiragana
    )


def _is_hiragana(ch: str) -> bool:
    return 0x3040 <= ord(ch) <= 0x309F


def _stem(word: str) -> str:
    """English endings off, so "trips" finds "trip". A lone -s goes only after a consonant
    other than s ("trips", not "bahas" or "class"): words of other languages keep theirs."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    if (
        word.endswith("s")
        and len(word) >= 5
        and word[-2] not in _VOWELS
        and word[-2] != "s"
        and word[-2].isascii()
    ):
        return word[:-1]
    return word


def _cjk_terms(run: str) -> list[str]:
    """Pairs of characters of each particle-free segment (a lone character is dropped)."""
    segments = re.split(r"[\u3040-\u309f]+", run) if any(map(_is_hiragana, run)) else [run]
    terms: list[str] = []
    for segment in segments:
        if len(segment) < 2:
            continue
        pairs = [segment[i : i + 2] for i in range(len(segment) - 1)]
        terms.extend(p for p in pairs if p not in _CJK_STOP)
    return terms


def query_terms(query: str) -> list[str]:
    """The distinct search terms of a query, in order (see the module docstring)."""
    text = unicodedata.normalize("NFKC", query).casefold()
    terms: list[str] = []
    for word in _WORD.findall(text):
        run: list[str] = []
        latin: list[str] = []
        for ch in word + " ":
            if ch != " " and _is_cjk(ch):
                if latin:
                    terms.extend(_latin_terms("".join(latin)))
                    latin = []
                run.append(ch)
            else:
                if run:
                    terms.extend(_cjk_terms("".join(run)))
                    run = []
                if ch != " ":
                    latin.append(ch)
        if latin:
            terms.extend(_latin_terms("".join(latin)))
    seen: dict[str, None] = {}
    for term in terms:
        seen.setdefault(term, None)
    return list(seen)


def _latin_terms(word: str) -> list[str]:
    if word.isdigit():
        return [word] if len(word) >= 2 else []
    if len(word) < 3 or word in _STOPWORDS:
        return []
    return [_stem(word)]


@dataclass(frozen=True)
class RecallHit:
    """One dated snippet. `source` is "history" (a consolidated summary) or "message"."""

    source: str
    ref_id: int
    at: str  # ISO timestamp of the conversation
    text: str
    role: str | None
    score: float


@dataclass
class _Doc:
    source: str
    ref_id: int
    at: str
    text: str
    role: str | None
    folded: str = ""


def _fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _like(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class Recall:
    """Search over one database; every call is limited to one chat."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def search(
        self,
        chat_id: int,
        query: str,
        *,
        limit: int = DEFAULT_LIMIT,
        exclude_message_ids: Iterable[int] = (),
    ) -> list[RecallHit]:
        """The best `limit` snippets for the query, best first.

        Control characters and lone surrogates become spaces first, whoever asked (a user's
        /recall or a model's tool call): a query with no term is searched as the text it is,
        and they would reach SQLite in it and raise.
        """
        limit = max(1, min(MAX_LIMIT, int(limit)))
        query = _UNSEARCHABLE.sub(" ", query)
        terms = query_terms(query)
        if not terms:
            terms = [t for t in [normalise_plain(query)] if t]
        if not terms:
            return []
        docs = await self._history_candidates(chat_id, terms)
        docs += await self._message_candidates(chat_id, set(exclude_message_ids))
        return _rank(docs, terms, limit)

    async def _history_candidates(self, chat_id: int, terms: list[str]) -> list[_Doc]:
        rows: dict[int, object] = {}
        long_terms = [t for t in terms if len(t) >= 3]
        short_terms = [t for t in terms if len(t) < 3]
        if long_terms:
            match = " OR ".join(_fts_phrase(t) for t in long_terms)
            for row in await self.db.fetchall(
                "SELECT h.id, h.entry, h.created_at, h.first_message_at FROM history_fts "
                "JOIN history_entries h ON h.id = history_fts.rowid "
                "WHERE history_fts MATCH ? AND h.chat_id = ? "
                "ORDER BY bm25(history_fts) LIMIT ?",
                (match, chat_id, _CANDIDATES),
            ):
                rows[row["id"]] = row
        if short_terms:
            where = " OR ".join("entry LIKE ? ESCAPE '\\'" for _ in short_terms)
            for row in await self.db.fetchall(
                "SELECT id, entry, created_at, first_message_at FROM history_entries "
                f"WHERE chat_id = ? AND ({where}) ORDER BY id DESC LIMIT ?",
                (chat_id, *(_like(t) for t in short_terms), _CANDIDATES),
            ):
                rows[row["id"]] = row
        return [
            _Doc(
                "history",
                int(row["id"]),  # type: ignore[index]
                row["first_message_at"] or row["created_at"],  # type: ignore[index]
                row["entry"],  # type: ignore[index]
                None,
            )
            for row in rows.values()
        ]

    async def _message_candidates(self, chat_id: int, exclude: set[int]) -> list[_Doc]:
        """Stored messages still waiting for consolidation: closed sessions, and the open
        session's messages the caller did not put in the prompt."""
        rows = await self.db.fetchall(
            "SELECT id, role, content, created_at FROM messages "
            "WHERE chat_id = ? AND role IN ('user', 'assistant') AND content != '' "
            "ORDER BY id DESC LIMIT ?",
            (chat_id, _MESSAGE_SCAN),
        )
        return [
            _Doc("message", int(r["id"]), r["created_at"], r["content"], r["role"])
            for r in rows
            if int(r["id"]) not in exclude
        ]


def normalise_plain(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().strip()


def _rank(docs: list[_Doc], terms: list[str], limit: int) -> list[RecallHit]:
    """BM25 (k1 1.2, b 0.75) with substring term frequency; newest first among equals."""
    if not docs:
        return []
    for doc in docs:
        doc.folded = unicodedata.normalize("NFKC", doc.text).casefold()
    n = len(docs)
    avg_len = sum(len(d.folded) for d in docs) / n or 1.0
    counts = {term: [d.folded.count(term) for d in docs] for term in terms}
    idf = {}
    for term, per_doc in counts.items():
        df = sum(1 for c in per_doc if c)
        idf[term] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    scored: list[tuple[float, str, _Doc]] = []
    for i, doc in enumerate(docs):
        norm = 1.2 * (0.25 + 0.75 * len(doc.folded) / avg_len)
        score = 0.0
        for term in terms:
            tf = counts[term][i]
            if tf:
                score += idf[term] * tf * 2.2 / (tf + norm)
        if score > 0:
            scored.append((score, doc.at, doc))
    if not scored:
        return []
    scored.sort(key=lambda item: (round(item[0], 6), item[1]), reverse=True)
    best = scored[0][0]
    hits = []
    for score, _, doc in scored:
        if score < best * 0.2 or len(hits) == limit:
            break
        hits.append(
            RecallHit(doc.source, doc.ref_id, doc.at, _snippet(doc, terms), doc.role, score)
        )
    return hits


def _snippet(doc: _Doc, terms: list[str]) -> str:
    text = " ".join(doc.text.split())
    size = SNIPPET_CHARS if doc.source == "history" else MESSAGE_SNIPPET_CHARS
    if len(text) <= size:
        return text
    folded = unicodedata.normalize("NFKC", text).casefold()
    positions = [folded.find(t) for t in terms if folded.find(t) >= 0]
    centre = min(positions) if positions and len(folded) == len(text) else 0
    start = max(0, min(centre - size // 3, len(text) - size))
    piece = text[start : start + size]
    return ("…" if start else "") + piece + ("…" if start + size < len(text) else "")
