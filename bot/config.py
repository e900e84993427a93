"""Settings from the environment and `.env`, validated once at start-up.

Every name here is a contract (see README "Configuration"). A bad value stops start-up with one
line naming the setting, because a bot that starts half-configured fails later, in a chat, where
nobody reads the log.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot import BotError
from memory.consolidation.jobs import MIN_RETRY_DELAY_S
from models.catalog import CatalogError, declared_gateways, keys_may_travel


def _split_csv(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _retry_delays(values: list[float]) -> list[float]:
    """A delay under MIN_RETRY_DELAY_S (0 above all) would re-run a failing job's paid model
    chain as soon as it failed, over and over."""
    if any(v < 0 for v in values):
        raise ValueError("delays must not be negative")
    if any(v < MIN_RETRY_DELAY_S for v in values):
        raise ValueError(f"each delay must be at least {MIN_RETRY_DELAY_S:g} s")
    return values


IdList = Annotated[list[int], NoDecode]
KeyList = Annotated[list[SecretStr], NoDecode]
DelayList = Annotated[list[float], NoDecode, AfterValidator(_retry_delays)]
HostList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    """All of mnemobot's settings. Names match the environment variables exactly."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        # Unknown names are refused in load_settings, except the key variables that gateways
        # declared in MODEL_CATALOG_FILE name (they cannot be fields: the owner picks them).
        extra="allow",
        case_sensitive=True,
        validate_default=True,
    )

    # Telegram
    TELEGRAM_BOT_TOKEN: SecretStr
    TELEGRAM_BASE_URL: str = "https://api.telegram.org/bot"
    TELEGRAM_MODE: Literal["polling", "webhook"] = "polling"
    # Private chats stream into native drafts with a Stop button; false: edits, as in groups.
    TELEGRAM_DRAFT_STREAMING: bool = True
    ALLOWED_USER_IDS: IdList = Field(default_factory=list)
    ADMIN_USER_IDS: IdList = Field(default_factory=list)

    # Storage
    DATABASE_PATH: Path = Path("data/mnemobot.sqlite3")

    # Models
    DEFAULT_MODEL: str | None = None
    MODEL_CATALOG_FILE: Path | None = None
    CHAT_TIMEOUT: float = Field(default=60.0, gt=0)
    CONSOLIDATION_MODEL: str = "llama-3.3-70b-versatile"
    CONSOLIDATION_TIMEOUT: float = Field(default=30.0, gt=0)
    CONSOLIDATION_RETRY_DELAYS: DelayList = Field(
        default_factory=lambda: [60.0, 300.0, 1800.0, 7200.0]
    )
    PROVIDER_WORKERS: int | None = Field(default=None, ge=1, le=16)  # unset: provider_workers()
    PROVIDER_WORKERS_AT_REST: int = Field(default=1, ge=1, le=16)
    MEMORY_WINDOW: int = Field(default=50, ge=4)
    MEMORY_KEEP_RECENT: int = Field(default=10, ge=1)
    MEMORY_MAX_CHARS: int = Field(default=6000, ge=500)
    SESSION_IDLE_MINUTES: float = Field(default=360.0, ge=0)  # 0 = sessions never go idle
    ARCHIVE_DAYS: float = Field(default=0.0, ge=0)  # 0 = archived words are kept until /forget
    AGENT_MAX_STEPS: int = Field(default=4, ge=0, le=20)
    MAX_ANSWER_TOKENS: int = Field(default=8192, ge=256, le=1_000_000)
    MAX_ANSWER_SECONDS: float = Field(default=300.0, gt=0)
    # Characters one answer may show and keep, all its rounds together (about 8 messages).
    MAX_ANSWER_CHARS: int = Field(default=32_000, ge=1000, le=1_000_000)

    # Scheduled tasks: active tasks per chat; a run this late (down, or queued) is skipped
    # with one line; the wall time of one run, all its rounds together.
    TASKS_PER_CHAT: int = Field(default=10, ge=1, le=1000)
    TASK_MAX_LATE_HOURS: float = Field(default=3.0, gt=0)
    TASK_MAX_SECONDS: float = Field(default=180.0, gt=0, le=3600)

    # Media: voice/audio/video notes are transcribed, photos seen, documents read.
    TRANSCRIPTION_MODEL: str = "whisper-large-v3-turbo"
    TRANSCRIPTION_TIMEOUT: float = Field(default=60.0, gt=0)
    MAX_VOICE_SECONDS: int = Field(default=600, ge=1)
    MAX_DOCUMENT_BYTES: int = Field(default=10_000_000, ge=1)
    DOCUMENT_TOKEN_BUDGET: int = Field(default=12_000, ge=500)
    DOCUMENT_TIMEOUT: float = Field(default=30.0, gt=0)

    # Web: web_read always (unless WEB_DAILY_CALLS is 0), web_search when a SearXNG is set.
    WEB_SEARCH_URL: str | None = None
    # Hosts, addresses or CIDRs web_read may reach although private (WEB_SEARCH_URL's host
    # needs no entry: it is reached by web_search only).
    WEB_ALLOW_PRIVATE: HostList = Field(default_factory=list)
    # A long-context model can take more; the prompt carries a web_read result of this size
    # whole (agent/loop.py tool_result_chars).
    WEB_READ_MAX_CHARS: int = Field(default=15_000, ge=1000, le=100_000)
    # Web calls (reads and searches) per user per UTC day; 0 turns web use off.
    WEB_DAILY_CALLS: int = Field(default=100, ge=0)

    # The operator's MCP servers (mcp_client/): a JSON file in the `mcpServers` shape; unset,
    # no server is started and the SDK is never loaded.
    MCP_CONFIG: Path | None = None
    # Longest MCP tool result handed to the model; the rest is cut, marked.
    MCP_MAX_RESULT_CHARS: int = Field(default=15_000, ge=1000, le=100_000)
    # MCP calls per user per UTC day (failed ones too); 0 turns MCP tools off.
    MCP_USER_DAILY_CALLS: int = Field(default=200, ge=0)

    # Gateways: any *_API_KEY may hold several comma-separated keys (rotated).
    OPENAI_API_KEY: KeyList = Field(default_factory=list)
    OPENAI_API_BASE: str = "https://api.openai.com/v1"
    # Optional ceilings of our own; unset = paced by the limits each provider reports.
    OPENAI_RPS: float | None = Field(default=None, gt=0)
    ANTHROPIC_API_KEY: KeyList = Field(default_factory=list)
    ANTHROPIC_API_BASE: str = "https://api.anthropic.com"
    ANTHROPIC_RPS: float | None = Field(default=None, gt=0)
    GROQ_API_KEY: KeyList = Field(default_factory=list)
    GROQ_API_BASE: str = "https://api.groq.com/openai/v1"
    GROQ_RPS: float | None = Field(default=None, gt=0)

    # Operations
    LOG_FORMAT: Literal["json", "console"] | None = None
    LOG_LEVEL: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    WEBHOOK_URL: str | None = None
    WEBHOOK_LISTEN: str = "127.0.0.1"
    WEBHOOK_PORT: int = Field(default=8443, ge=1, le=65535)
    WEBHOOK_SECRET: SecretStr | None = None
    HEALTH_PORT: int | None = Field(default=None, ge=1, le=65535)
    SHUTDOWN_GRACE_SECONDS: float = Field(default=20.0, ge=0)

    # Budgets and limits (0 = no cap)
    USER_DAILY_BUDGET_USD: float = Field(default=0.0, ge=0)
    USER_MONTHLY_BUDGET_USD: float = Field(default=0.0, ge=0)
    BOT_DAILY_BUDGET_USD: float = Field(default=0.0, ge=0)
    BOT_MONTHLY_BUDGET_USD: float = Field(default=0.0, ge=0)
    USER_MESSAGES_PER_MINUTE: int = Field(default=20, ge=0)
    MAX_INPUT_CHARS: int = Field(default=16000, ge=1)
    SPLIT_MESSAGE_WINDOW: float = Field(default=1.5, ge=0)

    @field_validator("ALLOWED_USER_IDS", "ADMIN_USER_IDS", mode="before")
    @classmethod
    def _parse_ids(cls, value: object) -> list[int]:
        ids = []
        for part in _split_csv(value):
            if not part.lstrip("-").isdigit():
                raise ValueError(f"{part!r} is not a numeric Telegram user id")
            ids.append(int(part))
        return ids

    @field_validator("WEB_ALLOW_PRIVATE", mode="before")
    @classmethod
    def _parse_hosts(cls, value: object) -> list[str]:
        return _split_csv(value)

    @field_validator("WEB_SEARCH_URL")
    @classmethod
    def _search_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return _http_url(value.strip().rstrip("/"))

    @field_validator("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY", mode="before")
    @classmethod
    def _parse_keys(cls, value: object) -> list[str]:
        return _split_csv(value)

    @field_validator("CONSOLIDATION_RETRY_DELAYS", mode="before")
    @classmethod
    def _parse_delays(cls, value: object) -> list[float]:
        parts = _split_csv(value)
        if not parts:
            raise ValueError("at least one delay is needed")
        return [float(p) for p in parts]

    @field_validator("TELEGRAM_BOT_TOKEN")
    @classmethod
    def _token_present(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError("is empty; set it to the token @BotFather gave you")
        return value

    @field_validator("ANTHROPIC_API_BASE")
    @classmethod
    def _anthropic_base(cls, value: str) -> str:
        value = value.rstrip("/")
        if value.endswith("/v1"):
            raise ValueError("must not end in /v1 (litellm appends /v1/messages itself)")
        return _key_base(value)

    @field_validator("OPENAI_API_BASE", "GROQ_API_BASE")
    @classmethod
    def _openai_like_base(cls, value: str) -> str:
        value = value.rstrip("/")
        if "/v1" not in value:
            raise ValueError("must include /v1 (an OpenAI-compatible base URL)")
        return _key_base(value)

    @field_validator("TELEGRAM_BASE_URL")
    @classmethod
    def _telegram_base(cls, value: str) -> str:
        """The bot token is in the path of every request: plain http would show it to every
        network between here and a Bot API server elsewhere."""
        _http_url(value)
        if not _https_or_loopback(value):
            raise ValueError(
                "must be https:// (the bot token is in every request's path; plain http only "
                "to this machine, e.g. http://127.0.0.1:8081/bot)"
            )
        return value


# Every setting's name: none may be where a gateway of the catalog file takes its keys from
# (`api_key_env = "TELEGRAM_BOT_TOKEN"` would send the bot token to that gateway's host).
SETTING_NAMES = frozenset(Settings.model_fields)

# Former settings that are constants: a .env that still sets one is told so by name, and
# what the value is fixed at, instead of an unknown-setting error.
RETIRED_SETTINGS = {
    "CONSOLIDATION_CONCURRENCY": "fixed at 2 jobs at once (memory/consolidation/worker.py)",
    "PROVIDER_WORKER_HEARTBEAT_S": "fixed at 5 s (models/worker/pool.py WorkerSettings)",
    "PROVIDER_WORKER_MAX_RSS_MB": "fixed at 1024 MB (models/worker/pool.py WorkerSettings)",
}


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


def _https_or_loopback(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme.lower() == "https":
        return True
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _key_base(value: str) -> str:
    """A built-in gateway's base: its API key travels with every request, so the rule is the
    one declared gateways follow (models/catalog.py keys_may_travel): https anywhere, plain
    http only to a loopback or private address. http://api.example.com would send the key in
    clear over the internet."""
    _http_url(value)
    if not keys_may_travel(value):
        raise ValueError(
            "must be https:// (plain http only to a loopback or private address, "
            "e.g. http://127.0.0.1:11434/v1)"
        )
    return value


class ConfigError(BotError):
    """A setting is missing or invalid; the message is one line that names it."""


GIB = 1024**3


def provider_workers(
    settings: Settings, *, cpus: float | None = None, memory_bytes: int | None = None
) -> int:
    """At most how many litellm worker processes to run (models/worker/pool.py): PROVIDER_WORKERS,
    or when unset 2 on a machine with 2 CPUs and 2 GiB of memory or more, else 1 (and never
    fewer than PROVIDER_WORKERS_AT_REST). PROVIDER_WORKERS_AT_REST run at rest (1 by default);
    another starts only under load (one worker uses at most one core; measured with
    benchmarks/turn_overhead.py on 2 cores at 100 conversations starting within a second, one
    worker alone gave an intake p99 of 0.47–0.86 s, a second forked under load 36–296 ms
    (median 128 over 12 runs), two from the start 27–303 ms)."""
    if settings.PROVIDER_WORKERS is not None:
        return settings.PROVIDER_WORKERS
    cpus = _usable_cpus() if cpus is None else cpus
    memory_bytes = _usable_memory() if memory_bytes is None else memory_bytes
    by_machine = 2 if cpus >= 2 and memory_bytes >= 2 * GIB else 1
    return max(by_machine, settings.PROVIDER_WORKERS_AT_REST)


def _usable_cpus() -> float:
    """CPUs this process may run on, within a container's CPU quota (cgroup v2) if it has one."""
    cpus: float = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, int(quota) / int(period))
    except (OSError, ValueError):
        pass
    return cpus


def _usable_memory() -> int:
    """Physical memory, within a container's memory limit (cgroup v2) if it has one."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            memory = min(memory, int(limit))
    except (OSError, ValueError):
        pass
    return memory


def load_settings(**overrides: Any) -> Settings:
    """Load and validate settings, turning pydantic's report into one readable line."""
    try:
        settings = Settings(**overrides)  # pydantic checks every value
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    _check_extra(settings)
    _check_cross_field(settings)
    return settings


def _check_extra(settings: Settings) -> None:
    """Refuse unknown settings (typos), except the keys of gateways the catalog file declares,
    which are kept as secrets."""
    extra = settings.model_extra or {}
    if not extra:
        return
    try:
        declared = declared_gateways(settings.MODEL_CATALOG_FILE, reserved=SETTING_NAMES)
        allowed = {g.key_env for g in declared} | mcp_variables(settings.MCP_CONFIG)
    except CatalogError as exc:
        raise ConfigError(f"MODEL_CATALOG_FILE: {exc}") from None
    for name in extra:
        if name in RETIRED_SETTINGS:
            raise ConfigError(f"{name}: no longer a setting, {RETIRED_SETTINGS[name]}; remove it")
        if name not in allowed:
            raise ConfigError(f"{name}: unknown setting (check the spelling against .env.example)")
        extra[name] = SecretStr(str(extra[name]))


def mcp_variables(path: Path | None) -> set[str]:
    """The `${VAR}` names MCP_CONFIG's servers use: such a variable may be set in .env (a
    token for a server's headers), where it is kept as a secret like a gateway's key. Read from
    the raw file, so the names are known before (and whether or not) the file parses."""
    if path is None:
        return set()
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()  # start-up refuses the file with its own line (bot/app.py prepare)
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text))


