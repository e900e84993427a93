"""The gateway queue (models/policy/pacing.py) and the header reading it learns from
(models/policy/ratelimits).

Queue tests drive the pacer with an injected clock that moves only when the dispatcher sleeps,
so the order and the moments of service are exact. Header tests use the providers' real header
names and formats (models/policy/ratelimits.py lists them).
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime

import pytest

from models.policy.pacing import GatewayPacer, Priority, Ticket
from models.policy.ratelimits import DAY, MINUTE, read_windows
from primitives.tasks import stop_tasks
from tests.support.clocks import SettableClock
from tests.support.waits import within


def _pacer(
    clock: SettableClock[float], rps: float | None = 10.0, burst: float = 1.0
) -> GatewayPacer:
    async def sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    pacer = GatewayPacer("g", ceiling_rps=rps, burst=burst, clock=clock, sleep=sleep)
    # The provider's limit is far above the ceiling: only the ceiling paces here.
    roomy = {"x-ratelimit-limit-requests": "1000000", "x-ratelimit-remaining-requests": "999999"}
    pacer.settle(Ticket("m", 0.0), read_windows("openai", roomy))
    return pacer


def _learning_pacer(clock: SettableClock[float]) -> GatewayPacer:
    """No ceiling: paced by what the provider's headers say alone; its sleeps advance `clock`."""

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    return GatewayPacer("g", ceiling_rps=None, burst=None, clock=clock, sleep=sleep)


async def _serve(pacer: GatewayPacer, requests: list[tuple[str, Priority]]) -> list[str]:
    """Ask for every (user, priority) at once, in list order; the order they were served."""
    served: list[str] = []

    async def one(label: str, user: str, priority: Priority) -> None:
        if await pacer.acquire("m", user=user, priority=priority, max_wait=60) is not None:
            served.append(label)

    # Tasks start in the order they were created, all before the dispatcher serves anyone.
    tasks = [
        asyncio.create_task(one(f"{user}{n}", user, priority))
        for n, (user, priority) in enumerate(requests)
    ]
    await asyncio.gather(*tasks)
    return served


async def test_one_users_burst_does_not_push_the_others_back() -> None:
    pacer = _pacer(SettableClock(1000.0))
    heavy = [("h", Priority.CHAT)] * 6
    light = [("a", Priority.CHAT), ("b", Priority.CHAT), ("c", Priority.CHAT)]
    served = await _serve(pacer, heavy + light)
    # First come, first served would give h0..h5 before a6, b7, c8. Round robin over users:
    # h0 went at once, then each user in turn.
    assert served == ["h0", "h1", "a6", "b7", "c8", "h2", "h3", "h4", "h5"]


async def test_chat_goes_before_background_work_which_catches_up_after() -> None:
    pacer = _pacer(SettableClock(1000.0))
    background = [("job", Priority.BACKGROUND)] * 4
    chat = [("u", Priority.CHAT), ("v", Priority.CHAT), ("u", Priority.CHAT)]
    served = await _serve(pacer, background + chat)
    # job0 found the gateway idle; every chat request then went before the other jobs.
    assert served == ["job0", "u4", "v5", "u6", "job1", "job2", "job3"]
    assert pacer.status()["served"] == 7


async def test_a_waiter_whose_bound_passes_gets_no_ticket_and_the_queue_moves_on() -> None:
    clock = SettableClock(1000.0)
    pacer = _pacer(clock, rps=1.0)
    first = await pacer.acquire("m", user="a", max_wait=10)
    assert first is not None and first.waited_s == 0.0
    # The next turn is 1 s away: with a bound of 0.5 s it is not waited for.
    assert await pacer.acquire("m", user="b", max_wait=0.5) is None
    ticket = await pacer.acquire("m", user="c", max_wait=5)
    assert ticket is not None and ticket.waited_s == pytest.approx(1.0)
    status = pacer.status()
    assert (status["refused"], status["served"], status["waiting"]) == (1, 2, 0)
    assert status["longest_wait_s"] == pytest.approx(1.0)


async def test_unknown_limits_let_one_probe_go_and_the_rest_wait_for_its_answer() -> None:
    clock = SettableClock(1000.0)
    pacer = GatewayPacer("g", ceiling_rps=None, burst=None, clock=clock)
    probe = await pacer.acquire("m", user="a", max_wait=30)
    assert probe is not None
    second = asyncio.create_task(pacer.acquire("m", user="b", max_wait=30))
    await asyncio.sleep(0.05)
    assert not second.done()  # nothing is known yet about m's limits
    window = read_windows(
        "openai",
        {
            "x-ratelimit-limit-requests": "600",
            "x-ratelimit-remaining-requests": "599",
            "x-ratelimit-reset-requests": "100ms",
        },
    )
    pacer.settle(probe, window)
    ticket = await within(second, 5)
    assert ticket is not None
    assert pacer.status()["models"]["m"]["pace_per_s"] == pytest.approx(9.0)  # 0.9 x 600/min


