"""One exception base per layer: every exception class a layer defines derives from the base in
its package's __init__.py, and that base's docstring names it (the docstring is the tree a
reader looks at, so it must hold every class). The layers' bases derive from one root,
`primitives.MnemobotError`, and every class is named `…Error`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import bot
import mcp_client
import media
import memory
import models
import reminders
import web
from primitives import MnemobotError

BASES: dict[str, type[Exception]] = {
    "bot": bot.BotError,
    "web": web.WebError,
    "mcp_client": mcp_client.McpClientError,
    "reminders": reminders.RemindersError,
    "media": media.MediaError,
    "memory": memory.MemoryLayerError,
    "models": models.ModelsError,
}


def exception_classes(package: str) -> list[type[BaseException]]:
    """The exception classes defined in the package's modules (imported, not parsed, so a
    class built from an alias or a base class imported under another name is found too)."""
    root = importlib.import_module(package)
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found.append(value)
    return found


@pytest.mark.parametrize("package", sorted(BASES))
def test_every_exception_of_a_layer_derives_from_its_base_and_is_in_its_tree(
    package: str,
) -> None:
    base = BASES[package]
    classes = exception_classes(package)
    assert classes, f"{package} defines no exception: its base would be dead code"
    outside = [c.__qualname__ for c in classes if not issubclass(c, base)]
    assert outside == [], f"{package}: not under {base.__name__}"
    missing = [c.__name__ for c in classes if c.__name__ not in (base.__doc__ or "")]
    assert missing == [], f"{package}: {base.__name__}'s docstring lacks them"


def test_the_agent_defines_no_exception_of_its_own() -> None:
    """The agent layer has no base because it raises nothing of its own; the first class it
    defines needs one (agent/__init__.py), with its tree."""
    assert exception_classes("agent") == []


def test_the_layer_bases_derive_from_the_one_root_and_its_tree_names_them() -> None:
    assert [name for name, base in BASES.items() if MnemobotError not in base.__mro__[1:]] == []
    tree = MnemobotError.__doc__ or ""
    assert [base.__name__ for base in BASES.values() if base.__name__ not in tree] == []


@pytest.mark.parametrize("package", sorted(BASES))
def test_every_exception_we_define_is_named_with_the_error_suffix(package: str) -> None:
    names = [c.__name__ for c in exception_classes(package)]
    assert [name for name in names if not name.endswith("Error")] == []
