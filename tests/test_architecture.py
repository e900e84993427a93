"""The import rules of ARCHITECTURE.md, checked on the source (not by importing it).

Every `import` counts: at the top, inside functions, and under `if TYPE_CHECKING:` — a cycle
that only type checkers follow is still a cycle a reader has to untangle, and a lazy import is
how the last ones were hidden. The layers are `bot → agent → memory → models`: a module may
import its own layer and the ones below, never above; Telegram stays in `bot/`.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Highest first: each layer may import itself and what comes after it.
LAYERS = ("bot", "agent", "memory", "models")
RANK = {name: len(LAYERS) - i for i, name in enumerate(LAYERS)}
TELEGRAM_PACKAGES = {"telegram"}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def our_modules(root: Path = ROOT) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")) if (root / layer).is_dir() else []:
            modules[module_name(root, path)] = path
    return modules


def imported_names(path: Path, name: str) -> list[tuple[str, int]]:
    """(dotted module, line) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((base, node.lineno))
            # `from bot import app` imports the module bot.app.
            found.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """Edges between our modules: importer -> {imported: first line}."""
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        for target, line in imported_names(path, name):
            if target in modules and target != name:
                graph[name].setdefault(target, line)
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def layer_violations(modules: dict[str, Path], root: Path = ROOT) -> list[str]:
    problems = []
    for name, path in modules.items():
        layer = name.split(".")[0]
        for target, line in imported_names(path, name):
            top = target.split(".")[0]
            where = f"{path.relative_to(root)}:{line}"
            if top in RANK and RANK[top] > RANK[layer]:
                problems.append(f"{where}: {layer} imports {top} (against {' → '.join(LAYERS)})")
            if top in TELEGRAM_PACKAGES and layer != "bot":
                problems.append(f"{where}: {top} outside bot/")
    return sorted(set(problems))


def test_no_import_cycles_between_our_modules() -> None:
    cycles = find_cycles(import_graph(our_modules()))
    assert not cycles, f"import cycles: {cycles}"


def test_imports_follow_the_layers_and_telegram_stays_in_bot() -> None:
    assert layer_violations(our_modules()) == []


# The checker itself must see what it claims to see: each rule on a tree that breaks it.


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return our_modules(root)


@pytest.mark.parametrize(
    "files",
    [
        # a lazy import inside a function
        {
            "memory/store.py": "def f():\n    from memory.jobs import x\n",
            "memory/jobs.py": "from memory.store import y\n",
        },
        # a cycle only type checkers follow
        {
            "bot/app.py": "from bot.handlers import h\n",
            "bot/handlers.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from bot.app import Services\n"
            ),
        },
        # `from package import module`, and a relative import
        {"bot/a.py": "from bot import b\n", "bot/b.py": "from . import a\n"},
    ],
)
def test_cycle_finder_sees_lazy_type_checking_and_relative_imports(
    tmp_path: Path, files: dict[str, str]
) -> None:
    modules = _write(tmp_path, files)
    assert find_cycles(import_graph(modules))


def test_layer_check_flags_upward_and_telegram_imports(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "models/x.py": "import memory.store\n",
            "memory/y.py": "from agent.loop import run\n",
            "agent/z.py": "def f():\n    from telegram import Bot\n",
            "agent/ok.py": "from memory.store import Store\nfrom models.types import Usage\n",
            "bot/ok.py": "from agent.loop import run\nfrom telegram import Bot\n",
        },
    )
    problems = layer_violations(modules, tmp_path)
    assert [p.split(":")[0] for p in problems] == ["agent/z.py", "memory/y.py", "models/x.py"]


def test_the_bot_process_does_not_load_litellm() -> None:
    """litellm runs in the provider worker (models/worker.py). Loaded in the bot too, it would
    cost the bot ~150 MB of memory and its CPU would share the chat loop's GIL again."""
    code = (
        "import sys, bot.app, bot.runner, bot.services, agent.loop, memory.consolidation, "
        "models.transport\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('litellm', 'openai')))"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
