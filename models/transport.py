"""The transport layer: our own thin loop over `litellm.acompletion`.

We do not use litellm's Router: it sends 400s down the fallback chain, reports its own
cool-downs as provider 429s and decides from exception classes before we can look at the body.
Here every request is one litellm call with `max_retries=0` and an explicit timeout, and every
retry, fallback, key choice and wait is decided by our own rules (models/policy/attempt_policy.py:
backoff then the fallback chain, key rests, fair gateway queues paced by the provider's own
headers, circuit breakers, one retry budget). This module runs the attempts those rules allow
and reports every attempt a provider may bill to the caller as it ends, priced by
models/billing.py (the provider's usage, else an estimate).

litellm itself (request set-up, the HTTP exchange, per-chunk stream handling) runs in the
provider worker processes (models/worker/pool.py): the decisions stay in the bot, and litellm's CPU
does not share the bot's GIL. A worker that is lost (killed, frozen, unreadable) or a call that
cannot cross to it is our failure, not the provider's: the attempt is retried on the same model
(another worker) without touching breakers, keys or the retry budget, and never falls back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import structlog

from models.calls import (
    Answer,
    Call,
    CallOptions,
    CompletionCall,
    StreamCall,
    TranscriptionCall,
)
from models.catalog import Catalog
from models.errors import (
    Classified,
    classify,
    classify_exception,
    evidence_from_wire,
)
from models.gateways import Gateway
from models.policy.attempt_policy import AttemptPolicy, CallPlan, Sleep, Slot
from models.types import (
    ChatResult,
    Message,
    Outcome,
    StreamEvent,
    StreamRestart,
    TextDelta,
    Transcription,
    Usage,
)
from models.worker.interface import ProviderWorkers
from models.worker.ipc import ClientSpec, LocalError, ProviderCallError
from models.worker.wire import WireRecord
from primitives.clock import Clock

log = structlog.get_logger(__name__)


class Transport:
    """See the module docstring. One instance is shared by every chat and the worker.

    Options (all keyword-only; tests pass small values and an injected `sleep`/`clock`); all
    but `timeout_grace` are the rules' own and go to its `AttemptPolicy`:

    - `backoff`: waits before phase-1 retries of the requested model; its length is the
      number of retries. `retry_after_cap`: a provider's Retry-After up to this is waited
      for; beyond it the request falls back at once (the key still rests as asked).
    - `bucket_burst`: burst of the optional per-gateway ceiling `Gateway.requests_per_second`
      (default: a quarter second's worth). Requests wait for their turn in the gateway's fair
      queue (models/policy/pacing.py) at most the attempt's `timeout`.
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
    - `workers`: where litellm runs (models/worker/interface.py): the bot's process pool,
      built by the composition root, or what a test swaps in.
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
        clock: Clock[float] = time.monotonic,
        workers: ProviderWorkers,
    ) -> None:
        self.catalog = catalog
        self.workers = workers
        self.timeout_grace = timeout_grace
        self.policy = AttemptPolicy(
            catalog,
            gateways,
            backoff=backoff,
            retry_after_cap=retry_after_cap,
            bucket_burst=bucket_burst,
            breaker_threshold=breaker_threshold,
            gateway_breaker_threshold=gateway_breaker_threshold,
            breaker_cooldown=breaker_cooldown,
            rate_limit_cooldown=rate_limit_cooldown,
            quota_cooldown=quota_cooldown,
            auth_cooldown=auth_cooldown,
            retry_budget_initial=retry_budget_initial,
            retry_budget_cap=retry_budget_cap,
            retry_budget_ratio=retry_budget_ratio,
            retry_budget_per_second=retry_budget_per_second,
            max_in_flight=max_in_flight,
            sleep=sleep,
            clock=clock,
        )
        self._pool = workers.new_pool()  # this transport's HTTP clients in the worker

    # --- public API ---------------------------------------------------------------------------

    async def complete(
        self, model_id: str, messages: list[Message], options: CallOptions
    ) -> ChatResult:
        """One answer (text and/or tool calls). `on_spend` hears every billable attempt as it
        ends (see `Spend`): the answer's usage, and an estimate when a cancellation cut off
        a request in flight. `user_key` (e.g. the Telegram user id) is who waits in the
        gateways' fair queues; `priority` puts background work behind chat (`CallOptions`)."""
        call = CompletionCall(model_id, messages, options, pool=self._pool)
        return await _answer(self._attempts(call), ChatResult)

    def stream(
        self, model_id: str, messages: list[Message], options: CallOptions
    ) -> AsyncGenerator[StreamEvent, None]:
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

        `bounds` (`AnswerBounds`) caps the answer's size the same way: text past its characters
        is neither shown nor kept, and a stream past any bound (text, number of tool calls, one
        call's arguments) is closed, billed ("cut") and ends with `finish_reason` SIZE_LIMIT,
        the text up to the bound, and no tool calls.
        """
        call = StreamCall(model_id, messages, options, pool=self._pool)
        return self._attempts(call)

    async def transcribe(
        self,
        model_id: str,
        audio: bytes,
        options: CallOptions,
        *,
        filename: str,
        mime_type: str,
        duration_s: float,
    ) -> Transcription:
        """Speech to text through `litellm.atranscription`, with the same retry, fallback, key,
        bucket and breaker rules as chat (the same `CallPlan`).

        An empty transcript is a success (the note may hold no words); a 200 whose body is an
        error object is classified from that body. Cost is the catalog's price per second times
        the longer of the duration the provider reports (Whisper's verbose_json `duration`,
        asked for from Whisper models) and `duration_s` (the caller's bound, measured from the
        recording's bytes: never just what the sender announced).

        `on_spend` hears every attempt the provider may bill as soon as it ends (see `Spend`),
        as for `complete`: the answer; an attempt that timed out (`ended` "failed") and one cut
        off in flight by a cancellation of the caller's task (`ended` "cancelled"), both at
        `duration_s`: the provider had the whole upload and may have transcribed it before we
        gave up. It is the only report of what failed or cancelled attempts cost: an error or a
        cancellation carries none.
        """
        call = TranscriptionCall(
            model_id,
            audio,
            options,
            filename=filename,
            mime_type=mime_type,
            duration_s=duration_s,
            pool=self._pool,
        )
        return await _answer(self._attempts(call), Transcription)

    def status(self) -> dict[str, Any]:
        """Breaker, key and queue state (`AttemptPolicy.status`) and the provider workers, for
        /stats, /healthz and logs."""
        return {**self.policy.status(), "workers": self.workers.status()}

    async def warm_up(self) -> None:
        """Start a provider worker and load there what litellm otherwise loads during the
        first requests (every later worker does the same before it takes calls).

        A mocked call per model loads what a first request loads (litellm's stream and
        pricing code). The HTTP clients of every gateway and key are built there too (TLS
        set-up). Call once at start-up.
        """
        names: set[str] = set()
        specs: list[ClientSpec] = []
        for entry in self.catalog.entries.values():
            state = self.policy.gateway_state(entry.gateway)
            if state is not None and len(state.keys):
                names.add(state.gateway.litellm_model(entry))
        for state in self.policy.gateways.values():
            for index, key in enumerate(state.gateway.keys):
                specs.append(ClientSpec(self._pool, state.gateway, index, key))
        try:
            await self.workers.warm_up(specs, sorted(names))
        except Exception as exc:  # only an optimisation: never a reason not to start
            log.warning("litellm_warm_up_failed", error=str(exc))

    async def aclose(self) -> None:
        """Close the HTTP clients (connection pools) this transport's requests used, in the
        worker."""
        await self.workers.close_pool(self._pool)

    # --- the attempt loop ---------------------------------------------------------------------

    async def _attempts(
        self, call: Call[Answer]
    ) -> AsyncGenerator[TextDelta | StreamRestart | Answer, None]:
        """The one attempt loop of `complete`, `stream` and `transcribe`: take the next slot
        the plan allows and run one attempt on it (`_attempt`), until an answer (the last
        item) or the plan runs out (`TransportError`). What differs per kind is the `call`'s
        (models/calls.py). Text shown on the way comes as TextDelta; after text was shown a
        failure cannot take it back, so the next attempt starts with a StreamRestart.

        Every attempt the provider may bill is reported by the call as it ends: cancelled
        (also a caller that stops iterating), failed after it answered, cut at the deadline,
        answered."""
        plan = CallPlan(
            self.policy,
            call.model_id,
            call.messages,
            walk_chain=call.walk_chain,
            timeout=call.timeout,
            user_key=call.user_key,
            priority=call.priority,
        )
        progress = _Progress()
        while (slot := await plan.next_slot()) is not None:
            try:
                # aclosing: a caller that stops reading closes the attempt at once, so it
                # bills what the cut-off request cost before the slot is given back.
                async with aclosing(self._attempt(call, plan, slot, progress)) as items:
                    async for item in items:
                        yield item
                if progress.ended:
                    return
            finally:
                slot.close()
        raise call.failure(plan)

    async def _attempt(
        self, call: Call[Answer], plan: CallPlan, slot: Slot, progress: _Progress
    ) -> AsyncGenerator[TextDelta | StreamRestart | Answer, None]:
        """One attempt on `slot`: send the call's request through a provider worker under our
        own guard, read what arrives, and end it as it came out — cut at the answer's bounds,
        lost to our own failure, failed at the provider, or answered (`progress.ended`)."""
        if call.deadline is not None and asyncio.get_running_loop().time() >= call.deadline:
            # Out of time between attempts (after a failure): nothing more is asked.
            progress.ended = True
            yield call.cut(slot, plan, "", Usage())
            return
        if progress.shown_model is not None:
            yield StreamRestart(progress.shown_model, slot.entry.id, progress.restart_reason)
            progress.shown_model = None
        request = call.request(slot)
        call.start()
        if not await self._worker_ready(plan, slot):
            return
        exchange = _Exchange()
        try:
            # A guard on silence (no answer or chunk for `timeout`: the provider is gone; a
            # long answer may stream for minutes) and on the answer's deadline, around each
            # wait for the provider only: the time the caller holds a piece we yielded is
            # neither, and a timer firing then would cancel the caller wherever it is. (A
            # context per chunk costs about what rescheduling did.)
            async with asyncio.timeout_at(self._guard_until(call)):
                exchange.response = await self.workers.call(
                    call.method, request, exchange.wire, slot
                )
            exchange.headers = exchange.wire.headers or _success_headers(exchange.response)
            slot.learn(exchange.headers)
            chunks = call.chunks(exchange.response)
            while chunks is not None:
                async with asyncio.timeout_at(self._guard_until(call)):
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        break
                for text in call.feed(chunk):
                    progress.shown_model = slot.entry.id
                    yield TextDelta(text)
                if call.oversize:
                    break  # past the answer's bounds: closed below, then cut
        except (asyncio.CancelledError, GeneratorExit):
            # Cut off by /cancel, a stop of the bot, or a caller that stopped reading: the
            # provider billed the prompt and what it sent so far.
            call.bill_cancelled(slot)
            raise
        except LocalError as exc:
            exchange.local = exc
        except Exception as exc:  # classified below; nothing escapes unclassified
            self._failed(call, slot, exchange, exc)
        finally:
            await call.close(exchange.response)
        if exchange.out_of_time or call.oversize:
            # Not the model's failure (no breaker, no fallback): the answer ends here with
            # what came, and that is billed.
            text, spent = call.bill_cut(slot)
            tail = call.tail()
            if tail:
                yield TextDelta(tail)
            progress.ended = True
            yield call.cut(slot, plan, text, spent)
        elif exchange.local is not None:
            call.bill_failed(slot, None)
            progress.restart_reason = str(exchange.local)
            plan.report_local(slot, exchange.local)
        elif exchange.failure is not None:
            call.bill_failed(slot, exchange.failure)
            failure = exchange.failure
            progress.restart_reason = failure.detail or failure.outcome.value
            await plan.report(slot, failure, text_shown=progress.shown_model is not None)
        else:
            async with aclosing(self._answered(call, plan, slot, exchange, progress)) as items:
                async for item in items:
                    yield item

    async def _answered(
        self,
        call: Call[Answer],
        plan: CallPlan,
        slot: Slot,
        exchange: _Exchange,
        progress: _Progress,
    ) -> AsyncGenerator[TextDelta | Answer, None]:
        """The provider answered: the text held back for the end, then the answer; an empty
        answer is a failure of its own (the plan moves on)."""
        tail = call.tail()
        if tail:
            progress.shown_model = slot.entry.id
            try:
                yield TextDelta(tail)
            except GeneratorExit:  # the caller stopped at the very end
                call.bill_cancelled(slot)
                raise
        answer = call.answer(slot, exchange.response, exchange.wire, plan)
        if answer is None:
            await plan.report(slot, _classify_empty(exchange.wire, call.empty_detail))
            return
        plan.report_success(slot, exchange.headers)
        progress.ended = True
        yield answer

    def _guard_until(self, call: Call[Answer]) -> float:
        """No answer (no chunk) for `timeout` seconds means the provider is gone; and no
        answer runs past the call's deadline."""
        silent = asyncio.get_running_loop().time() + call.timeout + self.timeout_grace
        return silent if call.deadline is None else min(silent, call.deadline)

    @staticmethod
    def _failed(call: Call[Answer], slot: Slot, exchange: _Exchange, exc: Exception) -> None:
        """What an exception during the exchange was: the answer's deadline passing (not the
        model's failure), else the provider's failure, classified from what it sent."""
        deadline = call.deadline
        exchange.out_of_time = (
            isinstance(exc, TimeoutError)
            and deadline is not None
            and asyncio.get_running_loop().time() >= deadline
        )
        if exchange.out_of_time:
            return
        exchange.failure = _classify_failure(exc, exchange.wire)
        if exchange.response is None and exchange.wire.headers:
            slot.learn(exchange.wire.headers, exchange.failure, exchange.wire.error_body)

    async def _worker_ready(self, plan: CallPlan, slot: Slot) -> bool:
        """Wait for a provider worker before the attempt's clock starts: a worker starting or
        replacing a lost one is our delay, never the provider's timeout. False: none came
        (reported to the plan as a local failure)."""
        try:
            await self.workers.wait_ready()
        except LocalError as exc:
            plan.report_local(slot, exc)
            return False
        return True


# --- one attempt's state ---------------------------------------------------------------------


@dataclass
class _Progress:
    """What one call's attempts carry from one to the next."""

    shown_model: str | None = None  # whose text the caller currently shows
    restart_reason: str = ""  # why the last attempt failed, for the next one's StreamRestart
    ended: bool = False  # an answer (or a cut) was yielded: no further attempt


@dataclass
class _Exchange:
    """What one request brought: the provider's response and headers, or how it failed."""

    wire: WireRecord = field(default_factory=WireRecord)  # filled in by the worker
    response: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    failure: Classified | None = None
    local: LocalError | None = None
    out_of_time: bool = False


# --- response helpers -------------------------------------------------------------------------


def _classify_failure(exc: BaseException, wire: WireRecord) -> Classified:
    if isinstance(exc, ProviderCallError):  # classified in the worker, beside the exception
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


async def _answer(
    attempts: AsyncIterator[TextDelta | StreamRestart | Answer], kind: type[Answer]
) -> Answer:
    """Run an attempt loop whose call shows nothing on the way: its one item is the answer.
    Iterated to its end, so the attempt's slot is closed before the answer is returned."""
    last: object = None
    async for item in attempts:
        last = item
    assert isinstance(last, kind), last
    return last