async def test_a_learned_limit_paces_below_it_and_counts_our_own_sends() -> None:
    clock = SettableClock(1000.0)
    pacer = _learning_pacer(clock)
    probe = await pacer.acquire("m", user="a", max_wait=60)
    assert probe is not None
    # 120 requests a minute; 2 left now, the window is whole again in 1 s.
    headers = {
        "x-ratelimit-limit-requests": "120",
        "x-ratelimit-remaining-requests": "2",
        "x-ratelimit-reset-requests": "1s",
    }
    pacer.settle(probe, read_windows("openai", headers))
    start = clock.now
    moments = []
    for user in "bcdef":
        ticket = await pacer.acquire("m", user=user, max_wait=60)
        assert ticket is not None
        moments.append(clock.now - start)
    gaps = [b - a for a, b in itertools.pairwise(moments)]
    # Paced at 0.9 x 2/s = 1.8/s: never closer than the pace once the burst is spent.
    assert all(gap >= 1 / 1.8 - 1e-9 for gap in gaps[1:])
    assert moments[-1] >= 3 / 1.8


async def test_the_send_gate_lets_a_request_go_at_once_from_any_thread_while_the_pace_allows(
) -> None:  # fmt: skip
    clock = SettableClock(1000.0)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)
        await asyncio.sleep(0)

    pacer = GatewayPacer("g", ceiling_rps=None, burst=None, clock=clock, sleep=sleep)
    # 600 requests a minute: 0.9 x 10/s = 9/s, and at most 2 leave together.
    headers = {"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "600"}
    pacer.settle(Ticket("m", 0.0), read_windows("openai", headers))
    tickets = [Ticket("m", 0.0) for _ in range(3)]

    # The request hook asks from the provider loop's thread: no round trip to our loop.
    answers = await asyncio.to_thread(lambda: [pacer.send_now(t) for t in tickets])

    assert answers == [True, True, False]
    assert [t.sent_at for t in tickets[:2]] == [clock.now, clock.now]
    assert tickets[2].sent_at is None  # not sent: nothing counted
    start = clock.now
    await pacer.before_send(tickets[2])  # the third waits out the pace, then goes
    assert slept and sum(slept) == pytest.approx(1 / 9)
    assert tickets[2].sent_at == pytest.approx(start + 1 / 9)


async def loop_turns(count: int = 20) -> None:
    """Let the event loop run `count` turns. The dispatcher admits one waiter a turn and an
    admitted caller resumes the turn after, so a few turns settle any admission: turns, not a
    stretch of time (on a slow machine 10 ms can pass within one turn; no count of turns is
    ever cut short by a slow machine)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def test_without_a_request_limit_a_slow_start_opens_one_more_per_answer() -> None:
    """Groq states no per-minute request limit in its headers: until a refusal names it,
    requests go one more at a time per answer, and a refusal halves the window."""
    pacer = GatewayPacer("g", ceiling_rps=None, burst=None, clock=SettableClock(1000.0))
    groq_headers = {
        "x-ratelimit-limit-requests": "14400",
        "x-ratelimit-remaining-requests": "14399",
        "x-ratelimit-reset-requests": "6s",
    }
    waiting = [asyncio.create_task(pacer.acquire("m", user=n, max_wait=30)) for n in range(8)]
    await loop_turns()
    assert sum(t.done() for t in waiting) == 1
    first = waiting[0].result()
    pacer.settle(first, read_windows("groq", groq_headers))
    await loop_turns()
    assert sum(t.done() for t in waiting) == 2  # window 2, one still in flight
    pacer.release(first)
    await loop_turns()
    assert sum(t.done() for t in waiting) == 3
    second = waiting[1].result()
    pacer.settle(second, [], refused=True)  # a 429 without words: the window halves
    pacer.release(second)
    await loop_turns()
    assert sum(t.done() for t in waiting) == 3  # window 1, the third in flight
    assert pacer.status()["models"]["m"]["slow_start_window"] == 1.0
    await stop_tasks(waiting)


def test_openai_headers_go_durations_and_per_minute_limits() -> None:
    windows = read_windows(
        "openai",
        {
            "X-RateLimit-Limit-Requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-reset-requests": "120ms",
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "29000",
            "x-ratelimit-reset-tokens": "2m59.56s",
        },
    )
    by_name = {w.name: w for w in windows}
    assert by_name["requests"].period_s == MINUTE and by_name["requests"].reset_s == 0.12
    assert by_name["tokens"].remaining == 29000
    assert by_name["tokens"].reset_s == pytest.approx(179.56)


def test_groq_request_limit_is_per_day_and_its_token_limit_per_minute() -> None:
    windows = read_windows(
        "groq",
        {
            "x-ratelimit-limit-requests": "14400",
            "x-ratelimit-remaining-requests": "14370",
            "x-ratelimit-reset-requests": "2m59.56s",
            "x-ratelimit-limit-tokens": "6000",
            "x-ratelimit-remaining-tokens": "5997",
            "x-ratelimit-reset-tokens": "6m0s",
        },
    )
    by_name = {w.name: w for w in windows}
    assert by_name["requests"].period_s == DAY
    assert by_name["tokens"].period_s == MINUTE and by_name["tokens"].reset_s == 360.0


def test_anthropic_headers_with_rfc3339_resets() -> None:
    now = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-11-30T16:00:07Z",
        "anthropic-ratelimit-input-tokens-limit": "30000",
        "anthropic-ratelimit-input-tokens-remaining": "29500",
        "anthropic-ratelimit-input-tokens-reset": "2026-11-30T16:00:01.5+00:00",
        "retry-after": "7",
    }
    by_name = {w.name: w for w in read_windows("anthropic", headers, now=now)}
    assert set(by_name) == {"requests", "input-tokens"}
    assert by_name["requests"].remaining == 0 and by_name["requests"].reset_s == 7.0
    # A stamp to the whole second stands for a moment up to a second later: surely full at
    # its end. A stamp with a fraction is taken as it reads.
    assert by_name["requests"].full_in_s == 8.0 and by_name["input-tokens"].full_in_s == 1.5
    assert by_name["input-tokens"].reset_s == 1.5


def test_no_or_broken_headers_are_no_limits() -> None:
    assert read_windows("openai", {"content-type": "application/json"}) == []
    assert read_windows("openai", {"x-ratelimit-limit-requests": "many"}) == []


async def test_a_window_refills_from_when_the_request_left_not_from_its_permission() -> None:
    """A request allowed at once may leave later: its set-up in a busy provider worker, or a
    first request's imports (~200 ms for litellm's Anthropic tokenizer). The provider counts
    it when it arrives, so the refill that its `remaining` leaves is reckoned from then. Seen
    against the fake Anthropic (600 a minute, bursts of 2): reckoned from the permission, the
    two requests after the first answer left together and the second met a 429."""
    clock = SettableClock(1000.0)
    pacer = _learning_pacer(clock)
    probe = await pacer.acquire("m", user="a", max_wait=60)
    assert probe is not None and pacer.send_now(probe)  # allowed at t = 0 ...
    clock.advance(0.2)
    pacer.left(probe, 0.0)  # ... it left at t = 0.2, and was answered at t = 0.25:
    clock.advance(0.05)
    headers = {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "1",
        "x-ratelimit-reset-requests": "59.9s",
    }
    pacer.settle(probe, read_windows("openai", headers))
    answered = clock.now
    moments = []
    for user in "bc":
        assert await pacer.acquire("m", user=user, max_wait=60) is not None
        moments.append(clock.now - answered)
    # b takes the one left; c waits for one more, refilled at 0.9 x 10/s from t = 0.2.
    assert moments[0] == 0.0
    assert moments[1] == pytest.approx(0.2 + 1 / 9 - 0.25, abs=0.005)


async def test_a_reset_stamped_to_the_second_does_not_count_the_window_full_early() -> None:
    """Anthropic stamps a reset to the whole second. A provider 0.95 s into a second whose
    window refills in 0.1 s stamps the next second: read as exact, the window seemed full
    0.05 s after the answer, and the next requests went together into the provider's 429
    (seen against the fake Anthropic, 600 a minute in bursts of 2). Read as the end of the
    second, the refill at the learned pace decides: one request per 1/9 s."""
    clock = SettableClock(1000.0)
    pacer = _learning_pacer(clock)
    probe = await pacer.acquire("m", user="a", max_wait=60)
    assert probe is not None and pacer.send_now(probe)
    answered_at = datetime(2026, 11, 30, 16, 0, 0, 950_000, tzinfo=UTC)
    headers = {
        "anthropic-ratelimit-requests-limit": "600",
        "anthropic-ratelimit-requests-remaining": "1",
        "anthropic-ratelimit-requests-reset": "2026-11-30T16:00:01Z",
    }
    pacer.settle(probe, read_windows("anthropic", headers, now=answered_at))
    pacer.release(probe)
    answered = clock.now
    moments = []
    for user in "bcd":
        assert await pacer.acquire("m", user=user, max_wait=60) is not None
        moments.append(clock.now - answered)
    assert moments == [0.0, pytest.approx(1 / 9, abs=0.005), pytest.approx(2 / 9, abs=0.005)]
