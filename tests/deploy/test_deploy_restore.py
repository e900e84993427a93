"""deploy/README.md's restore, done: a backup taken with the real `python -m bot backup` while the
bot runs, copied into a fresh folder as the README says, and a bot started on it shows the
memory of the moment of the backup (and not what was written after it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from primitives.litellm_env import LITELLM_FLAGS
from tests.support.e2e_bot import OWNER, bot_under_test
from tests.support.paths import REPO
from tests.support.waits import within


async def backup(database: Path, folder: Path) -> str:
    """`python -m bot backup FOLDER --database DATABASE`, as the README and the timer run it."""
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO),
        **LITELLM_FLAGS,
    }
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bot", "backup", str(folder), "--database", str(database)),
        cwd=folder.parent,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await within(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_a_restored_backup_starts_with_its_memory(tmp_path: Path) -> None:
    live, backups, fresh = tmp_path / "live", tmp_path / "backups", tmp_path / "fresh"
    for folder in (live, backups, fresh):
        folder.mkdir()
    async with bot_under_test(live) as bot:
        await bot.set_memory(OWNER, "- the user's cat is called Miso")
        said = await backup(bot.settings.DATABASE_PATH, backups)
        assert "integrity ok" in said
        await bot.set_memory(OWNER, "- the user's cat is called Tofu")  # after the backup
    [copy] = backups.glob("mnemobot-*.sqlite3")

    # The README: the copy in place of the database, no -wal or -shm beside it; start.
    shutil.copy(copy, fresh / "mnemobot.sqlite3")
    async with bot_under_test(fresh) as restored:
        restored.say(OWNER, "/memory")
        await restored.wait(lambda: "Miso" in "\n".join(restored.texts(OWNER)))
        assert "Tofu" not in "\n".join(restored.texts(OWNER))
