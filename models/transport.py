"""The transport layer: our own thin loop over `litellm.acompletion`.

We do not use litellm's Router: it sends 400s down the fallback chain, reports its own
cool-downs as provider 429s and decides from exception classes before we can look at the body.
Here every request is one litellm call with `max_retries=0` and an explicit timeout, and every
retry, fallback, key choice and wait is decided in this module:

- phase 1 retries the requested model with backoff (honouring Retry-After up to a cap) for
  retryable outcomes; phase 2 walks the fallback chain, each model once, each on its own gateway;
- a key that is rejected or out of quota cools down and the others carry the load; a rate limit
  rests only that key for that model (providers count rate limits per model, quota per account);
- each gateway has a fair queue (models/pacing.py): a request waits for its turn, chat before
  consolidation and round robin over users, paced just under the limits the provider reports
  in its headers (and under an optional ceiling); waiting never counts as a model failure, and
  only a wait longer than the attempt's timeout gives up on the gateway, like a timeout;
- circuit breakers per model and per gateway skip what keeps failing, with half-open probes;
- one global retry budget bounds how much extra traffic an outage can make us send;
- every attempt a provider may bill is reported to the caller as it ends, priced by
  models/billing.py (the provider's usage, else an estimate).

litellm itself (request set-up, the HTTP exchange, per-chunk stream handling) runs in the
provider worker processes (models/worker.py): the decisions stay here, and litellm's CPU does
not share the bot's GIL. A worker that is lost (killed, frozen, unreadable) or a call that
cannot cross to it is our failure, not the provider's: the attempt is retried on the same model
(another worker) without touching breakers, keys or the retry budget, and never falls back.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from models.billing import audio_usage, estimate_usage, provider_usage, tell_spend
from models.breakers import BreakerChange, CircuitBreaker, RetryBudget
from models.catalog import Catalog, ModelEntry
from models.errors import (
    Classified,
    classify,
    classify_exception,
    evidence_from_wire,
)
from models.gateways import Gateway
from models.ipc import ClientSpec, LocalFailure, ProviderFailure
from models.keys import KeyRing
from models.pacing import GatewayPacer, Priority, Ticket
from models.ratelimits import exhausted_until_reset, read_windows, refusal_windows
from models.streamtext import WholeCharacters
from models.tokens import estimate_prompt_tokens
from models.toolstream import ToolCallAssembler, flatten_tool_messages
from models.types import (
    NO_KEY,
    TIME_LIMIT,
    Attempt,
    ChatResult,
    Message,
    Outcome,
    SpendCallback,
    StreamDone,
    StreamEvent,
    StreamRestart,
    TextDelta,
    ToolCall,
    Transcription,
    TransportError,
    Usage,
)
from models.wire import WireRecord, start_record
from models.worker import WORKER, acompletion, atranscription

# Attempts a call may retry after local failures (a worker lost under it) before it gives up.
_LOCAL_RETRIES = 3

log = structlog.get_logger(__name__)

_POOL_IDS = itertools.count(1)

Sleep = Callable[[float], Awaitable[Any]]
Clock = Callable[[], float]

# Outcomes that say something about the provider's health (a bad request says nothing).
_HEALTH_FAILURES = (Outcome.RATE_LIMIT, Outcome.UNAVAILABLE, Outcome.TIMEOUT, Outcome.EMPTY)


@dataclass
class _GatewayState:
    gateway: Gateway
    keys: KeyRing
    pacer: GatewayPacer
    breaker: CircuitBreaker
    in_flight: int = 0


@dataclass
class _Slot:
    """Permission to send one request: which model, gateway and key."""

    entry: ModelEntry
    state: _GatewayState
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
        refused = refusal is not None and refusal.outcome is Outcome.RATE_LIMIT
        if refused:
            windows += refusal_windows(body, refusal.retry_after_s)
        self.state.pacer.settle(self.ticket, windows, refused=refused)

    async def before_send(self) -> None:
        await self.state.pacer.before_send(self.ticket)

    def send_now(self) -> bool:
        return self.state.pacer.send_now(self.ticket)

    def close(self) -> None:
        self.state.in_flight -= 1
        self.state.pacer.release(self.ticket)


class Transport:
    """See the module docstring. One instance is shared by every chat and the worker.

    Options (all keyword-only; tests pass small values and an injected `sleep`/`clock`):

    - `backoff`: waits before phase-1 retries of the requested model; its length is the
      number of retries. `retry_after_cap`: a provider's Retry-After up to this is waited
      for; beyond it the request falls back at once (the key still rests as asked).
    - `bucket_burst`: burst of the optional per-gateway ceiling `Gateway.requests_per_second`
      (default: a quarter second's worth). Requests wait for their turn in the gateway's fair
      queue (models/pacing.py) at most the attempt's `timeout`.
    - `breaker_threshold`, `gateway_breaker_threshold`, `breaker_cooldown`: consecutive
      failures that open a model's / a gateway's breaker, and how long it stays open before
      one probe is let through.
    - `rate_limit_cooldown`, `quota_cooldown`, `auth_cooldown`: how long a key rests for the
      model after a rate limit without a hint, and wholly after an exhausted quota, a rejection.
    - `retry_budget_*`: the shared retry allowance (see `RetryBudget`).
    - `timeout_grace`: slack on top of the per-attempt `timeout` for our own guard (litellm
      applies `timeout` itself); for streams the guard is on silence between chunks.
    - `max_in_flight`: at most this many requests open per gateway (None: no cap), so a
      provider that hangs holds a bounded number of our requests.
    """

    def __init__(
        self,
        catalog: Catalog,
        gateways: Mapping[str, Gateway],
        *,
        backoff: Sequence[float] = (1.0, 2.0, 4.0),
        retry_after_cap: float = 20.0,
        bucket_burst: float | None = None,
        breaker_threshold: int = 5,
        gateway_breaker_threshold: int = 10,
        breaker_cooldown: float = 30.0,
        rate_limit_cooldown: float = 2.0,
        quota_cooldown: float = 600.0,
        auth_cooldown: float = 3600.0,
        retry_budget_initial: float = 10.0,
        retry_budget_cap: float = 20.0,
        retry_budget_ratio: float = 0.2,
        retry_budget_per_second: float = 0.1,
        timeout_grace: float = 5.0,
        max_in_flight: int | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        self.catalog = catalog
        self.backoff = tuple(backoff)
        self.retry_after_cap = retry_after_cap
        self.breaker_threshold = breaker_threshold
        self.breaker_cooldown = breaker_cooldown
        self.rate_limit_cooldown = rate_limit_cooldown
        self.quota_cooldown = quota_cooldown
        self.auth_cooldown = auth_cooldown
        self.timeout_grace = timeout_grace
        self.max_in_flight = max_in_flight
        self._sleep = sleep
        self._clock = clock
        self._gateways: dict[str, _GatewayState] = {}
        for name, gateway in gateways.items():
            self._gateways[name] = _GatewayState(
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
        self._pool = next(_POOL_IDS)  # this transport's HTTP clients in the worker
        self.retry_budget = RetryBudget(
            initial=retry_budget_initial,
            cap=retry_budget_cap,
            ratio=retry_budget_ratio,
            per_second=retry_budget_per_second,
            clock=clock,
        )

    # --- public API ---------------------------------------------------------------------------

    async def complete(
        self,
        model_id: str,
        messages: list[Message],
        *,
        timeout: float,  # noqa: ASYNC109 - per-attempt provider timeout, part of the contract
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        walk_chain: bool = True,
        max_tokens: int | None = None,
        user_key: Hashable | None = None,
        priority: Priority = Priority.CHAT,
        on_spend: SpendCallback | None = None,
    ) -> ChatResult:
        """One answer (text and/or tool calls). `on_spend` hears every billable attempt as it
        ends (see `Spend`): the answer's usage, and an estimate when a cancellation cut off
        a request in flight. `user_key` (e.g. the Telegram user id) is who waits in the
        gateways' fair queues; `priority` puts background work behind chat."""
        plan = _CallPlan(self, model_id, walk_chain, messages, timeout, user_key, priority)
        while (slot := await plan.next_slot()) is not None:
            try:
                kwargs = self._request_kwargs(
                    slot, messages, timeout, max_tokens, tools=tools, tool_choice=tool_choice
                )
                if not await plan.worker_ready(slot):
                    continue
                wire = start_record()
                wire.gate = slot
                try:
                    async with asyncio.timeout(timeout + self.timeout_grace):
                        response = await acompletion(**kwargs)
                except asyncio.CancelledError:
                    # The provider got the prompt and may be answering: count the prompt.
                    tell_spend(on_spend, slot.entry, messages, "", None, "cancelled")
                    raise
                except LocalFailure as exc:
                    plan.report_local(slot, exc)
                    continue
                except Exception as exc:  # classified below; nothing escapes unclassified
                    failure = _classify_failure(exc, wire)
                    if wire.headers:
                        slot.learn(wire.headers, failure, wire.error_body)
                    await plan.report(slot, failure)
                    continue
                headers = wire.headers or _success_headers(response)
                slot.learn(headers)
                result = _result_from_response(response, slot.entry, model_id)
                if getattr(response, "usage", None) is None:
                    answered = result.text + "".join(c.arguments for c in result.tool_calls)
                    result.usage = estimate_usage(slot.entry, messages, answered)
                if not result.text.strip() and not result.tool_calls:
                    await plan.report(slot, _classify_empty(wire, "200 empty completion"))
                    continue
                tell_spend(on_spend, slot.entry, messages, "", result.usage, "success")
                plan.report_success(slot, headers)
                result.attempts = plan.attempts
                result.queued_s = plan.queued_s
                return result
            finally:
                slot.close()
        raise plan.failure()

    async def stream(
        self,
        model_id: str,
        messages: list[Message],
        *,
        timeout: float,  # noqa: ASYNC109 - per-attempt provider timeout, part of the contract
        walk_chain: bool = True,
        max_tokens: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        user_key: Hashable | None = None,
        priority: Priority = Priority.CHAT,
        on_spend: SpendCallback | None = None,
        deadline: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """TextDelta pieces (whole characters), maybe StreamRestart, then StreamDone.

        A failure before any text was shown falls through silently to the next attempt. After
        text was shown the reply cannot be taken back, so the next model's text is preceded by
        a StreamRestart telling the caller to clear what it showed. Streamed tool calls are
        assembled (all three protocols arrive through litellm in the OpenAI delta shape) and
        returned whole in the StreamDone result; a model whose catalog entry has `tools=False`
        is sent neither the tools nor tool-shaped messages. `user_key` and `priority` as for
        `complete`.

        `on_spend` hears what every attempt cost as soon as it ends (see `Spend`), also when
        the caller is cancelled or stops iterating: close the generator (`aclosing`) so a
        cancellation while the caller was busy elsewhere is reported too. The provider's usage
        when it came, else an estimate of the prompt and the text received.

        `deadline` (the event loop's clock) bounds the whole answer, however steadily it
        streams: `timeout` is about silence, and a gateway that never stops (or ignores
        `max_tokens`) would otherwise hold the turn and keep spending. When it passes, the
        request is closed, what was received is billed (`Spend.ended` "cut") and the stream
        ends with a StreamDone whose `finish_reason` is TIME_LIMIT, holding the text so far.
        """
        loop = asyncio.get_running_loop()
        plan = _CallPlan(self, model_id, walk_chain, messages, timeout, user_key, priority)
        shown_model: str | None = None  # whose text the caller currently shows
        restart_reason = ""

        def guard_until() -> float:
            """No chunk for `timeout` seconds means the provider is gone; and no answer runs
            past `deadline`."""
            silent = loop.time() + timeout + self.timeout_grace
            return silent if deadline is None else min(silent, deadline)

        while (slot := await plan.next_slot()) is not None:
            try:
                if deadline is not None and loop.time() >= deadline:
                    # Out of time between attempts (after a failure): nothing more is asked.
                    yield StreamDone(_cut_result(slot.entry, model_id, "", Usage(), plan))
                    return
                if shown_model is not None:
                    yield StreamRestart(shown_model, slot.entry.id, restart_reason)
                    shown_model = None
                kwargs = self._request_kwargs(
                    slot, messages, timeout, max_tokens, tools=tools, tool_choice=tool_choice
                )
                kwargs["stream"] = True
                kwargs["stream_options"] = {"include_usage": True}
                assembler = WholeCharacters()
                pieces: list[str] = []
                usage: Any = None
                finish_reason: str | None = None
                calls = ToolCallAssembler()
                headers: Mapping[str, str] = {}
                response: Any = None
                failure: Classified | None = None
                out_of_time = False
                local: LocalFailure | None = None
                if not await plan.worker_ready(slot):
                    continue
                wire = start_record()
                wire.gate = slot
                try:
                    # A guard on silence (no chunk for `timeout`: the provider is gone; a long
                    # answer may stream for minutes) and on the answer's deadline, around each
                    # wait for the provider only: the time the caller holds a piece we yielded
                    # is neither, and a timer firing then would cancel the caller wherever it
                    # is. (A context per chunk costs about what rescheduling one did.)
                    async with asyncio.timeout_at(guard_until()):
                        response = await acompletion(**kwargs)
                    headers = wire.headers or _success_headers(response)
                    slot.learn(headers)
                    chunks = aiter(response)
                    while True:
                        async with asyncio.timeout_at(guard_until()):
                            try:
                                chunk = await anext(chunks)
                            except StopAsyncIteration:
                                break
                        if getattr(chunk, "usage", None):
                            usage = chunk.usage
                        for choice in getattr(chunk, "choices", None) or []:
                            if choice.finish_reason:
                                finish_reason = choice.finish_reason
                            delta = choice.delta
                            if getattr(delta, "tool_calls", None):
                                calls.feed(delta.tool_calls)
                            piece = getattr(delta, "content", None) or ""
                            if not piece:
                                continue
                            pieces.append(piece)
                            whole = assembler.feed(piece)
                            if whole:
                                shown_model = slot.entry.id
                                yield TextDelta(whole)
                except (asyncio.CancelledError, GeneratorExit):
                    # Cut off by /cancel, a stop of the bot, or a caller that stopped reading:
                    # the provider billed the prompt and what it streamed so far.
                    tell_spend(on_spend, slot.entry, messages, "".join(pieces), usage, "cancelled")
                    raise
                except LocalFailure as exc:
                    local = exc
                except Exception as exc:
                    out_of_time = (
                        isinstance(exc, TimeoutError)
                        and deadline is not None
                        and loop.time() >= deadline
                    )
                    if not out_of_time:
                        failure = _classify_failure(exc, wire)
                        if response is None and wire.headers:
                            slot.learn(wire.headers, failure, wire.error_body)
                finally:
                    if response is not None and hasattr(response, "aclose"):
                        try:
                            await response.aclose()
                        except Exception:  # closing a broken stream may fail again; nothing to do
                            pass
                if out_of_time:
                    # Not the model's failure (no breaker, no fallback): the answer ends here
                    # with what came, and that is billed.
                    text = "".join(pieces)
                    spent = provider_usage(usage, slot.entry) if usage else None
                    spent = spent or estimate_usage(slot.entry, messages, text)
                    tell_spend(on_spend, slot.entry, messages, text, spent, "cut")
                    log.warning(
                        "answer_time_limit",
                        model=slot.entry.id,
                        chars=len(text),
                        completion_tokens=spent.completion_tokens,
                    )
                    tail = assembler.flush()
                    if tail:
                        yield TextDelta(tail)
                    yield StreamDone(_cut_result(slot.entry, model_id, text, spent, plan))
                    return
                if failure is not None or local is not None:
                    if pieces or usage is not None:  # it answered before it broke: billed
                        tell_spend(on_spend, slot.entry, messages, "".join(pieces), usage, "failed")
                    if local is not None:
                        restart_reason = str(local)
                        plan.report_local(slot, local)
                        continue
                    assert failure is not None
                    restart_reason = failure.detail or failure.outcome.value
                    await plan.report(slot, failure, text_shown=shown_model is not None)
                    continue
                tail = assembler.flush()
                if tail:
                    shown_model = slot.entry.id
                    try:
                        yield TextDelta(tail)
                    except GeneratorExit:  # the caller stopped at the very end
                        tell_spend(
                            on_spend, slot.entry, messages, "".join(pieces), usage, "cancelled"
                        )
                        raise
                text = "".join(pieces)
                if not text.strip() and not calls:
                    if usage is not None:
                        tell_spend(on_spend, slot.entry, messages, text, usage, "failed")
                    await plan.report(slot, _classify_empty(wire, "200 empty stream"))
                    continue
                spent = provider_usage(usage, slot.entry) if usage else None
                answered = text + "".join(c.arguments for c in calls.calls())
                spent = spent or estimate_usage(slot.entry, messages, answered)
                tell_spend(on_spend, slot.entry, messages, text, spent, "success")
                plan.report_success(slot, headers)
                yield StreamDone(
                    ChatResult(
                        model_id=slot.entry.id,
                        text=text,
                        tool_calls=calls.calls(),
                        finish_reason=finish_reason,
                        usage=spent,
                        attempts=plan.attempts,
                        requested_model_id=model_id,
                        queued_s=plan.queued_s,
                    )
                )
                return
            finally:
                slot.close()
        raise plan.failure()

    async def transcribe(
        self,
        model_id: str,
        audio: bytes,
        *,
        filename: str,
        mime_type: str,
        duration_s: float,
        timeout: float,  # noqa: ASYNC109 - per-attempt provider timeout, part of the contract
        walk_chain: bool = True,
        user_key: Hashable | None = None,
        priority: Priority = Priority.CHAT,
    ) -> Transcription:
        """Speech to text through `litellm.atranscription`, with the same retry, fallback, key,
        bucket and breaker rules as chat (the same `_CallPlan`).

        An empty transcript is a success (the note may hold no words); a 200 whose body is an
        error object is classified from that body. Cost is the catalog's price per second times
        the duration the provider reports (Whisper's verbose_json `duration`), else `duration_s`
        (the caller's best bound: never just what the sender announced). A timed-out attempt is
        billed too, at `duration_s`: the provider may have transcribed the audio before we gave
        up.
        """
        plan = _CallPlan(self, model_id, walk_chain, [], timeout, user_key, priority)
        billed: list[tuple[str, Usage]] = []
        while (slot := await plan.next_slot()) is not None:
            try:
                gateway = slot.state.gateway
                kwargs: dict[str, Any] = {
                    "model": gateway.litellm_model(slot.entry),
                    "file": (filename, audio, mime_type),
                    "api_base": gateway.api_base,
                    "api_key": slot.key,
                    "client": ClientSpec(self._pool, gateway, slot.key_index, slot.key, sdk=True),
                    "max_retries": 0,
                    "timeout": timeout,
                }
                cost = audio_usage(slot.entry, duration_s)
                if not await plan.worker_ready(slot):
                    continue
                wire = start_record()
                wire.gate = slot
                try:
                    async with asyncio.timeout(timeout + self.timeout_grace):
                        response = await atranscription(**kwargs)
                except asyncio.CancelledError:
                    raise
                except LocalFailure as exc:
                    plan.report_local(slot, exc)
                    continue
                except Exception as exc:
                    failure = _classify_failure(exc, wire)
                    if wire.headers:
                        slot.learn(wire.headers, failure, wire.error_body)
                    if failure.outcome is Outcome.TIMEOUT:
                        billed.append((slot.entry.id, cost))
                    await plan.report(slot, failure)
                    continue
                slot.learn(wire.headers or _success_headers(response))
                text = getattr(response, "text", None)
                if not isinstance(text, str) or wire.has_error_body:
                    await plan.report(slot, _classify_empty(wire, "200 without a transcript"))
                    continue
                plan.report_success(slot, wire.headers or _success_headers(response))
                reported = getattr(response, "duration", None)  # verbose_json: what it heard
                if (
                    isinstance(reported, int | float)
                    and not isinstance(reported, bool)
                    and 0 < reported < 86_400
                ):
                    cost = audio_usage(slot.entry, float(reported))
                billed.append((slot.entry.id, cost))
                return Transcription(
                    model_id=slot.entry.id,
                    text=text.strip(),
                    usage=cost,
                    attempts=plan.attempts,
                    requested_model_id=model_id,
                    billed=billed,
                )
            finally:
                slot.close()
        error = plan.failure()
        error.billed = billed
        raise error

    def status(self) -> dict[str, Any]:
        """Breaker, key and bucket state and the provider workers, for /stats, /healthz and
        logs. Key positions only, never keys; each key lists under `model_rests` the models it
        is rate-limited for right now."""
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
                for name, gs in self._gateways.items()
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
            "workers": WORKER.status(),
        }

    async def warm_up(self) -> None:
        """Start a provider worker and load there what litellm otherwise loads during the
        first requests (every later worker does the same before it takes calls).

        Every streamed request is priced by litellm when it starts, counting the prompt's
        tokens; the first count loads its tokenizer (~1 s of CPU), during which every request
        waits; a mocked call per model loads the rest of what a first request loads. The HTTP
        clients of every gateway and key are built there too (TLS set-up). Call once at
        start-up.
        """
        names: set[str] = set()
        specs: list[ClientSpec] = []
        for entry in self.catalog.entries.values():
            state = self._gateways.get(entry.gateway)
            if state is not None and len(state.keys):
                # litellm prices with either name, and picks a tokenizer per name.
                names.update((state.gateway.litellm_model(entry), entry.wire_name))
        for state in self._gateways.values():
            for index, key in enumerate(state.gateway.keys):
                specs.append(ClientSpec(self._pool, state.gateway, index, key))
        try:
            await WORKER.warm_up(specs, sorted(names))
        except Exception as exc:  # only an optimisation: never a reason not to start
            log.warning("litellm_warm_up_failed", error=str(exc))

    async def aclose(self) -> None:
        """Close the HTTP clients (connection pools) this transport's requests used, in the
        worker."""
        await WORKER.close_pool(self._pool)

    # --- internals ----------------------------------------------------------------------------

    def model_breaker(self, model_id: str) -> CircuitBreaker:
        breaker = self._model_breakers.get(model_id)
        if breaker is None:
            breaker = CircuitBreaker(
                f"model:{model_id}", self.breaker_threshold, self.breaker_cooldown, self._clock
            )
            self._model_breakers[model_id] = breaker
        return breaker

    def gateway_state(self, name: str) -> _GatewayState | None:
        return self._gateways.get(name)

    def _request_kwargs(
        self,
        slot: _Slot,
        messages: list[Message],
        timeout: float,
        max_tokens: int | None,
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        gateway = slot.state.gateway
        if not slot.entry.tools:
            # No tool support: no tools offered, and earlier tool exchanges become text.
            tools, tool_choice = None, None
            if any(m.get("role") == "tool" or m.get("tool_calls") for m in messages):
                messages = flatten_tool_messages(messages)
        kwargs: dict[str, Any] = {
            "model": gateway.litellm_model(slot.entry),
            "messages": messages,
            "api_base": gateway.api_base,
            "api_key": slot.key,
            "client": ClientSpec(self._pool, gateway, slot.key_index, slot.key),
            "max_retries": 0,
            "timeout": timeout,
        }
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        return kwargs


def log_breaker_change(change: BreakerChange | None) -> None:
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


class _CallPlan:
    """Which request to send next for one call, and what to learn from each outcome.

    Shared by `complete` and `stream` so both follow exactly the same retry, fallback, key,
    bucket, breaker and budget rules.
    """

    def __init__(
        self,
        transport: Transport,
        model_id: str,
        walk_chain: bool,
        messages: list[Message],
        timeout: float,
        user_key: Hashable | None,
        priority: Priority,
    ) -> None:
        self.t = transport
        self.requested = model_id
        self.timeout = timeout  # also the longest wait for a gateway's queue, per attempt
        self.user_key = user_key if user_key is not None else object()
        self.priority = priority
        self.cost_tokens = estimate_prompt_tokens(messages)
        head = transport.catalog.get(model_id)
        self.chain = list(transport.catalog.chain(model_id)) if walk_chain else [head]
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

    async def next_slot(self) -> _Slot | None:
        if self.pending_delay > 0:
            delay, self.pending_delay = self.pending_delay, 0.0
            await self.t._sleep(delay)
        while self.position < len(self.chain):
            entry = self.chain[self.position]
            # Our own limits make a request wait, never fail: at most `timeout` per model.
            if self._waiting_for != self.position:
                self._waiting_for = self.position
                self._wait_until = self.t._clock() + self.timeout
            wait_until = self._wait_until
            state = self.t.gateway_state(entry.gateway)
            if state is None or not len(state.keys):
                self._skip(entry, NO_KEY)
                continue
            allowed, change = state.breaker.allow()
            log_breaker_change(change)
            if not allowed:
                self._skip(entry, "gateway circuit open")
                continue
            model_breaker = self.t.model_breaker(entry.id)
            allowed, change = model_breaker.allow()
            log_breaker_change(change)
            if not allowed:
                state.breaker.release_probe()
                self._skip(entry, "model circuit open")
                continue
            limit = self.t.max_in_flight
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
                if rest is None or self.t._clock() + rest > wait_until:
                    self._skip(entry, "all keys cooling down")
                    continue
                await self.t._sleep(rest)
                continue  # look again: breakers and keys may have changed meanwhile
            ticket = await state.pacer.acquire(
                entry.wire_name,
                user=self.user_key,
                priority=self.priority,
                max_wait=max(0.0, wait_until - self.t._clock()),
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
            return _Slot(entry, state, index, key, ticket, started=self.t._clock())
        return None

    def _release(self, entry: ModelEntry, state: _GatewayState) -> None:
        state.breaker.release_probe()
        self.t.model_breaker(entry.id).release_probe()

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
            self.t.retry_budget.try_spend()

    # learning

    def report_success(self, slot: _Slot, headers: Mapping[str, str]) -> None:
        state = slot.state
        attempt = Attempt(
            slot.entry.id,
            slot.entry.gateway,
            Outcome.SUCCESS,
            "",
            slot.key_index,
            200,
            latency_s=round(self.t._clock() - slot.started, 4),
        )
        self.attempts.append(attempt)
        state.keys.record_success(slot.key_index)
        log_breaker_change(state.breaker.record_success())
        log_breaker_change(self.t.model_breaker(slot.entry.id).record_success())
        self.t.retry_budget.record_success()
        spent = _spent_until_reset(state.gateway.protocol, headers)
        if spent:  # remaining = 0: this key waits for the reset (for this model only)
            state.keys.cool(
                slot.key_index, spent, "rate_limit_window_spent", model=slot.entry.wire_name
            )

    async def report(self, slot: _Slot, result: Classified, *, text_shown: bool = False) -> None:
        """Record a failed attempt and decide whether the next slot retries or moves on."""
        state, entry = slot.state, slot.entry
        outcome = result.outcome
        attempt = Attempt(
            entry.id,
            entry.gateway,
            outcome,
            result.detail,
            slot.key_index,
            result.status_code,
            latency_s=round(self.t._clock() - slot.started, 4),
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
        model_breaker = self.t.model_breaker(entry.id)
        if outcome in _HEALTH_FAILURES:
            log_breaker_change(state.breaker.record_failure())
            log_breaker_change(model_breaker.record_failure())
        else:
            self._release(entry, state)

        if outcome is Outcome.AUTH:
            if state.keys.cool(slot.key_index, self.t.auth_cooldown, "auth"):
                log.error(
                    "api_key_rejected",
                    gateway=entry.gateway,
                    key_position=slot.key_index,
                    detail=result.detail,
                    cooldown_s=self.t.auth_cooldown,
                )
            self.excluded_keys.add(slot.key_index)
            # Another key of the same gateway may be fine: try it on the same model at once.
            if self._other_key_usable(state, entry):
                return
            self._advance()
            return
        if outcome is Outcome.QUOTA and result.per_model:
            # A daily cap of this model (Groq's TPD): the key serves the gateway's other models
            # meanwhile; this one rests until the provider says it resets.
            rest = (
                result.retry_after_s if result.retry_after_s is not None else self.t.quota_cooldown
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
            self.excluded_keys.add(slot.key_index)
            if not self._other_key_usable(state, entry):
                self._advance()
            return
        if outcome is Outcome.QUOTA:
            if state.keys.cool(slot.key_index, self.t.quota_cooldown, "quota"):
                log.error(
                    "api_key_out_of_quota",
                    gateway=entry.gateway,
                    key_position=slot.key_index,
                    detail=result.detail,
                    cooldown_s=self.t.quota_cooldown,
                )
            self.excluded_keys.add(slot.key_index)
            if not self._other_key_usable(state, entry):  # keys may be different accounts
                self._advance()
            return
        retry_after = result.retry_after_s
        other_key = False
        if outcome is Outcome.RATE_LIMIT:
            # Rate limits are counted per model: the key stays free for the gateway's others.
            cool_for = retry_after if retry_after is not None else self.t.rate_limit_cooldown
            state.keys.cool(
                slot.key_index, min(cool_for, 3600.0), "rate_limit", model=entry.wire_name
            )
            other_key = self._other_key_usable(state, entry)
        if (
            self.position != 0  # the chain walk tries each model once
            or not outcome.retryable
            or text_shown  # the user saw this model fail: restart on the next one
            or self.retries >= len(self.t.backoff)
            or (not other_key and retry_after is not None and retry_after > self.t.retry_after_cap)
        ):
            self._advance()
            return
        if not self.t.retry_budget.try_spend():
            log.info("retry_budget_empty", model=entry.id, gateway=entry.gateway)
            self._advance()
            return
        delay = self.t.backoff[self.retries]
        self.retries += 1
        if other_key:
            delay = 0.0  # another key carries the load right away
        elif retry_after is not None:
            delay = max(delay, retry_after)
        elif outcome is Outcome.RATE_LIMIT:
            # No hint from the provider: the key rests exactly as long as our backoff, so the
            # retry finds it usable (and concurrent calls leave it alone meanwhile).
            state.keys.rest_until(slot.key_index, self.t._clock() + delay, entry.wire_name)
        self.pending_delay = delay

    async def worker_ready(self, slot: _Slot) -> bool:
        """Wait for a provider worker before the attempt's clock starts: a worker starting or
        replacing a lost one is our delay, never the provider's timeout. False: none came."""
        try:
            await WORKER.wait_ready()
        except LocalFailure as exc:
            self.report_local(slot, exc)
            return False
        return True

    def report_local(self, slot: _Slot, error: LocalFailure) -> None:
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
                latency_s=round(self.t._clock() - slot.started, 4),
            )
        )
        log.warning("provider_attempt", model=entry.id, gateway=entry.gateway,
                    outcome=Outcome.LOCAL.value, detail=str(error))  # fmt: skip
        self._release(entry, slot.state)
        if error.retry and self.local_retries < _LOCAL_RETRIES:
            self.local_retries += 1
            return
        self.position = len(self.chain)

    def _other_key_usable(self, state: _GatewayState, entry: ModelEntry) -> bool:
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


# --- response helpers -------------------------------------------------------------------------


def _classify_failure(exc: BaseException, wire: WireRecord) -> Classified:
    if isinstance(exc, ProviderFailure):  # classified in the worker, beside the exception
        return exc.classified
    return classify_exception(exc, wire.status, wire.headers, wire.error_body)


def _classify_empty(wire: WireRecord, detail: str) -> Classified:
    """No text and no tool call. If the 200 body was an error object, it says what happened
    (a rate limit or an unpaid bill); otherwise the provider really sent nothing."""
    if wire.has_error_body:
        return classify(evidence_from_wire(wire.status, wire.headers, wire.error_body))
    return Classified(Outcome.EMPTY, detail, wire.status or 200)


def _success_headers(response: Any) -> Mapping[str, str]:
    hidden = getattr(response, "_hidden_params", None) or {}
    headers = hidden.get("additional_headers") or {}
    # litellm prefixes the provider's own headers with "llm_provider-"
    out: dict[str, str] = {}
    for name, value in headers.items():
        out[str(name).lower().removeprefix("llm_provider-")] = str(value)
    return out


def _spent_until_reset(protocol: str, headers: Mapping[str, str]) -> float | None:
    """Seconds until the latest reset of a window the provider says is spent (remaining 0)."""
    waits = [w.reset_s for w in read_windows(protocol, headers) if w.remaining <= 0]
    partial = exhausted_until_reset(headers)  # remaining and reset without a limit
    if partial is not None:
        waits.append(partial)
    return max(waits) if waits else None


def _cut_result(
    entry: ModelEntry, requested: str, text: str, usage: Usage, plan: _CallPlan
) -> ChatResult:
    """The end of an answer whose time ran out: the text so far, no tool calls (a call cut
    in the middle is not one)."""
    return ChatResult(
        model_id=entry.id,
        text=text,
        finish_reason=TIME_LIMIT,
        usage=usage,
        attempts=plan.attempts,
        requested_model_id=requested,
        queued_s=plan.queued_s,
    )


def _result_from_response(response: Any, entry: ModelEntry, requested: str) -> ChatResult:
    choices = getattr(response, "choices", None) or []
    text = ""
    tool_calls: list[ToolCall] = []
    finish_reason = None
    if choices:
        choice = choices[0]
        finish_reason = getattr(choice, "finish_reason", None)
        message = getattr(choice, "message", None)
        text = (getattr(message, "content", None) or "") if message is not None else ""
        for call in (getattr(message, "tool_calls", None) or []) if message is not None else []:
            function = getattr(call, "function", None)
            name = getattr(function, "name", None) or ""
            arguments = getattr(function, "arguments", None)
            if not isinstance(arguments, str):
                arguments = "" if arguments is None else str(arguments)
            tool_calls.append(ToolCall(getattr(call, "id", "") or "", name, arguments))
    return ChatResult(
        model_id=entry.id,
        text=text,
        tool_calls=tool_calls,
        finish_reason=finish_reason,
        usage=provider_usage(getattr(response, "usage", None), entry),
        requested_model_id=requested,
    )
