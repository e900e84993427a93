"""Which attempt comes next for a call, and what each outcome teaches the next calls.

The transport (models/transport.py) runs the attempts; every decision about them is here, in
one place, the same for chat, streamed chat and transcription:

- phase 1 retries the requested model with backoff (honouring Retry-After up to a cap) for
  retryable outcomes; phase 2 walks the fallback chain, each model once, each on its own gateway;
- a key that is rejected or out of quota cools down and the others carry the load; a rate limit
  rests only that key for that model (providers count rate limits per model, quota per account);
- each gateway has a fair queue (models/policy/pacing.py): a request waits for its turn, and only a
  wait longer than the attempt's timeout gives up on the gateway, like a timeout;
- circuit breakers per model and per gateway skip what keeps failing, with half-open probes;
- one global retry budget bounds how much extra traffic an outage can make us send;
- a local failure (a provider worker lost, a call that could not cross to it) is ours: it
  touches no breaker, key or budget, and is retried on the same model, never a fallback.

`AttemptPolicy` holds the rules and the state they keep across calls (one per transport);
`CallPlan` applies them to one call; a `Slot` is the permission to send one request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from models.catalog import Catalog, ModelEntry
from models.errors import Classified
from models.gateways import Gateway
from models.policy.breakers import BreakerChange, CircuitBreaker, RetryBudget
from models.policy.keys import KeyRing
from models.policy.pacing import GatewayPacer, Priority, Ticket
from models.policy.ratelimits import exhausted_until_reset, read_windows, refusal_windows
from models.tokens import estimate_messages
from models.types import NO_KEY, Attempt, Message, Outcome, TransportError
from models.worker.ipc import LocalError
from primitives.backoff import Backoff
from primitives.clock import Clock

log = structlog.get_logger(__name__)

Sleep = Callable[[float], Awaitable[Any]]

# Attempts a call may retry after local failures (a worker lost under it) before it gives up.
_LOCAL_RETRIES = 3

# Outcomes that say something about the provider's health (a bad request says nothing).
_HEALTH_FAILURES = (Outcome.RATE_LIMIT, Outcome.UNAVAILABLE, Outcome.TIMEOUT, Outcome.EMPTY)


class AttemptPolicy:
    """The rules every call follows and the state they keep: each gateway's keys, fair queue
    and breaker, each model's breaker, the shared retry budget. One per transport, shared by
    every chat and the worker; the transport passes its options through (see `Transport`).
    """

    def __init__(
        self,
        catalog: Catalog,
        gateways: Mapping[str, Gateway],
        *,
        backoff: Sequence[float],
        retry_after_cap: float,
        bucket_burst: float | None,
        breaker_threshold: int,
        gateway_breaker_threshold: int,
        breaker_cooldown: float,
        rate_limit_cooldown: float,
        quota_cooldown: float,
        auth_cooldown: float,
        retry_budget_initial: float,
        retry_budget_cap: float,
        retry_budget_ratio: float,
        retry_budget_per_second: float,
        max_in_flight: int | None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock[float] = time.monotonic,
    ) -> None:
        self.catalog = catalog
        self.backoff = Backoff(backoff)
        self.retry_after_cap = retry_after_cap
        self.breaker_threshold = breaker_threshold
        self.breaker_cooldown = breaker_cooldown
        self.rate_limit_cooldown = rate_limit_cooldown
        self.quota_cooldown = quota_cooldown
        self.auth_cooldown = auth_cooldown
        self.max_in_flight = max_in_flight
        self.sleep = sleep
        self.clock = clock
        self.gateways: dict[str, GatewayState] = {}
        for name, gateway in gateways.items():
            self.gateways[name] = GatewayState(
                gateway=gateway,
                keys=KeyRing(name, gateway.keys, clock),
                pacer=GatewayPacer(
                    name,
                    ceiling_rps=gateway.requests_per_second,
                    burst=bucket_burst,
                    clock=clock,
                    sleep=sleep,
                ),
                breaker=CircuitBreaker(
                    f"gateway:{name}", gateway_breaker_threshold, breaker_cooldown, clock
                ),
            )
        self._model_breakers: dict[str, CircuitBreaker] = {}
        self.retry_budget = RetryBudget(
            initial=retry_budget_initial,
            cap=retry_budget_cap,
            ratio=retry_budget_ratio,
            per_second=retry_budget_per_second,
            clock=clock,
        )

    def model_breaker(self, model_id: str) -> CircuitBreaker:
        breaker = self._model_breakers.get(model_id)
        if breaker is None:
            breaker = CircuitBreaker(
                f"model:{model_id}", self.breaker_threshold, self.breaker_cooldown, self.clock
            )
            self._model_breakers[model_id] = breaker
        return breaker

    def gateway_state(self, name: str) -> GatewayState | None:
        return self.gateways.get(name)

    def status(self) -> dict[str, Any]:
        """Breaker, key and queue state per gateway, breakers per model, the retry budget.
        Key positions only, never keys; each key lists under `model_rests` the models it is
        rate-limited for right now."""
        return {
            "gateways": {
                name: {
                    "configured": bool(len(gs.keys)),
                    "breaker": gs.breaker.state.value,
                    "consecutive_failures": gs.breaker.failures,
                    "open_for_s": round(gs.breaker.remaining_open_s(), 1),
                    "keys": gs.keys.status(),
                    "in_flight": gs.in_flight,
                    "queue": gs.pacer.status(),
                }
                for name, gs in self.gateways.items()
            },
            "models": {
                model_id: {
                    "breaker": breaker.state.value,
                    "consecutive_failures": breaker.failures,
                    "open_for_s": round(breaker.remaining_open_s(), 1),
                }
                for model_id, breaker in self._model_breakers.items()
            },
            "retry_budget": {
                "balance": round(self.retry_budget.balance, 2),
                "spent": self.retry_budget.spent,
                "denied": self.retry_budget.denied,
            },
        }


@dataclass
class GatewayState:
    gateway: Gateway
    keys: KeyRing
    pacer: GatewayPacer
    breaker: CircuitBreaker
    in_flight: int = 0


@dataclass
class Slot:
    """Permission to send one request: which model, gateway and key."""

    entry: ModelEntry
    state: GatewayState
    key_index: int
    key: str = field(repr=False)
    ticket: Ticket
    started: float = 0.0

    def learn(
        self, headers: Mapping[str, str], refusal: Classified | None = None, body: Any = None
    ) -> None:
        """Tell the gateway's pacer what the provider said about its limits (even nothing):
        the headers, and a rate-limit refusal's own words about the limit it hit."""
        windows = read_windows(self.state.gateway.protocol, headers)
        refused = False
        if refusal is not None and refusal.outcome is Outcome.RATE_LIMIT:
            refused = True
            windows += refusal_windows(body, refusal.retry_after_s)
        self.state.pacer.settle(self.ticket, windows, refused=refused)

    async def before_send(self) -> None:
        await self.state.pacer.before_send(self.ticket)

    def send_now(self) -> bool:
        return self.state.pacer.send_now(self.ticket)

    def left(self, seconds_ago: float) -> None:
        self.state.pacer.left(self.ticket, seconds_ago)

    def close(self) -> None:
        self.state.in_flight -= 1
        self.state.pacer.release(self.ticket)


