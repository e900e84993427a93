"""`python -m bot.healthcheck`: the container's health check, which also ends a frozen bot.

Docker marks a container whose check fails "unhealthy", but no restart policy ever restarts a
container for that: a bot whose event loop froze would stay frozen, answering nobody. So this
check, when /healthz on HEALTH_PORT gives no answer within the timeout or answers anything but
"ok", SIGKILLs the bot; the container then exits and its restart policy starts a new one, as
systemd's WatchdogSec does for the service. A bot that is "stopping" is left alone: it is
finishing its work on a stop someone asked for.

The bot is the process listening on 127.0.0.1:HEALTH_PORT, found through /proc: exactly the
process this check asked, whatever else runs on the machine, with no PID file to go stale.
It must not be PID 1 of its container (PID 1 cannot be killed from inside): compose runs it with
`init: true`, `docker run` needs `--init`.

Standard library only, so it starts fast and never waits on the bot's own imports.
"""

from __future__ import annotations

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
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def ask(port: int, timeout: float = TIMEOUT_S) -> tuple[str, str]:
    """("ok" | "stopping" | "failed", what was seen) for one GET /healthz."""
    url = f"http://{HOST}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return "ok", f"{response.status}"
    except urllib.error.HTTPError as error:
        try:
            status = str(json.loads(error.read()).get("status"))
        except (ValueError, AttributeError, OSError):
            status = "unreadable"
        return ("stopping" if status == "stopping" else "failed"), f"{error.code} {status}"
    except (TimeoutError, OSError) as error:  # refused, reset, or no answer in time
        return "failed", f"no answer in {timeout:g} s" if _timed_out(error) else str(error)


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
        try:
            links = {os.readlink(fd) for fd in (process / "fd").iterdir()}
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if links & inodes:
            found.append(int(process.name))
    return sorted(found)


def main() -> int:
    """0 when healthy; 1 otherwise, after killing the bot unless it is stopping."""
    port = int(os.environ.get("HEALTH_PORT") or 0)
    if not port:
        print("healthcheck: HEALTH_PORT is not set")
        return 1
    verdict, seen = ask(port)
    if verdict == "ok":
        return 0
    if verdict == "stopping":
        print(f"healthcheck: /healthz {seen}: the bot is stopping; left alone")
        return 1
    pids = listeners(port)
    if 1 in pids:
        print(f"healthcheck: /healthz {seen}; the bot is PID 1 and cannot be killed: run it "
              "with an init (compose: init: true, docker run --init)")  # fmt: skip
        return 1
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    print(f"healthcheck: /healthz {seen}; killed {pids or 'nothing (no listener)'}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
