"""The docs a newcomer reads agree with the code, and the code's comments cite only the repo.

- Comments and docstrings say what a thing does and why in the repo's own words: none cites a
  document the repo does not have (a design brief) or an issue by number, which a reader of the
  code cannot open.
- ARCHITECTURE.md's map of the database names every table that exists after the last migration
  (FTS5 shadow tables and views included), so a new table cannot go unmapped.
- ARCHITECTURE.md and the README state the import order `tests/test_architecture.py` enforces.
"""

from __future__ import annotations

import importlib.util
import re
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

from memory.db import discover_migrations
from tests.support.paths import REPO

APPLICATION = ("bot", "agent", "web", "mcp_client", "reminders", "media", "memory", "models")
# Migrations are left out: a landed one is never edited, and each says why it was added.
PACKAGES = (*APPLICATION, "primitives", "benchmarks", "tests")
# This file quotes such citations on purpose, as the check's examples.
THIS_FILE = Path(__file__).resolve()
ARCHITECTURE = REPO / "ARCHITECTURE.md"
README = REPO / "README.md"

# What a reader of the code cannot follow: a document outside the repo, an issue by number.
OUTSIDE_CITATION = re.compile(
    r"design\.md|design brief|\(design[,)]|\bissue\s+(?:\d+|[A-Z])\b", re.IGNORECASE
)


def outside_citations(text: str) -> list[str]:
    """The lines of `text` that cite something outside the repo, with their line numbers."""
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE_CITATION.search(line)
    ]


def _sources() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (REPO / package).rglob("*")
        if path.suffix == ".py" and path.is_file() and path.resolve() != THIS_FILE
    )


def test_no_module_or_test_cites_a_design_brief_or_an_issue() -> None:
    found = [
        f"{path.relative_to(REPO)}:{hit}"
        for path in _sources()
        for hit in outside_citations(path.read_text(encoding="utf-8"))
    ]
    assert not found, "cite the repo, not a brief or an issue:\n" + "\n".join(found)


def test_the_docs_cite_no_design_brief_or_issue() -> None:
    found = [
        f"{path.name}:{hit}"
        for path in (README, ARCHITECTURE)
        for hit in outside_citations(path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "# see design.md for why",
        '"""The web tools (design brief, "Web")."""',
        "    said changes the order, issue 23 item 2), and",
        "# What is untrusted is decided once (Issue X stores it).",
        '"""Held calls (design, "MCP")."""',
    ],
)
def test_the_check_sees_each_kind_of_outside_citation(line: str) -> None:
    assert outside_citations(f"x = 1\n{line}\n") == [f"2: {line.strip()}"]


@pytest.mark.parametrize(
    "line",
    [
        "# the design of the queue: one writer",
        "# a tissue 3 cm wide",
        "# an issue with the gateway's headers",
        "# designed for two cores",
    ],
)
def test_the_check_lets_ordinary_words_be(line: str) -> None:
    assert outside_citations(line) == []


def _schema_names() -> set[str]:
    conn = sqlite3.connect(":memory:")
    try:
        for _number, path in discover_migrations():
            conn.executescript(f"BEGIN;\n{path.read_text(encoding='utf-8')}\nCOMMIT;")
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        ).fetchall()
    finally:
        conn.close()
    return {str(name) for (name,) in rows}


def test_the_database_map_names_every_table_after_the_last_migration() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## The database") :]
    section = section[: section.index("\n## ", 1)]
    names = _schema_names()
    assert {"messages", "history_fts", "archive_fts_data", "archive_fts_rows"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in section)
    assert not missing, f"ARCHITECTURE.md's database map lacks {missing}"


def _architecture_test() -> ModuleType:
    [path] = (REPO / "tests").rglob("test_architecture.py")
    spec = importlib.util.spec_from_file_location("architecture_rules", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_state_the_import_order_the_architecture_test_enforces() -> None:
    order = _architecture_test().ORDER
    assert order.startswith("bot → agent") and order.endswith("→ primitives")
    for path in (ARCHITECTURE, README):
        assert order in path.read_text(encoding="utf-8"), f"{path.name} lacks `{order}`"


# A repo path as ARCHITECTURE.md writes one (`memory/store.py`, deploy/compose.yaml).
_PATH = re.compile(r"(?<![\w/.*])((?:[a-z_]+/)+[a-z_0-9]+\.(?:py|toml|sql|md|yaml|service))\b")
# A path followed by a name defined in it: `bot/app.py` `open_services`, `x.py` `Class.method`.
_PATH_AND_NAME = re.compile(r"`?((?:[a-z_]+/)+[a-z_0-9]+\.py)`? `([A-Za-z_][\w.]*)(?:\(\))?`")


def _architecture_text() -> str:
    """ARCHITECTURE.md with its line breaks (and the indentation after them) as single spaces."""
    return re.sub(r"\s*\n\s*", " ", ARCHITECTURE.read_text(encoding="utf-8"))


def test_every_file_the_architecture_names_exists() -> None:
    named = set(_PATH.findall(_architecture_text()))
    assert len(named) > 50
    missing = sorted(path for path in named if not (REPO / path).is_file())
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"


def _defines(path: Path, name: str) -> bool:
    last = re.escape(name.split(".")[-1])
    text = path.read_text(encoding="utf-8")
    return (
        re.search(rf"^\s*(?:async def|def|class) {last}\b|^\s*{last}\s*[:=]", text, re.M)
        is not None
    )


def test_every_name_the_architecture_gives_a_file_is_defined_there() -> None:
    pairs = set(_PATH_AND_NAME.findall(_architecture_text()))
    assert len(pairs) > 10
    wrong = sorted(
        f"{path} {name}"
        for path, name in pairs
        if (REPO / path).is_file() and not _defines(REPO / path, name)
    )
    assert not wrong, f"ARCHITECTURE.md names what these files do not define: {wrong}"
