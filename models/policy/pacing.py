"""Admission to one gateway: who sends next, and when, so that nobody fails for our own limits.

A request that finds the gateway's pace used up WAITS for its turn instead of failing or
falling back: our own limits exist to keep the provider from refusing us, not to refuse users.
The wait is bounded by the caller (the per-attempt timeout, CHAT_TIMEOUT for chat); only when
that passes does the request give up on this gateway, as a timeout would.

Order of service:

- priority first: chat (`Priority.CHAT`) before background work (`Priority.BACKGROUND`,
  consolidation), which therefore waits while chat needs the capacity and catches up when
  chat is idle;
- within a priority, round robin over users (the `user` key), FIFO per user: one user's burst
  of requests does not push anyone else back;
- a waiter whose model may not go yet (its learned limit is spent) does not block the others.

Pace (all must allow a request):

- the gateway ceiling, `*_RPS` or a catalog gateway's `rps` (optional: unset = learned only);
- per model, what the provider itself reported in its rate-limit headers
  (`models/policy/ratelimits`): a request pace just under its per-minute request limit, and every
  window's `remaining` counted down by our own sends since, refilled at just under the provider's
  rate;
- per model, while no per-minute request limit is known (before the first answer; Groq, whose
  headers give only a per-day request limit; servers that send no headers), a slow start: one
  request in flight, one more for every answer, as TCP does (a burst into an unknown limit is
  exactly what a provider answers with 429s, and the first such 429 names the limit).

A window at remaining = 0 and a provider's 429 with retry-after rest the key for that model
(models/policy/keys.py) until the reset / for the retry-after, which wins over all of this; the
transport waits that rest out like a turn when it ends within the attempt's timeout.
Learned limits are per model and shared by the gateway's keys (keys of one account share its
limits; keys of separate accounts are then paced conservatively).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from models.policy.ratelimits import MINUTE, Window
from models.policy.token_bucket import TokenBucket
from primitives.clock import Clock
from primitives.waits import wait_or_timeout

Sleep = Callable[[float], Awaitable[Any]]

# Pace at this share of what the provider allows: "just under" its limits.
PACE_SHARE = 0.9
# Float slack, and the shortest nap of the dispatcher (a wait of 1e-16 s would never end).
_EPSILON = 1e-9
_MIN_NAP_S = 0.001
# Queue only when the predicted turn comes within this share of the bound: a turn predicted
# just inside it is missed by the slightest slowdown, and then the whole wait was for nothing.
_ETA_SHARE = 0.8
# How long /stats remembers the longest wait.
WAIT_MEMORY_S = 15 * 60.0


class Priority(IntEnum):
    """Lower goes first."""

    CHAT = 0
    BACKGROUND = 1


@dataclass
class Ticket:
    """Permission to send one request to `model`; hand it back with `settle`/`release`."""

    model: str
    waited_s: float
    sent_marks: dict[str, float] = field(default_factory=dict)  # our sends, counted at dispatch
    sent_at: float | None = None  # our clock when it left (at dispatch until then)


@dataclass
class _Track:
    """One window of one model as we last heard it, and what we sent since."""

    window: Window
    read_at: float  # our estimate of when the provider counted: refills start from there
    reset_at: float  # surely full again (a reset stamped to the second: its end)
    sent_mark: float  # our cumulative sends (unit) when the request it answers was sent


class ModelLimits:
    """What one model's provider-side limits allow now, learned from its responses."""

    def __init__(self, model: str, clock: Clock[float]) -> None:
        self.model = model
        self._clock = clock
        self.known = False  # a response said what the limits are (possibly: none sent)
        self.in_flight = 0
        self.window = 1.0  # slow start: requests in flight while no request pace is known
        self.tracks: dict[str, _Track] = {}
        self.pace: TokenBucket | None = None  # from a per-minute request limit
        self.sent: dict[str, float] = {"requests": 0.0, "tokens": 0.0}
        self.spacer: TokenBucket | None = None  # the pace again, at the moment of sending

    def ready_in(self, cost_tokens: float) -> float:
        """Seconds until a request costing `cost_tokens` may go (inf: wait for news)."""
        if self.pace is None and self.in_flight >= self.window:
            return math.inf  # the next answer opens the window further
        now = self._clock()
        wait = self.pace.available_in() if self.pace is not None else 0.0
        for track in self.tracks.values():
            wait = max(wait, self._track_wait(track, now, cost_tokens))
        return wait

    def _track_wait(self, track: _Track, now: float, cost_tokens: float) -> float:
        window = track.window
        if window.unit == "requests":
            need = 1.0
        elif window.name == "output-tokens":
            need = 0.0  # what a request will write is unknown before it is sent
        else:
            need = min(cost_tokens, window.limit)
        if need <= 0:
            return 0.0
        rate = window.rate_per_s * PACE_SHARE
        spent_since = self.sent[window.unit] - track.sent_mark
        refilled = window.limit if now >= track.reset_at else (now - track.read_at) * rate
        available = min(window.limit, window.remaining + refilled) - spent_since
        if available >= need - _EPSILON:
            return 0.0
        until_reset = max(0.0, track.reset_at - now)
        return min(until_reset, (need - available) / rate) if rate > 0 else until_reset

    def take(self, cost_tokens: float) -> dict[str, float]:
        self.in_flight += 1
        if self.pace is not None:
            self.pace.try_take()
        self.sent["requests"] += 1
        self.sent["tokens"] += cost_tokens
        return dict(self.sent)

    def learn(
        self,
        windows: list[Window],
        sent_marks: dict[str, float],
        *,
        refused: bool,
        sent_at: float | None = None,
    ) -> None:
        """A response arrived; `sent_marks` are our send counters when its request left.

        Providers count a request when it arrives and state the headers then, however long
        the answer takes after: refills are reckoned from `sent_at`, so a provider that takes a
        second to answer does not halve our pace (our own sends since are subtracted)."""
        now = self._clock()
        counted_at = now if sent_at is None else sent_at
        self.known = True
        if refused:
            self.window = max(1.0, self.window / 2)
        else:
            self.window += 1.0
        for window in windows:
            mark = sent_marks.get(window.unit, 0.0)
            old = self.tracks.get(window.name)
            if old is not None and old.sent_mark > mark:
                continue  # a newer response already spoke for this window
            self.tracks[window.name] = _Track(window, counted_at, now + window.full_in_s, mark)
            if window.unit == "requests" and window.period_s <= MINUTE:
                rate = window.rate_per_s * PACE_SHARE
                burst = max(1.0, rate / 4)
                if self.pace is None:
                    self.pace = TokenBucket(rate, burst, self._clock)
                    self.spacer = TokenBucket(rate, min(burst, 2.0), self._clock)
                else:
                    self.pace.retune(rate, burst)
                    assert self.spacer is not None
                    self.spacer.retune(rate, min(burst, 2.0))

    def status(self) -> dict[str, Any]:
        now = self._clock()
        return {
            "learned": self.known and bool(self.tracks),
            "in_flight": self.in_flight,
            "slow_start_window": None if self.pace is not None else self.window,
            "pace_per_s": round(self.pace.rate, 2) if self.pace is not None else None,
            "windows": {
                name: {
                    "limit": t.window.limit,
                    "remaining": t.window.remaining,
                    "per_s": t.window.period_s,
                    "reset_in_s": round(max(0.0, t.reset_at - now), 2),
                }
                for name, t in sorted(self.tracks.items())
            },
        }


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[Ticket | None]
    model: str
    user: Hashable
    priority: Priority
    cost_tokens: float
    enqueued_at: float
    deadline: float


