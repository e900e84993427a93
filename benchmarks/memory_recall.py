"""Recall quality and speed over 200 real sessions consolidated into one chat's history.

The sessions are real: every multi-message oasst2 conversation (many languages, Chinese,
Japanese and Korean among them), then the Indonesian/English Telegram group exports of
tg-export-tgif cut into sessions of 20 messages, then single-question oasst2 sessions (CJK
first) until there are 200. Each is stored with its own timestamps in ONE chat, closed like
/new, and consolidated by the real worker over HTTP through the fake providers, whose
consolidation model writes an extractive summary of the transcript it is sent (the session's
date, what the user asked first, how it was answered, later user messages — real words only).

Then one recall query per session, built from facts of that session that a summary keeps:
names and places (capitalised inside a sentence, or all capitals) and words of Han, katakana
or Hangul first, then topic words (6+ letters), then numbers — the two most distinctive across
the 200 sessions — wrapped in a question in the session's language ("what did we say about X
and Y?", "XとYについて前に話したよね？", …). A hit is the session's own history entry, or its own
words (kept in the archive), among the first k results of `Recall.search` — the function
behind the chat model's `recall` tool.
Latency is the wall time of each search on the SQLite file (the tool's whole database part).

Then LoCoMo (../shared/testdata/locomo: months-long conversations between two people, with
questions and the turns that answer them). Each conversation is one chat: every turn goes in as
one user message `Name: text` stamped with its session's date (Store.add_message, the path a
chat turn stores its message through), the session is closed like /new
(Store.start_new_session, which enqueues its consolidation), and the real worker consolidates
it over HTTP through the fake providers, whose consolidation model writes LoCoMo's
session_N_summary as the history entry; the commit moves the turns to the archive. (The chat
model's answer to each turn is left out: it would be the fakes' canned text, searched as noise,
and sending ~3,000 turns through the Bot API fake takes minutes.) Every question of categories
1-4 is then asked through `Recall.search` with /recall's limit (5); R@k is the share of questions
with an evidence session (the sessions of the question's evidence turns) among the first k hits.

Last, scale: 100,000 archived turns in one chat (LoCoMo's turns over and over, each copy its own
session), then the same number spread over 1,000 chats (100 each), written with the archive's
own functions (memory/recall/archive.py: terms, then the insert the commit does), and LoCoMo's
questions asked of it.

    python -m benchmarks.memory_recall [--sessions 200] [--scale-turns 100000]
        [--scale-chats 1 1000] [--only locomo]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import re
import sqlite3
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

try:
    from memory.recall.terms import STOPWORDS as RECALL_STOPWORDS
except ImportError:  # the code before the archive (measuring the baseline)
    from memory.recall.search import _STOPWORDS as RECALL_STOPWORDS  # type: ignore[attr-defined,no-redef]
from memory.recall.search import Recall
from tests.fakes.providers import Respond
from tests.support.consolidation_stack import open_stack
from tests.support.memory_sessions import (
    TESTDATA,
    SessionMessage,
    SettableClock,
    _parse_time,
    evidence_sessions,
    extractive_summary,
    locomo_conversations,
    locomo_summary_call,
    oasst_conversations,
    store_session,
    summarising_call,
)

CHAT = 7001
EXPORT_SESSION = 20
_CJK = r"\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af"
_FACT = re.compile(rf"[{_CJK}]{{2,}}|\b\d[\d.,:]*\d\b|\b[A-ZÀ-Ý][\w'-]{{2,}}\b")
_COMMON_CAPS = {
    "The", "This", "That", "What", "When", "Where", "Which", "How", "Why", "Who", "Can",
    "Could", "Would", "Should", "Please", "Here", "There", "Yes", "Also", "But", "And", "For",
    "You", "Your", "It's", "I'm", "Hello", "Sure", "Thanks", "Thank", "Okay", "Its", "However",
    "Some", "Many", "These", "Those", "Are", "Is", "Do", "Does", "Let", "If", "In", "On", "As",
    "Write", "Tell", "Give", "Make", "Explain", "Hi", "Hey", "Yang", "Tapi", "Kalau", "Ini",
    "Itu", "Jadi", "Kita", "Saya", "Aku", "Nah", "Ada", "Apa", "Mau", "Udah", "Gak", "Iya",
}  # fmt: skip


# Words no user would ask about, in the corpus' other languages (Spanish, German, Indonesian…).
STOPWORDS = RECALL_STOPWORDS | {
    "que", "qué", "cómo", "como", "para", "por", "una", "los", "las", "del", "con", "eso",
    "esto", "hola", "puedes", "sería", "dónde", "cuál", "cual", "quién", "wie", "was", "kannst",
    "bitte", "hallo", "ich", "und", "est-ce", "comment", "pourquoi", "bonjour", "salut",
    "kenapa", "gimana", "bisa", "mas", "bang", "kak", "halo", "that", "what", "it's",
    "sin", "esta", "estas", "este", "estos", "pueden", "además", "crea", "dime",
    "escribe", "because", "should", "something", "people", "really", "gracias", "porque",
}  # fmt: skip


def export_sessions(limit: int) -> list[list[SessionMessage]]:
    """The group exports as sessions of EXPORT_SESSION messages, senders named inline."""
    sessions: list[list[SessionMessage]] = []
    for path in sorted((TESTDATA / "tg-export-tgif").glob("*.exported.json")):
        data = json.loads(path.read_text("utf-8"))
        messages = []
        for raw in data["messages"]:
            if raw.get("type") != "message":
                continue
            text = raw.get("text")
            if isinstance(text, list):
                text = "".join(p if isinstance(p, str) else p.get("text", "") for p in text)
            if not text or not text.strip():
                continue
            sender = raw.get("from") or "someone"
            messages.append(SessionMessage("user", f"{sender}: {text}", _parse_time(raw["date"])))
        for start in range(0, len(messages) - 5, EXPORT_SESSION):
            sessions.append(messages[start : start + EXPORT_SESSION])
    return sessions[:limit]


def single_questions(limit: int) -> list[list[SessionMessage]]:
    singles = oasst_conversations(("zh", "ja", "ko", "ru", "de", "fr"), 400, min_messages=1)
    return [s for s in singles if len(s) == 1][:limit]


def real_sessions(total: int) -> list[list[SessionMessage]]:
    sessions = oasst_conversations(None, total, min_messages=2)
    sessions += export_sessions(total - len(sessions) - 20)
    sessions += single_questions(total - len(sessions))
    return sessions[:total]


def covered_text(session: list[SessionMessage]) -> str:
    """What the summary keeps of a session: see tests.support.memory_sessions.extractive_summary."""
    lines = [f"[{m.at.strftime('%Y-%m-%d %H:%M')}] {m.role}: {m.content}" for m in session]
    return extractive_summary("\n".join(lines)).split("] ", 1)[-1]


def facts(text: str) -> tuple[list[str], list[str], list[str]]:
    """(names and CJK words, topic words, numbers) of a text. A capital that opens a sentence
    says nothing, a name inside one does; a kana-only run is grammar; function words of the
    corpus' languages are never facts."""
    names, numbers = [], []
    for match in _FACT.finditer(text):
        token = match.group(0)
        if token in _COMMON_CAPS or token.casefold().strip("'s") in STOPWORDS:
            continue
        if token[0].isdigit():
            if len(token) >= 3:
                numbers.append(token)
            continue
        before = text[: match.start()].rstrip()
        opens_sentence = not before or before[-1] in ".!?¿¡:—\"'"
        if token[0].isupper() and not token.isupper() and opens_sentence:
            continue
        if re.fullmatch(rf"[{_CJK}]+", token):
            words = [w for w in re.split(r"[\u3040-\u309f]+", token) if len(w) >= 2]
            if not words:
                continue
            token = words[0][:4]
        names.append(token)
    topics = [
        w for w in re.findall(r"\b[^\W\d_]{6,}\b", text) if w.islower() and w not in STOPWORDS
    ]
    return list(dict.fromkeys(names)), list(dict.fromkeys(topics)), list(dict.fromkeys(numbers))


