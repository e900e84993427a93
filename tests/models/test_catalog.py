"""The model catalog: seed chains, gateway resolution, user files, and refusing bad catalogs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.app import available_models, build_gateways
from bot.config import load_settings
from models.catalog import DEFAULT_ENTRIES, Catalog, CatalogError, ModelEntry, load_catalog


def _write(path: Path, models: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"models": models}), encoding="utf-8")
    return path


def test_hidden_consolidation_chain_is_the_seed_chain() -> None:
    catalog = load_catalog()
    chain = list(catalog.chain("llama-3.3-70b-versatile"))
    assert [(e.id, e.wire_name, e.gateway) for e in chain] == [
        ("llama-3.3-70b-versatile", "llama-3.3-70b-versatile", "groq"),
        ("qwen3-32b", "qwen/qwen3-32b", "groq"),
        (
            "llama-4-scout-17b-16e-instruct",
            "meta-llama/llama-4-scout-17b-16e-instruct",
            "groq",
        ),
        ("gpt-4.1-mini", "gpt-4.1-mini", "openai"),
        ("claude-haiku-4-5", "claude-haiku-4-5", "anthropic"),
    ]
    assert all(e.hidden for e in chain)


def test_visible_models_fall_back_inside_their_family() -> None:
    catalog = load_catalog()
    visible = catalog.visible()
    assert {e.gateway for e in visible} == {"openai", "anthropic", "groq"}
    for entry in visible:
        for member in catalog.chain(entry.id):
            assert member.gateway == entry.gateway, (entry.id, member.id)


def test_every_entry_resolves_to_its_own_gateway_string() -> None:
    settings = load_settings(TELEGRAM_BOT_TOKEN="1:x")
    gateways = build_gateways(settings)
    catalog = load_catalog()
    strings = {e.id: gateways[e.gateway].litellm_model(e) for e in catalog.entries.values()}
    assert strings["qwen3-32b"] == "groq/qwen/qwen3-32b"
    assert strings["claude-sonnet-4-5"] == "anthropic/claude-sonnet-4-5"
    assert strings["gpt-5"] == "openai/gpt-5"


def test_cost_uses_catalog_prices_per_million_tokens() -> None:
    entry = load_catalog().get("qwen3-32b")
    assert entry.cost_usd(1_000_000, 0) == pytest.approx(0.29)
    assert entry.cost_usd(2_000, 1_000) == pytest.approx((2_000 * 0.29 + 1_000 * 0.59) / 1e6)


def test_available_models_are_visible_with_a_configured_gateway() -> None:
    settings = load_settings(TELEGRAM_BOT_TOKEN="1:x", OPENAI_API_KEY="sk-x")
    available = available_models(load_catalog(), build_gateways(settings))
    assert available and all(e.gateway == "openai" and not e.hidden for e in available)
    assert "gpt-4.1-mini" not in {e.id for e in available}  # hidden even though on OpenAI


def test_user_file_adds_and_overrides(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "models.json",
        [
            {"id": "gpt-5", "label": "GPT-5 (house)", "fallback": "my-llama"},
            {
                "id": "my-llama",
                "gateway": "groq",
                "wire_name": "llama-3.1-8b-instant",
                "fallback": "gpt-4.1",
                "input_price_per_mtok": 0.05,
            },
        ],
    )
    catalog = load_catalog(path)
    assert catalog.get("gpt-5").label == "GPT-5 (house)"
    assert catalog.get("gpt-5").gateway == "openai"  # untouched fields kept
    mine = catalog.get("my-llama")
    assert (mine.tier, mine.label, mine.hidden) == ("custom", "my-llama", False)
    assert [e.id for e in catalog.chain("gpt-5")] == ["gpt-5", "my-llama", "gpt-4.1"]


def test_user_file_in_toml(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        '[[models]]\nid = "mixtral"\ngateway = "groq"\nwire_name = "mixtral-8x7b"\nhidden = true\n',
        encoding="utf-8",
    )
    catalog = load_catalog(path)
    assert catalog.get("mixtral").hidden
    assert not catalog.is_visible("mixtral")


@pytest.mark.parametrize(
    ("models", "words"),
    [
        (
            [{"id": "gpt-4.1", "fallback": "gpt-5"}],
            "fallback cycle",
        ),
        ([{"id": "x", "gateway": "mistral", "wire_name": "x"}], "unknown gateway 'mistral'"),
        ([{"id": "x", "gateway": "groq", "wire_name": "x", "fallback": "nope"}], "'nope'"),
        ([{"id": "x", "gateway": "groq"}], "missing field(s) wire_name"),
        ([{"id": "x", "gateway": "groq", "wire_name": "x", "colour": "red"}], "colour"),
        ([{"gateway": "groq", "wire_name": "x"}], "string 'id'"),
        ([{"id": "gpt-5", "input_price_per_mtok": -1}], "negative"),
        ([{"id": "gpt-5", "context_window": 0}], "context_window"),
    ],
)
def test_bad_user_files_are_refused(
    tmp_path: Path, models: list[dict[str, object]], words: str
) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(_write(tmp_path / "models.json", models))
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_unreadable_or_invalid_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(CatalogError, match="not valid"):
        load_catalog(broken)


def test_chain_walk_guards_cycles_at_run_time() -> None:
    """Even a catalog that skipped validation cannot make the chain walk loop forever."""
    a = ModelEntry("a", "A", "t", "", "groq", "a", fallback="b")
    b = ModelEntry("b", "B", "t", "", "groq", "b", fallback="a")
    unchecked = Catalog(entries={"a": a, "b": b})
    assert [e.id for e in unchecked.chain("a")] == ["a", "b"]
    with pytest.raises(CatalogError, match="cycle"):
        Catalog.build([a, b])


def test_default_catalog_is_valid_and_ids_unique() -> None:
    ids = [e.id for e in DEFAULT_ENTRIES]
    assert len(ids) == len(set(ids))
    Catalog.build(DEFAULT_ENTRIES)
    with pytest.raises(CatalogError, match="unknown model"):
        load_catalog().get("nope")


# --- media: transcription entries and vision ----------------------------------------------------


def test_hidden_transcription_chain_and_its_prices() -> None:
    catalog = load_catalog()
    chain = list(catalog.chain("whisper-large-v3-turbo"))
    assert [(e.id, e.gateway, e.kind, e.hidden) for e in chain] == [
        ("whisper-large-v3-turbo", "groq", "transcription", True),
        ("gpt-4o-mini-transcribe", "openai", "transcription", True),
        ("whisper-1", "openai", "transcription", True),
    ]
    # $0.04 per hour of audio on Groq; OpenAI's $0.003 and $0.006 per minute.
    assert chain[0].audio_cost_usd(3600) == pytest.approx(0.04)
    assert chain[1].audio_cost_usd(60) == pytest.approx(0.003)
    assert chain[2].audio_cost_usd(60) == pytest.approx(0.006)


def test_visible_models_can_see_and_transcription_models_are_never_offered(
    tmp_path: Path,
) -> None:
    catalog = load_catalog()
    # Every family's head sees photos; Groq's text-only fallbacks are the only exceptions.
    assert all(e.vision for e in catalog.visible() if e.gateway != "groq")
    assert catalog.get("llama-4-scout").vision
    # Even unhidden by a user file, a transcription model is not a chat model.
    user = _write(tmp_path / "c.json", [{"id": "whisper-1", "hidden": False}])
    assert "whisper-1" not in {e.id for e in load_catalog(user).visible()}
    assert not load_catalog(user).is_visible("whisper-1")


@pytest.mark.parametrize(
    ("models", "fragment"),
    [
        ([{"id": "gpt-5", "fallback": "whisper-1"}], "is a transcription model, not a chat"),
        ([{"id": "whisper-1", "fallback": "gpt-4.1"}], "is a chat model, not a transcription"),
        ([{"id": "whisper-1", "gateway": "anthropic"}], "has no transcription endpoint"),
        ([{"id": "whisper-1", "kind": "speech"}], "unknown kind 'speech'"),
        ([{"id": "whisper-1", "price_per_second": -1}], "prices must not be negative"),
    ],
)
def test_media_catalog_mistakes_stop_start_up(
    tmp_path: Path, models: list[dict[str, object]], fragment: str
) -> None:
    with pytest.raises(CatalogError, match=fragment):
        load_catalog(_write(tmp_path / "c.json", models))


def test_transcription_model_setting_must_name_a_transcription_model() -> None:
    from bot.app import prepare
    from bot.config import ConfigError

    base = {"TELEGRAM_BOT_TOKEN": "1:x", "OPENAI_API_KEY": "sk-x"}
    with pytest.raises(ConfigError, match="TRANSCRIPTION_MODEL: 'gpt-5' is not a transcription"):
        prepare(load_settings(**base, TRANSCRIPTION_MODEL="gpt-5"))
    with pytest.raises(ConfigError, match="TRANSCRIPTION_MODEL: unknown model 'nope'"):
        prepare(load_settings(**base, TRANSCRIPTION_MODEL="nope"))
    assert prepare(load_settings(**base, TRANSCRIPTION_MODEL="whisper-1")) is not None


def _declare(path: Path, gateways: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"gateways": gateways, "models": []}), encoding="utf-8")
    return path


OPENROUTER = {
    "name": "openrouter",
    "protocol": "openai-compatible",
    "base_url": "https://openrouter.ai/api/v1/",
    "api_key_env": "OPENROUTER_API_KEY",
    "rps": 5,
}


def test_a_declared_gateway_carries_its_models_with_its_own_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "gateways": [OPENROUTER],
                "models": [
                    {"id": "ds", "gateway": "openrouter", "wire_name": "deepseek/deepseek-chat"}
                ],
            }
        ),
        encoding="utf-8",
    )
    catalog = load_catalog(path)
    [spec] = catalog.gateways
    assert (spec.protocol, spec.base_url, spec.rps) == ("openai", OPENROUTER["base_url"][:-1], 5)
    settings = load_settings(
        TELEGRAM_BOT_TOKEN="1:x", MODEL_CATALOG_FILE=str(path), OPENROUTER_API_KEY="or-1, or-2"
    )
    gateways = build_gateways(settings, catalog)
    assert gateways["openrouter"].keys == ("or-1", "or-2")
    assert gateways["openrouter"].requests_per_second == 5
    assert (
        gateways["openrouter"].litellm_model(catalog.get("ds")) == "openai/deepseek/deepseek-chat"
    )
    assert [e.id for e in available_models(catalog, gateways)] == ["ds"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"name": "groq"}, "the name is already taken"),
        ({"name": "Open Router"}, "lower-case"),
        ({"protocol": "gemini"}, "protocol must be 'openai-compatible' or 'anthropic'"),
        ({"base_url": "ftp://x/v1"}, "is not an http(s) URL"),
        ({"protocol": "anthropic", "base_url": "https://x.example/v1"}, "must not end in /v1"),
        ({"api_key_env": "openrouter key"}, "api_key_env must be an upper-case variable name"),
        ({"rps": 0}, "rps must be a positive number"),
        ({"region": "eu"}, "unknown field(s) region"),
    ],
)
def test_a_malformed_gateway_is_refused_with_one_line(
    tmp_path: Path, change: dict[str, object], words: str
) -> None:
    path = _declare(tmp_path / "c.json", [{**OPENROUTER, **change}])
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_gateway_declared_twice_or_missing_fields_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="already taken"):
        load_catalog(_declare(tmp_path / "a.json", [OPENROUTER, OPENROUTER]))
    partial = {k: v for k, v in OPENROUTER.items() if k != "api_key_env"}
    with pytest.raises(CatalogError, match=r"missing field\(s\) api_key_env"):
        load_catalog(_declare(tmp_path / "b.json", [partial]))