def mcp_environ(settings: Settings) -> dict[str, str]:
    """What `${VAR}` in MCP_CONFIG is filled from: the environment, and the .env lines of
    the variables it names."""
    environ = dict(os.environ)
    for name in mcp_variables(settings.MCP_CONFIG):
        value = (settings.model_extra or {}).get(name)
        if isinstance(value, SecretStr):
            environ[name] = value.get_secret_value()
    return environ


def gateway_keys(settings: Settings, key_env: str) -> list[str]:
    """The comma-separated keys in a declared gateway's variable (.env first, then the
    environment), like every `*_API_KEY`."""
    value = (settings.model_extra or {}).get(key_env)
    text = value.get_secret_value() if isinstance(value, SecretStr) else os.environ.get(key_env)
    return _split_csv(text)


def _check_cross_field(settings: Settings) -> None:
    if settings.TELEGRAM_MODE == "webhook":
        if not settings.WEBHOOK_URL:
            raise ConfigError("WEBHOOK_URL: required when TELEGRAM_MODE=webhook")
        if not settings.WEBHOOK_URL.startswith("https://"):
            raise ConfigError("WEBHOOK_URL: must be an https:// URL Telegram can reach")
        if settings.WEBHOOK_SECRET is None or not settings.WEBHOOK_SECRET.get_secret_value():
            raise ConfigError("WEBHOOK_SECRET: required when TELEGRAM_MODE=webhook")
    if settings.MEMORY_KEEP_RECENT >= settings.MEMORY_WINDOW:
        raise ConfigError("MEMORY_KEEP_RECENT: must be smaller than MEMORY_WINDOW")
    if (
        settings.PROVIDER_WORKERS is not None
        and settings.PROVIDER_WORKERS_AT_REST > settings.PROVIDER_WORKERS
    ):
        raise ConfigError("PROVIDER_WORKERS_AT_REST: must not be more than PROVIDER_WORKERS")


def _one_line(exc: ValidationError) -> str:
    error = exc.errors()[0]
    name = ".".join(str(part) for part in error["loc"] if not isinstance(part, int)) or "settings"
    if error["type"] == "missing":
        return f"{name}: required but not set (put it in .env or the environment)"
    if error["type"] == "extra_forbidden":
        return f"{name}: unknown setting (check the spelling against .env.example)"
    message = error["msg"].removeprefix("Value error, ")
    return f"{name}: {message}"
