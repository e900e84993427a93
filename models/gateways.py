"""Gateways: where a model's requests go (protocol, base URL, keys, optional request ceiling).

Each catalog entry names a gateway; the transport resolves every model in a chain to its own
gateway, so an Anthropic-format model is never sent to an OpenAI base or the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models.catalog import ModelEntry

# litellm provider prefix per protocol. "groq" is OpenAI-compatible but litellm parses it apart.
PROTOCOL_PREFIX = {"openai": "openai", "anthropic": "anthropic", "groq": "groq"}


@dataclass(frozen=True)
class Gateway:
    """One provider endpoint. `keys` may hold several keys, used in turn.

    `requests_per_second` is an optional ceiling of our own; None (the default) paces by the
    limits the provider reports in its rate-limit headers alone (models/policy/pacing.py).
    """

    name: str
    protocol: str
    api_base: str
    keys: tuple[str, ...] = field(default=(), repr=False)
    requests_per_second: float | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOL_PREFIX:
            raise ValueError(f"gateway {self.name!r}: unknown protocol {self.protocol!r}")

    @property
    def configured(self) -> bool:
        return bool(self.keys)

    def litellm_model(self, entry: ModelEntry) -> str:
        """The model string litellm routes on, e.g. ``groq/qwen/qwen3-32b``."""
        return f"{PROTOCOL_PREFIX[self.protocol]}/{entry.wire_name}"
