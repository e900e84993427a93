"""The model catalog: the single source of truth for which models exist and how to reach them.

Visible entries are what users pick with /model; hidden entries only serve background chains such
as consolidation. A user file may add or override entries; a catalog with a cycle, an unknown
gateway or a dangling fallback is refused at start-up rather than discovered mid-outage.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

GATEWAY_NAMES = ("openai", "anthropic", "groq")
MODEL_KINDS = ("chat", "transcription")
# Gateways whose protocol has an audio transcription endpoint (Anthropic has none).
TRANSCRIPTION_GATEWAYS = ("openai", "groq")


class CatalogError(Exception):
    """The catalog (built-in or user file) is inconsistent; the message names the entry."""


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
    # Hidden consolidation chain (seed): Groq-hosted, cheap and fast, then reliable tool callers.
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

    @classmethod
    def build(
        cls, entries: Iterable[ModelEntry], gateways: Iterable[str] = GATEWAY_NAMES
    ) -> Catalog:
        by_id: dict[str, ModelEntry] = {}
        for entry in entries:
            by_id[entry.id] = entry
        catalog = cls(entries=by_id)
        catalog._validate(set(gateways))
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
            if entry.kind == "transcription" and entry.gateway not in TRANSCRIPTION_GATEWAYS:
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


def load_catalog(user_file: Path | None = None) -> Catalog:
    """Built-in entries, then the user's file (JSON or TOML) adding or overriding by id."""
    entries = {e.id: e for e in DEFAULT_ENTRIES}
    if user_file is not None:
        for raw in _read_user_entries(user_file):
            entries[raw["id"]] = _entry_from_raw(raw, entries.get(raw["id"]))
    return Catalog.build(entries.values())


_FIELDS = set(ModelEntry.__slots__)


def _read_user_entries(path: Path) -> list[dict[str, object]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read catalog file {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"catalog file {path} is not valid: {exc}") from None
    models = data.get("models") if isinstance(data, dict) else data
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
            return replace(base, **raw)  # type: ignore[arg-type]
        except TypeError as exc:
            raise CatalogError(f"model {raw['id']!r}: {exc}") from None
    required = {"id", "gateway", "wire_name"}
    missing = required - set(raw)
    if missing:
        raise CatalogError(f"model {raw['id']!r}: missing field(s) {', '.join(sorted(missing))}")
    defaults: dict[str, object] = {"label": raw["id"], "tier": "custom", "description": ""}
    try:
        return ModelEntry(**{**defaults, **raw})  # type: ignore[arg-type]
    except TypeError as exc:
        raise CatalogError(f"model {raw['id']!r}: {exc}") from None
