"""The import rules of ARCHITECTURE.md, checked on the source (not by importing it).

Every `import` counts: at the top, inside functions, and under `if TYPE_CHECKING:` — a cycle
that only type checkers follow is still a cycle a reader has to untangle, and a lazy import is
how the last ones were hidden. The layers are `bot → agent → web, mcp_client → reminders, media →
memory → models → primitives`: a module may import its own layer and the ones below, never
above; packages of one rank (web and mcp_client; reminders and media) do not import each other
(web reads pages in media's reader children, so it stands a rank above media); Telegram stays
in `bot/`; `primitives` (the shared building blocks) imports none of ours.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from primitives.litellm_env import LITELLM_FLAGS
from tests.support.paths import REPO

# Highest first: each layer may import itself and what comes after it. Packages in one tuple
# share a rank: neither may import the other.
RANKS: tuple[tuple[str, ...], ...] = (
    ("bot",),
    ("agent",),
    ("web", "mcp_client"),
    ("reminders", "media"),
    ("memory",),
    ("models",),
    ("primitives",),
)
LAYERS = tuple(name for rank in RANKS for name in rank)
RANK = {name: len(RANKS) - i for i, rank in enumerate(RANKS) for name in rank}
ORDER = " → ".join(", ".join(rank) for rank in RANKS)
TELEGRAM_PACKAGES = {"telegram"}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def our_modules(root: Path = REPO) -> dict[str, Path]:
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


def layer_violations(modules: dict[str, Path], root: Path = REPO) -> list[str]:
    problems = []
    for name, path in modules.items():
        layer = name.split(".")[0]
        for target, line in imported_names(path, name):
            top = target.split(".")[0]
            where = f"{path.relative_to(root)}:{line}"
            if top in RANK and RANK[top] > RANK[layer]:
                problems.append(f"{where}: {layer} imports {top} (against {ORDER})")
            elif top in RANK and top != layer and RANK[top] == RANK[layer]:
                problems.append(f"{where}: {layer} imports {top} (one rank: {ORDER})")
            if top in TELEGRAM_PACKAGES and layer != "bot":
                problems.append(f"{where}: {top} outside bot/")
    return sorted(set(problems))


# Inside a layer, the message path reads one way: handlers → turns (→ agent → memory). A turn
# never calls back into a handler; what both need sits in turns or below both (bot/incoming.py).
NEVER_IMPORTS: tuple[tuple[str, str], ...] = (("bot.turns", "bot.handlers"),)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(f"{package}.")


def path_violations(modules: dict[str, Path], root: Path = REPO) -> list[str]:
    """Every import of a package by one that must never import it (NEVER_IMPORTS)."""
    problems = []
    for name, path in modules.items():
        for importer, imported in NEVER_IMPORTS:
            if not _within(name, importer):
                continue
            for target, line in imported_names(path, name):
                if _within(target, imported):
                    where = f"{path.relative_to(root)}:{line}"
                    problems.append(f"{where}: {importer} imports {imported}")
    return sorted(set(problems))


def test_turns_never_import_handlers() -> None:
    assert path_violations(our_modules()) == []


def test_path_check_sees_every_import_of_a_handler_from_a_turn(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "bot/turns/a.py": "def f():\n    from bot.handlers.incoming import is_group\n",
            "bot/turns/b.py": "from bot import handlers\n",
            "bot/turns/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    import bot.handlers.chat\n"
            ),
            "bot/turns/ok.py": "from bot.incoming import is_group\nfrom bot.turns import a\n",
            "bot/handlers/ok.py": "from bot.turns.turn import run_chat_turn\n",
        },
    )
    problems = path_violations(modules, tmp_path)
    assert [p.split(":")[0] for p in problems] == [
        "bot/turns/a.py",
        "bot/turns/b.py",
        "bot/turns/c.py",
    ]


# One room stores a turn: the agent writes the user's message, the tool rounds and the answer
# (agent/record.py), on the store's methods; no other layer calls them.
TURN_WRITES = frozenset({"store_user_turn", "add_message", "add_answer", "add_tool_round"})
TURN_WRITERS = ("agent", "memory")


def turn_writes_outside_the_agent(modules: dict[str, Path], root: Path = REPO) -> list[str]:
    """Every call of a turn's write (TURN_WRITES) from a layer other than TURN_WRITERS."""
    problems = []
    for name, path in modules.items():
        if name.split(".")[0] in TURN_WRITERS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in TURN_WRITES:
                problems.append(f"{path.relative_to(root)}:{node.lineno}: {node.attr}")
    return sorted(problems)


def test_only_the_agent_stores_a_turn() -> None:
    assert turn_writes_outside_the_agent(our_modules()) == []


