"""Settings: exact names, parsing, and one clear line naming the setting for every bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import build_gateways, prepare, resolve_default_model, secrets_of
from bot.config import GIB, ConfigError, Settings, load_settings, provider_workers
from models.catalog import load_catalog
from tests.support.paths import REPO

TOKEN = "123456:TEST-TOKEN"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real .env and no stray environment variables leak into these tests."""
    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        monkeypatch.delenv(name, raising=False)


def _error(**overrides: object) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(**overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_match_the_design_brief() -> None:
    s = load_settings(TELEGRAM_BOT_TOKEN=TOKEN)
    assert s.TELEGRAM_BASE_URL == "https://api.telegram.org/bot"
    assert s.ALLOWED_USER_IDS == [] and s.ADMIN_USER_IDS == []
    assert s.DATABASE_PATH == Path("data/mnemobot.sqlite3")
    assert s.CONSOLIDATION_MODEL == "llama-3.3-70b-versatile"
    assert s.CONSOLIDATION_TIMEOUT == 30
    assert s.CONSOLIDATION_RETRY_DELAYS == [60, 300, 1800, 7200]
    assert s.MEMORY_WINDOW == 50
    assert s.OPENAI_API_BASE == "https://api.openai.com/v1"
    assert s.ANTHROPIC_API_BASE == "https://api.anthropic.com"
    assert s.GROQ_API_BASE == "https://api.groq.com/openai/v1"
    assert s.TELEGRAM_MODE == "polling"
    assert s.WEBHOOK_LISTEN == "127.0.0.1" and s.WEBHOOK_PORT == 8443
    assert s.HEALTH_PORT is None


def test_missing_token_names_the_setting() -> None:
    message = _error()
    assert message.startswith("TELEGRAM_BOT_TOKEN:")
    assert "required" in message


def test_blank_token_is_refused() -> None:
    assert _error(TELEGRAM_BOT_TOKEN="   ").startswith("TELEGRAM_BOT_TOKEN:")


def test_env_file_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        f"TELEGRAM_BOT_TOKEN={TOKEN}\nALLOWED_USER_IDS=1, 22 ,333\n"
        "OPENAI_API_KEY=sk-one,sk-two\nCONSOLIDATION_RETRY_DELAYS=1,2.5\n",
        encoding="utf-8",
    )
    s = load_settings()
    assert s.TELEGRAM_BOT_TOKEN.get_secret_value() == TOKEN
    assert s.ALLOWED_USER_IDS == [1, 22, 333]
    assert [k.get_secret_value() for k in s.OPENAI_API_KEY] == ["sk-one", "sk-two"]
    assert s.CONSOLIDATION_RETRY_DELAYS == [1.0, 2.5]


def test_environment_overrides_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\nLOG_LEVEL=INFO\n")
    monkeypatch.setenv("LOG_LEVEL", "DEBUG")
    assert load_settings().LOG_LEVEL == "DEBUG"


