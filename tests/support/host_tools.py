"""Programs of this machine a test drives (docker-compose, systemd-analyze, ...).

One rule for all of them, in one place: on a developer's machine a missing program skips the
test; in CI, where .ci/run installs each one, a missing program fails it, so a broken install
never passes as a skip.
"""

from __future__ import annotations

import os
import shutil

import pytest


def need(tool: str) -> str:
    """The tool's path; CI installs it (.ci/run), so there a missing tool is a failure."""
    found = shutil.which(tool)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is missing (.ci/run installs it)")
        pytest.skip(f"{tool} is not installed")
    return found