def language(session: list[SessionMessage]) -> str:
    text = session[0].content
    if re.search(r"[\u3040-\u30ff]", text):
        return "ja"
    if re.search(r"[\uac00-\ud7af]", text):
        return "ko"
    if re.search(r"[\u4e00-\u9fff]", text):
        return "zh"
    if re.search(r"\b(yang|aja|nggak|gak|bisa|kalau|udah)\b", text.lower()):
        return "id"
    return "other"


TEMPLATES = {
    "other": ("what did we say about {a} and {b}?", "what did we say about {a}?"),
    "id": ("kemarin kita bahas {a} dan {b} ya?", "kemarin kita bahas {a} ya?"),
    "ja": ("{a}と{b}について前に話したよね？", "{a}について前に話したよね？"),
    "zh": ("我们之前聊过{a}和{b}吗？", "我们之前聊过{a}吗？"),
    "ko": ("우리 {a}랑 {b} 얘기했었지?", "우리 {a} 얘기했었지?"),
}


def build_queries(sessions: list[list[SessionMessage]]) -> list[str]:
    covered = [covered_text(s) for s in sessions]
    per_session = [facts(text) for text in covered]
    folded = [text.casefold() for text in covered]

    def df(term: str) -> int:
        needle = term.casefold()
        return sum(1 for text in folded if needle in text)

    queries = []
    for session, kinds, text in zip(sessions, per_session, covered, strict=True):
        chosen: list[str] = []
        longest = sorted(set(re.findall(r"\w{4,}", text)), key=len, reverse=True)
        for kind in (*kinds, longest):  # names first, then topics, numbers, any long word
            ranked = sorted(kind, key=lambda f: (df(f), -len(f)))
            chosen += [f for f in ranked if f not in chosen][: 2 - len(chosen)]
        pair, single = TEMPLATES[language(session)]
        queries.append(
            pair.format(a=chosen[0], b=chosen[1]) if len(chosen) > 1 else single.format(a=chosen[0])
        )
    return queries


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