def test_unknown_setting_in_env_file_is_named(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\nOPENAI_APIKEY=sk-typo\n")
    message = _error()
    assert message.startswith("OPENAI_APIKEY:")
    assert "unknown setting" in message
    assert "sk-typo" not in message


def test_a_setting_that_became_a_constant_is_named_with_its_value(tmp_path: Path) -> None:
    """An upgraded bot whose .env still sets a retired setting is told which, and what it is
    fixed at, instead of "unknown setting" (a typo's message)."""
    (tmp_path / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\nPROVIDER_WORKER_HEARTBEAT_S=9\n")
    message = _error()
    assert message == (
        "PROVIDER_WORKER_HEARTBEAT_S: no longer a setting, fixed at 5 s "
        "(models/worker/pool.py WorkerSettings); remove it"
    )


@pytest.mark.parametrize(
    ("overrides", "setting", "words"),
    [
        ({"ALLOWED_USER_IDS": "12,abc"}, "ALLOWED_USER_IDS", "'abc' is not a numeric"),
        ({"ADMIN_USER_IDS": "@ann"}, "ADMIN_USER_IDS", "not a numeric"),
        ({"ANTHROPIC_API_BASE": "https://api.anthropic.com/v1"}, "ANTHROPIC_API_BASE", "/v1"),
        ({"ANTHROPIC_API_BASE": "https://api.anthropic.com/v1/"}, "ANTHROPIC_API_BASE", "/v1"),
        ({"OPENAI_API_BASE": "https://api.openai.com"}, "OPENAI_API_BASE", "/v1"),
        ({"GROQ_API_BASE": "ftp://x/v1"}, "GROQ_API_BASE", "http(s)"),
        # The key travels with every request: plain http only to loopback or private addresses.
        ({"GROQ_API_BASE": "http://api.groq.com/openai/v1"}, "GROQ_API_BASE", "https://"),
        ({"OPENAI_API_BASE": "http://203.0.113.9/v1"}, "OPENAI_API_BASE", "https://"),
        ({"ANTHROPIC_API_BASE": "http://api.anthropic.com"}, "ANTHROPIC_API_BASE", "https://"),
        ({"TELEGRAM_BASE_URL": "localhost:8081/bot"}, "TELEGRAM_BASE_URL", "http(s)"),
        # The token is in every request's path: plain http only to this machine.
        ({"TELEGRAM_BASE_URL": "http://bot-api:8081/bot"}, "TELEGRAM_BASE_URL", "https://"),
        ({"TELEGRAM_BASE_URL": "http://192.168.1.5:8081/bot"}, "TELEGRAM_BASE_URL", "https://"),
        ({"TELEGRAM_BASE_URL": "http://api.telegram.org/bot"}, "TELEGRAM_BASE_URL", "https://"),
        ({"WEB_READ_MAX_CHARS": "100001"}, "WEB_READ_MAX_CHARS", "100000"),
        ({"CONSOLIDATION_TIMEOUT": "-1"}, "CONSOLIDATION_TIMEOUT", "greater than 0"),
        ({"CHAT_TIMEOUT": "0"}, "CHAT_TIMEOUT", "greater than 0"),
        ({"CONSOLIDATION_RETRY_DELAYS": "60,-5"}, "CONSOLIDATION_RETRY_DELAYS", "negative"),
        ({"CONSOLIDATION_RETRY_DELAYS": ""}, "CONSOLIDATION_RETRY_DELAYS", "at least one"),
        # 0 would re-run a failing job's paid model chain as soon as it failed, forever.
        ({"CONSOLIDATION_RETRY_DELAYS": "0"}, "CONSOLIDATION_RETRY_DELAYS", "at least 1 s"),
        ({"CONSOLIDATION_RETRY_DELAYS": "60,0.5"}, "CONSOLIDATION_RETRY_DELAYS", "at least 1 s"),
        ({"MEMORY_WINDOW": "ten"}, "MEMORY_WINDOW", "integer"),
        ({"PROVIDER_WORKERS": "0"}, "PROVIDER_WORKERS", "greater than or equal to 1"),
        (
            {"PROVIDER_WORKERS": "2", "PROVIDER_WORKERS_AT_REST": "3"},
            "PROVIDER_WORKERS_AT_REST",
            "not be more than PROVIDER_WORKERS",
        ),
        ({"TELEGRAM_MODE": "push"}, "TELEGRAM_MODE", "polling"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL", "DEBUG"),
        ({"WEBHOOK_PORT": "70000"}, "WEBHOOK_PORT", "65535"),
        ({"MEMORY_WINDOW": "10", "MEMORY_KEEP_RECENT": "10"}, "MEMORY_KEEP_RECENT", "smaller"),
        ({"TELEGRAM_MODE": "webhook"}, "WEBHOOK_URL", "required"),
        (
            {"TELEGRAM_MODE": "webhook", "WEBHOOK_URL": "http://example.org/hook"},
            "WEBHOOK_URL",
            "https",
        ),
        (
            {"TELEGRAM_MODE": "webhook", "WEBHOOK_URL": "https://example.org/hook"},
            "WEBHOOK_SECRET",
            "required",
        ),
    ],
)
def test_invalid_values_stop_with_one_line(
    overrides: dict[str, str], setting: str, words: str
) -> None:
    message = _error(TELEGRAM_BOT_TOKEN=TOKEN, **overrides)
    assert message.startswith(f"{setting}:"), message
    assert words in message, message


@pytest.mark.parametrize(
    "url",
    [
        "https://bot-api.example.org/bot",
        "http://127.0.0.1:8081/bot",
        "http://127.0.0.53:8081/bot",
        "http://[::1]:8081/bot",
        "http://localhost:8081/bot",
    ],
)
def test_the_bot_api_is_https_or_on_this_machine(url: str) -> None:
    assert load_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_BASE_URL=url).TELEGRAM_BASE_URL == url


def test_a_long_context_model_may_read_long_pages() -> None:
    settings = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, WEB_READ_MAX_CHARS="100000")
    assert settings.WEB_READ_MAX_CHARS == 100_000


def test_error_lines_never_show_keys_or_token() -> None:
    message = _error(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-secret-123", MEMORY_WINDOW="many")
    assert "sk-secret-123" not in message and TOKEN not in message
    settings = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-secret-123")
    assert "sk-secret-123" not in repr(settings) and TOKEN not in repr(settings)
    assert "sk-secret-123" not in repr(build_gateways(settings))


def test_gateways_resolved_from_settings() -> None:
    s = load_settings(
        TELEGRAM_BOT_TOKEN=TOKEN,
        GROQ_API_KEY="gsk-a, gsk-b",
        ANTHROPIC_API_BASE="http://127.0.0.1:9/",
        OPENAI_API_BASE="http://127.0.0.1:8/v1",
    )
    gateways = build_gateways(s)
    assert gateways["groq"].keys == ("gsk-a", "gsk-b") and gateways["groq"].configured
    assert gateways["anthropic"].api_base == "http://127.0.0.1:9"
    assert gateways["openai"].api_base == "http://127.0.0.1:8/v1"
    assert not gateways["openai"].configured
    assert {g.protocol for g in gateways.values()} == {"openai", "anthropic", "groq"}


def test_default_model_is_first_model_with_a_key() -> None:
    anthropic_only = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-ant-x")
    openai_only = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-x")
    assert prepare(anthropic_only).default_model.startswith("claude-")
    assert prepare(openai_only).default_model.startswith("gpt-")


@pytest.mark.parametrize(
    ("default", "words"),
    [
        ("gpt-9", "unknown model 'gpt-9'"),
        ("qwen3-32b", "hidden"),
        ("claude-opus-4-5", "ANTHROPIC_API_KEY"),
    ],
)
def test_unusable_default_model_is_refused(default: str, words: str) -> None:
    settings = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-x", DEFAULT_MODEL=default)
    with pytest.raises(ConfigError) as info:
        prepare(settings)
    assert str(info.value).startswith("DEFAULT_MODEL:")
    assert words in str(info.value)


def test_no_provider_key_at_all_is_refused() -> None:
    settings = load_settings(TELEGRAM_BOT_TOKEN=TOKEN)
    catalog = load_catalog()
    with pytest.raises(ConfigError) as info:
        resolve_default_model(settings, catalog, build_gateways(settings))
    assert "OPENAI_API_KEY" in str(info.value)


def test_unknown_consolidation_model_is_refused() -> None:
    settings = load_settings(
        TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-x", CONSOLIDATION_MODEL="nope"
    )
    with pytest.raises(ConfigError, match=r"^CONSOLIDATION_MODEL:"):
        prepare(settings)


def test_env_example_lists_every_setting() -> None:
    example = REPO / ".env.example"
    names = {
        line.split("=", 1)[0].lstrip("# ").strip()
        for line in example.read_text(encoding="utf-8").splitlines()
        if "=" in line and not line.startswith("##")
    }
    missing = set(Settings.model_fields) - names
    assert not missing, f".env.example lacks {sorted(missing)}"
    unknown = {n for n in names if n.isupper() and n not in Settings.model_fields}
    assert not unknown, f".env.example names unknown settings {sorted(unknown)}"


def test_readme_documents_every_setting() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [name for name in Settings.model_fields if f"`{name}`" not in readme]
    assert not missing, f"README's configuration table lacks {missing}"
    # The two set-up commands come first, before any other section.
    assert -1 < readme.find("make run") < readme.find("make test") < readme.find("## Set-up")


def test_only_the_key_variables_a_catalog_file_declares_are_accepted(tmp_path: Path) -> None:
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        '[[gateways]]\nname = "local"\nprotocol = "openai-compatible"\n'
        'base_url = "http://127.0.0.1:11434/v1"\napi_key_env = "OLLAMA_API_KEY"\n',
        encoding="utf-8",
    )
    settings = load_settings(
        TELEGRAM_BOT_TOKEN=TOKEN, MODEL_CATALOG_FILE=str(catalog), OLLAMA_API_KEY="ollama-key"
    )
    # Kept as a secret: the settings' repr never shows it.
    assert "ollama-key" not in repr(settings)
    assert "ollama-key" in secrets_of(settings)
    with pytest.raises(ConfigError) as info:
        load_settings(
            TELEGRAM_BOT_TOKEN=TOKEN, MODEL_CATALOG_FILE=str(catalog), OLAMA_API_KEY="typo"
        )
    assert str(info.value).startswith("OLAMA_API_KEY: unknown setting")


def test_only_a_groq_key_is_enough_to_start() -> None:
    settings = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, GROQ_API_KEY="gsk-only")
    prepared = prepare(settings)
    assert prepared.default_model == "llama-4-scout"
    assert prepared.catalog.get(prepared.default_model).gateway == "groq"


