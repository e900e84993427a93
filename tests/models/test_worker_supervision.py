"""models/worker/pool.py supervising its workers: frozen, killed and garbled workers are replaced
and their calls answered by the model asked for, never blamed on the provider; what cannot cross
fails clearly; a worker holds no secret it does not need.

Real worker processes running real litellm over HTTP against the fake providers.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from models.calls import CallOptions
from models.catalog import load_catalog
from models.gateways import Gateway
from models.transport import Transport
from models.types import ChatResult, Outcome, StreamDone, TextDelta, TransportError
from models.worker.pool import WorkerPool, WorkerSettings
from tests.fakes.loopback import loopback_server
from tests.fakes.providers import Reply
from tests.support.e2e_bot import wait_until
from tests.support.transport import make_transport

HI = [{"role": "user", "content": "Tell me a long story about a lighthouse, please."}]
LONG = "The keeper climbed the stairs and lit the lamp again. " * 40


async def _stream_all(t: Transport, started: set[int], number: int) -> ChatResult:
    """One streamed reply; `number` joins `started` at its first text."""
    async for event in t.stream("gpt-5", HI, CallOptions(timeout=30)):
        if isinstance(event, TextDelta):
            started.add(number)
        if isinstance(event, StreamDone):
            return event.result
    raise AssertionError("the stream ended without a result")


def _assert_provider_untouched(t: Transport) -> None:
    status = t.status()
    assert status["models"]["gpt-5"]["breaker"] == "closed"
    assert status["models"]["gpt-5"]["consecutive_failures"] == 0
    assert status["gateways"]["openai"]["breaker"] == "closed"
    assert status["gateways"]["openai"]["consecutive_failures"] == 0
    assert status["retry_budget"]["spent"] == 0


async def _next_messages_go_to(t: Transport, fake_openai: Any, count: int) -> None:
    for n in range(count):
        fake_openai.script("gpt-5", Reply(f"next {n}"))
        result = await t.complete("gpt-5", HI, CallOptions(timeout=10))
        assert (result.model_id, result.text) == ("gpt-5", f"next {n}")
        assert [a.outcome for a in result.attempts] == [Outcome.SUCCESS]


async def _signal_every_worker_mid_stream(
    t: Transport, fake_openai: Any, streams: int, signum: int, signalled: list[int]
) -> None:
    """`streams` replies of gpt-5 streaming; once each has shown text, every worker gets
    `signum` (its pid goes into `signalled`). The replies, within 45 s; the retries answer
    "again, whole"."""
    fake_openai.script("gpt-5", *[Reply(LONG, chunk_chars=8, chunk_delay=0.05)] * streams)
    fake_openai.set_default("gpt-5", Reply("again, whole"))
    started: set[int] = set()
    tasks = [asyncio.create_task(_stream_all(t, started, n)) for n in range(streams)]
    await wait_until(lambda: len(started) == streams, "the replies to stream", 60.0)
    pool = t.workers
    assert isinstance(pool, WorkerPool)
    signalled += pool.pids
    for pid in signalled:
        os.kill(pid, signum)
    async with asyncio.timeout(45):
        results = await asyncio.gather(*tasks)
    assert [(r.model_id, r.text) for r in results] == [("gpt-5", "again, whole")] * streams
    for result in results:
        assert [a.outcome for a in result.attempts] == [Outcome.LOCAL, Outcome.SUCCESS]
    assert not set(signalled) & set(pool.pids)
    assert not [r for r in fake_openai.requests if r.model != "gpt-5"]  # no fallback
    _assert_provider_untouched(t)


@pytest.mark.slow
async def test_every_worker_frozen_while_six_replies_stream(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    """SIGSTOP: the silence is noticed within the heartbeat, the worker killed and replaced,
    all six replies come from gpt-5 (no fallback), and the next message too."""
    pool = WorkerPool(replace(WorkerSettings(), heartbeat_s=2.0))
    t = make_transport(fake_openai, fake_groq, fake_anthropic, workers=pool)
    frozen: list[int] = []
    try:
        await _signal_every_worker_mid_stream(t, fake_openai, 6, signal.SIGSTOP, frozen)
        await _next_messages_go_to(t, fake_openai, 1)
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        await t.aclose()
        await pool.aclose()


@pytest.mark.slow
async def test_every_worker_killed_under_ten_streams_opens_no_breaker(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    try:
        await _signal_every_worker_mid_stream(t, fake_openai, 10, signal.SIGKILL, [])
        await _next_messages_go_to(t, fake_openai, 3)
        assert not [r for r in fake_openai.requests if r.model != "gpt-5"]
    finally:
        await t.aclose()


def _steal_worker_socket(pid: int) -> socket.socket:
    """The worker's end of its socket, duplicated into this process (pidfd_getfd, Linux 5.6+;
    the worker is our child), so the test can write into the worker's side of the wire."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    number = int(argv[-2])  # the descriptor's number is the worker's last argument
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(438, pidfd, number, 0)  # SYS_pidfd_getfd
        if fd < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
    finally:
        os.close(pidfd)
    return socket.socket(fileno=fd)


