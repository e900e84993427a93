"""This process's resident memory, from /proc/self/status (Linux), for tests that compare
memory rather than time: reset the peak (VmHWM), do the work, read how far the peak rose above
the resident size (VmRSS) at the start."""

from __future__ import annotations

from pathlib import Path


def peak_reset() -> None:
    """The peak resident size starts again from the current one (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_mib() -> int:
    return _status_mib("VmHWM:")


def current_mib() -> int:
    return _status_mib("VmRSS:")


def _status_mib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) // 1024
    raise AssertionError(f"no {field} in /proc/self/status")
