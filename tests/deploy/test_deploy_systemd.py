"""The systemd path of deploy/README.md, proven without installing anything on this machine:
the three units, with their paths pointed at a temporary layout, pass `systemd-analyze verify`
with nothing to say; the service restarts a frozen bot (Type=notify, WatchdogSec, a Restart= that
covers the watchdog); its ExecStart, run as the unit runs it, starts a bot that tells systemd it
is ready and stopping; and the backup service's commands, run once, back up and prune.

The layout: /opt/mnemobot is a folder of links to this checkout (the README installs a checkout
there; no stray .env of a developer's comes along), /etc/mnemobot and /var/lib/mnemobot are
temporary folders.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from memory.db import Database
from memory.longterm import write_memory
from memory.store import to_iso
from primitives.clock import utc_now
from tests.bot.test_loop_watch import NotifyListener
from tests.fakes.providers import FakeProvider
from tests.fakes.telegram import FakeTelegram
from tests.support.e2e_bot import KEYS, OWNER, TOKEN
from tests.support.host_tools import need
from tests.support.paths import REPO
from tests.support.waits import within

DEPLOY = REPO / "deploy"
UNITS = ("mnemobot.service", "mnemobot-backup.service", "mnemobot-backup.timer")
# The restart policies under which systemd restarts a service its watchdog killed.
RESTARTS_A_WATCHDOG_KILL = {"on-failure", "on-watchdog", "on-abnormal", "always"}


@dataclass
class Layout:
    root: Path

    @property
    def code(self) -> Path:
        return self.root / "opt" / "mnemobot"

    @property
    def etc(self) -> Path:
        return self.root / "etc" / "mnemobot"

    @property
    def state(self) -> Path:
        return self.root / "var" / "lib" / "mnemobot"

    def point(self, text: str) -> str:
        """A unit's text with its paths pointed into this layout."""
        for real, here in (
            ("/opt/mnemobot", self.code),
            ("/etc/mnemobot", self.etc),
            ("/var/lib/mnemobot", self.state),
        ):
            text = text.replace(real, str(here))
        return text


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    made = Layout(tmp_path / "host")
    made.code.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in {".env", ".git"}:
            (made.code / entry.name).symlink_to(entry)
    made.etc.mkdir(parents=True)
    (made.etc / "mnemobot.env").write_text("", encoding="utf-8")
    made.state.mkdir(parents=True)
    return made


def settings(unit: str) -> dict[str, list[str]]:
    """Every `Key=value` of a unit file, by key, in order (a key may repeat)."""
    found: dict[str, list[str]] = {}
    for raw in unit.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def command(value: str) -> list[str]:
    """An Exec line's argv: its prefixes (-, @, +, !) dropped, quoting as systemd's."""
    return shlex.split(value.lstrip("-@+!:"))


def unit_env(unit: dict[str, list[str]]) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")}
    for assignments in unit.get("Environment", []):
        for pair in shlex.split(assignments):
            name, _, value = pair.partition("=")
            env[name] = value
    return env


