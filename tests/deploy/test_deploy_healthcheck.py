"""`python -m bot.healthcheck`, the image's HEALTHCHECK, on each answer /healthz can give: it
kills the listener only when a restart cures it (no answer, "loop_lagging"), never a bot that is
stopping or whose database cannot be read. A small server stands in for the bot here; the real
bot, frozen, is in tests/deploy/test_deploy_image.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import urllib.error
import urllib.request

import pytest

from tests.support.e2e_bot import free_port
from tests.support.paths import REPO
from tests.support.waits import within

# Answers every GET with the given code and body, on 127.0.0.1:port, until killed.
SERVER = """
import http.server, sys
port, code, body = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Answer).serve_forever()
"""


def _still_answers(port: int) -> None:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).close()
    except urllib.error.HTTPError:
        pass  # a 503 is an answer


async def _listening(port: int, server: asyncio.subprocess.Process) -> None:
    for _ in range(500):
        assert server.returncode is None, "the stand-in server did not start"
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        return
    raise AssertionError("the stand-in server never listened")


@pytest.mark.skipif(sys.platform != "linux", reason="finds the listener through /proc")
@pytest.mark.parametrize(
    ("code", "status", "exit_code", "killed"),
    [
        (200, "ok", 0, False),
        (503, "stopping", 1, False),
        (503, "error", 1, False),
        (503, "loop_lagging", 1, True),
    ],
)
async def test_the_check_kills_only_what_a_restart_cures(
    code: int, status: str, exit_code: int, killed: bool
) -> None:
    port = free_port()
    body = json.dumps({"status": status})
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVER, str(port), str(code), body, start_new_session=True
    )
    try:
        await _listening(port, server)
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HEALTH_PORT": str(port)}
        check = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.healthcheck", env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await within(check.communicate(), 30)
        assert check.returncode == exit_code, out
        if killed:
            assert await within(server.wait(), 10) == -signal.SIGKILL
        else:  # still serving: a killed one's socket is closed at once, reaped or not
            await asyncio.to_thread(_still_answers, port)
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
