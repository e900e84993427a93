"""The transport layer: our own thin loop over `litellm.acompletion`.

We do not use litellm's Router: it sends 400s down the fallback chain, reports its own
cool-downs as provider 429s and decides from exception classes before we can look at the body.
Here every request is one litellm call with `max_retries=0` and an explicit timeout, and every
retry, fallback, key choice and wait is decided by our own rules (models/attempt_policy.py:
backoff then the fallback chain, key rests, fair gateway queues paced by the provider's own
headers, circuit breakers, one retry budget). This module runs the attempts those rules allow
and reports every attempt a provider may bill to the caller as it ends, priced by
models/billing.py (the provider's usage, else an estimate).

litellm itself (request set-up, the HTTP exchange, per-chunk stream handling) runs in the
provider worker processes (models/worker.py): the decisions stay in the bot, and litellm's CPU
does not share the bot's GIL. A worker that is lost (killed, frozen, unreadable) or a call that
cannot cross to it is our failure, not the provider's: the attempt is retried on the same model
(another worker) without touching breakers, keys or the retry budget, and never falls back.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from typing import Any

import structlog

from models.attempt_policy import AttemptPolicy, CallPlan, Clock, Sleep, Slot
from models.billing import audio_usage, estimate_usage, provider_usage, tell_spend
from models.catalog import Catalog, ModelEntry
from models.errors import (
    Classified,
    classify,
    classify_exception,
    evidence_from_wire,
)
from models.gateways import Gateway
from models.ipc import ClientSpec, LocalFailure, ProviderFailure
from models.pacing import Priority
from models.streamtext import WholeCharacters
from models.toolstream import ToolCallAssembler, flatten_tool_messages
from models.types import (
    TIME_LIMIT,
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
    Usage,
)
from models.wire import WireRecord, start_record
from models.worker import WORKER, acompletion, atranscription

log = structlog.get_logger(__name__)

_POOL_IDS = itertools.count(1)


class Transport:
    """See the module docstring. One instance is shared by every chat and the worker.

    Options (all keyword-only; tests pass small values and an injected `sleep`/`clock`); all
    but `timeout_grace` are the rules' own and go to its `AttemptPolicy`:

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
        self._pool = next(_POOL_IDS)  # this transport's HTTP clients in the worker

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
        plan = CallPlan(self.policy, model_id, walk_chain, messages, timeout, user_key, priority)
        while (slot := await plan.next_slot()) is not None:
            try:
                kwargs = self._request_kwargs(
                    slot, messages, timeout, max_tokens, tools=tools, tool_choice=tool_choice
                )
                if not await self._worker_ready(plan, slot):
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
        plan = CallPlan(self.policy, model_id, walk_chain, messages, timeout, user_key, priority)
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
                if not await self._worker_ready(plan, slot):
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
        bucket and breaker rules as chat (the same `CallPlan`).

        An empty transcript is a success (the note may hold no words); a 200 whose body is an
        error object is classified from that body. Cost is the catalog's price per second times
        the duration the provider reports (Whisper's verbose_json `duration`), else `duration_s`
        (the caller's best bound: never just what the sender announced). A timed-out attempt is
        billed too, at `duration_s`: the provider may have transcribed the audio before we gave
        up.
        """
        plan = CallPlan(self.policy, model_id, walk_chain, [], timeout, user_key, priority)
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
                if not await self._worker_ready(plan, slot):
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
        """Breaker, key and queue state (`AttemptPolicy.status`) and the provider workers, for
        /stats, /healthz and logs."""
        return {**self.policy.status(), "workers": WORKER.status()}

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
            state = self.policy.gateway_state(entry.gateway)
            if state is not None and len(state.keys):
                # litellm prices with either name, and picks a tokenizer per name.
                names.update((state.gateway.litellm_model(entry), entry.wire_name))
        for state in self.policy.gateways.values():
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

    async def _worker_ready(self, plan: CallPlan, slot: Slot) -> bool:
        """Wait for a provider worker before the attempt's clock starts: a worker starting or
        replacing a lost one is our delay, never the provider's timeout. False: none came
        (reported to the plan as a local failure)."""
        try:
            await WORKER.wait_ready()
        except LocalFailure as exc:
            plan.report_local(slot, exc)
            return False
        return True

    def _request_kwargs(
        self,
        slot: Slot,
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


def _cut_result(
    entry: ModelEntry, requested: str, text: str, usage: Usage, plan: CallPlan
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
