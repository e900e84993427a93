"""The three kinds of call the transport makes, and only what differs between them.

`Transport` runs one attempt loop for all three (`Transport._attempts` in models/transport.py):
a slot from the `CallPlan`, the request through a provider worker under our own guard, what
arrives read, the outcome told to the plan. A call object answers the loop's questions for its
kind: what to send, what to show while the answer arrives, what an attempt that ends early
cost, and what the answer is.

- `CompletionCall` (`Transport.complete`): a chat answer that arrives in one piece;
- `StreamCall` (`Transport.stream`): a chat answer shown as it streams, in whole characters,
  with tool calls assembled from their pieces and a deadline for the whole answer;
- `TranscriptionCall` (`Transport.transcribe`): speech to text, priced by the second.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from models.billing import audio_usage, estimate_usage, provider_usage, tell_spend
from models.catalog import ModelEntry
from models.errors import Classified
from models.policy.attempt_policy import CallPlan, Slot
from models.policy.pacing import Priority
from models.streamtext import WholeCharacters
from models.toolstream import ToolCallAssembler, flatten_tool_messages
from models.types import (
    SIZE_LIMIT,
    TIME_LIMIT,
    AnswerBounds,
    ChatResult,
    Message,
    Outcome,
    SpendCallback,
    StreamDone,
    ToolCall,
    Transcription,
    TransportError,
    Usage,
)
from models.worker.ipc import ClientSpec
from models.worker.wire import WireRecord

log = structlog.get_logger(__name__)

# Covariant: a call only hands its answer out, so a Call[ChatResult] is a Call of any wider type.
Answer = TypeVar("Answer", covariant=True)


@dataclass(frozen=True)
class CallOptions:
    """How one model call is made: everything but the model and what it is sent. One value for
    `Transport.complete`, `stream` and `transcribe` and the calls behind them, so a caller
    builds it once and an option is added in one place."""

    timeout: float  # per attempt; for a stream, the longest silence between its chunks
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = None
    walk_chain: bool = True  # False: the requested model only, never a fallback
    user_key: Hashable | None = None  # who waits in the gateways' fair queues
    priority: Priority = Priority.CHAT  # background work waits behind chat
    on_spend: SpendCallback | None = None  # hears every billable attempt as it ends
    # Streams only: when the whole answer ends (the event loop's clock), and its size.
    deadline: float | None = None
    bounds: AnswerBounds | None = None


class Call(Generic[Answer]):
    """What the attempt loop asks of every kind of call. The defaults fit a request whose
    answer arrives in one piece, shows nothing on the way and has no deadline."""

    empty_detail: str  # the detail of an answer without content, reported as EMPTY
    method: str  # the litellm call the worker makes: "completion" or "transcription"
    deadline: float | None = None  # the event loop's clock: the whole answer ends there
    # The answer passed its size bounds (`AnswerBounds`): the loop cuts it as at the deadline.
    oversize: bool = False

    def __init__(
        self, model_id: str, messages: list[Message], options: CallOptions, *, pool: int
    ) -> None:
        self.model_id = model_id
        self.messages = messages
        self.options = options
        self.timeout = options.timeout
        self.walk_chain = options.walk_chain
        self.user_key = options.user_key
        self.priority = options.priority
        self.pool = pool  # the transport's HTTP clients in the worker

    def request(self, slot: Slot) -> dict[str, Any]:
        """The keyword arguments of the litellm call (`method`) for this slot's model, gateway
        and key; the transport hands them to a provider worker."""
        raise NotImplementedError

    def start(self) -> None:
        """A new attempt begins: forget what the last one received."""

    def chunks(self, response: Any) -> AsyncIterator[Any] | None:
        """The pieces the answer arrives in; None when it arrived whole."""
        return None

    def feed(self, chunk: Any) -> Iterator[str]:
        """Read one piece of the answer; yield the text to show the caller now."""
        return iter(())

    async def close(self, response: Any) -> None:
        """The attempt is over, however it ended: let go of what its response holds open."""

    def tail(self) -> str:
        """Text received but not shown yet (an incomplete character held back)."""
        return ""

    def bill_cancelled(self, slot: Slot) -> None:
        """The caller went away mid-attempt: report what the provider may bill for it."""

    def bill_failed(self, slot: Slot, failure: Classified | None) -> None:
        """The attempt failed (`failure` None: ours, a worker lost): report what it cost."""

    def answer(self, slot: Slot, response: Any, wire: WireRecord, plan: CallPlan) -> Answer | None:
        """The caller's answer, its spend reported; None: the provider sent nothing usable
        (the loop reports it as empty and tries the next slot)."""
        raise NotImplementedError

    def cut(self, slot: Slot, plan: CallPlan, text: str, usage: Usage) -> Answer:
        """The end of an answer whose deadline passed or that grew past its bounds: the text
        so far."""
        raise NotImplementedError("only a call with a deadline is cut")

    def bill_cut(self, slot: Slot) -> tuple[str, Usage]:
        """The deadline passed (or a bound) mid-answer: report what came, and return the text
        kept and the usage."""
        raise NotImplementedError("only a call with a deadline is cut")

    def failure(self, plan: CallPlan) -> TransportError:
        """Every slot failed: the error the caller gets."""
        return plan.failure()


class _ChatCall(Call[Answer]):
    """What chat answers share, streamed or not: the request and the bill. An attempt that
    ends early is billed for the prompt and what it received (nothing, for an answer that
    arrives whole), at the provider's usage when it came, else an estimate."""

    method = "completion"

    def __init__(
        self,
        model_id: str,
        messages: list[Message],
        options: CallOptions,
        *,
        pool: int,
    ) -> None:
        super().__init__(model_id, messages, options, pool=pool)
        self.tools = options.tools
        self.tool_choice = options.tool_choice
        self.max_tokens = options.max_tokens
        self.on_spend = options.on_spend
        self.pieces: list[str] = []  # text received in this attempt
        self.usage: Any = None  # the provider's usage in this attempt, when it came

    def request(self, slot: Slot) -> dict[str, Any]:
        gateway = slot.state.gateway
        messages, tools, tool_choice = self.messages, self.tools, self.tool_choice
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
            "client": ClientSpec(self.pool, gateway, slot.key_index, slot.key),
            "max_retries": 0,
            "timeout": self.timeout,
        }
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        return kwargs

    def start(self) -> None:
        self.pieces = []
        self.usage = None

    def bill_cancelled(self, slot: Slot) -> None:
        # The provider got the prompt and may be answering: count the prompt and what came.
        self._tell(slot, "".join(self.pieces), self.usage, "cancelled")

    def bill_failed(self, slot: Slot, failure: Classified | None) -> None:
        if self.pieces or self.usage is not None:  # it answered before it broke: billed
            self._tell(slot, "".join(self.pieces), self.usage, "failed")

    def _tell(self, slot: Slot, text: str, usage: Any, ended: str) -> None:
        tell_spend(self.on_spend, slot.entry, self.messages, text, usage, ended)


