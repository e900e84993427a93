"""pyproject.toml is the one list of what the bot is made of: the image installs exactly what it
names (deploy/Dockerfile runs `pip install .`), so a package missing from it is a bot that
cannot start in the image. The tree is read here, not a list kept beside the other one."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from setuptools import find_packages

from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
FIND = PYPROJECT["tool"]["setuptools"]["packages"]["find"]


def tree_packages() -> set[str]:
    """Every top-level folder of the repository that is a Python package (tests aside)."""
    return {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests"}


def named_packages() -> set[str]:
    """The top-level names pyproject's package discovery includes."""
    return {pattern.removesuffix(".*") for pattern in FIND["include"]}


def test_every_top_level_package_is_named_in_pyproject() -> None:
    assert tree_packages() - named_packages() == set(), "add them to pyproject's include list"
    assert named_packages() - tree_packages() == set(), "pyproject names packages that are gone"
    # Each top-level package brings its subpackages: "x" and "x.*" both.
    for name in tree_packages() - {"migrations"}:
        assert {name, f"{name}.*"} <= set(FIND["include"]), name


def test_every_folder_of_python_files_is_a_found_package() -> None:
    """A folder with .py files but no __init__.py would be left out of the install silently."""
    found = set(find_packages(where=str(REPO), include=FIND["include"]))
    with_code = {
        ".".join(p.parent.relative_to(REPO).parts)
        for top in tree_packages()
        for p in (REPO / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert with_code - found == set(), "these folders need an __init__.py"


def test_the_dependencies_are_the_ones_locked() -> None:
    """pyproject's dependencies are requirements.in's (the lock's source), less the build
    backend, which pyproject names under build-system."""
    lines = (REPO / "requirements.in").read_text(encoding="utf-8").splitlines()
    wanted = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    [backend] = [Requirement(w) for w in wanted if Requirement(w).name == "setuptools"]
    [needed] = [Requirement(w) for w in PYPROJECT["build-system"]["requires"]]
    assert needed.name == backend.name
    [pinned] = [spec.version for spec in backend.specifier]
    assert needed.specifier.contains(pinned), "the locked setuptools cannot build the project"
    assert set(PYPROJECT["project"]["dependencies"]) == wanted - {str(backend)}


def test_the_type_checker_covers_every_application_package_in_make_test() -> None:
    """mypy reads its package list from pyproject: a new top-level package left out of it would
    go unchecked. `make test` runs it after ruff and before pytest (and .ci/run runs make test)."""
    checked = set(PYPROJECT["tool"]["mypy"]["packages"])
    assert checked == tree_packages() - {"migrations"}
    recipe = (REPO / "Makefile").read_text(encoding="utf-8").split("\ntest:", 1)[1]
    steps = recipe.split("\n\n", 1)[0].splitlines()[1:]
    tools = [found.group(1) for step in steps if (found := re.search(r"(ruff \w+|-m \w+)", step))]
    mypy = tools.index("-m mypy")
    assert {"ruff check", "ruff format"} <= set(tools[:mypy]), tools
    assert "-m pytest" in tools[mypy + 1 :], tools
