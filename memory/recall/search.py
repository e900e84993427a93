"""`recall`: search a chat's past conversations for the chat model and for /recall.

Three sources, ranked on one scale:
- the archive: the words of consolidated sessions (memory/recall/archive.py). Candidates come from
its   FTS5 index of terms stemmed at write time; each candidate turn is scored together with its
  neighbours in the same session (a question names what the answer's turn and the turns around
  it talk about), and shown with them;
- the stored messages not consolidated yet (closed sessions waiting for their job, the part of
  the open session left out of the prompt): the newest few hundred, cut to a bounded size;
- the history entries consolidation wrote (FTS5 trigram index): a session's summary.

Every candidate is scored with the same BM25 (terms: memory/recall/terms.py; rarity of a term
from THIS chat's archive term counts, `archive_terms`, and the candidates: nothing another chat
said changes a search's results or their order, so their order cannot tell whether another chat
ever said a word), and a session whose
summary or other turns match lends part of their score to a turn (and its turns to its
summary), so the words and the gist of a session support each other. At most two hits come
from one session (the second counting half), so the first results cover different
conversations; ties go to the newer one.

Bounds: at most MAX_QUERY_TERMS terms, a fixed number of candidates per source and a fixed
number of characters of unconsolidated text; the scoring runs in a thread, off the chat loop.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.db import Database
from memory.provenance import Provenance
from memory.recall.archive import chat_token
from memory.recall.terms import (
    MAX_PREFIX_WORDS,
    Period,
    QueryTerm,
    fold,
    query_period,
    query_terms,
    text_terms,
)

DEFAULT_LIMIT = 5
MAX_LIMIT = 10
SNIPPET_CHARS = 600
TURN_SNIPPET_CHARS = 320
NEIGHBOUR_SNIPPET_CHARS = 160
MAX_HITS_PER_SESSION = 2
ARCHIVE_CANDIDATES = 150
HISTORY_CANDIDATES = 100
MESSAGE_SCAN = 400  # newest unconsolidated messages considered per query
MESSAGE_SCAN_CHARS = 120_000  # and at most this much of their text
MESSAGE_CHARS = 4_000  # of one of them
MAX_QUERY_CHARS = 1_000  # of a query, analysed (its first MAX_QUERY_TERMS terms are searched)
MAX_PLAIN_CHARS = 100  # of a query with no term, searched as it is
PLAIN_ARCHIVE_SCAN = 5_000  # newest archived turns such a query looks through
_TERMS_READ = 8_000  # characters of a stored turn's terms scored
# BM25 and fusion parameters (generic, tuned on LoCoMo: see benchmarks/memory_recall.py).
K1 = 0.6
B = 0.75
NEIGHBOUR_WEIGHT = 0.7  # a neighbouring turn's words count this much toward a turn
SESSION_SHARE = 0.3  # of a session's summary score added to its turns, and back
SECOND_HIT_FACTOR = 0.5  # a session's second hit counts this much of its score
DATE_BOOST = 0.5  # a result from the days a query names gains this share of its score
OTHER_TURNS_SHARE = 0.2  # of a session's two best other turns added to a turn
# A word's rarity is counted in this chat only (see the module docstring), against this many
# more turns that hold none of the query's words: a fixed background, the same for every chat,
# so in a young or one-topic chat a name in half its turns (a speaker's) still counts for
# something.
# LoCoMo R@5: 0.934 without it, 0.936 with 600 (300: 0.936, 1,200: 0.934, 2,200: 0.934,
# 5,000: 0.933); counted over all chats it would be 0.938, at the price of the privacy above.
BACKGROUND_TURNS = 600
MATCH_POSTINGS = 800  # postings of this chat a search reads and ranks (see _archive_candidates)

# Control characters (a NUL ends SQLite's parse of an FTS5 phrase: "unterminated string") and
# lone surrogates (SQLite cannot encode them) are no search terms.
_UNSEARCHABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


@dataclass(frozen=True)
class Turn:
    """A message shown around a hit: who said it, when, and (cut) what."""

    role: str
    at: str
    text: str
    provenance: Provenance | None = None  # not the user's (or the bot's) words: what it is


@dataclass(frozen=True)
class RecallHit:
    """One dated result. `source`: "history" (a session's summary), "archive" (the words of a
    consolidated session) or "message" (words not consolidated yet). `provenance`: the words
    are not the user's (a document, a forward, a page…); `flagged`: a summary written from a
    session that held such words. Either way the chat model gets it framed as untrusted."""

    source: str
    ref_id: int
    at: str  # ISO timestamp of the conversation
    text: str
    role: str | None
    score: float  # what it was ranked by: a session's second hit counts SECOND_HIT_FACTOR
    session_id: int | None = None
    before: tuple[Turn, ...] = ()
    after: tuple[Turn, ...] = ()
    provenance: Provenance | None = None
    flagged: bool = False

    @property
    def untrusted(self) -> bool:
        """Whether any part of the result (its turn, a neighbour, its summary) is not the
        user's or the bot's own words."""
        turns = (*self.before, *self.after)
        return self.flagged or self.provenance is not None or any(t.provenance for t in turns)


@dataclass(slots=True)
class _Doc:
    source: str
    ref_id: int
    session_id: int | None
    at: str
    text: str
    role: str | None
    terms: list[str]
    before: _Doc | None = None
    after: _Doc | None = None
    score: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)  # of the query's forms (by _rank)
    provenance: Provenance | None = None
    flagged: bool = False  # a summary of a session that held untrusted parts


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
        """The best `limit` results for the query, best first.

        The whole search (the query's analysis, every read, the ranking) is one call on a read
        connection's thread: off the chat loop, and one round trip to the thread rather than
        one per query, each of which also waits for a turn of a busy event loop.
        """
        limit = max(1, min(MAX_LIMIT, int(limit)))
        # Cut first: what goes to the thread is then bounded.
        query = query[:MAX_QUERY_CHARS]
        search = functools.partial(
            _search, chat_id=chat_id, query=query, limit=limit, exclude=set(exclude_message_ids)
        )
        return await self.db.read(search)


def _search(
    conn: sqlite3.Connection, *, chat_id: int, query: str, limit: int, exclude: set[int]
) -> list[RecallHit]:
    """On a read connection's thread: the search, in one snapshot of the database.

    Control characters and lone surrogates become spaces first, whoever asked (a user's
    /recall or a model's tool call): they would reach SQLite and raise. A query with no
    term ("*", "C#", a function word) is searched as the text it is, in the history, the
    unconsolidated messages and the newest PLAIN_ARCHIVE_SCAN archived turns.
    """
    query = _UNSEARCHABLE.sub(" ", query)
    terms, period = query_terms(query), query_period(query)
    plain = None
    if not terms:
        plain = fold(query).strip()[:MAX_PLAIN_CHARS]
        if not plain:
            return []
        terms = [QueryTerm(((plain, 1.0),))]
    forms = sorted({form for term in terms for form, _ in term.forms})
    conn.execute("BEGIN")  # one snapshot: a commit between the reads is not half seen
    try:
        # The trigram index of the history finds the longer words a query word begins itself.
        history = _history_rows(conn, chat_id, forms)
        messages = _message_rows(conn, chat_id, exclude)
        archive_df: dict[str, int] = {}
        archive_n = 0
        if plain is not None:
            archive = _archive_containing(conn, chat_id, plain)
        else:
            archive_df, archive_n = _archive_stats(conn, chat_id, terms)
            terms = [term.expanded(archive_df) for term in terms]
            archive = _archive_candidates(conn, chat_id, terms, archive_df, archive_n)
    finally:
        conn.execute("COMMIT")
    sources = _Sources(archive, history, messages, archive_df, archive_n, plain)
    try:
        return _rank(terms, period, sources, limit)
    finally:
        # A turn and its neighbour point at each other: left linked, the few hundred candidates
        # of every search are cycles only Python's cyclic collector frees, and its runs over
        # the whole heap were the slowest searches (p99 21 ms against 10 ms without them, at
        # 100,000 archived turns). Unlinked, they go as soon as the search returns.
        for doc in (*archive, *history, *messages):
            doc.before = doc.after = None


# candidates -------------------------------------------------------------------------------------


def _archive_stats(
    conn: sqlite3.Connection, chat_id: int, terms: list[QueryTerm]
) -> tuple[dict[str, int], int]:
    """In how many of this chat's archived turns each form occurs, the words of this chat that
    begin with a query word, and how many searched turns the chat has. Nothing another chat
    said changes them."""
    forms = sorted({form for term in terms for form, _ in term.forms})
    prefixes = sorted({term.prefix for term in terms if term.prefix})
    sql = (
        "SELECT term, docs FROM archive_terms "
        f"WHERE chat_id = ? AND term IN ('', {','.join('?' * len(forms))})"
    )
    for _ in prefixes:
        sql += (
            " UNION SELECT * FROM (SELECT term, docs FROM archive_terms "
            f"WHERE chat_id = ? AND term > ? AND term < ? LIMIT {MAX_PREFIX_WORDS})"
        )
    ranges = [bound for p in prefixes for bound in (chat_id, p, p + "\U0010ffff")]
    rows = conn.execute(sql, [chat_id, *forms, *ranges]).fetchall()
    counts = {r["term"]: int(r["docs"]) for r in rows}
    total = counts.pop("", 0)
    return counts, total


def _archive_candidates(
    conn: sqlite3.Connection,
    chat_id: int,
    terms: list[QueryTerm],
    df: dict[str, int],
    total: int,
) -> list[_Doc]:
    """This chat's best matching archived turns, with their neighbours.

    The index's tokens are qualified by chat (migrations/0018_archive_per_chat.sql), so the
    match reads this chat's posting lists only. Its turns are ranked here with this chat's
    rarity, not FTS5's bm25, whose turn count and average length span every chat.
    """
    forms = sorted({form for term in terms for form, _ in term.forms})
    present = [f for f in forms if df.get(f)]
    if not present:
        return []
    # The rarest forms select the candidates, up to MATCH_POSTINGS turns holding them (what is
    # read and ranked grows with that number); a commoner form is only scored. The rarest form
    # is always searched, so a query of common words finds something.
    searched: list[str] = []
    postings = 0
    for form in sorted(present, key=lambda f: df[f]):
        if searched and postings + df[form] > MATCH_POSTINGS:
            break
        searched.append(form)
        postings += df[form]
    match = " OR ".join(_fts_phrase(chat_token(chat_id, f)) for f in searched)
    if postings > MATCH_POSTINGS:
        # Even the rarest form is in very many turns: its newest ones, which FTS5 reads
        # without ranking them all.
        hits = conn.execute(
            "SELECT rowid AS id FROM archive_fts WHERE archive_fts MATCH ? "
            "ORDER BY rowid DESC LIMIT ?",
            (match, ARCHIVE_CANDIDATES),
        ).fetchall()
        hit_ids = [int(r["id"]) for r in hits]
    else:
        # CROSS JOIN: the match's postings first, each turn looked up by id (joined freely,
        # SQLite may walk the chat's turns instead and ask the index about each: 1 s a query
        # at 20,000 turns). The chat condition only double-checks what the tokens ensure.
        cursor = conn.cursor()
        cursor.row_factory = None  # plain tuples: up to MATCH_POSTINGS of them
        rows = cursor.execute(
            f"SELECT a.id, substr(a.terms, 1, {_TERMS_READ}) FROM archive_fts "
            "CROSS JOIN archived_messages a ON a.id = archive_fts.rowid "
            "WHERE archive_fts MATCH ? AND a.chat_id = ?",
            (match, chat_id),
        ).fetchall()
        hit_ids = _best_postings(rows, terms, df, total)
    if not hit_ids:
        return []
    rows = conn.execute(
        "WITH hit(id, session_id) AS MATERIALIZED ("
        "  SELECT id, session_id FROM archived_messages "
        "  WHERE id IN (SELECT value FROM json_each(?))), "
        "near(id) AS ("
        "  SELECT id FROM hit "
        "  UNION ALL SELECT (SELECT MAX(p.id) FROM archived_messages p "
        "    WHERE p.session_id = hit.session_id AND p.id < hit.id AND p.terms != '') "
        "    FROM hit "
        "  UNION ALL SELECT (SELECT MIN(n.id) FROM archived_messages n "
        "    WHERE n.session_id = hit.session_id AND n.id > hit.id AND n.terms != '') "
        "    FROM hit) "
        "SELECT m.id, m.session_id, m.role, substr(m.content, 1, ?) AS content, "
        f"substr(m.terms, 1, {_TERMS_READ}) AS terms, m.created_at, m.provenance "
        "FROM archived_messages m WHERE m.id IN (SELECT id FROM near) ORDER BY m.id",
        (json.dumps(hit_ids), MESSAGE_CHARS),
    ).fetchall()
    is_hit = set(hit_ids)
    docs = [_turn("archive", r, terms=r["terms"].split()) for r in rows]
    _link_neighbours(docs)
    for doc in docs:
        if doc.ref_id not in is_hit:  # only a hit's own links are read (see _search)
            doc.before = doc.after = None
    return [d for d in docs if d.ref_id in is_hit]


def _best_postings(
    rows: list[tuple[int, str]], terms: list[QueryTerm], df: dict[str, int], total: int
) -> list[int]:
    """The ids of the ARCHIVE_CANDIDATES turns among `rows` (id, terms) that score best on
    their own words (BM25 with this chat's rarity; ties to the newer), for `_rank` to score
    again with their neighbours and the session around them.

    Up to MATCH_POSTINGS rows, so kept lean: per row only the query forms it holds are looked
    at (a form belongs to the query words it is a form of, at that word's weight for it).
    """
    roles: dict[str, list[tuple[int, float]]] = {}
    for index, term in enumerate(terms):
        for form, weight in term.forms:
            if df.get(form):
                idf = _idf(BACKGROUND_TURNS + total, df[form])
                roles.setdefault(form, []).append((index, weight * idf))
    found: list[tuple[int, int, list[str]]] = []
    length_sum = 0
    for ref, text in rows:
        words = text.split()
        length_sum += len(words)
        found.append((ref, len(words), [w for w in words if w in roles]))
    average = (length_sum / len(found) if found else 0.0) or 1.0
    scored: list[tuple[float, int]] = []
    for ref, length, held in found:
        norm = K1 * (1 - B + B * length / average)
        best: dict[int, float] = {}
        for form, tf in ((held[0], 1),) if len(held) == 1 else Counter(held).items():
            gain = tf * (K1 + 1) / (tf + norm)
            for index, weight in roles[form]:
                if weight * gain > best.get(index, 0.0):
                    best[index] = weight * gain
        scored.append((sum(best.values()), ref))
    scored.sort(reverse=True)
    return [ref for _, ref in scored[:ARCHIVE_CANDIDATES]]


def _idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def _archive_containing(conn: sqlite3.Connection, chat_id: int, plain: str) -> list[_Doc]:
    """The newest archived turns holding `plain` as it is (no index: a bounded scan)."""
    rows = conn.execute(
        "SELECT id, session_id, role, substr(content, 1, ?) AS content, created_at, provenance "
        "FROM archived_messages WHERE id IN (SELECT id FROM archived_messages "
        "WHERE chat_id = ? AND terms != '' ORDER BY id DESC LIMIT ?) "
        "AND content LIKE ? ESCAPE '\\' ORDER BY id LIMIT ?",
        (MESSAGE_CHARS, chat_id, PLAIN_ARCHIVE_SCAN, _like(plain), ARCHIVE_CANDIDATES),
    ).fetchall()
    return [_turn("archive", r) for r in rows]


def _history_rows(conn: sqlite3.Connection, chat_id: int, forms: list[str]) -> list[_Doc]:
    """History entries holding a form (trigram index; two-character CJK pairs by LIKE,
    which trigrams cannot match)."""
    rows: dict[int, sqlite3.Row] = {}
    long_forms = [f for f in forms if len(f) >= 3]
    short_forms = [f for f in forms if len(f) < 3]
    columns = "h.id, h.entry, h.created_at, h.first_message_at, h.session_id, h.untrusted"
    if long_forms:
        match = " OR ".join(_fts_phrase(f) for f in long_forms)
        for row in conn.execute(
            f"SELECT {columns} FROM history_fts "
            "JOIN history_entries h ON h.id = history_fts.rowid "
            "WHERE history_fts MATCH ? AND h.chat_id = ? "
            "ORDER BY bm25(history_fts) LIMIT ?",
            (match, chat_id, HISTORY_CANDIDATES),
        ):
            rows[row["id"]] = row
    if short_forms:
        where = " OR ".join("h.entry LIKE ? ESCAPE '\\'" for _ in short_forms)
        for row in conn.execute(
            f"SELECT {columns} FROM history_entries h "
            f"WHERE h.chat_id = ? AND ({where}) ORDER BY h.id DESC LIMIT ?",
            (chat_id, *(_like(f) for f in short_forms), HISTORY_CANDIDATES),
        ):
            rows[row["id"]] = row
    return [
        _Doc(
            "history",
            int(row["id"]),
            row["session_id"],
            row["first_message_at"] or row["created_at"],
            row["entry"],
            None,
            [],
            flagged=bool(row["untrusted"]),
        )
        for row in rows.values()
    ]


def _message_rows(conn: sqlite3.Connection, chat_id: int, exclude: set[int]) -> list[_Doc]:
    """Stored messages still waiting for consolidation, newest first, bounded in number
    and in characters (their terms are computed per query)."""
    rows = conn.execute(
        "SELECT id, session_id, role, substr(content, 1, ?) AS content, created_at, provenance "
        "FROM messages WHERE chat_id = ? AND role IN ('user', 'assistant') "
        "AND content != '' ORDER BY id DESC LIMIT ?",
        (MESSAGE_CHARS, chat_id, MESSAGE_SCAN + len(exclude)),
    ).fetchall()
    docs: list[_Doc] = []
    budget = MESSAGE_SCAN_CHARS
    for r in rows:
        if int(r["id"]) in exclude:
            continue
        text = r["content"][:budget]
        budget -= len(text)
        docs.append(_turn("message", r, text=text))
        if budget <= 0 or len(docs) >= MESSAGE_SCAN:
            break
    docs.reverse()
    return docs


@functools.lru_cache(maxsize=4096)
def _terms_of(text: str) -> tuple[str, ...]:
    """The terms of a summary or an unconsolidated message: the same few texts are searched
    query after query, so they are cut into terms once (texts never change)."""
    return tuple(text_terms(text))


def _turn(
    source: str, row: Any, *, text: str | None = None, terms: list[str] | None = None
) -> _Doc:
    """A stored turn (an archived or unconsolidated message row) as a candidate."""
    content = row["content"] if text is None else text
    return _Doc(
        source,
        int(row["id"]),
        int(row["session_id"]),
        row["created_at"],
        content,
        row["role"],
        terms or [],
        provenance=Provenance.from_json(row["provenance"]),
    )


def _link_neighbours(docs: Sequence[_Doc]) -> None:
    """Each doc's previous and next doc of the same session among `docs` (sorted by id)."""
    last: dict[int | None, _Doc] = {}
    for doc in docs:
        previous = last.get(doc.session_id)
        if previous is not None:
            doc.before, previous.after = previous, doc
        last[doc.session_id] = doc


# ranking ----------------------------------------------------------------------------------------


@dataclass
class _Sources:
    """The candidates of one query, and the archive's term counts for their rarity. `plain`:
    the query had no term and is searched as the text it is."""

    archive: list[_Doc]
    history: list[_Doc]
    messages: list[_Doc]
    archive_df: dict[str, int]
    archive_n: int
    plain: str | None


def _rank(
    terms: list[QueryTerm], period: Period | None, sources: _Sources, limit: int
) -> list[RecallHit]:
    """BM25 (K1, B) of each candidate, its neighbours' words at NEIGHBOUR_WEIGHT; a turn gains
    OTHER_TURNS_SHARE of its session's best other turns; summaries and turns of one session lend
    each other SESSION_SHARE of their scores; results from the days
    the query names gain DATE_BOOST; MAX_HITS_PER_SESSION."""
    archive, history, messages = sources.archive, sources.history, sources.messages
    for doc in history + messages:
        doc.terms = list(_terms_of(doc.text))
    _link_neighbours(messages)
    plain = sources.plain
    if plain is None:  # "postgres" finds "postgresql" in the summaries and messages too
        seen = {t for doc in history + messages for t in doc.terms}
        terms = [term.expanded(seen | {f for f, _ in term.forms}) for term in terms]
    forms = {form for term in terms for form, _ in term.forms}
    if plain is not None:
        for doc in archive:
            doc.terms = text_terms(doc.text)
        for doc in archive + history + messages:
            found = fold(doc.text).count(plain)
            doc.counts = Counter({plain: found} if found else {})
    else:
        for doc in archive + history + messages:
            doc.counts = Counter(t for t in doc.terms if t in forms)
    message_hits = [d for d in messages if d.counts]
    turns = archive + message_hits
    # Rarity: the archive's counts, plus the history entries and unconsolidated messages seen.
    df = Counter(sources.archive_df)
    for doc in history + message_hits + (archive if plain is not None else []):
        df.update(doc.counts.keys())
    # The background goes with an archive (a chat with none ranks its summaries and messages
    # without it: a background would flatten the rarity of their few words).
    background = BACKGROUND_TURNS if sources.archive_n else 0
    n = background + sources.archive_n + len(history) + len(message_hits)
    n += len(archive) if plain is not None else 0
    idf = {f: _idf(n, df[f]) for f in forms}

    def window(doc: _Doc) -> tuple[dict[str, float], float]:
        counts: dict[str, float] = dict(doc.counts)
        length = float(len(doc.terms))
        for near in (doc.before, doc.after):
            if near is not None:
                for form, count in near.counts.items():
                    counts[form] = counts.get(form, 0.0) + NEIGHBOUR_WEIGHT * count
                length += NEIGHBOUR_WEIGHT * len(near.terms)
        return counts, length

    _score(turns, [window(doc) for doc in turns], terms, idf)
    _score(history, [(dict(d.counts), float(len(d.terms))) for d in history], terms, idf)
    summary_of: dict[int | None, float] = {}
    for doc in history:
        summary_of[doc.session_id] = max(summary_of.get(doc.session_id, 0.0), doc.score)
    words_of: dict[int | None, float] = {}
    for doc in turns:
        words_of[doc.session_id] = max(words_of.get(doc.session_id, 0.0), doc.score)
    _support_from_the_session(turns)
    for doc in turns:
        doc.score += SESSION_SHARE * summary_of.get(doc.session_id, 0.0)
    for doc in history:
        doc.score += SESSION_SHARE * words_of.get(doc.session_id, 0.0)
    if period is not None:  # "in July 2022": what was said then comes first
        for doc in turns + history:
            if period.first <= doc.at[:10] <= period.last:
                doc.score *= 1 + DATE_BOOST
    return _select([d for d in turns + history if d.score > 0], terms, limit)


def _support_from_the_session(turns: list[_Doc]) -> None:
    """Each turn gains OTHER_TURNS_SHARE of its session's two best other matching turns: an
    answer is often spread over a conversation, and a session that talks about the question
    in several places is likelier the one asked about."""
    by_session: dict[int | None, list[_Doc]] = {}
    for doc in turns:
        by_session.setdefault(doc.session_id, []).append(doc)
    gains: dict[int, float] = {}
    for docs in by_session.values():
        best = sorted(docs, key=lambda d: d.score, reverse=True)[:3]
        for doc in docs:
            others = [d.score for d in best if d is not doc][:2]
            gains[id(doc)] = OTHER_TURNS_SHARE * sum(others)
    for doc in turns:
        doc.score += gains[id(doc)]


def _score(
    docs: list[_Doc],
    windows: list[tuple[dict[str, float], float]],
    terms: list[QueryTerm],
    idf: dict[str, float],
) -> None:
    if not docs:
        return
    average = sum(length for _, length in windows) / len(windows) or 1.0
    for doc, (counts, length) in zip(docs, windows, strict=True):
        norm = K1 * (1 - B + B * length / average)
        score = 0.0
        for term in terms:
            best = 0.0
            for form, weight in term.forms:
                tf = counts.get(form, 0.0)
                if tf:
                    best = max(best, weight * idf[form] * tf * (K1 + 1) / (tf + norm))
            score += best
        doc.score = score


def _select(scored: list[_Doc], terms: list[QueryTerm], limit: int) -> list[RecallHit]:
    """At most MAX_HITS_PER_SESSION per session (a turn shown beside a better one is not a
    hit of its own), a session's later hits counting SECOND_HIT_FACTOR of their score, so the
    first results cover different conversations; ties go to the newer."""
    if not scored:
        return []
    scored.sort(key=lambda d: (round(d.score, 6), d.at), reverse=True)
    best = scored[0].score
    taken: dict[int | None, int] = {}
    shown: set[tuple[str, int]] = set()
    chosen: list[tuple[float, _Doc]] = []
    for doc in scored:
        if doc.score < best * 0.2:
            break
        if (doc.source, doc.ref_id) in shown:
            continue  # already shown as a neighbour of a better turn
        count = taken.get(doc.session_id, 0)
        if doc.session_id is not None and count >= MAX_HITS_PER_SESSION:
            continue
        taken[doc.session_id] = count + 1
        chosen.append((doc.score * (SECOND_HIT_FACTOR if count else 1.0), doc))
        for near in (doc, doc.before, doc.after):
            if near is not None:
                shown.add((near.source, near.ref_id))
    chosen.sort(key=lambda pair: (round(pair[0], 6), pair[1].at), reverse=True)
    return [_hit(doc, terms, score) for score, doc in chosen[:limit]]


def _hit(doc: _Doc, terms: list[QueryTerm], score: float) -> RecallHit:
    size = SNIPPET_CHARS if doc.source == "history" else TURN_SNIPPET_CHARS

    def turn(near: _Doc | None) -> tuple[Turn, ...]:
        if near is None:
            return ()
        snippet = _snippet(near.text, terms, NEIGHBOUR_SNIPPET_CHARS)
        return (Turn(near.role or "", near.at, snippet, near.provenance),)

    return RecallHit(
        doc.source,
        doc.ref_id,
        doc.at,
        _snippet(doc.text, terms, size),
        doc.role,
        score,
        doc.session_id,
        turn(doc.before),
        turn(doc.after),
        doc.provenance,
        doc.flagged,
    )


def _snippet(text: str, terms: list[QueryTerm], size: int) -> str:
    """The text on one line, cut to `size` around the first query word it holds."""
    text = " ".join(text.split())
    if len(text) <= size:
        return text
    folded = fold(text)
    positions = [p for term in terms for form, _ in term.forms if (p := folded.find(form[:4])) >= 0]
    centre = min(positions) if positions and len(folded) == len(text) else 0
    start = max(0, min(centre - size // 3, len(text) - size))
    piece = text[start : start + size]
    return ("…" if start else "") + piece + ("…" if start + size < len(text) else "")


def trimmed(query: str, size: int = 80) -> str:
    """A query as results may echo it: one line, cut."""
    line = " ".join(_UNSEARCHABLE.sub(" ", query).split())
    return line if len(line) <= size else line[: size - 1] + "…"
