"""models/worker/pool.py: litellm runs in a process of its own, and the bot loses nothing by it.

Real litellm in the real worker process over HTTP against the fake providers. What the worker
adds that a thread did not have: it can die on its own, and a cancelled call must be stopped in
another process. (Frozen, killed and garbled workers under load:
tests/models/test_worker_supervision.py.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from contextlib import aclosing
from pathlib import Path
from urllib.parse import urlsplit

import models.worker.process as worker_process
from models.calls import CallOptions
from models.types import Outcome, Spend, StreamDone, StreamRestart, TextDelta
from models.worker.ipc import ClientSpec
from models.worker.pool import WorkerPool, WorkerSettings
from models.worker.process import EXTRA_WORKER_NICE
from models.worker.wire import WireRecord
from primitives.tasks import stop_tasks
from tests.fakes.providers import Reply
from tests.support.e2e_bot import wait_until
from tests.support.shared_workers import shared_workers
from tests.support.transport import make_gateways, make_transport
from tests.support.waits import within

HI = [{"role": "user", "content": "Tell me a long story about a lighthouse, please."}]
LONG = "The keeper climbed the stairs and lit the lamp again. " * 40


async def test_a_worker_killed_mid_stream_is_replaced_and_the_same_model_answers(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """A lost worker is our failure: the stream restarts on the same model in a new worker,
    no fallback; what streamed before is billed."""
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    spends: list[Spend] = []
    fake_openai.script("gpt-5", Reply(LONG, chunk_chars=16, chunk_delay=0.02), Reply("again"))
    fake_openai.script("gpt-5-mini", Reply("fallback answer"))
    events: list[object] = []
    killed: int | None = None
    async with aclosing(
        t.stream("gpt-5", HI, CallOptions(timeout=5, on_spend=spends.append))
    ) as stream:
        async for event in stream:
            events.append(event)
            if killed is None and isinstance(event, TextDelta):
                killed = t.workers.pid
                assert killed is not None and killed != os.getpid()
                os.kill(killed, signal.SIGKILL)
    [restart] = [e for e in events if isinstance(e, StreamRestart)]
    assert (restart.from_model, restart.to_model) == ("gpt-5", "gpt-5")
    assert restart.reason.startswith("provider worker lost (")
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert (done.result.model_id, done.result.text) == ("gpt-5", "again")
    assert [a.outcome for a in done.result.attempts] == [Outcome.LOCAL, Outcome.SUCCESS]
    assert not [r for r in fake_openai.requests if r.model == "gpt-5-mini"]
    # What gpt-5 streamed before the worker died is billed, as for any broken stream.
    assert [(s.model_id, s.ended, s.usage.estimated) for s in spends] == [
        ("gpt-5", "failed", True),
        ("gpt-5", "success", False),
    ]
    assert spends[0].usage.completion_tokens > 0
    assert t.workers.pid not in (None, killed)
    await t.aclose()


async def test_a_caller_that_stops_reading_stops_the_request_in_the_worker(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    # 160 chunks 50 ms apart: 8 s if nobody hangs up.
    fake_openai.script("gpt-5", Reply(LONG * 2, chunk_chars=27, chunk_delay=0.05))
    cut_before = fake_openai.streams_cut
    async with aclosing(t.stream("gpt-5", HI, CallOptions(timeout=5))) as stream:
        async for event in stream:
            assert isinstance(event, TextDelta)
            break
    await wait_until(lambda: fake_openai.streams_cut == cut_before + 1, "the hang-up", 30.0)
    await t.aclose()


async def test_the_worker_holds_the_clients_and_a_closed_transport_frees_them(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """The bot process builds no HTTP client of its own for providers: every request leaves
    from the worker, and the connections it opened close with the transport."""
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    fake_openai.script("gpt-4.1", Reply("short answer"))
    result = await t.complete("gpt-4.1", HI, CallOptions(timeout=5))
    assert result.text == "short answer"
    worker = t.workers.pid
    assert worker is not None and worker != os.getpid()
    peers = _peer_pids(_port(fake_openai.base_url))
    assert peers == {worker}
    await t.aclose()
    await wait_until(
        lambda: not _peer_pids(_port(fake_openai.base_url)), "the connections to close", 5.0
    )


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _peer_pids(port: int) -> set[int]:
    """Processes holding a TCP connection to 127.0.0.1:`port` (from /proc, Linux)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01":  # ESTABLISHED
                inodes.add(fields[9])
    found: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    found.add(int(pid))
        except OSError:
            continue
    return found


