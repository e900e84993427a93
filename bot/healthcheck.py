"""`python -m bot.healthcheck`: the container's health check, which also ends a frozen bot.

Docker marks a container whose check fails "unhealthy", but no restart policy ever restarts a
container for that: a bot whose event loop froze would stay frozen, answering nobody. So when
/healthz on HEALTH_PORT gives no answer within the timeout (a frozen loop cannot answer), or
answers "loop_lagging" (the loop stalled past its bound in the last minute), this check SIGKILLs
the bot; the container then exits and its restart policy starts a new one, as systemd's
WatchdogSec does for the service. Any other failure only makes the check fail: a restart does
not make an unreadable database readable, and a "stopping" bot is finishing a requested stop.

The bot is the process listening on 127.0.0.1:HEALTH_PORT, found through /proc: exactly the
process this check asked, whatever else runs on the machine, with no PID file to go stale.
It must not be PID 1 of its container (PID 1 cannot be killed from inside): compose runs it with
`init: true`, `docker run` needs `--init`.

Standard library only, so it starts fast and never waits on the bot's own imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
TIMEOUT_S = 10.0
# The verdicts a restart cures: the loop is frozen or stalling.
KILL_ON = frozenset({"no answer", "loop_lagging"})
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def ask(port: int, timeout: float = TIMEOUT_S) -> tuple[str, str]:
    """(verdict, what was seen) for one GET /healthz: the verdict is "ok", the 503's status
    ("stopping", "loop_lagging", "error", ...) or "no answer"."""
    url = f"http://{HOST}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return "ok", f"{response.status}"
    except urllib.error.HTTPError as error:
        try:
            status = str(json.loads(error.read()).get("status"))
        except (ValueError, AttributeError, OSError):
            status = "unreadable"
        return status, f"{error.code} {status}"
    except (TimeoutError, OSError) as error:  # refused, reset, or no answer in time
        return "no answer", f"no answer in {timeout:g} s" if _timed_out(error) else str(error)


def _timed_out(error: BaseException) -> bool:
    return isinstance(error, TimeoutError) or isinstance(
        getattr(error, "reason", None), TimeoutError
    )


def listeners(port: int, host: str = HOST) -> list[int]:
    """PIDs of the processes holding the socket that listens on host:port (the bot, and any
    child that inherited the socket)."""
    address = f"{int.from_bytes(socket.inet_aton(host), sys.byteorder):08X}:{port:04X}"
    inodes = set()
    for line in Path("/proc/net/tcp").read_text(encoding="ascii").splitlines()[1:]:
        fields = line.split()
        if fields[1] == address and fields[3] == _LISTEN:
            inodes.add(f"socket:[{fields[9]}]")
    found = []
    for process in Path("/proc").iterdir():
        if not process.name.isdigit() or int(process.name) == os.getpid():
            continue
        if any(_link(fd) in inodes for fd in _fds(process)):
            found.append(int(process.name))
    return sorted(found)


def _fds(process: Path) -> list[Path]:
    try:
        return list((process / "fd").iterdir())
    except OSError:  # gone meanwhile, or not ours to read
        return []


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile
        return ""


def main() -> int:
    """0 when healthy; 1 otherwise, after killing the bot when its loop is frozen or stalling."""
    port = int(os.environ.get("HEALTH_PORT") or 0)
    if not port:
        print("healthcheck: HEALTH_PORT is not set")
        return 1
    verdict, seen = ask(port)
    if verdict == "ok":
        return 0
    if verdict not in KILL_ON:
        print(f"healthcheck: /healthz {seen}")
        return 1
    pids = listeners(port)
    if 1 in pids:
        print(f"healthcheck: /healthz {seen}; the bot is PID 1 and cannot be killed: run it "
              "with an init (compose: init: true, docker run --init)")  # fmt: skip
        return 1
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    print(f"healthcheck: /healthz {seen}; killed {pids or 'nothing (no listener)'}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