def test_turn_write_check_sees_a_write_from_the_bot(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "bot/turns/t.py": "async def f(s):\n    await s.store.store_user_turn(1, 'x')\n",
            "bot/ui/u.py": "def g(store):\n    return store.add_answer\n",
            "agent/record.py": "async def f(store):\n    await store.add_answer(1)\n",
            "bot/ok.py": "async def f(agent, q):\n    await agent.ask(q)\n",
        },
    )
    problems = turn_writes_outside_the_agent(modules, tmp_path)
    assert [p.split(":")[0] for p in problems] == ["bot/turns/t.py", "bot/ui/u.py"]


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
            "memory/store.py": "def f():\n    from memory.consolidation.jobs import x\n",
            "memory/consolidation/jobs.py": "from memory.store import y\n",
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
            "media/a.py": "from reminders.book import ReminderBook\n",
            "reminders/b.py": "from agent.prompt import time_text\n",
            "web/c.py": "from mcp_client.client import McpClient\n",
            "primitives/d.py": "from models.types import Usage\n",
            "primitives/ok.py": "import asyncio\nfrom primitives.clock import Clock\n",
            "mcp_client/ok.py": "from memory.db import Database\nfrom primitives import x\n",
            "reminders/ok.py": "from memory.timezones import zone\n",
            "media/ok.py": "from memory.db import Database\n",
            "agent/ok.py": "from memory.store import Store\nfrom models.types import Usage\n",
            "bot/ok.py": "from agent.loop import run\nfrom telegram import Bot\n",
        },
    )
    problems = layer_violations(modules, tmp_path)
    assert [p.split(":")[0] for p in problems] == [
        "agent/z.py",
        "media/a.py",
        "memory/y.py",
        "models/x.py",
        "primitives/d.py",
        "reminders/b.py",
        "web/c.py",
    ]


# litellm and the OpenAI SDK live in the provider worker (models/worker/pool.py). Loaded in the bot
# too, they would cost the bot ~150 MB of memory and their CPU would share the chat loop's GIL.
WORKER_ONLY = ("litellm", "openai")
BOT_ENTRY = "bot.__main__"


def bot_process_modules(modules: dict[str, Path]) -> set[str]:
    """Our modules the bot process may load: all that `python -m bot` reaches through any
    import, lazy ones inside functions included (the worker is started from a command line,
    so its modules are not reached)."""
    graph = import_graph(modules)
    seen: set[str] = set()
    todo = [BOT_ENTRY]
    while todo:
        name = todo.pop()
        if name in seen or name not in graph:
            continue
        seen.add(name)
        # A module's package runs first: `import bot.app` runs bot/__init__.py too.
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo.extend([*graph[name], *parents])
    return seen


def worker_imports_in_the_bot(modules: dict[str, Path], root: Path = REPO) -> list[str]:
    problems = []
    for name in sorted(bot_process_modules(modules)):
        path = modules[name]
        for target, line in imported_names(path, name):
            if target.split(".")[0] in WORKER_ONLY:
                problems.append(f"{path.relative_to(root)}:{line}: imports {target}")
    return sorted(set(problems))


def test_no_module_of_the_bot_process_imports_litellm_anywhere() -> None:
    """Every import statement, at the top or inside a function, of every module the bot can
    reach: a lazy import on a path no test runs is found too."""
    modules = our_modules()
    reached = bot_process_modules(modules)
    assert {"bot.app", "agent.loop", "models.transport", "models.worker.pool"} <= reached
    assert "models.worker.child" not in reached
    assert worker_imports_in_the_bot(modules) == []


def test_the_litellm_check_sees_lazy_and_indirect_imports(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "bot/__main__.py": "def main():\n    from bot import app\n",
            "bot/app.py": "import agent.loop\n",
            "agent/loop.py": "def turn():\n    import litellm\n    return litellm\n",
            "models/ok.py": "from openai import AsyncOpenAI\n",  # not reached from the bot
        },
    )
    assert worker_imports_in_the_bot(modules, tmp_path) == ["agent/loop.py:2: imports litellm"]


TURN_IN_A_FRESH_PROCESS = """
import asyncio, sys, tempfile
from pathlib import Path

from tests.support.consolidation_stack import good_call
from tests.support.e2e_bot import OWNER, bot_under_test
from tests.fakes.providers import Reply, ToolCallReply


# litellm and the OpenAI SDK live in the worker; the MCP SDK is loaded only with MCP_CONFIG.
WORKER_OR_MCP = ("litellm", "openai", "mcp", "mcp_types")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with bot_under_test(Path(tmp)) as bot:
            bot.openai.script(
                "gpt-5",
                ToolCallReply("remember", {"fact": "Likes green tea"}),
                Reply("Noted: green tea."),
            )
            bot.groq.script("llama-3.3-70b-versatile", good_call())
            [answer] = await bot.ask(OWNER, "remember that I like green tea")
            assert answer.text.startswith("Noted: green tea."), answer.text
            await bot.ask(OWNER, "/new")  # and a consolidation in the background
            await bot.consolidations_settled(OWNER)
            consolidated = [r for r in bot.groq.requests if r.model == "llama-3.3-70b-versatile"]
            assert consolidated, "no consolidation request"
            loaded = sorted(m for m in sys.modules if m.split(".")[0] in WORKER_OR_MCP)
    print(loaded)


asyncio.run(main())
"""


@pytest.mark.slow
def test_the_bot_process_does_not_load_litellm_while_it_answers() -> None:
    """A fresh interpreter runs the bot against the fakes: a turn with a tool round, /new and
    its consolidation. Whatever the bot loaded on the way (an import inside a function, one
    made by a library) is in sys.modules; litellm and the OpenAI SDK must not be, nor (without
    MCP_CONFIG) the MCP SDK."""
    env = {**os.environ, **LITELLM_FLAGS}
    done = subprocess.run(
        [sys.executable, "-c", TURN_IN_A_FRESH_PROCESS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
