"""The command line and environment of a child Python process that runs this tree's code.

A child (the provider worker, a document or image reader) must import exactly the code its
parent runs, wherever that came from: a checkout run from its root, another checkout sharing
the same venv, or the installed package in the image. So the child is told the parent's import
root in PYTHONPATH, first, and runs with `-P`: nothing is put before it (not the current
directory, which may hold another tree, nor a path an editable install added later on).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

# The folder that holds this package and the project's others, as this process imported them.
IMPORT_ROOT = str(Path(__file__).resolve().parents[1])


def python_command(code: str) -> list[str]:
    """argv running `code` in a fresh interpreter of this venv; use it with `child_env`."""
    return [sys.executable, "-P", "-c", code]


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` (what the child may see) with this tree's import root first in PYTHONPATH."""
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != IMPORT_ROOT]
    return {**env, "PYTHONPATH": os.pathsep.join([IMPORT_ROOT, *inherited])}
