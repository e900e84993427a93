"""bot/heap.py: the start-up heap is frozen, and so is what modules imported later leave behind,
after the next full collection; without new imports a full collection freezes nothing.

Each case runs in a fresh interpreter: freezing is process-wide and would reach every test."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import gc, json, sys, types
    from bot.heap import freeze_start_up_heap

    freeze_start_up_heap()
    after_start = gc.get_freeze_count()

    # Something else turns create, alive across a full collection: not frozen for that alone.
    held = [[n] for n in range(5000)]  # lists: objects the collector tracks
    gc.collect()
    without_import = gc.get_freeze_count()

    # A module imported late (as litellm does during its first requests), with its objects.
    late = types.ModuleType("late_module")
    late.table = [[n] for n in range(20000)]
    sys.modules["late_module"] = late
    gc.collect()
    after_import = gc.get_freeze_count()
    gc.collect()
    again = gc.get_freeze_count()
    print(json.dumps([after_start, without_import, after_import, again]))
    """
)


def test_late_imports_are_frozen_after_the_next_full_collection() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    after_start, without_import, after_import, again = json.loads(done.stdout)

    assert after_start > 0
    assert without_import == after_start  # no new module: nothing more frozen
    assert after_import >= after_start + 20000  # the late module's table is frozen now
    assert again == after_import  # and only once