async def test_with_two_workers_concurrent_calls_are_spread_over_both(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """PROVIDER_WORKERS=2: one worker at rest; a second starts when the first is busy, and
    a call goes to the worker with fewer calls in flight."""
    pool = WorkerPool(WorkerSettings(max_workers=2, scale_calls=1))
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=pool)
    try:
        # ~30 s each unless cut: both must still stream once the second worker is ready.
        for _ in range(2):
            fake_openai.script("gpt-5", Reply(LONG * 4, chunk_chars=16, chunk_delay=0.05))

        async def read() -> str:
            text = ""
            async for event in t.stream("gpt-5", HI, CallOptions(timeout=5)):
                if isinstance(event, TextDelta):
                    text += event.text
            return text

        fake_openai.script("gpt-4.1", Reply("up"))
        await t.complete("gpt-4.1", HI, CallOptions(timeout=5))  # a worker is up
        assert len(pool.pids) == 1
        first = asyncio.create_task(read())
        await wait_until(lambda: len(pool.workers) == 2, "a second worker to start", 30.0)
        await wait_until(lambda: len(pool.pids) == 2, "a second worker to run", 30.0)
        await wait_until(
            lambda: all(w.state == "ready" for w in pool.workers), "it to be ready", 30.0
        )
        second = asyncio.create_task(read())
        port = _port(fake_openai.base_url)
        await wait_until(lambda: len(_peer_pids(port)) == 2, "both workers to be connected", 60.0)
        assert _peer_pids(port) == set(pool.pids) and os.getpid() not in pool.pids
        assert sorted(w.in_flight for w in pool.workers) == [1, 1]
        await stop_tasks([first, second])
    finally:
        await t.aclose()
        await pool.aclose()


async def test_a_worker_started_under_load_is_a_copy_of_a_ready_one_and_supervised_alike(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """The second worker is forked from the warm first one (its spare socket), not spawned:
    it imports nothing, so it serves within the rush that asked for it. It serves calls from
    its own connections, and it is supervised like a spawned one: killed, it is replaced and
    its stream is finished on the same model by a worker that is left."""
    pool = WorkerPool(WorkerSettings(max_workers=2, scale_calls=1))
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=pool)
    try:
        await t.warm_up()
        [first] = pool.pids
        # Two streams long enough to overlap the second worker's start and the kill; the
        # killed one's replay needs no pace.
        for _ in range(2):
            fake_openai.script("gpt-5", Reply(LONG * 4, chunk_chars=16, chunk_delay=0.025))
        fake_openai.script("gpt-5", Reply(LONG * 4, chunk_chars=16))
        fake_openai.script("gpt-5-mini", Reply("a fallback must not answer"))

        async def read() -> tuple[str, str]:
            text, model = "", ""
            async for event in t.stream("gpt-5", HI, CallOptions(timeout=5)):
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, StreamRestart):
                    text = ""
                elif isinstance(event, StreamDone):
                    model = event.result.model_id
            return text, model

        one = asyncio.create_task(read())
        await wait_until(lambda: len(pool.workers) == 2, "a second worker under load", 60.0)
        await wait_until(
            lambda: all(w.state == "ready" for w in pool.workers), "it to be ready", 30.0
        )
        second = next(pid for pid in pool.pids if pid != first)
        assert _parent_pid(second) == first
        # The copy made the warm-up's first calls on its own loop before it took a call.
        [copy] = [w for w in pool.workers if w.pid == second]
        assert copy.warmed and copy.warmed == pool.workers[0].warmed
        two = asyncio.create_task(read())
        port = _port(fake_openai.base_url)
        await wait_until(lambda: _peer_pids(port) == {first, second}, "both to stream", 60.0)
        os.kill(second, signal.SIGKILL)
        results = await within(asyncio.gather(one, two), 60)
        assert [model for _, model in results] == ["gpt-5", "gpt-5"]
        assert [text for text, _ in results] == [LONG * 4, LONG * 4]
        assert second not in pool.pids and pool.restarts >= 1
        # The kill cut a stream: it was asked for again (the unpaced reply), not just ended.
        assert len([r for r in fake_openai.requests if r.model == "gpt-5"]) == 3
    finally:
        await t.aclose()
        await pool.aclose()


