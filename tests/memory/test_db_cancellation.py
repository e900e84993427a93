"""A turn cancelled mid-write (/cancel, /new, shutdown) must not wedge the shared connection."""

from __future__ import annotations

import asyncio

from memory.db import Database
from memory.store import Store
from primitives.tasks import stop_tasks


async def test_cancelling_writers_at_every_point_leaves_the_connection_usable(tmp_path):
    db = await Database.open(tmp_path / "db.sqlite3")
    store = Store(db)
    try:
        returned: list[str] = []

        async def writer(text: str) -> None:
            # Like a turn: store, then go on awaiting (where a late cancellation lands).
            message = await store.add_message(1, "user", text)
            returned.append(message.content)
            await asyncio.sleep(0)

        # Cancel writers after 0..N loop iterations so cancellation lands in BEGIN, in the
        # INSERT, in COMMIT and while waiting for the lock.
        for delay_steps in range(40):
            tasks = [asyncio.create_task(writer(f"m{delay_steps}-{i}")) for i in range(3)]
            for _ in range(delay_steps):
                await asyncio.sleep(0)
            await stop_tasks(tasks)  # cancelled at every await in turn: the case tested
        # On a loaded machine 40 loop iterations may not be enough for any write to land, so one
        # last round is cancelled only once its first writer has finished: the comparison below
        # always covers writes that landed as well as writes that were cancelled.
        tasks = [asyncio.create_task(writer(f"last-{i}")) for i in range(3)]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        await stop_tasks(tasks)
        stored = len(returned)
        # The connection is not stuck inside a dead transaction: normal writes still work.
        message = await store.add_message(1, "user", "after the storm")
        assert message.content == "after the storm"
        session = await store.active_session(1)
        rows = await store.session_messages(session)
        # Every write either happened whole or not at all, and a writer told "cancelled" left
        # nothing behind: exactly the writes that returned are stored, the survivor last.
        assert [r.content for r in rows] == [*returned, "after the storm"]
        assert stored > 0  # some writes landed, so the comparison says something
    finally:
        await db.close()
