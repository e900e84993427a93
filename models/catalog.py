"""The model catalog: the single source of truth for which models exist and how to reach them.

Visible entries are what users pick with /model; hidden entries only serve background chains such
as consolidation. A user file may add or override entries and declare more gateways (OpenRouter,
a local Ollama or vLLM, DeepSeek, Gemini's OpenAI-compatible endpoint...); a catalog with a
cycle, an unknown gateway, a dangling fallback or a malformed gateway is refused at start-up
rather than discovered mid-outage.
"""

from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from models import ModelsError

GATEWAY_NAMES = ("openai", "anthropic", "groq")
# What a user file may call a gateway's protocol, and the protocol the transport speaks for it.
GATEWAY_PROTOCOLS = {"openai-compatible": "openai", "openai": "openai", "anthropic": "anthropic"}
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
# The built-in gateways' key variables: a declared gateway naming one would send that
# provider's keys to its own base_url.
BUILT_IN_KEY_VARIABLES = frozenset(f"{name.upper()}_API_KEY" for name in GATEWAY_NAMES)
# Where plain http may carry keys besides loopback: the private ranges of RFC 1918 and IPv6's
# unique local addresses (not `is_private`, which also counts documentation and reserved ranges
# and link-local, where a cloud's metadata service lives).
_LOCAL_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)
MODEL_KINDS = ("chat", "transcription")
# Gateways whose protocol has an audio transcription endpoint (Anthropic has none).
TRANSCRIPTION_GATEWAYS = ("openai", "groq")


class CatalogError(ModelsError):
    """The catalog (built-in or user file) is inconsistent; the message names the entry."""