class CompletionCall(_ChatCall[ChatResult]):
    """A chat answer (text and/or tool calls) that arrives in one piece. An empty one that
    reported usage is billed as failed (its prompt was), as an empty stream is."""

    empty_detail = "200 empty completion"

    def answer(
        self, slot: Slot, response: Any, wire: WireRecord, plan: CallPlan
    ) -> ChatResult | None:
        result = _result_from_response(response, slot.entry, self.model_id)
        reported = provider_usage(getattr(response, "usage", None), slot.entry)
        if reported is None:  # none sent, or counts no bill can hold
            answered = result.text + "".join(c.arguments for c in result.tool_calls)
            reported = estimate_usage(slot.entry, self.messages, answered)
        result.usage = reported
        if not result.text.strip() and not result.tool_calls:
            if getattr(response, "usage", None) is not None:  # the prompt was billed
                self._tell(slot, "", result.usage, "failed")
            return None
        self._tell(slot, "", result.usage, "success")
        result.attempts = plan.attempts
        result.queued_s = plan.queued_s
        return result


class StreamCall(_ChatCall[StreamDone]):
    """A chat answer shown as it streams: text in whole characters, tool calls assembled from
    their pieces (all three protocols arrive through litellm in the OpenAI delta shape), a
    `deadline` for the whole answer and `bounds` on its size (`AnswerBounds`): the text past
    the bound is never shown nor kept, and the attempt loop cuts the answer there."""

    empty_detail = "200 empty stream"

    def __init__(
        self,
        model_id: str,
        messages: list[Message],
        options: CallOptions,
        *,
        pool: int,
    ) -> None:
        super().__init__(model_id, messages, options, pool=pool)
        self.deadline = options.deadline
        self.bounds = options.bounds
        self.assembler = WholeCharacters()
        self.calls = ToolCallAssembler()
        self.finish_reason: str | None = None
        self.kept_chars = 0  # text kept in this attempt (`pieces`)
        self.beyond = ""  # text received past the bound: never shown, but billed

    def request(self, slot: Slot) -> dict[str, Any]:
        kwargs = super().request(slot)
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    def start(self) -> None:
        super().start()
        self.assembler = WholeCharacters()
        self.calls = ToolCallAssembler()
        self.finish_reason = None
        self.kept_chars = 0
        self.beyond = ""
        self.oversize = False

    def chunks(self, response: Any) -> AsyncIterator[Any]:
        return aiter(response)

    def feed(self, chunk: Any) -> Iterator[str]:
        if getattr(chunk, "usage", None):
            self.usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or []:
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if getattr(delta, "tool_calls", None):
                self.calls.feed(delta.tool_calls)
                if self._calls_too_big():
                    self.oversize = True
                    return
            piece = getattr(delta, "content", None) or ""
            if not piece:
                continue
            if self.bounds is not None:
                room = max(0, self.bounds.text_chars - self.kept_chars)
                if len(piece) > room:
                    piece, self.beyond = piece[:room], piece[room:]
                    self.oversize = True
            if piece:
                self.pieces.append(piece)
                self.kept_chars += len(piece)
                whole = self.assembler.feed(piece)
                if whole:
                    yield whole
            if self.oversize:
                return

    def _calls_too_big(self) -> bool:
        bounds = self.bounds
        return bounds is not None and (
            self.calls.started > bounds.tool_calls
            or self.calls.longest_arguments > bounds.tool_argument_chars
        )

    async def close(self, response: Any) -> None:
        if response is not None and hasattr(response, "aclose"):
            try:
                await response.aclose()
            except Exception:  # closing a broken stream may fail again; nothing to do
                pass

    def tail(self) -> str:
        return self.assembler.flush()

    def answer(
        self, slot: Slot, response: Any, wire: WireRecord, plan: CallPlan
    ) -> StreamDone | None:
        text = "".join(self.pieces)
        if not text.strip() and not self.calls:
            if self.usage is not None:
                self._tell(slot, text, self.usage, "failed")
            return None
        spent = provider_usage(self.usage, slot.entry) if self.usage else None
        answered = text + "".join(c.arguments for c in self.calls.calls())
        spent = spent or estimate_usage(slot.entry, self.messages, answered)
        self._tell(slot, text, spent, "success")
        return StreamDone(
            ChatResult(
                model_id=slot.entry.id,
                text=text,
                tool_calls=self.calls.calls(),
                finish_reason=self.finish_reason,
                usage=spent,
                attempts=plan.attempts,
                requested_model_id=self.model_id,
                queued_s=plan.queued_s,
            )
        )

    def bill_cut(self, slot: Slot) -> tuple[str, Usage]:
        text = "".join(self.pieces)
        spent = provider_usage(self.usage, slot.entry) if self.usage else None
        # Everything received was written (and billed) by the provider, kept or not.
        received = text + self.beyond + "".join(c.arguments for c in self.calls.calls())
        spent = spent or estimate_usage(slot.entry, self.messages, received)
        self._tell(slot, text, spent, "cut")
        log.warning(
            "answer_size_limit" if self.oversize else "answer_time_limit",
            model=slot.entry.id,
            chars=len(text),
            tool_calls=self.calls.started,
            tool_argument_chars=self.calls.longest_arguments,
            completion_tokens=spent.completion_tokens,
        )
        return text, spent

    def cut(self, slot: Slot, plan: CallPlan, text: str, usage: Usage) -> StreamDone:
        # No tool calls: a call cut in the middle (or past the bounds) is not one.
        return StreamDone(
            ChatResult(
                model_id=slot.entry.id,
                text=text,
                finish_reason=SIZE_LIMIT if self.oversize else TIME_LIMIT,
                usage=usage,
                attempts=plan.attempts,
                requested_model_id=self.model_id,
                queued_s=plan.queued_s,
            )
        )


