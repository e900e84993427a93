"""Where the tests find the repository and their data, from any folder of tests/: the real
test data is ../shared/testdata beside the checkout (never copied in); tests/data holds the
media files made for the tests (tests/data/SOURCE.md)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
TESTDATA = REPO.parent / "shared" / "testdata"
DATA = TESTS / "data"
