"""The per-user rate limit and the input size check, on a clock the test moves by hand."""

from __future__ import annotations

import pytest

from bot.turns.limits import input_too_long
from bot.turns.rate_limit import UserRateLimiter
from tests.support.clocks import SettableClock

ANN, BOB = 1, 2


def test_limit_refuses_the_message_over_the_limit_and_says_when_to_retry() -> None:
    clock = SettableClock(500.0)
    limiter = UserRateLimiter(3, clock=clock)
    for _ in range(3):
        assert limiter.check(ANN).allowed
        clock.now += 10
    refused = limiter.check(ANN)  # t=530: the first of three was at t=500
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(30.0)
    # Another user is not affected.
    assert limiter.check(BOB).allowed


def test_only_the_first_refusal_of_a_burst_is_answered() -> None:
    clock = SettableClock(500.0)
    limiter = UserRateLimiter(2, clock=clock)
    limiter.check(ANN)
    limiter.check(ANN)
    decisions = [limiter.check(ANN) for _ in range(5)]
    assert [d.allowed for d in decisions] == [False] * 5
    assert [d.notify for d in decisions] == [True, False, False, False, False]


def test_window_slides_and_refused_messages_do_not_count() -> None:
    clock = SettableClock(500.0)
    limiter = UserRateLimiter(2, clock=clock)
    assert limiter.check(ANN).allowed  # t=500
    clock.now += 30
    assert limiter.check(ANN).allowed  # t=530
    for _ in range(10):  # hammering while limited must not extend the wait
        clock.now += 2
        assert not limiter.check(ANN).allowed
    clock.now = 560.0  # the t=500 message left the window
    assert limiter.check(ANN).allowed
    assert not limiter.check(ANN).allowed
    clock.now = 590.0  # the t=530 message left too
    decision = limiter.check(ANN)
    assert decision.allowed
    # After a successful message, a new refusal is announced again.
    later = limiter.check(ANN)
    assert not later.allowed and later.notify


def test_zero_means_no_limit_and_idle_users_are_forgotten() -> None:
    clock = SettableClock(500.0)
    unlimited = UserRateLimiter(0, clock=clock)
    assert all(unlimited.check(ANN).allowed for _ in range(1000))

    limiter = UserRateLimiter(1, clock=clock)
    limiter.check(ANN)
    limiter.check(BOB)
    clock.now += 61
    limiter.check(BOB)
    limiter.forget_idle()
    assert set(limiter._accepted) == {BOB}


def test_input_size_counts_characters() -> None:
    assert not input_too_long("a" * 10, 10)
    assert input_too_long("a" * 11, 10)
    # An emoji is one character to the user even though it is two UTF-16 units.
    assert not input_too_long("😀" * 10, 10)