def reports_duration(entry: ModelEntry) -> bool:
    """Whisper-style endpoints (Groq's and OpenAI's Whisper models) answer `verbose_json` with
    the `duration` they decoded; OpenAI's gpt-4o transcription models refuse that format (json
    or text only) and report tokens instead."""
    return "whisper" in entry.wire_name.lower()


def reported_seconds(response: Any) -> float:
    """How long the provider says the audio was: verbose_json's `duration`, or a `usage` of
    type "duration" (`seconds`), the longer; 0 when it said neither (or nonsense)."""
    usage = getattr(response, "usage", None)
    claims = (
        getattr(response, "duration", None),
        getattr(usage, "seconds", None) if getattr(usage, "type", None) == "duration" else None,
    )
    sane = [
        float(c)
        for c in claims
        if isinstance(c, int | float) and not isinstance(c, bool) and 0 < c < 86_400
    ]
    return max(sane, default=0.0)


class TranscriptionCall(Call[Transcription]):
    """Speech to text. Priced by the second: the longest of the duration the provider reports
    (Whisper's verbose_json `duration`, asked for where the endpoint has it) and `duration_s`,
    the caller's bound (the recording's own length as its bytes tell it, never less than its
    size allows: never just what the sender announced). Each attempt the provider may bill is
    told to `on_spend` as it ends, as chat calls tell theirs: the answer, an attempt that timed
    out and one cut off by a cancellation (both at `duration_s`: the provider had the whole
    upload and may have transcribed, and billed, it before we gave up). A refusal (429, 5xx,
    an error body) costs nothing and is not told."""

    empty_detail = "200 without a transcript"
    method = "transcription"

    def __init__(
        self,
        model_id: str,
        audio: bytes,
        options: CallOptions,
        *,
        filename: str,
        mime_type: str,
        duration_s: float,
        pool: int,
    ) -> None:
        super().__init__(model_id, [], options, pool=pool)
        self.audio = audio
        self.filename = filename
        self.mime_type = mime_type
        self.duration_s = duration_s
        self.on_spend = options.on_spend

    def request(self, slot: Slot) -> dict[str, Any]:
        gateway = slot.state.gateway
        kwargs: dict[str, Any] = {
            "model": gateway.litellm_model(slot.entry),
            "file": (self.filename, self.audio, self.mime_type),
            "api_base": gateway.api_base,
            "api_key": slot.key,
            "client": ClientSpec(self.pool, gateway, slot.key_index, slot.key, sdk=True),
            "max_retries": 0,
            "timeout": self.timeout,
        }
        if reports_duration(slot.entry):
            # The answer then says how long the audio the provider decoded was: the bill.
            kwargs["response_format"] = "verbose_json"
        return kwargs

    def bill_cancelled(self, slot: Slot) -> None:
        self._tell(slot, audio_usage(slot.entry, self.duration_s), "cancelled")

    def bill_failed(self, slot: Slot, failure: Classified | None) -> None:
        if failure is not None and failure.outcome is Outcome.TIMEOUT:
            self._tell(slot, audio_usage(slot.entry, self.duration_s), "failed")

    def answer(
        self, slot: Slot, response: Any, wire: WireRecord, plan: CallPlan
    ) -> Transcription | None:
        # An empty transcript is a success (the note may hold no words); a 200 whose body is
        # an error object is not.
        text = getattr(response, "text", None)
        if not isinstance(text, str) or wire.has_error_body:
            return None
        reported = reported_seconds(response)
        if reported > self.duration_s + 1:
            # The audio held more than its bytes admitted to (a forged length): billed as heard.
            log.warning(
                "transcription_longer_than_measured",
                model=slot.entry.id,
                measured_s=round(self.duration_s, 1),
                reported_s=round(reported, 1),
            )
        cost = audio_usage(slot.entry, max(self.duration_s, reported))
        self._tell(slot, cost, "success")
        return Transcription(
            model_id=slot.entry.id,
            text=text.strip(),
            usage=cost,
            attempts=plan.attempts,
            requested_model_id=self.model_id,
        )

    def _tell(self, slot: Slot, usage: Usage, ended: str) -> None:
        tell_spend(self.on_spend, slot.entry, self.messages, "", usage, ended)


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
        requested_model_id=requested,
    )
