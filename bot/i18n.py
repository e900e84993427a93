"""The bot's own words, per Telegram language, with English as the fallback.

Keys are stable identifiers; handlers call `t(key, lang, **values)`. Add English first; other
languages may lag and then fall back to English per key.
"""

from __future__ import annotations

SUPPORTED_LANGUAGES = ("en", "pt", "id", "tr", "ja")

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "new_session": "New session started.",
    },
}


def normalise_language(code: str | None) -> str:
    """Telegram sends IETF tags such as 'pt-br'; keep the primary subtag if we speak it."""
    if not code:
        return "en"
    primary = code.split("-")[0].split("_")[0].lower()
    return primary if primary in SUPPORTED_LANGUAGES else "en"


def t(key: str, lang: str | None = None, **values: object) -> str:
    """The message `key` in `lang` (falling back to English), formatted with `values`."""
    language = normalise_language(lang)
    template = MESSAGES.get(language, {}).get(key) or MESSAGES["en"][key]
    return template.format(**values) if values else template