class GatewayPacer:
    """The fair, prioritised queue in front of one gateway (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        ceiling_rps: float | None,
        burst: float | None,
        clock: Clock[float],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.name = name
        self._clock = clock
        self._sleep = sleep
        self.ceiling: TokenBucket | None = None
        if ceiling_rps is not None:
            self.ceiling = TokenBucket(
                ceiling_rps, burst if burst is not None else max(1.0, ceiling_rps / 4), clock
            )
        self.models: dict[str, ModelLimits] = {}
        self._queues: tuple[OrderedDict[Hashable, deque[_Waiter]], ...] = tuple(
            OrderedDict() for _ in Priority
        )
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self.served = 0
        self.waited = 0  # requests that had to queue
        self.refused = 0  # requests whose turn the pace put beyond their bound: not queued
        self.gave_up = 0  # queued requests whose bound passed before their turn
        self._longest: deque[tuple[float, float]] = deque()  # (minute, longest wait in it)

    # --- public -----------------------------------------------------------------------------

    def limits(self, model: str) -> ModelLimits:
        found = self.models.get(model)
        if found is None:
            found = self.models[model] = ModelLimits(model, self._clock)
        return found

    async def acquire(
        self,
        model: str,
        *,
        user: Hashable,
        priority: Priority = Priority.CHAT,
        max_wait: float,
        cost_tokens: float = 0.0,
    ) -> Ticket | None:
        """A ticket once it is this request's turn; None if that would take over `max_wait`.

        A turn that the current pace puts beyond `max_wait` is not waited for: that wait
        could only end in a timeout, so the caller hears it at once.
        """
        if self._eta(model, user, priority) > max_wait * _ETA_SHARE:
            self.refused += 1
            return None
        if self._idle() and self._ready_in(model, cost_tokens) == 0.0:
            return self._dispatch_to(model, cost_tokens, waited=0.0)
        now = self._clock()
        waiter = _Waiter(
            asyncio.get_running_loop().create_future(),
            model,
            user if user is not None else object(),
            priority,
            cost_tokens,
            now,
            now + max_wait,
        )
        queue = self._queues[priority]
        queue.setdefault(waiter.user, deque()).append(waiter)
        self.waited += 1
        self._poke()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            future = waiter.future
            served = future.result() if future.done() and not future.cancelled() else None
            if served is not None:
                self.release(served)  # served just as the caller gave up
            self._poke()  # the dispatcher drops the cancelled waiter and serves the next
            raise

    def settle(self, ticket: Ticket, windows: list[Window], *, refused: bool = False) -> None:
        """The response to `ticket`'s request came (headers or none; `refused`: a rate limit):
        learn from it."""
        self.limits(ticket.model).learn(
            windows, ticket.sent_marks, refused=refused, sent_at=ticket.sent_at
        )
        self._poke()

    async def before_send(self, ticket: Ticket) -> None:
        """Right before the request leaves: keep the learned pace at the moment of sending too.
        Between admission and sending litellm sets the request up in the provider worker:
        requests admitted evenly can leave in a bunch, and a provider counts arrivals."""
        while (wait := self._try_send(ticket)) > 0.0:
            await self._sleep(wait)

    def send_now(self, ticket: Ticket) -> bool:
        """`before_send` when it need not wait: True, and the request counts as sent; False:
        await `before_send` (the worker asks for it when the request is about to leave)."""
        return self._try_send(ticket) <= 0.0

    def _try_send(self, ticket: Ticket) -> float:
        limits = self.limits(ticket.model)
        wait = limits.spacer.try_take() if limits.spacer is not None else 0.0
        if wait <= 0.0:
            ticket.sent_at = self._clock()  # what the provider counts from
        return wait

    def left(self, ticket: Ticket, seconds_ago: float) -> None:
        """The request really left `seconds_ago`: later than its permission when its set-up
        took a while (a busy provider worker, a first request's imports). The provider counts
        it from its arrival, so its window refills are reckoned from then, not from the
        permission (reckoned from the permission, a busy worker made us think the window
        had refilled more than it had, and a burst after the first answer met 429s)."""
        left_at = self._clock() - max(0.0, seconds_ago)
        if ticket.sent_at is None or left_at > ticket.sent_at:
            ticket.sent_at = left_at

    def release(self, ticket: Ticket) -> None:
        """The request is over, however it ended (call once per ticket)."""
        self.limits(ticket.model).in_flight -= 1
        self._poke()

    def waiting(self, priority: Priority | None = None) -> int:
        queues = self._queues if priority is None else (self._queues[priority],)
        return sum(1 for q in queues for line in q.values() for w in line if not w.future.done())

    def status(self) -> dict[str, Any]:
        now = self._clock()
        oldest = min(
            (w.enqueued_at for q in self._queues for line in q.values() for w in line),
            default=now,
        )
        self._forget_old(now)
        longest = max((wait for _, wait in self._longest), default=0.0)
        return {
            "ceiling_per_s": self.ceiling.rate if self.ceiling is not None else None,
            "waiting": self.waiting(),
            "waiting_chat": self.waiting(Priority.CHAT),
            "waiting_background": self.waiting(Priority.BACKGROUND),
            "oldest_wait_s": round(now - oldest, 2),
            "longest_wait_s": round(max(longest, now - oldest), 2),
            "served": self.served,
            "queued": self.waited,
            "refused": self.refused,
            "gave_up": self.gave_up,
            "models": {m: lim.status() for m, lim in sorted(self.models.items()) if lim.known},
        }

    # --- internals --------------------------------------------------------------------------

    def _eta(self, model: str, user: Hashable, priority: Priority) -> float:
        """When a new request of `user` would be served, from the queue ahead and the pace."""
        rates = [b for b in (self.ceiling, self.limits(model).pace) if b is not None]
        if not rates:
            return 0.0  # no pace known: nothing to predict
        rate = min(b.rate for b in rates)
        tokens = min(b.tokens for b in rates)
        mine = len(self._queues[priority].get(user, ()))
        ahead = sum(len(line) for q in self._queues[:priority] for line in q.values())
        ahead += mine + sum(
            min(len(line), mine + 1)
            for other, line in self._queues[priority].items()
            if other != user
        )
        return max(0.0, ahead + 1 - tokens) / rate

    def _idle(self) -> bool:
        return not any(self._queues)

    def _ready_in(self, model: str, cost_tokens: float) -> float:
        wait = self.ceiling.available_in() if self.ceiling is not None else 0.0
        return max(wait, self.limits(model).ready_in(cost_tokens))

    def _dispatch_to(self, model: str, cost_tokens: float, *, waited: float) -> Ticket:
        limits = self.limits(model)
        if self.ceiling is not None:
            self.ceiling.try_take()
        marks = limits.take(cost_tokens)
        self.served += 1
        self._note_wait(waited)
        return Ticket(model, waited, marks, self._clock())

    def _note_wait(self, waited: float) -> None:
        minute = math.floor(self._clock() / 60.0)
        if self._longest and self._longest[-1][0] == minute:
            if waited > self._longest[-1][1]:
                self._longest[-1] = (minute, waited)
        else:
            self._longest.append((minute, waited))
        self._forget_old(self._clock())

    def _forget_old(self, now: float) -> None:
        horizon = math.floor((now - WAIT_MEMORY_S) / 60.0)
        while self._longest and self._longest[0][0] < horizon:
            self._longest.popleft()

    def _poke(self) -> None:
        self._wake.set()
        if self._dispatcher is None or self._dispatcher.done():
            # Serves every caller: it carries none of their log context (chat, update).
            self._dispatcher = asyncio.get_running_loop().create_task(
                self._dispatch(), context=contextvars.Context()
            )

    async def _dispatch(self) -> None:
        while not self._idle():
            self._wake.clear()
            now = self._clock()
            soonest = math.inf
            served = False
            for queue in self._queues:
                for user in list(queue):
                    line = queue[user]
                    while line and (line[0].future.done() or line[0].deadline <= now):
                        expired = line.popleft()
                        if not expired.future.done():
                            self.gave_up += 1
                            expired.future.set_result(None)
                    if not line:
                        del queue[user]
                        continue
                    head = line[0]
                    soonest = min(soonest, head.deadline - now)
                    wait = self._ready_in(head.model, head.cost_tokens)
                    if wait > 0.0:
                        soonest = min(soonest, wait)
                        continue  # this model may not go yet; the others may
                    line.popleft()
                    del queue[user]
                    if line:
                        queue[user] = line  # to the back of the round
                    ticket = self._dispatch_to(
                        head.model, head.cost_tokens, waited=now - head.enqueued_at
                    )
                    head.future.set_result(ticket)
                    served = True
                    break
                if served:
                    break
            if served:
                # Let the request just admitted leave before the next one is admitted, so
                # requests reach the provider one by one, in the pace they were given.
                await asyncio.sleep(0)
                continue
            if self._idle():
                return
            await self._nap(max(soonest, _MIN_NAP_S))

    async def _nap(self, seconds: float) -> None:
        """Sleep until `seconds` pass or something changes (a new waiter, news on limits)."""
        # The sleep is a parameter (a test's clock), so it is a task of ours to wait on beside
        # the event, not wait_or_timeout's timeout.
        sleeper = asyncio.ensure_future(self._sleep(seconds)) if math.isfinite(seconds) else None
        try:
            await wait_or_timeout(self._wake, *([sleeper] if sleeper else []), timeout=None)
        finally:
            if sleeper is not None:
                sleeper.cancel()  # our own sleep: nothing else awaits it
