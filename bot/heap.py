"""Keep the long-lived heap out of garbage collections.

A full collection walks every object the collector tracks while every thread of the process
stands still. Most of the process's objects are code and data of modules (litellm and its SDKs
leave a few hundred thousand), alive as long as the process: walking them again and again is
pure pause. So they are frozen (`gc.freeze`), and later collections see only what turns create.
"""

from __future__ import annotations

import gc
import sys
from typing import Any


def freeze_start_up_heap() -> None:
    """Collect once, then freeze everything alive after start-up; keep freezing late imports.

    Before this, full collections under load took 0.3–0.6 s each (benchmarks/turn_overhead.py).
    But litellm and the SDKs still import modules during the first requests (about 40, among
    them litellm's proxy types: ~37k more objects), which every full collection then walked
    again: 30–75 ms with every thread stopped, the longest stalls of the event loop left.
    """
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_LateImportFreezer())


class _LateImportFreezer:
    """After a full collection, if modules were imported since the last freeze, freeze what
    survived it: what remains after a full collection is alive, and a module's objects stay.

    The survivors also include what the turns in flight hold just then; those objects can never
    be collected as cycles later (plain reference counting still frees them). That happens only
    as often as a collection follows new imports: a few times, early in the process's life.
    """

    def __init__(self) -> None:
        self.modules = len(sys.modules)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != 2 or len(sys.modules) == self.modules:
            return
        self.modules = len(sys.modules)
        gc.freeze()