def test_provider_workers_follow_the_machine_unless_set() -> None:
    unset = load_settings(TELEGRAM_BOT_TOKEN=TOKEN)
    assert provider_workers(unset, cpus=2, memory_bytes=4 * GIB) == 2
    assert provider_workers(unset, cpus=8, memory_bytes=64 * GIB) == 2
    assert provider_workers(unset, cpus=1, memory_bytes=4 * GIB) == 1
    assert provider_workers(unset, cpus=1.5, memory_bytes=4 * GIB) == 1  # a container's quota
    assert provider_workers(unset, cpus=2, memory_bytes=1 * GIB) == 1  # a 1 GB VPS
    chosen = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, PROVIDER_WORKERS="3")
    assert provider_workers(chosen, cpus=1, memory_bytes=1 * GIB) == 3
    kept = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, PROVIDER_WORKERS_AT_REST="2")
    assert provider_workers(kept, cpus=1, memory_bytes=1 * GIB) == 2  # never fewer than at rest


def test_mcp_config_reads_its_tokens_from_env_file_and_keeps_them_secret(tmp_path: Path) -> None:
    """A `${VAR}` of MCP_CONFIG may be set in .env (it is no typo there), fills the server's
    header, and is one of the secrets the logs never show."""
    (tmp_path / "mcp.json").write_text(
        '{"mcpServers": {"notes": {"url": "https://notes.example.org/mcp",'
        ' "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}}}}'
    )
    (tmp_path / ".env").write_text(
        f"TELEGRAM_BOT_TOKEN={TOKEN}\nOPENAI_API_KEY=sk-x\nMCP_CONFIG=mcp.json\n"
        "NOTES_TOKEN=notes-secret-42\n"
    )
    settings = load_settings()
    prepared = prepare(settings)
    assert prepared.mcp is not None
    [notes] = prepared.mcp.servers
    assert dict(notes.headers) == {"Authorization": "Bearer notes-secret-42"}
    assert "notes-secret-42" in secrets_of(settings)
    assert settings.MCP_MAX_RESULT_CHARS == 15_000 and settings.MCP_USER_DAILY_CALLS == 200


def test_a_bad_mcp_config_stops_start_up_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"time": {"command": "x", "timeout": -1}}}')
    settings = load_settings(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-x", MCP_CONFIG="mcp.json")
    with pytest.raises(ConfigError) as info:
        prepare(settings)
    assert str(info.value) == (
        "MCP_CONFIG mcp.json: server 'time', field 'timeout': must be seconds per call, above 0, "
        "at most 600"
    )


def test_without_mcp_config_or_with_no_calls_there_is_no_mcp(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"time": {"command": "x"}}}')
    assert prepare(load_settings(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-x")).mcp is None
    off = load_settings(
        TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="sk-x", MCP_CONFIG="mcp.json",
        MCP_USER_DAILY_CALLS=0,
    )  # fmt: skip
    assert prepare(off).mcp is None
