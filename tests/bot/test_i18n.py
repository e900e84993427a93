"""The bot's own words in English, Portuguese, Indonesian, Turkish and Japanese."""

from __future__ import annotations

import string
import tomllib
from pathlib import Path

import pytest

from bot.ui.i18n import (
    LOCALES_DIR,
    MESSAGES,
    SUPPORTED_LANGUAGES,
    load_messages,
    normalise_language,
    t,
)
from tests.support.paths import REPO


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


def test_the_texts_are_one_toml_file_per_language_and_nothing_else() -> None:
    assert sorted(p.stem for p in LOCALES_DIR.glob("*.toml")) == sorted(SUPPORTED_LANGUAGES)
    for lang in SUPPORTED_LANGUAGES:
        with (LOCALES_DIR / f"{lang}.toml").open("rb") as file:
            assert tomllib.load(file) == MESSAGES[lang]


def test_a_non_string_value_in_a_locale_file_is_refused(tmp_path: Path) -> None:
    for lang in SUPPORTED_LANGUAGES:
        (tmp_path / f"{lang}.toml").write_text('new_session = "ok"\n', encoding="utf-8")
    (tmp_path / "ja.toml").write_text("new_session = 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"ja\.toml.*new_session"):
        load_messages(tmp_path)


def test_the_locale_files_ship_with_the_package() -> None:
    """The image installs the project from pyproject (tests/deploy/test_deploy_image.py starts a bot
    from exactly that install), so package-data is what carries the locales there."""
    with (REPO / "pyproject.toml").open("rb") as file:
        package_data = tomllib.load(file)["tool"]["setuptools"]["package-data"]["bot"]
    shipped = {p for pattern in package_data for p in (REPO / "bot").glob(pattern)}
    assert set(LOCALES_DIR.glob("*.toml")) <= shipped
