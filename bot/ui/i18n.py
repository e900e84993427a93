"""The bot's own words, per Telegram language, with English as the fallback.

The texts live in one TOML file per language, `bot/locales/<code>.toml` (a format translators'
tools and Python's stdlib `tomllib` both read), so a translation is a data change, not code.
Keys are stable identifiers; handlers call `t(key, lang, **values)`. Add English first; other
languages may lag and then fall back to English per key (tests/bot/test_i18n.py fails until they
catch up).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

SUPPORTED_LANGUAGES = ("en", "pt", "id", "tr", "ja")

LOCALES_DIR = Path(__file__).parent.parent / "locales"


def load_messages(directory: Path = LOCALES_DIR) -> dict[str, dict[str, str]]:
    """Every supported language's texts; a missing or malformed file fails at import, loudly."""
    messages: dict[str, dict[str, str]] = {}
    for lang in SUPPORTED_LANGUAGES:
        with (directory / f"{lang}.toml").open("rb") as file:
            table = tomllib.load(file)
        bad = sorted(key for key, value in table.items() if not isinstance(value, str))
        if bad:
            raise ValueError(f"{lang}.toml: values must be strings: {bad}")
        messages[lang] = table
    return messages


MESSAGES: dict[str, dict[str, str]] = load_messages()


def normalise_language(code: str | None) -> str:
    """Telegram sends IETF tags such as 'pt-br'; keep the primary subtag if we speak it."""
    if not code:
        return "en"
    primary = code.split("-")[0].split("_")[0].lower()
    return primary if primary in SUPPORTED_LANGUAGES else "en"


def has_text(key: str, lang: str) -> bool:
    """Whether `lang` has its own text for `key` (rather than the English fallback)."""
    return key in MESSAGES.get(lang, {})


def t(key: str, lang: str | None = None, **values: object) -> str:
    """The message `key` in `lang` (falling back to English), formatted with `values`."""
    language = normalise_language(lang)
    template = MESSAGES.get(language, {}).get(key) or MESSAGES["en"][key]
    return template.format(**values) if values else template
