"""The bot's own words in English, Portuguese, Indonesian, Turkish and Japanese."""

from __future__ import annotations

import string

import pytest

from bot.i18n import MESSAGES, SUPPORTED_LANGUAGES, normalise_language, t


def _fields(template: str) -> list[tuple[str, str | None, str]]:
    """Placeholders with their conversion and format spec, in a stable order."""
    return sorted(
        (name, conversion, spec or "")
        for _, name, spec, conversion in string.Formatter().parse(template)
        if name is not None
    )


def test_every_key_exists_in_every_language_with_the_same_placeholders() -> None:
    english = MESSAGES["en"]
    assert set(MESSAGES) == set(SUPPORTED_LANGUAGES)
    for lang in SUPPORTED_LANGUAGES:
        missing = sorted(set(english) - set(MESSAGES[lang]))
        extra = sorted(set(MESSAGES[lang]) - set(english))
        assert not missing, f"{lang} lacks {missing}"
        assert not extra, f"{lang} has keys English lacks: {extra}"
        for key, template in MESSAGES[lang].items():
            assert template.strip(), f"{lang}.{key} is empty"
            assert _fields(template) == _fields(english[key]), f"{lang}.{key} placeholders"


def test_translations_are_not_english_copies() -> None:
    # Short words such as tier names may coincide; whole sentences must not.
    for lang in ("pt", "id", "tr", "ja"):
        same = [
            key
            for key, text in MESSAGES[lang].items()
            if text == MESSAGES["en"][key] and len(text) > 25
        ]
        assert not same, f"{lang} left untranslated: {same}"


@pytest.mark.parametrize(
    ("lang", "expected"),
    [
        ("en", "New session started."),
        ("pt-br", "Nova sessão iniciada."),
        ("id", "Sesi baru dimulai."),
        ("tr", "Yeni oturum başladı."),
        ("ja", "新しいセッションを開始しました。"),
        ("de", "New session started."),  # a language we do not speak falls back to English
        (None, "New session started."),
    ],
)
def test_new_session_message_per_language(lang: str | None, expected: str) -> None:
    assert t("new_session", lang) == expected


@pytest.mark.parametrize(
    ("lang", "fragment"),
    [
        ("en", "daily budget of $1.00"),
        ("pt", "orçamento diário de $1.00"),
        ("id", "anggaran harian $1.00"),
        ("tr", "Günlük $1.00 bütçene"),
        ("ja", "1 日の予算 $1.00 に達した"),
    ],
)
def test_formatted_message_per_language(lang: str, fragment: str) -> None:
    assert fragment in t("budget_user_daily", lang, limit="$1.00")


def test_language_tags_are_normalised() -> None:
    assert normalise_language("pt-BR") == "pt"
    assert normalise_language("ja_JP") == "ja"
    assert normalise_language("ID") == "id"
    assert normalise_language("zh-hans") == "en"
    assert normalise_language("") == "en"
