"""One exception base per layer: every exception class a layer defines derives from the base in
its package's __init__.py, and that base's docstring names it (the docstring is the tree a
reader looks at, so it must hold every class)."""

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
