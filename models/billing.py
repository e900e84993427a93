"""What a provider attempt cost, and telling the caller the moment the attempt ends.

The transport reports every attempt a provider may bill (answered, failed after it answered,
a transcription timed out, cancelled, cut at the answer's time limit) through the caller's
`on_spend`; the caller writes the ledger. The provider's own usage when it sent one; otherwise
an estimate of the prompt as sent plus the text received, priced from the catalog and flagged
`estimated`. Transcription is priced by the second.
"""

from __future__ import annotations

from typing import Any

import structlog

from models.catalog import ModelEntry
from models.tokens import count_messages, count_text, estimate_messages, estimate_tokens
from models.types import Message, Spend, SpendCallback, Usage

log = structlog.get_logger(__name__)


def estimate_usage(entry: ModelEntry, messages: list[Message], text: str) -> Usage:
    """What an attempt probably cost when the provider did not say: the prompt as sent plus
    the text received, priced from the catalog, flagged as an estimate."""
    prompt = _count_tokens(messages=messages)
    completion = _count_tokens(text=text)
    return Usage(prompt, completion, entry.cost_usd(prompt, completion), estimated=True)


def provider_usage(usage: Any, entry: ModelEntry) -> Usage | None:
    """The usage a provider reported (litellm's object), priced from the catalog; None when it
    sent none, or counts no bill can hold (negative, not whole numbers): the caller estimates
    then, as for a provider that said nothing. Clamping a negative count to zero billed a
    lying gateway's answer as $0 and let spending pass its cap unseen."""
    if usage is None:
        return None
    prompt = _token_count(getattr(usage, "prompt_tokens", 0))
    completion = _token_count(getattr(usage, "completion_tokens", 0))
    if prompt is None or completion is None:
        log.warning("usage_not_trusted", model=entry.id)
        return None
    return Usage(prompt, completion, entry.cost_usd(prompt, completion))


def audio_usage(entry: ModelEntry, seconds: float) -> Usage:
    """A transcription's cost: the catalog's price per second times the seconds heard."""
    return Usage(cost_usd=entry.audio_cost_usd(seconds), audio_seconds=seconds)


def tell_spend(
    on_spend: SpendCallback | None,
    entry: ModelEntry,
    messages: list[Message],
    text: str,
    usage: Any,
    ended: str,
) -> None:
    """Report one attempt's spend: the provider's usage (ours or litellm's object) if any,
    else an estimate. A failing callback is logged, never raised into the stream."""
    if on_spend is None:
        return
    if isinstance(usage, Usage):
        spent = usage
    else:
        reported = provider_usage(usage, entry)
        spent = reported if reported is not None else estimate_usage(entry, messages, text)
    try:
        on_spend(Spend(entry.id, entry.gateway, spent, ended))
    except Exception:
        log.exception("spend_callback_failed", model=entry.id)


def _count_tokens(*, messages: list[Message] | None = None, text: str = "") -> int:
    """gpt-4o's tokens as litellm counts them (models/tokens.py), or their estimate."""
    try:
        if messages is not None:
            return count_messages(messages)
        return count_text(text)
    except Exception:  # an estimate must never fail the turn it accounts for
        return max(
            1, estimate_messages(messages) if messages is not None else estimate_tokens(text)
        )


def _token_count(value: Any) -> int | None:
    """A token count as the gateway reported it (absent: 0); None when it is no count at all:
    below zero (it would take money off the ledger), fractional, or not a number."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        return None
    return int(value) if value >= 0 else None