def log_breaker_change(change: BreakerChange | None) -> None:
    """Log a breaker's change of state once, when it happens (opening as a warning)."""
    if change is None:
        return
    level = log.warning if change.new.value == "open" else log.info
    level(
        "circuit_breaker",
        breaker=change.name,
        old_state=change.old.value,
        new_state=change.new.value,
        consecutive_failures=change.failures,
    )


class CallPlan:
    """Which request to send next for one call, and what to learn from each outcome.

    Made for every `complete`, `stream` and `transcribe`, so all three follow exactly the same
    retry, fallback, key, queue, breaker and budget rules.
    """

    def __init__(
        self,
        policy: AttemptPolicy,
        model_id: str,
        messages: list[Message],
        *,
        walk_chain: bool,
        timeout: float,
        user_key: Hashable | None,
        priority: Priority,
    ) -> None:
        self.policy = policy
        self.requested = model_id
        self.timeout = timeout  # also the longest wait for a gateway's queue, per attempt
        self.user_key = user_key if user_key is not None else object()
        self.priority = priority
        self.cost_tokens = estimate_messages(messages)
        head = policy.catalog.get(model_id)
        self.chain = list(policy.catalog.chain(model_id)) if walk_chain else [head]
        self.position = 0
        self.retries = 0  # phase-1 retries spent on the requested model
        self.excluded_keys: set[int] = set()  # keys rejected during this call
        self.pending_delay = 0.0
        self.attempts: list[Attempt] = []
        self.queued_s = 0.0  # time spent waiting for turns in gateway queues
        self.local_retries = 0  # attempts lost to our own failures (a worker lost)
        self._waiting_for = -1  # chain position whose wait bound `_wait_until` is
        self._wait_until = 0.0

    # choosing

    async def next_slot(self) -> Slot | None:
        if self.pending_delay > 0:
            delay, self.pending_delay = self.pending_delay, 0.0
            await self.policy.sleep(delay)
        while self.position < len(self.chain):
            entry = self.chain[self.position]
            # Our own limits make a request wait, never fail: at most `timeout` per model.
            if self._waiting_for != self.position:
                self._waiting_for = self.position
                self._wait_until = self.policy.clock() + self.timeout
            wait_until = self._wait_until
            state = self.policy.gateway_state(entry.gateway)
            if state is None or not len(state.keys):
                self._skip(entry, NO_KEY)
                continue
            allowed, change = state.breaker.allow()
            log_breaker_change(change)
            if not allowed:
                self._skip(entry, "gateway circuit open")
                continue
            model_breaker = self.policy.model_breaker(entry.id)
            allowed, change = model_breaker.allow()
            log_breaker_change(change)
            if not allowed:
                state.breaker.release_probe()
                self._skip(entry, "model circuit open")
                continue
            limit = self.policy.max_in_flight
            if limit is not None and state.in_flight >= limit:
                # A provider that stops answering holds at most `limit` of our requests.
                self._release(entry, state)
                self._skip(entry, f"gateway busy ({state.in_flight} in flight)")
                continue
            if not self._other_key_usable(state, entry):
                # Resting keys: a spent window (remaining = 0) whose reset comes in time is
                # waited out like any other turn; a provider's refusal (429, quota, rejected
                # key) moves the request on, and so does a reset later than the timeout.
                rest = state.keys.window_rest_s(entry.wire_name, exclude=self.excluded_keys)
                self._release(entry, state)
                if rest is None or self.policy.clock() + rest > wait_until:
                    self._skip(entry, "all keys cooling down")
                    continue
                await self.policy.sleep(rest)
                continue  # look again: breakers and keys may have changed meanwhile
            ticket = await state.pacer.acquire(
                entry.wire_name,
                user=self.user_key,
                priority=self.priority,
                max_wait=max(0.0, wait_until - self.policy.clock()),
                cost_tokens=self.cost_tokens,
            )
            if ticket is None:
                self._release(entry, state)
                self._skip(entry, f"no turn on the gateway within {self.timeout:g}s")
                continue
            picked = state.keys.pick(entry.wire_name, exclude=self.excluded_keys)
            if picked is None:  # a key went to rest while we waited: look again
                state.pacer.release(ticket)
                self._release(entry, state)
                continue
            index, key = picked
            state.in_flight += 1  # the caller decrements when the attempt ends, however
            self.queued_s += ticket.waited_s
            return Slot(entry, state, index, key, ticket, started=self.policy.clock())
        return None

    def _release(self, entry: ModelEntry, state: GatewayState) -> None:
        state.breaker.release_probe()
        self.policy.model_breaker(entry.id).release_probe()

    def _skip(self, entry: ModelEntry, why: str) -> None:
        attempt = Attempt(entry.id, entry.gateway, Outcome.SKIPPED, why)
        self.attempts.append(attempt)
        log.info("provider_attempt", model=entry.id, gateway=entry.gateway, outcome="skipped",
                 detail=why)  # fmt: skip
        self._advance()

    def _advance(self) -> None:
        """Move to the next model in the chain (phase 2). Each walk step draws on the budget
        when it can, but is never refused: the chain walk is what keeps a user answered."""
        self.position += 1
        self.retries = 0
        self.excluded_keys = set()
        self.pending_delay = 0.0
        if (
            self.position < len(self.chain)
            and self.attempts
            and any(a.outcome is not Outcome.SKIPPED for a in self.attempts)
        ):
            self.policy.retry_budget.try_spend()

    # learning

    def report_success(self, slot: Slot, headers: Mapping[str, str]) -> None:
        state = slot.state
        attempt = Attempt(
            slot.entry.id,
            slot.entry.gateway,
            Outcome.SUCCESS,
            "",
            slot.key_index,
            200,
            latency_s=round(self.policy.clock() - slot.started, 4),
        )
        self.attempts.append(attempt)
        state.keys.record_success(slot.key_index)
        log_breaker_change(state.breaker.record_success())
        log_breaker_change(self.policy.model_breaker(slot.entry.id).record_success())
        self.policy.retry_budget.record_success()
        spent = _spent_until_reset(state.gateway.protocol, headers)
        if spent:  # remaining = 0: this key waits for the reset (for this model only)
            state.keys.cool(
                slot.key_index, spent, "rate_limit_window_spent", model=slot.entry.wire_name
            )

    async def report(self, slot: Slot, result: Classified, *, text_shown: bool = False) -> None:
        """Record a failed attempt and decide whether the next slot retries or moves on: the
        outcome picks its step from `_ON_FAILURE` (a rejected key, a spent quota, a rate
        limit), and every other outcome goes straight to `_retry_or_advance`."""
        self._record_failure(slot, result)
        step = _ON_FAILURE.get(result.outcome, CallPlan._retry_or_advance)
        step(self, slot, result, text_shown)

    def _record_failure(self, slot: Slot, result: Classified) -> None:
        """The attempt in the call's list and the log; the breakers hear it when it says
        something about the provider's health, and let their probe go otherwise."""
        state, entry = slot.state, slot.entry
        outcome = result.outcome
        attempt = Attempt(
            entry.id,
            entry.gateway,
            outcome,
            result.detail,
            slot.key_index,
            result.status_code,
            latency_s=round(self.policy.clock() - slot.started, 4),
            retry_after_s=result.retry_after_s,
            refused_param=result.refused_param,
        )
        self.attempts.append(attempt)
        log.warning(
            "provider_attempt",
            model=entry.id,
            gateway=entry.gateway,
            outcome=outcome.value,
            detail=result.detail,
            key_position=slot.key_index,
            status=result.status_code,
            retry_after_s=result.retry_after_s,
        )
        if outcome in _HEALTH_FAILURES:
            log_breaker_change(state.breaker.record_failure())
            log_breaker_change(self.policy.model_breaker(entry.id).record_failure())
        else:
            self._release(entry, state)

    def _on_auth(self, slot: Slot, result: Classified, text_shown: bool) -> None:
        """A rejected key rests long; another key of the same gateway may be fine, so it is
        tried on the same model at once, else the chain moves on."""
        state, entry = slot.state, slot.entry
        if state.keys.cool(slot.key_index, self.policy.auth_cooldown, "auth"):
            log.error(
                "api_key_rejected",
                gateway=entry.gateway,
                key_position=slot.key_index,
                detail=result.detail,
                cooldown_s=self.policy.auth_cooldown,
            )
        self.excluded_keys.add(slot.key_index)
        if not self._other_key_usable(state, entry):
            self._advance()

    def _on_quota(self, slot: Slot, result: Classified, text_shown: bool) -> None:
        """A spent quota: a daily cap of this model (Groq's TPD) rests the key for this model
        until the provider says it resets, and the key serves the gateway's other models
        meanwhile; an account's quota rests the key wholly. Keys may be different accounts:
        another usable one is tried, else the chain moves on."""
        state, entry = slot.state, slot.entry
        if result.per_model:
            rest = (
                result.retry_after_s
                if result.retry_after_s is not None
                else self.policy.quota_cooldown
            )
            if state.keys.cool(slot.key_index, rest, "daily_limit", model=entry.wire_name):
                log.warning(
                    "api_key_model_daily_limit",
                    gateway=entry.gateway,
                    model=entry.id,
                    key_position=slot.key_index,
                    detail=result.detail,
                    cooldown_s=round(rest, 1),
                )
        elif state.keys.cool(slot.key_index, self.policy.quota_cooldown, "quota"):
            log.error(
                "api_key_out_of_quota",
                gateway=entry.gateway,
                key_position=slot.key_index,
                detail=result.detail,
                cooldown_s=self.policy.quota_cooldown,
            )
        self.excluded_keys.add(slot.key_index)
        if not self._other_key_usable(state, entry):
            self._advance()

    def _on_rate_limit(self, slot: Slot, result: Classified, text_shown: bool) -> None:
        """Rate limits are counted per model: the key rests for this model only (as long as
        the provider asked, else our cool-down) and stays free for the gateway's others."""
        state, entry = slot.state, slot.entry
        retry_after = result.retry_after_s
        cool_for = retry_after if retry_after is not None else self.policy.rate_limit_cooldown
        state.keys.cool(slot.key_index, min(cool_for, 3600.0), "rate_limit", model=entry.wire_name)
        other_key = self._other_key_usable(state, entry)
        self._retry_or_advance(slot, result, text_shown, other_key=other_key)

    def _retry_or_advance(
        self, slot: Slot, result: Classified, text_shown: bool, *, other_key: bool = False
    ) -> None:
        """Phase 1 retries the requested model after its backoff (or the provider's
        Retry-After, or at once on another key) while the outcome is retryable, no text was
        shown, retries and the budget last and the wait is within the cap; otherwise the
        chain moves on."""
        entry, outcome = slot.entry, result.outcome
        retry_after = result.retry_after_s
        if (
            self.position != 0  # the chain walk tries each model once
            or not outcome.retryable
            or text_shown  # the user saw this model fail: restart on the next one
            or self.retries >= len(self.policy.backoff)
            or (
                not other_key
                and retry_after is not None
                and retry_after > self.policy.retry_after_cap
            )
        ):
            self._advance()
            return
        if not self.policy.retry_budget.try_spend():
            log.info("retry_budget_empty", model=entry.id, gateway=entry.gateway)
            self._advance()
            return
        delay = self.policy.backoff.after(self.retries + 1)
        self.retries += 1
        if other_key:
            delay = 0.0  # another key carries the load right away
        elif retry_after is not None:
            delay = max(delay, retry_after)
        elif outcome is Outcome.RATE_LIMIT:
            # No hint from the provider: the key rests exactly as long as our backoff, so the
            # retry finds it usable (and concurrent calls leave it alone meanwhile).
            slot.state.keys.rest_until(slot.key_index, self.policy.clock() + delay, entry.wire_name)
        self.pending_delay = delay

    def report_local(self, slot: Slot, error: LocalError) -> None:
        """An attempt lost to our own failure: no breaker, key or retry budget hears of it;
        the same model is tried again (another worker), a few times; no fallback, which
        would fail the same way and bill another provider."""
        entry = slot.entry
        self.attempts.append(
            Attempt(
                entry.id,
                entry.gateway,
                Outcome.LOCAL,
                str(error),
                slot.key_index,
                None,
                latency_s=round(self.policy.clock() - slot.started, 4),
            )
        )
        log.warning("provider_attempt", model=entry.id, gateway=entry.gateway,
                    outcome=Outcome.LOCAL.value, detail=str(error))  # fmt: skip
        self._release(entry, slot.state)
        if error.retry and self.local_retries < _LOCAL_RETRIES:
            self.local_retries += 1
            return
        self.position = len(self.chain)

    def _other_key_usable(self, state: GatewayState, entry: ModelEntry) -> bool:
        return any(
            index not in self.excluded_keys and state.keys.usable(index, entry.wire_name)
            for index in range(len(state.keys))
        )

    def failure(self) -> TransportError:
        tried = ", ".join(
            f"{a.model_id}@{a.gateway}: {a.outcome.value}" + (f" ({a.detail})" if a.detail else "")
            for a in self.attempts
        )
        return TransportError(
            f"every model failed for {self.requested}: {tried or 'nothing to try'}",
            list(self.attempts),
        )


# What a failed attempt's outcome does before the next slot is chosen (`CallPlan.report`);
# an outcome not listed retries the requested model or moves along the chain.
_ON_FAILURE: dict[Outcome, Callable[[CallPlan, Slot, Classified, bool], None]] = {
    Outcome.AUTH: CallPlan._on_auth,
    Outcome.QUOTA: CallPlan._on_quota,
    Outcome.RATE_LIMIT: CallPlan._on_rate_limit,
}


def _spent_until_reset(protocol: str, headers: Mapping[str, str]) -> float | None:
    """Seconds until the latest reset of a window the provider says is spent (remaining 0)."""
    waits = [w.reset_s for w in read_windows(protocol, headers) if w.remaining <= 0]
    partial = exhausted_until_reset(headers)  # remaining and reset without a limit
    if partial is not None:
        waits.append(partial)
    return max(waits) if waits else None