def test_the_units_verify_cleanly(layout: Layout) -> None:
    analyze = need("systemd-analyze")
    folder = layout.root / "units"
    folder.mkdir()
    for name in UNITS:
        text = layout.point((DEPLOY / name).read_text(encoding="utf-8"))
        (folder / name).write_text(text, encoding="utf-8")
    done = subprocess.run(
        [analyze, "verify", "--man=no", *UNITS],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # A bad value or an unknown key is only a warning (exit 0): the output must be empty too.
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_service_has_a_memory_backstop() -> None:
    """MemoryMax= bounds the whole service (bot, workers, readers), above what they use
    together; OOMPolicy=continue lets the bot replace a killed worker or reader instead of
    the whole service being stopped."""
    unit = settings((DEPLOY / "mnemobot.service").read_text(encoding="utf-8"))
    [memory_max] = unit["MemoryMax"]
    size = re.fullmatch(r"(\d+)([MG])", memory_max)
    assert size, memory_max
    mib = int(size.group(1)) * (1024 if size.group(2) == "G" else 1)
    assert 1024 < mib <= 4096, memory_max
    assert unit["OOMPolicy"] == ["continue"]
    [restart] = unit["Restart"]
    assert restart in {"on-failure", "on-abnormal", "always"}  # a bot killed by it comes back


def test_the_service_restarts_a_frozen_bot() -> None:
    unit = settings((DEPLOY / "mnemobot.service").read_text(encoding="utf-8"))
    assert unit.get("WatchdogSec"), "no WatchdogSec: a frozen bot would never be restarted"
    [watchdog] = unit["WatchdogSec"]
    seconds = re.fullmatch(r"(\d+)s?", watchdog)
    assert seconds and int(seconds.group(1)) > 0, watchdog
    assert unit["Type"] == ["notify"], "the watchdog needs the notify protocol"
    assert unit["NotifyAccess"] == ["main"], "only the bot itself may ping"
    [restart] = unit["Restart"]
    assert restart in RESTARTS_A_WATCHDOG_KILL, restart
    assert "0" not in unit.get("RestartPreventExitStatus", [""])[0].split()


async def test_the_units_bot_says_ready_and_stopping(layout: Layout) -> None:
    """ExecStart as the unit runs it (its folder, its Environment=, the EnvironmentFile, the
    notify socket and watchdog systemd would give): with Type=notify a bot that never said
    READY=1 would be killed as failed to start."""
    text = layout.point((DEPLOY / "mnemobot.service").read_text(encoding="utf-8"))
    unit = settings(text)
    [start] = unit["ExecStart"]
    [workdir] = unit["WorkingDirectory"]
    [watchdog] = unit["WatchdogSec"]
    listener = NotifyListener(str(layout.root / "notify.sock"))
    try:
        async with FakeTelegram(token=TOKEN) as tg, FakeProvider("openai") as openai:
            (layout.etc / "mnemobot.env").write_text(
                f"TELEGRAM_BOT_TOKEN={TOKEN}\nTELEGRAM_BASE_URL={tg.base_url}\n"
                f"ALLOWED_USER_IDS={OWNER}\nOPENAI_API_KEY={KEYS['openai']}\n"
                f"OPENAI_API_BASE={openai.base_url}\nPROVIDER_WORKERS=1\n",
                encoding="utf-8",
            )
            env = unit_env(unit)
            for line in (layout.etc / "mnemobot.env").read_text(encoding="utf-8").splitlines():
                name, _, value = line.partition("=")
                env[name] = value
            env |= {
                "NOTIFY_SOCKET": str(layout.root / "notify.sock"),
                "WATCHDOG_USEC": str(int(watchdog.rstrip("s")) * 1_000_000),
            }
            bot = await asyncio.create_subprocess_exec(
                *command(start),
                cwd=workdir,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                for _ in range(3000):  # 60 s
                    if listener.count("READY=1") or bot.returncode is not None:
                        break
                    await asyncio.sleep(0.02)
                assert listener.count("READY=1") == 1, f"no READY=1 (exit {bot.returncode})"
                assert Path(env["DATABASE_PATH"]).is_relative_to(layout.state)
                assert await asyncio.to_thread(Path(env["DATABASE_PATH"]).exists)
                bot.send_signal(signal.SIGTERM)
                assert await within(bot.wait(), 60) == 0
                assert listener.count("STOPPING=1") == 1
            finally:
                if bot.returncode is None:
                    os.killpg(bot.pid, signal.SIGKILL)
                    await bot.wait()
    finally:
        listener.close()


async def test_the_backup_service_backs_up_and_prunes(layout: Layout) -> None:
    """ExecStartPre, ExecStart and ExecStartPost of mnemobot-backup.service, once, as systemd
    runs them, against a database of the bot's: a copy that holds the memory, and copies past
    14 days deleted."""
    database = layout.state / "mnemobot.sqlite3"
    db = await Database.open(database)
    now = to_iso(utc_now())

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO chats(chat_id, created_at, updated_at) VALUES (?, ?, ?)", (7, now, now)
        )
        write_memory(conn, 7, "The user's cat is called Miso.", over_budget=False, now=now)

    await db.run_in_transaction(write)
    await db.close()

    backups = layout.state / "backups"
    backups.mkdir()
    day = 24 * 3600
    stale, kept = backups / "mnemobot-20000101-031700.sqlite3", backups / "mnemobot-recent.sqlite3"
    for path, age in ((stale, 20 * day), (kept, 10 * day)):
        path.write_bytes(b"")
        os.utime(path, (time.time() - age, time.time() - age))

    unit = settings(layout.point((DEPLOY / "mnemobot-backup.service").read_text("utf-8")))
    [workdir] = unit["WorkingDirectory"]
    for key in ("ExecStartPre", "ExecStart", "ExecStartPost"):
        for line in unit[key]:
            done = await asyncio.create_subprocess_exec(
                *command(line), cwd=workdir, env=unit_env(unit), stderr=asyncio.subprocess.PIPE
            )
            _, err = await within(done.communicate(), 120)
            assert done.returncode == 0, (key, err.decode())

    made = sorted(set(backups.glob("mnemobot-*.sqlite3")) - {stale, kept})
    assert len(made) == 1, made
    assert not stale.exists() and kept.exists()
    copy = sqlite3.connect(made[0])
    try:
        [(content,)] = copy.execute("SELECT content FROM long_term_memory WHERE chat_id = 7")
    finally:
        copy.close()
    assert content == "The user's cat is called Miso."
