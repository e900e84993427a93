"""Starts one stdio MCP server so that it cannot outlive the bot, with only the environment it
is given. Run as a script (`python -I -S launcher.py BOT_PID KEYS COMMAND ARGS...`), never
imported by the bot: standard library only, and `-I -S` so no PYTHON* variable or site
directory changes what it does.

Three steps, then it becomes the server (exec, no extra process):
1. PR_SET_PDEATHSIG: the kernel kills this process when the bot dies, kill -9 included, when
   no `finally` of the bot runs. The setting survives exec, so it applies to the server itself.
2. If the bot died before step 1 (our parent is no longer BOT_PID), exit at once.
3. The environment is cut to KEYS (a comma-separated list): the SDK adds a few variables of
   the bot's own (USER, SHELL, TERM, ...) to every server's environment, and a server should
   see PATH, HOME, LANG and what its config names, nothing else.

A server's own children share its stdin; when the bot dies the pipe closes and a well-behaved
server exits on end of input, taking them along. The SDK starts the launcher in a new process
group, which it signals as a whole on a normal stop.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
EXIT_NOT_FOUND = 127


def main(argv: list[str]) -> None:
    if len(argv) < 4:
        sys.stderr.write("usage: launcher.py BOT_PID KEYS COMMAND [ARGS...]\n")
        os._exit(2)
    bot_pid, keys, command = int(argv[1]), argv[2], argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        sys.stderr.write(f"launcher: prctl failed: {os.strerror(ctypes.get_errno())}\n")
        os._exit(1)
    if os.getppid() != bot_pid:
        os._exit(1)  # the bot is already gone
    wanted = [key for key in keys.split(",") if key]
    env = {key: os.environ[key] for key in wanted if key in os.environ}
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write(f"launcher: cannot start {command[0]!r}: {exc.strerror}\n")
        os._exit(EXIT_NOT_FOUND)


if __name__ == "__main__":
    main(sys.argv)
