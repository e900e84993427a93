"""A local Bot API server (--local) answers getFile with a path on this machine and may omit
the size: the file is read from disk only up to the limit. Real PTB against the fake Bot API,
which hands out the path as such a server does."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from telegram import Bot

from bot.app import file_base_url
from bot.handlers.media.downloads import download
from tests.fakes.telegram import FakeTelegram

TOKEN = "123456:TEST-TOKEN"
MIB = 1024 * 1024


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram(token=TOKEN)
    await fake.start()
    yield fake
    await fake.stop()


async def test_a_local_file_of_unknown_size_is_read_only_up_to_the_limit(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    on_disk = tmp_path / "telegram-bot-api" / TOKEN / "documents" / "file_7.bin"
    on_disk.parent.mkdir(parents=True)
    on_disk.touch()
    os.truncate(on_disk, 64 * MIB)  # 64 MiB, sparse: no disk space used
    stored = tg.add_file(b"", file_path=str(on_disk), size_unknown=True)
    bot = Bot(TOKEN, base_url=tg.base_url, base_file_url=file_base_url(tg.base_url))
    async with bot:
        tracemalloc.start()
        try:
            got = await download(bot, stored.file_id, 1 * MIB)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert got.data is None and got.too_big
    assert peak < 8 * MIB, f"{peak / MIB:.1f} MiB held for a 1 MiB limit"


async def test_a_local_file_within_the_limit_is_read_whole(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    on_disk = tmp_path / "voice" / "file_3.oga"
    on_disk.parent.mkdir(parents=True)
    on_disk.write_bytes(b"OggS" + bytes(range(256)) * 9000)
    stored = tg.add_file(b"", file_path=str(on_disk), size_unknown=True)
    bot = Bot(TOKEN, base_url=tg.base_url, base_file_url=file_base_url(tg.base_url))
    async with bot:
        got = await download(bot, stored.file_id, 4 * MIB)
    assert got.data == on_disk.read_bytes()
