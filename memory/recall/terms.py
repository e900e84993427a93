"""The words recall indexes and searches: stems for Latin-script languages, pairs for CJK.

One analysis for both sides. A text written to the archive is cut into its index terms once
(`text_terms`, stored beside it and indexed by FTS5); a query is cut the same way
(`query_terms`), so "trips" finds "trip" without any per-query scan of stored text.

Latin-script words are stemmed with Snowball (PyStemmer) in the text's language, guessed from
its function words among the languages we serve (English unless another one is clearly used).
A query names the same thing in other words and is often too short to guess, so each of its
words also carries its stem in every served language, as weaker variants. Words of fewer than
3 letters and common function words are no terms. Runs of Han, kana or Hangul are split at
particles and cut into overlapping character pairs, because those scripts put no spaces
between words and most of their words are two characters long.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta

import Stemmer

# Snowball stemmers of the languages the bot speaks (bot/locales) and a few close neighbours.
LANGUAGES = ("english", "portuguese", "indonesian", "turkish", "spanish", "french", "german")
MAX_QUERY_TERMS = 32  # a query's terms beyond this are not searched (bounded scoring)
VARIANT_WEIGHT = 0.6  # a query word's stem in another language counts this much
PREFIX_WEIGHT = 0.5  # a longer word a query word begins ("postgres": "postgresql") this much
MIN_PREFIX = 4  # letters a query word needs to match the words it begins
MAX_PREFIX_WORDS = 8  # longer words tried per query word
_BEFORE_DAYS = 3  # a query's day matches conversations this many days before it
_AFTER_DAYS = 10  # and this many after (people tell what they did in the days after)

# Function words per language: they tell a text's language and are never search terms.
_FUNCTION_WORDS = {
    "english": """the and for are was were you your yours our ours they them their this that
        these those what when where which who whom whose why how with from into about over
        under again than then there here have has had having does did doing done can could
        should would will shall may might must not but all any some such only own same very
        just also too more most other each few both nor off out onto upon its it's i'm i've
        we're you're he's she's let's she her hers herself him his himself myself yourself
        been being i'd i'll he'll she'll they're they've""",
    "portuguese": """que com para por uma das dos nas nos não sim foi era são ser ter tem isso
        isto esse essa ele ela eles elas você vocês nós quando onde como qual quais sobre mais
        muito pela pelo""",
    "indonesian": """yang dan dengan untuk dari ini itu ada tidak akan sudah bisa juga saya
        kamu kita kami mereka apa kapan dimana bagaimana tentang pada dalam oleh atau karena""",
    "turkish": """bir bu şu ve ile için ama gibi daha çok ne neden nasıl nerede hangi kim mı
        mi mu mü""",
    "spanish": "los las del una por para con como pero más este esta eso qué cómo dónde",
    "french": "les des une est pour avec dans sur pas par qui quoi mais vous nous",
    "german": "der die das und mit für von den dem ein eine ist war sind wie was wer wann",
}
_FUNCTION = {lang: frozenset(words.split()) for lang, words in _FUNCTION_WORDS.items()}
# Words that only carry the question ("remember", "talked", "yesterday", …), in our languages.
_QUESTION_WORDS = frozenset(
    """
    tell said say says talk talked talking told remember recall earlier before last time ago
    discuss discussed mention mentioned decide decided anything something thing things
    yesterday previously conversation chatted kind sort type likely
    falamos falar conversamos lembra lembro ontem disse dissemos passado passada
    kemarin bahas dibahas ngobrol ngomong bilang ingat inget tadi soal lalu pernah dong sih kok
    konuştuk hatırlıyor musun dün hakkında neydi
    """.split()
)
STOPWORDS = frozenset().union(*_FUNCTION.values(), _QUESTION_WORDS)
# Two-character CJK words that only carry the question ("we", "before", "talked about", …):
# they occur in most conversations in these languages and would drown the real terms.
_CJK_STOP = frozenset(
    """
    我们 你们 他们 之前 以前 什么 怎么 聊过 说过 讨论 关于 记得 上次 的话 一下 这个 那个 是不 不是
    我的 你的 一个 没有 可以 时候 有没 提到
    우리 얘기 이야기 했었 했던 기억 예전 지난
    """.split()
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_HIRAGANA = re.compile(r"[\u3040-\u309f]+")

_local = threading.local()  # a Stemmer object is not safe to share between threads


def _stemmer(language: str) -> Stemmer.Stemmer:
    stemmers: dict[str, Stemmer.Stemmer] | None = getattr(_local, "stemmers", None)
    if stemmers is None:
        stemmers = _local.stemmers = {}
    if language not in stemmers:
        stemmers[language] = Stemmer.Stemmer(language)
    return stemmers[language]


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


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _split(text: str) -> tuple[list[str], list[str]]:
    """(Latin-script words, CJK pairs) of a folded text, in order."""
    words: list[str] = []
    pairs: list[str] = []
    for token in _WORD.findall(text):
        if not any(_is_cjk(ch) for ch in token):
            words.append(token)
            continue
        latin: list[str] = []
        cjk: list[str] = []
        for ch in token + " ":
            if ch != " " and _is_cjk(ch):
                if latin:
                    words.append("".join(latin))
                    latin = []
                cjk.append(ch)
            else:
                if cjk:
                    pairs.extend(_cjk_pairs("".join(cjk)))
                    cjk = []
                if ch != " ":
                    latin.append(ch)
        if latin:
            words.append("".join(latin))
    return words, pairs


def _cjk_pairs(run: str) -> list[str]:
    """Pairs of characters of each particle-free segment (a lone character is dropped)."""
    segments = _HIRAGANA.split(run) if _HIRAGANA.search(run) else [run]
    pairs: list[str] = []
    for segment in segments:
        pairs.extend(
            p for p in (segment[i : i + 2] for i in range(len(segment) - 1)) if p not in _CJK_STOP
        )
    return pairs


def guess_language(words: list[str]) -> str:
    """The served language whose function words the text uses most (English on a tie)."""
    best, best_hits = "english", 0
    for language, function in _FUNCTION.items():
        hits = sum(1 for w in words if w in function)
        if hits > best_hits:
            best, best_hits = language, hits
    return best


def _keep(word: str) -> bool:
    if word.isdigit():
        return len(word) >= 2
    return len(word) >= 3 and word not in STOPWORDS


def text_terms(text: str) -> list[str]:
    """The index terms of a stored text, every occurrence, in order."""
    words, pairs = _split(fold(text))
    kept = [w for w in words if _keep(w)]
    stems = _stemmer(guess_language(words)).stemWords(kept) if kept else []
    return stems + pairs


@dataclass(frozen=True)
class QueryTerm:
    """One word of a query: the forms a stored text may hold it in, each with its weight."""

    forms: tuple[tuple[str, float], ...]
    prefix: str | None = None  # the word as written: a longer word it begins also matches

    @property
    def key(self) -> str:
        return self.forms[0][0]

    def expanded(self, words: Iterable[str]) -> QueryTerm:
        """With the `words` that begin with its prefix ("postgres": "postgresql") as weaker
        forms, at most MAX_PREFIX_WORDS of them."""
        if self.prefix is None:
            return self
        known = {form for form, _ in self.forms}
        extra = [w for w in words if w.startswith(self.prefix) and w not in known]
        if not extra:
            return self
        added = tuple((w, PREFIX_WEIGHT) for w in sorted(extra)[:MAX_PREFIX_WORDS])
        return QueryTerm(self.forms + added, self.prefix)


def query_terms(query: str, *, limit: int = MAX_QUERY_TERMS) -> list[QueryTerm]:
    """The distinct terms of a query, in order, at most `limit` of them."""
    words, pairs = _split(fold(query))
    guessed = guess_language(words)
    terms: dict[str, QueryTerm] = {}
    for word in dict.fromkeys(w for w in words if _keep(w)):
        forms: dict[str, float] = {_stemmer(guessed).stemWord(word): 1.0}
        forms.setdefault(word, 1.0)
        for language in LANGUAGES:
            forms.setdefault(_stemmer(language).stemWord(word), VARIANT_WEIGHT)
        term = QueryTerm(tuple(forms.items()), word if len(word) >= MIN_PREFIX else None)
        terms.setdefault(term.key, term)
    for pair in pairs:
        terms.setdefault(pair, QueryTerm(((pair, 1.0),)))
    return list(terms.values())[:limit]


# Month names of the served languages (and their common short forms), for a query's dates.
_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            "january jan januari janeiro ocak enero janvier januar",
            "february feb februari fevereiro şubat subat febrero février februar",
            "march mar maret março marco mart marzo mars märz",
            "april apr abril nisan avril",
            "may mei maio mayıs mayis mayo mai",
            "june jun juni junho haziran junio juin",
            "july jul juli julho temmuz julio juillet",
            "august aug agustus agosto ağustos agustos août",
            "september sep sept setembro eylül eylul septiembre septembre",
            "october oct oktober outubro ekim octubre octobre",
            "november nov novembro kasım kasim noviembre novembre",
            "december dec desember dezembro aralık aralik diciembre décembre dezember",
        ),
        start=1,
    )
    for name in names.split()
}
_DAY_MONTH_YEAR = re.compile(
    r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:de\s+)?([^\W\d_]+)\.?,?\s+(?:de\s+)?((?:19|20)\d\d)\b"
)
_MONTH_DAY_YEAR = re.compile(r"\b([^\W\d_]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+((?:19|20)\d\d)\b")
_MONTH_YEAR = re.compile(r"\b([^\W\d_]+)\.?,?\s+(?:de\s+)?((?:19|20)\d\d)\b")
_YEAR = re.compile(r"\b((?:19|20)\d\d)\b")


@dataclass(frozen=True)
class Period:
    """The days a query's date names, as ISO dates (inclusive), widened by a few days after:
    what happened on a day is often told in the days that follow."""

    first: str
    last: str


def query_period(query: str) -> Period | None:
    """The first date a query names (a day, a month or a year), if any."""
    text = fold(query)
    for pattern, order in ((_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        for match in pattern.finditer(text):
            parts = dict(zip(order, match.groups(), strict=True))
            month = _MONTHS.get(parts["m"])
            if month and 1 <= int(parts["d"]) <= 31:
                try:
                    day = date(int(parts["y"]), month, int(parts["d"]))
                except ValueError:
                    continue
                return Period(
                    (day - timedelta(days=_BEFORE_DAYS)).isoformat(),
                    (day + timedelta(days=_AFTER_DAYS)).isoformat(),
                )
    for match in _MONTH_YEAR.finditer(text):
        month = _MONTHS.get(match.group(1))
        if month:
            year = int(match.group(2))
            start = date(year, month, 1)
            end = date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)
            return Period(start.isoformat(), (end + timedelta(days=_AFTER_DAYS)).isoformat())
    year_match = _YEAR.search(text)
    if year_match:
        return Period(f"{year_match.group(1)}-01-01", f"{year_match.group(1)}-12-31")
    return None