async def test_a_garbage_frame_from_a_worker_replaces_it_and_its_call_is_retried(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    try:
        fake_openai.script("gpt-5", Reply(LONG, chunk_chars=8, chunk_delay=0.05))
        fake_openai.set_default("gpt-5", Reply("again, whole"))
        started: set[int] = set()
        stream = asyncio.create_task(_stream_all(t, started, 0))
        await wait_until(lambda: bool(started), "the reply to stream", 60.0)
        [garbled] = t.workers.pids
        # The retry is held at the fake until the breaker was looked at: once it succeeds,
        # the success resets the count, and a lost worker counted as the provider's failure
        # would not show any more.
        fake_openai.gate = asyncio.Event()
        requests = len(fake_openai.requests)
        with _steal_worker_socket(garbled) as theirs:
            theirs.sendall(b"\x00\x00\x00\x09not a pkl")
        await wait_until(lambda: len(fake_openai.requests) > requests, "the retry", 45.0)
        _assert_provider_untouched(t)
        fake_openai.gate.set()
        async with asyncio.timeout(45):
            result = await stream
        assert (result.model_id, result.text) == ("gpt-5", "again, whole")
        [lost, success] = result.attempts
        assert (lost.outcome, success.outcome) == (Outcome.LOCAL, Outcome.SUCCESS)
        assert "unreadable frame: UnpicklingError" in lost.detail
        assert garbled not in t.workers.pids
        _assert_provider_untouched(t)
    finally:
        await t.aclose()


async def test_a_call_that_cannot_be_encoded_fails_clearly_and_leaves_nothing_in_flight(
    fake_openai, fake_groq, fake_anthropic
) -> None:
    t = make_transport(fake_openai, fake_groq, fake_anthropic)
    try:
        fake_openai.script("gpt-5-mini", Reply("warm"))
        await t.complete("gpt-5-mini", HI, CallOptions(timeout=10))  # a worker is up
        requests = len(fake_openai.requests)
        messages: list[Any] = [{"role": "user", "content": "hi", "name": threading.Lock()}]
        with pytest.raises(TransportError) as raised:
            await t.complete("gpt-5", messages, CallOptions(timeout=10))
        [attempt] = raised.value.attempts
        assert attempt.outcome is Outcome.LOCAL
        assert attempt.detail == "call could not be encoded: TypeError"
        assert sum(w.in_flight for w in t.workers.workers) == 0
        assert t.status()["gateways"]["openai"]["in_flight"] == 0
        assert len(fake_openai.requests) == requests  # nothing left for the provider
        _assert_provider_untouched(t)
    finally:
        await t.aclose()


KEY = "sk-proj-SUPERSECRET0123456789abcdef"
BOT_TOKEN = "123456789:AAF-SECRET-BOT-TOKEN-0123456789"


def _echoing_gateway() -> web.Application:
    """An OpenAI-compatible gateway refusing the key with a 401 that quotes it whole, as
    OpenAI's did before it masked keys: the key lands in litellm's exception text."""

    async def refuse(request: web.Request) -> web.Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        body = {
            "error": {
                "message": f"Incorrect API key provided: {key}.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
        return web.json_response(body, status=401)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    return app


async def test_the_worker_holds_no_bot_token_and_its_stderr_no_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("LOG_LEVEL", "DEBUG")  # the worker logs each failed call's error
    pool = WorkerPool()  # its worker starts with this environment
    stderr_path = tmp_path / "worker-stderr"
    async with loopback_server(_echoing_gateway()) as gateway:
        t = Transport(
            load_catalog(),
            {"openai": Gateway("openai", "openai", f"{gateway}/v1", keys=(KEY,))},
            backoff=(),
            workers=pool,
        )
        try:
            with stderr_path.open("wb") as stderr:
                pool.stderr = stderr
                with pytest.raises(TransportError) as raised:
                    await t.complete("gpt-5", HI, CallOptions(timeout=10, walk_chain=False))
                assert raised.value.attempts[0].outcome is Outcome.AUTH
                [pid] = pool.pids
                environ = await asyncio.to_thread(Path(f"/proc/{pid}/environ").read_bytes)
                names = {entry.split(b"=", 1)[0] for entry in environ.split(b"\0") if entry}
                assert b"TELEGRAM_BOT_TOKEN" not in names and b"OPENAI_API_KEY" not in names
                assert BOT_TOKEN.encode() not in environ and KEY.encode() not in environ
                await pool.aclose()  # everything it wrote is written
        finally:
            await t.aclose()
            await pool.aclose()
    text = await asyncio.to_thread(stderr_path.read_text)
    assert KEY not in text
    failed = [json.loads(line) for line in text.splitlines() if "provider_call_failed" in line]
    assert failed and "Incorrect API key provided: [REDACTED]" in failed[0]["error"]
