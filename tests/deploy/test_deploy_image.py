"""The container image, without a Docker daemon: deploy/Dockerfile's file set is laid out in a
temporary directory (tests/support/deploy_image.py), and the bot started from there, outside the
checkout, must answer a message against the fakes; its HEALTHCHECK command, read from the
Dockerfile, must pass on that bot and kill it once its event loop is frozen.

A Dockerfile that copies some packages and forgets one (agent/, say) builds an image that stops
at once on `No module named 'agent'`: this test starts the bot from exactly the image's files.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest

from tests.fakes.providers import FakeProvider, Reply
from tests.fakes.telegram import FakeTelegram
from tests.support.deploy_image import Image, build_image
from tests.support.e2e_bot import KEYS, OWNER, TOKEN, free_port
from tests.support.paths import REPO
from tests.support.waits import within

# Every top-level package of ours, so the test can say which one the image lacks.
OURS = sorted(p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "tests")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    root = tmp_path_factory.mktemp("image")
    return build_image(REPO / "deploy" / "Dockerfile", REPO, root)


def _image_env(image: Image, tg: FakeTelegram, openai: FakeProvider, data: Path) -> dict[str, str]:
    """The image's own ENV, plus what a deployment gives it (settings, the data volume)."""
    return image.run_env(
        TELEGRAM_BOT_TOKEN=TOKEN,
        TELEGRAM_BASE_URL=tg.base_url,
        ALLOWED_USER_IDS=str(OWNER),
        OPENAI_API_KEY=KEYS["openai"],
        OPENAI_API_BASE=openai.base_url,
        PROVIDER_WORKERS="1",
        DATABASE_PATH=str(data / "mnemobot.sqlite3"),
        HEALTH_PORT=str(free_port()),
    )


@asynccontextmanager
async def image_bot(
    image: Image, env: dict[str, str], log_path: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The image's CMD, in its WORKDIR; its process group is killed on exit if still there."""
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *image.argv(image.cmd, env),
            cwd=image.workdir,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def until(
    predicate: Callable[[], bool], proc: asyncio.subprocess.Process, log: Path, what: str
) -> None:
    """Until `predicate`, failing at once (with the bot's last lines) if the bot has exited."""
    for _ in range(3000):  # 60 s
        if predicate():
            return
        if proc.returncode is not None:
            raise AssertionError(f"the bot exited ({proc.returncode}) before {what}:\n{_tail(log)}")
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _tail(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-1500:]


def running(log: Path) -> Callable[[], bool]:
    """The bot logged that it runs: polling, and /healthz served."""
    return lambda: '"bot_running"' in log.read_text(encoding="utf-8", errors="replace")


async def healthcheck(image: Image, env: dict[str, str]) -> tuple[int, str]:
    """The Dockerfile's HEALTHCHECK command, exactly, as Docker runs it in the container."""
    assert image.healthcheck, "the Dockerfile has no HEALTHCHECK"
    proc = await asyncio.create_subprocess_exec(
        *image.argv(image.healthcheck, env),
        cwd=image.workdir,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await within(proc.communicate(), 60)
    return await proc.wait(), out.decode("utf-8", errors="replace")


async def test_the_image_holds_every_file_of_ours(image: Image, tmp_path: Path) -> None:
    """Every package imports from the image's site-packages, not the checkout, and every file
    of them is there: locales and migrations too, as package data."""
    env = image.run_env()
    script = "import importlib,sys; print('\\n'.join(importlib.import_module(n).__file__ for n in sys.argv[1:]))"  # noqa: E501
    proc = await asyncio.create_subprocess_exec(
        *image.argv(["python", "-c", script, *OURS], env),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    for found in out.decode().split():
        assert Path(found).is_relative_to(image.site), found
    for package in OURS:
        mine = {
            p.relative_to(REPO)
            for p in (REPO / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        held = {p.relative_to(image.site) for p in (image.site / package).rglob("*") if p.is_file()}
        assert mine - held == set(), f"the image lacks these files of {package}/"


async def test_the_image_starts_answers_and_passes_its_healthcheck(
    image: Image, tmp_path: Path
) -> None:
    async with FakeTelegram(token=TOKEN) as tg, FakeProvider("openai") as openai:
        openai.set_default("*", Reply("Hello from the image!", chunk_chars=5))
        env = _image_env(image, tg, openai, tmp_path / "data")
        log = tmp_path / "bot.log"
        async with image_bot(image, env, log) as bot:
            await until(running(log), bot, log, "it ran")
            tg.push(tg.make_text_update(OWNER, OWNER, "hi there"))
            await until(
                lambda: [m.text for m in tg.bot_messages(OWNER)] == ["Hello from the image!"],
                bot, log, "its reply",
            )  # fmt: skip
            code, output = await healthcheck(image, env)
            assert code == 0, output
            bot.send_signal(signal.SIGTERM)
            assert await within(bot.wait(), 60) == 0


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="finds the bot through /proc")
async def test_the_healthcheck_kills_a_bot_whose_loop_is_frozen(
    image: Image, tmp_path: Path
) -> None:
    """Docker never restarts an "unhealthy" container, so the check itself kills the frozen
    bot (the restart policy then starts a new one). SIGSTOP freezes the whole process from
    outside, the loop included: /healthz stays connectable but never answers."""
    async with FakeTelegram(token=TOKEN) as tg, FakeProvider("openai") as openai:
        env = _image_env(image, tg, openai, tmp_path / "data")
        log = tmp_path / "bot.log"
        async with image_bot(image, env, log) as bot:
            await until(running(log), bot, log, "it ran")
            code, output = await healthcheck(image, env)
            assert code == 0, output
            os.kill(bot.pid, signal.SIGSTOP)
            code, output = await healthcheck(image, env)
            assert code == 1, output
            try:
                ended = await within(bot.wait(), 10)
            except TimeoutError:
                raise AssertionError(f"the frozen bot was left running: {output}") from None
            assert ended == -signal.SIGKILL, output