async def test_workers_kept_at_rest_start_with_the_bot_and_only_extra_ones_retire(
    fake_openai, fake_groq, fake_anthropic, monkeypatch
) -> None:
    """PROVIDER_WORKERS_AT_REST=2: both start at warm-up, before any load, at the bot's own
    priority (the second a copy of the first); a third one started by load is a copy too, and
    retires after its idle spell while the two at rest stay. The next rush forks again, on
    another spare socket; with the spares used up (three here) the extra one is spawned, at
    10 nice steps below the bot while it imports."""
    monkeypatch.setattr(worker_process, "SPARE_SOCKETS", 3)
    pool = WorkerPool(  # a new pool: which worker has a spare is known
        WorkerSettings(max_workers=3, at_rest=2, scale_calls=1, idle_s=0.5, heartbeat_s=2.0)
    )
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=pool)
    try:
        await t.warm_up()
        await wait_until(
            lambda: len(pool.workers) == 2 and all(w.state == "ready" for w in pool.workers),
            "both workers kept at rest to be ready, with no call made",
            60.0,
        )
        at_rest = set(pool.pids)
        first, second = pool.pids
        assert _parent_pid(second) == first  # a copy: no second import of litellm
        # Priorities relative to the bot's own (the suite may itself run under `nice`).
        own = os.getpriority(os.PRIO_PROCESS, 0)
        niced = min(own + EXTRA_WORKER_NICE, 19)
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in at_rest] == [own, own]

        async def rush() -> tuple[int, int]:
            """One rush that starts an extra worker: its parent's pid and its priority."""
            for _ in range(2):
                fake_openai.script("gpt-5", Reply(LONG * 4, chunk_chars=16, chunk_delay=0.05))

            async def read() -> None:
                async for _ in t.stream("gpt-5", HI, CallOptions(timeout=5)):
                    pass

            streams = [asyncio.create_task(read()) for _ in range(2)]
            await wait_until(lambda: len(pool.workers) == 3, "a third worker under load", 60.0)
            [extra] = [w for w in pool.workers if w.pid not in at_rest]
            await wait_until(lambda: extra.pid is not None, "the third worker's process", 60.0)
            assert extra.pid is not None
            seen = (_parent_pid(extra.pid), os.getpriority(os.PRIO_PROCESS, extra.pid))
            await stop_tasks(streams)
            await wait_until(lambda: extra not in pool.workers, "the idle extra to retire", 60)
            assert set(pool.pids) == at_rest
            assert all(w.state == "ready" for w in pool.workers)
            return seen

        assert await rush() == (first, own)  # a copy of the first, at the bot's priority
        assert await rush() == (first, own)  # the next rush: a copy again, on another spare
        # The first's spares are used up (the second at rest took one): spawned, niced.
        assert await rush() == (os.getpid(), niced)
    finally:
        await t.aclose()
        await pool.aclose()


class _RecordingGate:
    """A send gate that lets the request go at once and keeps what the worker says of it."""

    def __init__(self) -> None:
        self.left_at: list[float] = []

    def send_now(self) -> bool:
        return True

    async def before_send(self) -> None:
        raise AssertionError("a request allowed at once never waits")

    def left(self, seconds_ago: float) -> None:
        self.left_at.append(time.monotonic() - seconds_ago)


async def test_the_worker_says_when_a_request_really_left(fake_openai) -> None:
    """A request allowed at once leaves after litellm's set-up in the worker, which a busy
    worker makes late; the pacer reckons the provider's window from the moment the worker
    reports (models/policy/pacing.py `left`), which is when the provider received it, not when the
    answer came (the fake answers 1 s later)."""
    fake_openai.latency = 1.0
    gateway = make_gateways(fake_openai, fake_openai, fake_openai)["openai"]
    gate = _RecordingGate()
    record = WireRecord()
    asked_at = time.monotonic()
    response = await shared_workers().call(
        "completion",
        {
            "model": "openai/gpt-4.1",
            "messages": HI,
            "api_base": gateway.api_base,
            "api_key": gateway.keys[0],
            "client": ClientSpec(0, gateway, 0, gateway.keys[0]),
            "max_retries": 0,
            "timeout": 10,
        },
        record,
        gate,
    )
    assert response.choices[0].message.content
    [arrived] = [request.at for request in fake_openai.requests]
    [left_at] = gate.left_at
    # After we asked, and about when the fake read it, not when the answer came 1 s later.
    # One clock for all processes, but the age the worker reports is turned into a moment a
    # little after it arrives (and a loaded machine can stall the bot right between): half
    # the fake's latency apart from the read, never more.
    assert asked_at <= left_at < arrived + fake_openai.latency / 2
    assert record.status == 200
