"""Key rotation per gateway with per-key and per-(key, model) cool-downs.

Keys are known to the rest of the system only by their position (0, 1, ...): positions are what
logs, attempts and /stats show, so a key value never leaves this module and the HTTP call.

Two kinds of rest, because providers keep two kinds of books. Quota, billing and rejected keys
belong to the account, so the whole key rests. Request and token rate limits are counted per
model (Groq, OpenAI and Anthropic all publish per-model limits), so a rate limit rests only that
key for that model: a 429 for one model says nothing about another model on the same key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from primitives.clock import Clock


@dataclass
class Rest:
    until: float = 0.0
    reason: str = ""  # "rate_limit", "rate_limit_window_spent", "quota", "auth"


@dataclass
class KeyState:
    index: int
    cool_until: float = 0.0  # the whole key (account-wide: quota, billing, auth)
    reason: str = ""
    failures: int = 0
    uses: int = 0
    model_rests: dict[str, Rest] = field(default_factory=dict)  # wire model -> its rate limit

    def rest_for(self, model: str | None) -> float:
        """When this key is usable again for `model` (None: for any request at all)."""
        rest = self.model_rests.get(model) if model is not None else None
        return max(self.cool_until, rest.until if rest else 0.0)


class KeyRing:
    """Round-robin over a gateway's keys, skipping those resting (for the model asked)."""

    def __init__(self, gateway: str, keys: Sequence[str], clock: Clock[float]) -> None:
        self.gateway = gateway
        self._keys = tuple(keys)
        self._clock = clock
        self.states = [KeyState(i) for i in range(len(self._keys))]
        self._next = 0

    def __len__(self) -> int:
        return len(self._keys)

    def usable(self, index: int, model: str | None = None) -> bool:
        return self.states[index].rest_for(model) <= self._clock()

    def pick(
        self, model: str | None = None, exclude: set[int] | frozenset[int] = frozenset()
    ) -> tuple[int, str] | None:
        """The next key usable for `model` as (position, value), or None when all rest."""
        for offset in range(len(self._keys)):
            index = (self._next + offset) % len(self._keys)
            if index in exclude or not self.usable(index, model):
                continue
            self._next = (index + 1) % len(self._keys)
            self.states[index].uses += 1
            return index, self._keys[index]
        return None

    def cool(self, index: int, seconds: float, reason: str, model: str | None = None) -> bool:
        """Rest a key, or only its use for `model`; True when it was usable before (so the
        caller logs the change once)."""
        state = self.states[index]
        now = self._clock()
        was_usable = state.rest_for(model) <= now
        if model is None:
            state.cool_until = max(state.cool_until, now + max(0.0, seconds))
            state.reason = reason
        else:
            rest = state.model_rests.setdefault(model, Rest())
            rest.until = max(rest.until, now + max(0.0, seconds))
            rest.reason = reason
        state.failures += 1
        return was_usable

    def rest_until(self, index: int, moment: float, model: str | None = None) -> None:
        """Set when a resting key (or its use for `model`) is usable again."""
        state = self.states[index]
        if model is None:
            state.cool_until = moment
        else:
            state.model_rests.setdefault(model, Rest()).until = moment

    def record_success(self, index: int) -> None:
        self.states[index].failures = 0

    def window_rest_s(
        self, model: str, exclude: set[int] | frozenset[int] = frozenset()
    ) -> float | None:
        """Seconds until a key that rests only because `model`'s window is spent (remaining
        = 0 in the provider's headers: wait for the reset) is usable again; None when no key
        rests only for that. A key resting after a refusal (a 429, quota, a rejected key) is
        no candidate: a refusal moves requests on, a spent window is waited out."""
        now = self._clock()
        waits = []
        for state in self.states:
            if state.index in exclude or state.cool_until > now:
                continue
            rest = state.model_rests.get(model)
            if rest is None or rest.until <= now:
                waits.append(0.0)
            elif rest.reason == "rate_limit_window_spent":
                waits.append(rest.until - now)
        return min(waits) if waits else None

    def status(self) -> list[dict[str, object]]:
        now = self._clock()
        out: list[dict[str, object]] = []
        for s in self.states:
            # Forget rests that are over, so the map stays as small as what is resting now.
            s.model_rests = {m: r for m, r in s.model_rests.items() if r.until > now}
            out.append(
                {
                    "position": s.index,
                    "available": s.cool_until <= now,
                    "cooling_s": round(max(0.0, s.cool_until - now), 1),
                    "reason": s.reason if s.cool_until > now else "",
                    "uses": s.uses,
                    "model_rests": {
                        m: {"cooling_s": round(r.until - now, 1), "reason": r.reason}
                        for m, r in sorted(s.model_rests.items())
                    },
                }
            )
        return out