async def run(total: int) -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    sessions = real_sessions(total)
    cjk = sum(1 for s in sessions if language(s) in ("ja", "zh", "ko"))
    with tempfile.TemporaryDirectory() as tmp:
        stack = await open_stack(Path(tmp) / "recall.sqlite3", concurrency=1)
        try:
            for fake in stack.providers:
                fake.set_default("*", Respond(summarising_call))
            clock = SettableClock()
            real_clock, stack.store.clock = stack.store.clock, clock
            session_ids = []
            for session in sessions:
                stored = await store_session(stack.store, clock, CHAT, session)
                session_ids.append(stored[0].session_id)
                await stack.store.start_new_session(CHAT)
            stack.store.clock = real_clock
            started = time.perf_counter()
            await stack.worker.run_due()
            consolidated_s = time.perf_counter() - started
            rows = await stack.db.fetchall(
                "SELECT id, session_id FROM history_entries WHERE chat_id = ?", (CHAT,)
            )
            left = await stack.db.fetchall("SELECT COUNT(*) AS n FROM messages")
            print(
                f"sessions: {len(sessions)} ({cjk} Chinese/Japanese/Korean), "
                f"{sum(len(s) for s in sessions)} messages, consolidated into {len(rows)} "
                f"history entries in {consolidated_s:.1f} s ({left[0]['n']} messages left)"
            )
            queries = build_queries(sessions)
            recall = Recall(stack.db)
            for query in queries[:3]:
                await recall.search(CHAT, query)  # warm the page cache
            ranks: list[int | None] = []
            latencies: list[float] = []
            misses = []
            for session, session_id, query in zip(sessions, session_ids, queries, strict=True):
                t0 = time.perf_counter()
                hits = await recall.search(CHAT, query, limit=10)
                latencies.append((time.perf_counter() - t0) * 1000)
                sessions_hit = await hit_sessions(stack.db, hits)
                rank = next((n for n, s in enumerate(sessions_hit, 1) if s == session_id), None)
                ranks.append(rank)
                if rank is None or rank > 5:
                    misses.append((language(session), query, rank))
        finally:
            await stack.close()
    n = len(ranks)
    hit1 = sum(1 for r in ranks if r == 1) / n
    hit5 = sum(1 for r in ranks if r is not None and r <= 5) / n
    by_lang: dict[str, list[int | None]] = {}
    for session, rank in zip(sessions, ranks, strict=True):
        by_lang.setdefault(language(session), []).append(rank)
    print(f"queries: {n}, e.g. {queries[0]!r}, {queries[-1]!r}")
    for lang, lang_ranks in sorted(by_lang.items()):
        found = sum(1 for r in lang_ranks if r is not None and r <= 5)
        print(f"  {lang}: {found}/{len(lang_ranks)} found in the top 5")
    for lang, query, rank in misses[:10]:
        print(f"  miss ({lang}, rank {rank}): {query}")
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(f"search latency: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {max(latencies):.2f} ms")
    print(f"recall: hit@1={hit1:.2f} hit@5={hit5:.2f} p50_ms={round(p50)} p99_ms={round(p99)}")
    return 0