@dataclass(frozen=True)
class GatewaySpec:
    """A gateway declared in the user's catalog file, beside the three built in.

    `key_env` names the environment variable (or .env line) holding its keys, comma-separated
    like every `*_API_KEY`; `rps` is an optional ceiling of our own (unset: the limits the
    provider reports are learned from its headers).
    """

    name: str
    protocol: str  # "openai" (any OpenAI-compatible API) or "anthropic"
    base_url: str
    key_env: str
    rps: float | None = None


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model as users and chains see it.

    `id` is what users type and what the database stores; `wire_name` is what the provider
    expects. Prices are USD per million tokens, or per second of audio for transcription.

    `kind` is "chat" (answers messages) or "transcription" (turns speech into text); a chain
    never mixes kinds, and only chat models can be picked with /model. `vision`: the model
    accepts image input, so photos are sent to it as images.
    """

    id: str
    label: str
    tier: str
    description: str
    gateway: str
    wire_name: str
    fallback: str | None = None
    hidden: bool = False
    input_price_per_mtok: float = 0.0
    output_price_per_mtok: float = 0.0
    context_window: int = 128_000
    # False: the model cannot call tools; chat turns offer it none (memory tools included).
    tools: bool = True
    vision: bool = False
    kind: str = "chat"
    price_per_second: float = 0.0

    def audio_cost_usd(self, seconds: float) -> float:
        return max(0.0, seconds) * self.price_per_second

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_price_per_mtok
            + completion_tokens * self.output_price_per_mtok
        ) / 1_000_000


DEFAULT_ENTRIES: tuple[ModelEntry, ...] = (
    # Visible: current Claude and GPT models, each falling back inside its family.
    ModelEntry(
        "claude-opus-4-5", "Claude Opus 4.5", "frontier",
        "Anthropic's most capable model: hard reasoning and long code.",
        "anthropic", "claude-opus-4-5", fallback="claude-sonnet-4-5",
        input_price_per_mtok=5.0, output_price_per_mtok=25.0, context_window=200_000,
        vision=True,
    ),
    ModelEntry(
        "claude-sonnet-4-5", "Claude Sonnet 4.5", "balanced",
        "Strong everyday model for writing, analysis and code.",
        "anthropic", "claude-sonnet-4-5", fallback="claude-haiku-4-5",
        input_price_per_mtok=3.0, output_price_per_mtok=15.0, context_window=200_000,
        vision=True,
    ),
    ModelEntry(
        "gpt-5", "GPT-5", "frontier",
        "OpenAI's flagship reasoning model.",
        "openai", "gpt-5", fallback="gpt-5-mini",
        input_price_per_mtok=1.25, output_price_per_mtok=10.0, context_window=400_000,
        vision=True,
    ),
    ModelEntry(
        "gpt-5-mini", "GPT-5 mini", "fast",
        "Fast and cheap GPT-5 for quick questions.",
        "openai", "gpt-5-mini", fallback="gpt-4.1",
        input_price_per_mtok=0.25, output_price_per_mtok=2.0, context_window=400_000,
        vision=True,
    ),
    ModelEntry(
        "gpt-4.1", "GPT-4.1", "balanced",
        "Reliable non-reasoning GPT with a very long context.",
        "openai", "gpt-4.1", fallback=None,
        input_price_per_mtok=2.0, output_price_per_mtok=8.0, context_window=1_047_576,
        vision=True,
    ),
    # Visible on Groq, so an owner whose only key is Groq's (its free tier) can chat; each falls
    # back inside Groq (the fallbacks read no photos). Prices: Groq's on-demand prices per
    # million tokens, as for the hidden entries of the same models.
    ModelEntry(
        "llama-4-scout", "Llama 4 Scout (Groq)", "open",
        "Meta's multimodal Llama 4 on Groq: fast answers, reads photos too.",
        "groq", "meta-llama/llama-4-scout-17b-16e-instruct", fallback="llama-3.3-70b",
        input_price_per_mtok=0.11, output_price_per_mtok=0.34, context_window=131_072,
        vision=True,
    ),
    ModelEntry(
        "llama-3.3-70b", "Llama 3.3 70B (Groq)", "open",
        "Meta's versatile 70B model on Groq: quick everyday answers.",
        "groq", "llama-3.3-70b-versatile", fallback="llama-3.1-8b",
        input_price_per_mtok=0.59, output_price_per_mtok=0.79, context_window=131_072,
    ),
    ModelEntry(
        "llama-3.1-8b", "Llama 3.1 8B (Groq)", "fast",
        "Small and very fast; the last resort of the Groq models.",
        "groq", "llama-3.1-8b-instant", fallback=None,
        input_price_per_mtok=0.05, output_price_per_mtok=0.08, context_window=131_072,
    ),
    # Hidden consolidation chain: Groq-hosted, cheap and fast, then reliable tool callers.
    ModelEntry(
        "llama-3.3-70b-versatile", "Llama 3.3 70B", "background",
        "Consolidation head: cheap, fast tool calls on Groq.",
        "groq", "llama-3.3-70b-versatile", fallback="qwen3-32b", hidden=True,
        input_price_per_mtok=0.59, output_price_per_mtok=0.79, context_window=131_072,
    ),
    ModelEntry(
        "qwen3-32b", "Qwen3 32B", "background",
        "Second consolidation model on Groq.",
        "groq", "qwen/qwen3-32b", fallback="llama-4-scout-17b-16e-instruct", hidden=True,
        input_price_per_mtok=0.29, output_price_per_mtok=0.59, context_window=131_072,
    ),
    ModelEntry(
        "llama-4-scout-17b-16e-instruct", "Llama 4 Scout", "background",
        "Third consolidation model on Groq.",
        "groq", "meta-llama/llama-4-scout-17b-16e-instruct", fallback="gpt-4.1-mini",
        hidden=True,
        input_price_per_mtok=0.11, output_price_per_mtok=0.34, context_window=131_072,
    ),
    ModelEntry(
        "gpt-4.1-mini", "GPT-4.1 mini", "background",
        "Reliable tool calls when the Groq models fail.",
        "openai", "gpt-4.1-mini", fallback="claude-haiku-4-5", hidden=True,
        input_price_per_mtok=0.40, output_price_per_mtok=1.60, context_window=1_047_576,
        vision=True,
    ),
    ModelEntry(
        "claude-haiku-4-5", "Claude Haiku 4.5", "background",
        "Last resort of the consolidation chain; fallback of Sonnet.",
        "anthropic", "claude-haiku-4-5", fallback=None, hidden=True,
        input_price_per_mtok=1.0, output_price_per_mtok=5.0, context_window=200_000,
        vision=True,
    ),
    # Hidden transcription chain (voice notes, audio, video notes): Groq's Whisper first
    # ($0.04 per hour of audio), then OpenAI's two transcription models. Prices per second.
    ModelEntry(
        "whisper-large-v3-turbo", "Whisper large v3 turbo", "background",
        "Transcription head: fast, cheap Whisper on Groq.",
        "groq", "whisper-large-v3-turbo", fallback="gpt-4o-mini-transcribe", hidden=True,
        kind="transcription", price_per_second=0.04 / 3600,
    ),
    ModelEntry(
        "gpt-4o-mini-transcribe", "GPT-4o mini Transcribe", "background",
        "OpenAI transcription when Groq fails.",
        "openai", "gpt-4o-mini-transcribe", fallback="whisper-1", hidden=True,
        kind="transcription", price_per_second=0.003 / 60,
    ),
    ModelEntry(
        "whisper-1", "Whisper", "background",
        "Last resort of the transcription chain.",
        "openai", "whisper-1", fallback=None, hidden=True,
        kind="transcription", price_per_second=0.006 / 60,
    ),
)  # fmt: skip


@dataclass(frozen=True)
class Catalog:
    """A validated, immutable set of model entries."""

    entries: Mapping[str, ModelEntry] = field(default_factory=dict)
    gateways: tuple[GatewaySpec, ...] = ()  # declared in the user's file, beside the built-in

    @classmethod
    def build(
        cls,
        entries: Iterable[ModelEntry],
        gateways: Iterable[str] = GATEWAY_NAMES,
        declared: Iterable[GatewaySpec] = (),
    ) -> Catalog:
        by_id: dict[str, ModelEntry] = {}
        for entry in entries:
            by_id[entry.id] = entry
        specs = tuple(declared)
        catalog = cls(entries=by_id, gateways=specs)
        catalog._validate(set(gateways) | {spec.name for spec in specs})
        return catalog

    def _validate(self, gateways: set[str]) -> None:
        for entry in self.entries.values():  # kinds first: the fallback checks compare them
            if entry.kind not in MODEL_KINDS:
                raise CatalogError(
                    f"model {entry.id!r}: unknown kind {entry.kind!r} "
                    f"(known: {', '.join(MODEL_KINDS)})"
                )
        for entry in self.entries.values():
            if not entry.id or not entry.wire_name:
                raise CatalogError(f"model {entry.id!r}: id and wire_name must not be empty")
            if entry.gateway not in gateways:
                raise CatalogError(
                    f"model {entry.id!r}: unknown gateway {entry.gateway!r} "
                    f"(known: {', '.join(sorted(gateways))})"
                )
            if entry.fallback is not None and entry.fallback not in self.entries:
                raise CatalogError(
                    f"model {entry.id!r}: fallback {entry.fallback!r} is not in the catalog"
                )
            if entry.input_price_per_mtok < 0 or entry.output_price_per_mtok < 0:
                raise CatalogError(f"model {entry.id!r}: prices must not be negative")
            if not isinstance(entry.tools, bool):
                raise CatalogError(f"model {entry.id!r}: tools must be true or false")
            if entry.context_window <= 0:
                raise CatalogError(f"model {entry.id!r}: context_window must be positive")
            if entry.price_per_second < 0:
                raise CatalogError(f"model {entry.id!r}: prices must not be negative")
            speaks_openai = {g.name for g in self.gateways if g.protocol == "openai"}
            if entry.kind == "transcription" and entry.gateway not in {
                *TRANSCRIPTION_GATEWAYS,
                *speaks_openai,
            }:
                raise CatalogError(
                    f"model {entry.id!r}: the {entry.gateway} gateway has no transcription endpoint"
                )
            if entry.fallback is not None and self.entries[entry.fallback].kind != entry.kind:
                raise CatalogError(
                    f"model {entry.id!r}: fallback {entry.fallback!r} is a "
                    f"{self.entries[entry.fallback].kind} model, not a {entry.kind} model"
                )
            seen = [entry.id]
            current = entry
            while current.fallback is not None:
                if current.fallback in seen:
                    cycle = " -> ".join([*seen, current.fallback])
                    raise CatalogError(f"model {entry.id!r}: fallback cycle {cycle}")
                seen.append(current.fallback)
                current = self.entries[current.fallback]

    def __contains__(self, model_id: object) -> bool:
        return model_id in self.entries

    def get(self, model_id: str) -> ModelEntry:
        try:
            return self.entries[model_id]
        except KeyError:
            raise CatalogError(f"unknown model {model_id!r}") from None

    def visible(self) -> list[ModelEntry]:
        """Chat models users may pick: transcription models are never offered, even unhidden."""
        return [e for e in self.entries.values() if not e.hidden and e.kind == "chat"]

    def is_visible(self, model_id: str) -> bool:
        entry = self.entries.get(model_id)
        return entry is not None and not entry.hidden and entry.kind == "chat"

    def chain(self, head: str) -> Iterator[ModelEntry]:
        """Yield `head` then its fallbacks, each at most once (a visited set guards cycles)."""
        visited: set[str] = set()
        current: str | None = head
        while current is not None and current not in visited and current in self.entries:
            visited.add(current)
            entry = self.entries[current]
            yield entry
            current = entry.fallback


def load_catalog(user_file: Path | None = None, *, reserved: Collection[str] = ()) -> Catalog:
    """Built-in entries, then the user's file (JSON or TOML) adding or overriding by id and
    declaring more gateways. `reserved`: variable names no gateway may take its keys from
    (the application's own settings: its bot token, webhook secret, other keys)."""
    entries = {e.id: e for e in DEFAULT_ENTRIES}
    declared: list[GatewaySpec] = []
    if user_file is not None:
        data = _read_user_file(user_file)
        declared = _gateways_from(data, reserved)
        for raw in _read_user_entries(user_file, data):
            model_id = str(raw["id"])  # a str: _read_user_entries checked it
            entries[model_id] = _entry_from_raw(raw, entries.get(model_id))
    return Catalog.build(entries.values(), declared=declared)


def declared_gateways(
    user_file: Path | None, *, reserved: Collection[str] = ()
) -> list[GatewaySpec]:
    """Only the gateways a user file declares (settings need their key variables' names)."""
    if user_file is None:
        return []
    return _gateways_from(_read_user_file(user_file), reserved)


_FIELDS = set(ModelEntry.__slots__)
_GATEWAY_FIELDS = {"name", "protocol", "base_url", "api_key_env", "rps"}


def _read_user_file(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read catalog file {path}: {exc.strerror}") from None
    try:
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"catalog file {path} is not valid: {exc}") from None


def _gateways_from(data: object, reserved: Collection[str] = ()) -> list[GatewaySpec]:
    """The `gateways` list of a user file, each checked so start-up can say what is wrong.

    A gateway's keys go to its base_url in every request, so a catalog file must not be able to
    send a secret somewhere else: `api_key_env` may not name a built-in gateway's key variable,
    one of `reserved` (the bot token, ...) or another declared gateway's on another host, and
    keys travel in the clear only to a loopback or private address."""
    raw_list = data.get("gateways", []) if isinstance(data, dict) else []
    if not isinstance(raw_list, list):
        raise CatalogError("'gateways' must be a list of tables/objects")
    specs: list[GatewaySpec] = []
    for raw in raw_list:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise CatalogError("every gateway needs a string 'name'")
        name = raw["name"]
        where = f"gateway {name!r}"
        unknown = set(raw) - _GATEWAY_FIELDS
        if unknown:
            raise CatalogError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        missing = {"protocol", "base_url", "api_key_env"} - set(raw)
        if missing:
            raise CatalogError(f"{where}: missing field(s) {', '.join(sorted(missing))}")
        if not _NAME.fullmatch(name):
            raise CatalogError(f"{where}: name must be lower-case letters, digits, - or _")
        if name in GATEWAY_NAMES or name in {s.name for s in specs}:
            raise CatalogError(f"{where}: the name is already taken")
        protocol = GATEWAY_PROTOCOLS.get(str(raw["protocol"]))
        if protocol is None:
            raise CatalogError(f"{where}: protocol must be 'openai-compatible' or 'anthropic'")
        base_url = str(raw["base_url"]).rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise CatalogError(f"{where}: base_url {base_url!r} is not an http(s) URL")
        if protocol == "anthropic" and base_url.endswith("/v1"):
            raise CatalogError(f"{where}: an anthropic base_url must not end in /v1")
        if not keys_may_travel(base_url):
            raise CatalogError(
                f"{where}: base_url must be https:// (plain http only to a loopback or private "
                "address, e.g. http://127.0.0.1:11434/v1)"
            )
        key_env = raw["api_key_env"]
        if not isinstance(key_env, str) or not _ENV_NAME.fullmatch(key_env):
            raise CatalogError(f"{where}: api_key_env must be an upper-case variable name")
        if key_env in BUILT_IN_KEY_VARIABLES or key_env in reserved:
            raise CatalogError(
                f"{where}: api_key_env {key_env} is one of the bot's own settings; give the "
                f"gateway a variable of its own (e.g. {name.upper().replace('-', '_')}_API_KEY)"
            )
        sharing = next((s for s in specs if s.key_env == key_env), None)
        if sharing is not None and _host(sharing.base_url) != _host(base_url):
            raise CatalogError(
                f"{where}: api_key_env {key_env} already holds the keys of gateway "
                f"{sharing.name!r} on another host"
            )
        rps = raw.get("rps")
        if rps is not None and (
            isinstance(rps, bool) or not isinstance(rps, int | float) or rps <= 0
        ):
            raise CatalogError(f"{where}: rps must be a positive number")
        specs.append(GatewaySpec(name, protocol, base_url, key_env, float(rps) if rps else None))
    return specs


def keys_may_travel(base_url: str) -> bool:
    """Whether keys may be sent to `base_url`: over https anywhere, over plain http only to a
    loopback or private address (a local Ollama or vLLM, a proxy on the same network)."""
    scheme = urlsplit(base_url).scheme.lower()
    if scheme == "https":
        return True
    host = _host(base_url)
    if scheme != "http" or not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name could resolve anywhere
    return address.is_loopback or any(address in network for network in _LOCAL_NETWORKS)


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _read_user_entries(path: Path, data: object) -> list[dict[str, object]]:
    models = data.get("models", []) if isinstance(data, dict) else data
    if not isinstance(models, list):
        raise CatalogError(f"catalog file {path}: expected a list of models under 'models'")
    for raw in models:
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise CatalogError(f"catalog file {path}: every model needs a string 'id'")
        unknown = set(raw) - _FIELDS
        if unknown:
            raise CatalogError(
                f"model {raw['id']!r}: unknown field(s) {', '.join(sorted(unknown))}"
            )
    return models


def _entry_from_raw(raw: dict[str, object], base: ModelEntry | None) -> ModelEntry:
    if base is not None:
        try:
            return replace(base, **raw)  # type: ignore[arg-type]  # the file's values: build checks
        except TypeError as exc:
            raise CatalogError(f"model {raw['id']!r}: {exc}") from None
    required = {"id", "gateway", "wire_name"}
    missing = required - set(raw)
    if missing:
        raise CatalogError(f"model {raw['id']!r}: missing field(s) {', '.join(sorted(missing))}")
    defaults: dict[str, object] = {"label": raw["id"], "tier": "custom", "description": ""}
    try:
        return ModelEntry(**{**defaults, **raw})  # type: ignore[arg-type]  # as in replace above
    except TypeError as exc:
        raise CatalogError(f"model {raw['id']!r}: {exc}") from None
