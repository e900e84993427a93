"""primitives/: the building blocks every layer shares. Each helper is driven here on its own,
with events instead of sleeps: a test that waits does so for something to happen."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import media.document_reader
import models
from media.document_reader import ReaderSlots, read_document
from models.worker import pool as pool_module
from models.worker.pool import RESTART_BACKOFF, WorkerPool
from primitives.backoff import Backoff
from primitives.framing import fresh_mark
from primitives.interpreter import IMPORT_ROOT, child_env, python_command
from primitives.litellm_env import LITELLM_FLAGS, keep_litellm_offline
from primitives.tasks import stop_task, stop_tasks
from primitives.waits import wait_or_timeout

# ---- stop_task / stop_tasks ------------------------------------------------------------------


async def _forever() -> None:
    await asyncio.Event().wait()


async def test_a_stopped_task_has_run_its_finally_when_stop_returns() -> None:
    cleaned: list[str] = []

    async def holds_a_resource() -> None:
        try:
            await _forever()
        finally:
            await asyncio.sleep(0)  # the clean-up itself awaits, as closing a socket does
            cleaned.append("closed")

    task = asyncio.create_task(holds_a_resource())
    await asyncio.sleep(0)
    await stop_task(task)
    assert cleaned == ["closed"] and task.cancelled()


async def test_within_the_grace_a_task_ends_by_itself_and_is_not_cancelled() -> None:
    go = asyncio.Event()

    async def finishing() -> str:
        await go.wait()
        return "sent"

    task = asyncio.create_task(finishing())
    stopping = asyncio.create_task(stop_tasks([task], grace=300))
    await asyncio.sleep(0)
    assert not stopping.done()  # the grace is running: the stop waits
    go.set()
    assert await stopping == set()
    assert task.result() == "sent"


async def test_past_the_grace_what_is_left_is_cancelled_and_returned() -> None:
    done = asyncio.create_task(asyncio.sleep(0, result="quick"))
    stuck = asyncio.create_task(_forever())
    await asyncio.sleep(0)
    cut = await stop_tasks([done, stuck], grace=0.01)
    assert cut == {stuck} and stuck.cancelled() and done.result() == "quick"


async def test_the_stopped_task_reads_the_reason_of_its_cancellation() -> None:
    seen: list[Any] = []

    async def reads_its_reason() -> None:
        try:
            await _forever()
        except asyncio.CancelledError as error:
            seen.append(error.args)
            raise

    task = asyncio.create_task(reads_its_reason())
    await asyncio.sleep(0)
    await stop_task(task, reason="forgetting")
    assert seen == [("forgetting",)]


async def test_patience_bounds_the_wait_for_a_task_that_holds_on_to_its_cancellation() -> None:
    release = asyncio.Event()

    async def holds_on() -> None:
        try:
            await _forever()
        except asyncio.CancelledError:
            await release.wait()  # storing what it showed, say
            raise

    task = asyncio.create_task(holds_on())
    await asyncio.sleep(0)
    assert await stop_tasks([task], patience=0.01) == {task}
    assert not task.done()  # the caller went on; the task ends when it ends
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_callers_own_cancellation_is_never_swallowed() -> None:
    """A stop that is itself cancelled (a second signal) must end cancelled, not return as if
    the stopped task had ended: swallowing every CancelledError around `await task` did."""
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await _forever()
        except asyncio.CancelledError:
            await release.wait()
            raise

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    stopping = asyncio.create_task(stop_task(task))
    await asyncio.sleep(0)
    stopping.cancel()  # the stop itself cancelled: the case tested
    # Bounded: a stop that swallowed it would wait on, for the task that holds on.
    await asyncio.wait([stopping], timeout=30)
    release.set()
    await asyncio.wait([task, stopping])
    assert stopping.cancelled()


async def test_stop_task_raises_what_the_task_ended_with_and_takes_none() -> None:
    async def broken() -> None:
        raise ValueError("the loop broke")

    task = asyncio.create_task(broken())
    await asyncio.wait([task])
    with pytest.raises(ValueError, match="the loop broke"):
        await stop_task(task)
    await stop_task(None)


# ---- wait_or_timeout -----------------------------------------------------------------------


async def test_wait_or_timeout_answers_true_when_the_event_is_set_meanwhile() -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_or_timeout(event, timeout=300))
    await asyncio.sleep(0)
    assert not waiting.done()
    event.set()
    assert await waiting is True


async def test_wait_or_timeout_answers_false_on_the_timeout_and_leaves_no_waiter() -> None:
    event = asyncio.Event()
    watched = asyncio.get_running_loop().create_future()
    before = len(asyncio.all_tasks())
    assert await wait_or_timeout(event, watched, timeout=0.01) is False
    await asyncio.sleep(0)  # the cancelled waiter's last step
    assert len(asyncio.all_tasks()) == before
    assert not watched.done()  # only watched, never cancelled: it is the caller's
    watched.cancel()  # the caller's future, cancelled by the caller


async def test_wait_or_timeout_sees_what_is_ready_already_even_with_no_time() -> None:
    event = asyncio.Event()
    event.set()
    assert await wait_or_timeout(asyncio.Event(), event, timeout=0) is True
    assert await wait_or_timeout(asyncio.Event(), timeout=0) is False


async def test_wait_or_timeout_ends_when_a_watched_task_ends() -> None:
    go = asyncio.Event()
    task = asyncio.create_task(go.wait())
    waiting = asyncio.create_task(wait_or_timeout(asyncio.Event(), task, timeout=None))
    await asyncio.sleep(0)
    assert not waiting.done()
    go.set()
    assert await waiting is True


# ---- Backoff ---------------------------------------------------------------------------------


def test_the_nth_failure_waits_the_nth_delay_and_the_last_repeats() -> None:
    backoff = Backoff([1, 2, 5])
    assert [backoff.after(n) for n in (1, 2, 3, 4, 10)] == [1.0, 2.0, 5.0, 5.0, 5.0]
    assert backoff.first == 1.0 and len(backoff) == 3


def test_a_doubling_backoff_doubles_up_to_its_cap_then_repeats_it() -> None:
    restarts = Backoff.doubling(1.0, 300.0)
    assert [restarts.after(n) for n in range(1, 12)] == [
        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0,
    ]  # fmt: skip
    assert Backoff.doubling(0.2, 0.8).delays == (0.2, 0.4, 0.8)


def test_a_backoff_is_asked_after_a_failure_and_refuses_negative_delays() -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        Backoff([1]).after(0)
    with pytest.raises(ValueError, match="no wait"):
        Backoff([]).after(1)  # the transport's "no retry"
    with pytest.raises(ValueError, match="negative"):
        Backoff([1, -2])
    assert len(Backoff([])) == 0


def test_worker_restarts_back_off_by_young_deaths_as_before() -> None:
    """The pool's schedule, through `lost`: no wait for the first young death, then 1, 2, 4 …
    30 s, and 30 s from then on."""

    class Lost:
        number, restarts = 1, 0

        def __init__(self) -> None:
            self.started_at = time.monotonic()  # died young

    pool = WorkerPool()
    waits = []
    for _ in range(8):
        pool.lost(Lost())  # type: ignore[arg-type]
        waits.append(round(pool._next_start - time.monotonic()))
    assert waits == [0, 1, 2, 4, 8, 16, 30, 30]
    assert pool_module.RESTART_BACKOFF is RESTART_BACKOFF


# ---- the child interpreter -------------------------------------------------------------------


def _decoy_tree(root: Path) -> Path:
    """Another checkout's packages, as a folder and as a PYTHONPATH entry would offer them."""
    for package in ("models", "media", "primitives"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("raise SystemExit('decoy tree imported')\n")
    return root


def test_a_child_imports_its_parents_tree_not_the_one_in_its_folder_or_path(
    tmp_path: Path,
) -> None:
    decoy = str(_decoy_tree(tmp_path / "other-checkout"))
    done = subprocess.run(
        python_command("import models, primitives; print(models.__file__)"),
        cwd=decoy,
        env=child_env({"PATH": "/usr/bin:/bin", "PYTHONPATH": decoy}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == models.__file__
    assert Path(models.__file__).parents[1] == Path(IMPORT_ROOT)


async def test_a_document_reader_started_in_another_trees_folder_reads_with_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real reader child, started while the process stands in a folder holding another
    checkout's `media`: it reads the document with this tree's code."""
    monkeypatch.chdir(_decoy_tree(tmp_path / "other-checkout"))
    document = await read_document(
        b"plain words",
        file_name="a.txt",
        mime_type="text/plain",
        token_budget=100,
        timeout=60,
        slots=ReaderSlots(),
    )
    assert document.text == "plain words"
    assert media.document_reader.__file__.startswith(IMPORT_ROOT)


def test_child_env_puts_this_tree_first_once() -> None:
    env = child_env({"PYTHONPATH": f"/elsewhere:{IMPORT_ROOT}", "LANG": "C"})
    assert env == {"PYTHONPATH": f"{IMPORT_ROOT}:/elsewhere", "LANG": "C"}
    assert python_command("pass")[:2] == [sys.executable, "-P"]


# ---- litellm's flags and marker lines -------------------------------------------------------


def test_litellm_flags_are_set_where_missing_and_an_operators_choice_stands() -> None:
    environ = {"LITELLM_OFFLINE_MODE": "false"}
    keep_litellm_offline(environ)
    assert environ == {**LITELLM_FLAGS, "LITELLM_OFFLINE_MODE": "false"}


def test_a_fresh_mark_is_drawn_again_until_no_framed_text_holds_it() -> None:
    tokens = iter(["mark-1", "mark-2", "mark-3"])
    assert fresh_mark(lambda: next(tokens), "text with mark-1", "origin mark-2") == "mark-3"