# --- LoCoMo -------------------------------------------------------------------------------------

LOCOMO_CHAT = 8000


async def ingest_locomo(stack: Any, clock: SettableClock) -> dict[int, dict[int, int]]:
    """Every conversation into its own chat; returns chat -> our session id -> LoCoMo's."""
    conversations = locomo_conversations()
    summaries = {s.turns[0][:120]: s.summary for _, ss, _ in conversations for s in ss}
    for fake in stack.providers:
        fake.set_default("*", Respond(locomo_summary_call(summaries)))
    sessions_of: dict[int, dict[int, int]] = {}
    real_clock, stack.store.clock = stack.store.clock, clock
    for index, (_, sessions, _) in enumerate(conversations):
        chat = LOCOMO_CHAT + index
        sessions_of[chat] = {}
        for session in sessions:
            stored = await store_session(
                stack.store,
                clock,
                chat,
                [
                    SessionMessage("user", text, session.at + timedelta(seconds=30 * n))
                    for n, text in enumerate(session.turns)
                ],
            )
            sessions_of[chat][stored[0].session_id] = session.number
            await stack.store.start_new_session(chat)
    stack.store.clock = real_clock
    await stack.worker.run_due()
    return sessions_of


async def hit_sessions(db: Any, hits: list[Any]) -> list[int | None]:
    """Our session id of each hit (a history entry's through its row, for a tree whose hits
    carry no session)."""
    found: list[int | None] = []
    for hit in hits:
        session = getattr(hit, "session_id", None)
        if session is None and hit.source == "history":
            row = await db.fetchone(
                "SELECT session_id FROM history_entries WHERE id = ?", (hit.ref_id,)
            )
            session = row["session_id"] if row else None
        found.append(session)
    return found


async def run_locomo() -> list[float]:
    """The `locomo:` line; returns the questions' latencies' source for the scale run."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    conversations = locomo_conversations()
    with tempfile.TemporaryDirectory() as tmp:
        stack = await open_stack(Path(tmp) / "locomo.sqlite3", concurrency=1)
        try:
            started = time.perf_counter()
            sessions_of = await ingest_locomo(stack, SettableClock())
            ingest_s = time.perf_counter() - started
            counts = await stack.db.fetchall(
                "SELECT (SELECT COUNT(*) FROM history_entries) AS h, "
                "(SELECT COUNT(*) FROM messages) AS m"
            )
            turns = sum(len(s.turns) for _, ss, _ in conversations for s in ss)
            print(
                f"locomo: {len(conversations)} conversations, {turns} turns, "
                f"{counts[0]['h']} history entries, {counts[0]['m']} messages left, "
                f"ingested in {ingest_s:.1f} s"
            )
            recall = Recall(stack.db)
            ranks: list[int | None] = []
            latencies: list[float] = []
            by_category: dict[int, list[int | None]] = {}
            for index, (_, _, questions) in enumerate(conversations):
                chat = LOCOMO_CHAT + index
                for question in questions:
                    shown = await stack.store.open_session_message_ids(chat)
                    t0 = time.perf_counter()
                    hits = await recall.search(
                        chat, question["question"], limit=5, exclude_message_ids=shown
                    )
                    latencies.append((time.perf_counter() - t0) * 1000)
                    ours = await hit_sessions(stack.db, hits)
                    theirs = [sessions_of[chat].get(s) if s else None for s in ours]
                    wanted = evidence_sessions(question)
                    rank = next((n for n, s in enumerate(theirs, 1) if s in wanted), None)
                    ranks.append(rank)
                    by_category.setdefault(question["category"], []).append(rank)
        finally:
            await stack.close()
    n = len(ranks)

    def at(k: int, values: list[int | None]) -> float:
        return sum(1 for r in values if r is not None and r <= k) / len(values)

    for category, values in sorted(by_category.items()):
        print(f"  category {category}: {len(values)} questions, R@5={at(5, values):.3f}")
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(
        f"locomo: questions={n} R@1={at(1, ranks):.3f} R@3={at(3, ranks):.3f} "
        f"R@5={at(5, ranks):.3f} p50_ms={p50:.1f} p99_ms={p99:.1f}"
    )
    return latencies


async def run_scale(total: int, chats: int = 1) -> None:
    """A `recall_scale:` line: LoCoMo's questions over `total` archived turns, in one chat or
    spread evenly over `chats` chats (each chat then holds its share of LoCoMo's turns, in
    order, as one session; question n is asked in chat n mod `chats`). Rarity and candidates
    are per chat, so the spread measures a search that must not read the
    other chats' turns."""
    from memory.recall.archive import archive_in, index_messages, index_pending_in
    from memory.store import StoredMessage

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    conversations = locomo_conversations()
    turns = [(s.at, t) for _, ss, _ in conversations for s in ss for t in s.turns]
    questions = [q["question"] for _, _, qs in conversations for q in qs]
    text_chars = sum(len(text) for _, text in turns)
    first_chat = 9000

    def write(conn: sqlite3.Connection, batch: list[tuple[datetime, str]], chat: int) -> None:
        """One copy of the turns, archived as a consolidation commit archives them."""
        cursor = conn.execute(
            "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (chat, "2023-01-01", "2023-01-01"),
        )
        cursor = conn.execute(
            "INSERT INTO sessions(chat_id, opened_at, closed_at) VALUES (?, ?, ?) RETURNING id",
            (chat, "2023-01-01", "2023-01-01"),
        )
        row = cursor.fetchone()
        session = int(row["id"])
        stored = []
        for at, text in batch:
            cursor = conn.execute(
                "INSERT INTO messages(session_id, chat_id, role, content, created_at) "
                "VALUES (?, ?, 'user', ?, ?) RETURNING id",
                (session, chat, text, at.isoformat()),
            )
            row = cursor.fetchone()
            stored.append(
                StoredMessage(int(row["id"]), session, chat, "user", text, at.isoformat())
            )
        rows = index_messages(stored)
        archive_in(conn, rows, "2024-01-01T00:00:00+00:00")
        conn.execute("DELETE FROM messages WHERE session_id = ?", (session,))
        while index_pending_in(conn, len(rows) + 1):
            pass

    with tempfile.TemporaryDirectory() as tmp:
        stack = await open_stack(Path(tmp) / "scale.sqlite3", concurrency=1)
        try:
            db = stack.db
            started = time.perf_counter()
            written, sessions = 0, 0
            per_chat = -(-total // chats)  # ceiling
            while written < total:
                chat = first_chat + sessions % chats
                take = min(total - written, per_chat if chats > 1 else len(turns))
                start = written % len(turns)
                batch = (turns * 2)[start : start + take] if chats > 1 else turns[:take]
                sessions += 1
                await db.run_in_transaction(functools.partial(write, batch=batch, chat=chat))
                written += len(batch)
            size = await asyncio.to_thread(os.path.getsize, Path(tmp) / "scale.sqlite3")
            print(
                f"recall_scale: wrote {written} archived turns in {min(chats, sessions)} chat(s), "
                f"{sessions} sessions, in {time.perf_counter() - started:.1f} s, database "
                f"{size / 1e6:.1f} MB ({size / written:.0f} bytes a turn = KB per 1,000 turns, "
                f"text {text_chars / len(turns):.0f} characters a turn)"
            )
            recall = Recall(db)
            for n, question in enumerate(questions[:5]):
                await recall.search(first_chat + n % chats, question)
            latencies = []
            for n, question in enumerate(questions):
                t0 = time.perf_counter()
                await recall.search(first_chat + n % chats, question, limit=5)
                latencies.append((time.perf_counter() - t0) * 1000)
        finally:
            await stack.close()
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(f"recall_scale: turns={written} chats={chats} p50_ms={p50:.1f} p99_ms={p99:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--scale-turns", type=int, default=100_000)
    parser.add_argument("--scale-chats", type=int, nargs="+", default=[1, 1000])
    parser.add_argument("--only", choices=("recall", "locomo", "scale"), default=None)
    args = parser.parse_args()
    asyncio.run(run_parts(args))
    return 0


async def run_parts(args: argparse.Namespace) -> None:
    """All parts, one after the other, on one event loop and its provider worker pool."""
    if args.only in (None, "recall"):
        await run(args.sessions)
    if args.only in (None, "locomo"):
        await run_locomo()
    if args.only in (None, "scale"):
        for chats in args.scale_chats:
            await run_scale(args.scale_turns, chats)


if __name__ == "__main__":
    raise SystemExit(main())
