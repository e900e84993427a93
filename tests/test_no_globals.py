"""No module-level mutable state in the application packages, checked on the source.

State a module keeps for the whole process belongs to whichever event loop, test or bot first
touched it: a semaphore made on one loop refuses another, a counter or a dict of one bot leaks
into the next, and a test then needs a fixture that resets it. So every long-lived object is
built by the composition root (bot/app.py `open_services`) and handed to its users, and a module
keeps only constants. Found on the source, not by importing it:

- a `global` statement;
- a module-level dict, list, set (or other container) that a function of the module changes;
- a module-level instance of a class that is not a known immutable value (an asyncio or
  threading primitive, a counter, one of our own objects);
- a cache decorator on a module-level function (its cache is process-wide).

The few exceptions are process-wide by nature and named below with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "agent", "web", "mcp_client", "reminders", "media", "memory", "models")
PACKAGES += ("primitives",)

# (module, name): why this process-wide state is right where it is.
ALLOWED: dict[tuple[str, str], str] = {
    ("models/tokens.py", "global"): "the ~80 MB tokenizer, loaded once per process in a "
    "thread; immutable once loaded and bound to no event loop",
    ("models/tokens.py", "_loading"): "the lock of that one load (a threading lock: no loop)",
    ("models/logging_setup.py", "global"): "logging is process-wide (stdlib handlers, "
    "sys.excepthook): whether it was configured is a fact about the process",
    ("models/logging_setup.py", "_redactor"): "the secrets every log line of the process is "
    "scrubbed of, whichever logger, thread or loop writes it",
    ("memory/recall/terms.py", "_local"): "one stemmer per thread (a Stemmer is not "
    "thread-safe); a pure cache, bound to no loop",
    ("memory/recall/search.py", "_terms_of"): "a pure function's memo (text to terms)",
    ("memory/timezones.py", "_zone_names"): "the system's zone names, read once",
    ("web/fetch.py", "default_tls"): "the CA bundle's SSL context, loaded once and never "
    "changed; bound to no loop",
}

# Classes whose instances are values: a module may hold one as a constant.
IMMUTABLE_TYPES = frozenset(
    {
        "Backoff",
        "ImageLimit",
        "Limits",
        "LinkPreviewOptions",
        "MappingProxyType",
        "Path",
        "Struct",
        "IPv6Network",
        "IPv4Network",
        "timedelta",
        "Decimal",
        "TypeVar",
        "ParamSpec",
        "Enum",
        "StrEnum",
        "IntEnum",
        "NamedTuple",
        # Context-local by design: each task sees its own value.
        "ContextVar",
    }
)
CONTAINER_CALLS = frozenset(
    {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque", "bytearray"}
)
MUTATORS = frozenset(
    {
        "append",
        "add",
        "update",
        "pop",
        "popitem",
        "setdefault",
        "clear",
        "extend",
        "remove",
        "discard",
        "insert",
        "appendleft",
        "popleft",
        "move_to_end",
        "__setitem__",
    }
)
CACHES = frozenset({"cache", "lru_cache", "functools.cache", "functools.lru_cache"})


def _called_name(node: ast.expr) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _module_bindings(tree: ast.Module) -> list[tuple[str, ast.expr, int]]:
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        found.extend((t.id, value, node.lineno) for t in targets if isinstance(t, ast.Name))
    return found


def _is_container(value: ast.expr) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp):
        return True
    if isinstance(value, ast.SetComp):
        return True
    return isinstance(value, ast.Call) and _called_name(value) in CONTAINER_CALLS


def _mutated_names(tree: ast.Module) -> set[str]:
    """Names changed in place inside a function: `x[k] = …`, `del x[k]`, `x[k] += …`,
    `x.append(…)` and the other mutating methods."""
    changed: set[str] = set()
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    changed.add(target.value.id)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS
                and isinstance(node.func.value, ast.Name)
            ):
                changed.add(node.func.value.id)
    return changed


def _local_names(tree: ast.Module) -> set[str]:
    """Names also bound inside some function (a local that shadows a module name)."""
    names: set[str] = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
            names.update(a.arg for a in func.args.args + func.args.kwonlyargs)
    return names


def module_state(relative: str, source: str) -> list[str]:
    """The module-level mutable state of one module's source, as `path:line name: what`."""
    tree = ast.parse(source)
    found: list[str] = []

    def report(name: str, line: int, what: str) -> None:
        if (relative, name) not in ALLOWED:
            found.append(f"{relative}:{line} {name}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            report("global", node.lineno, f"`global {', '.join(node.names)}`")
    mutated = _mutated_names(tree) - _local_names(tree)
    for name, value, line in _module_bindings(tree):
        if _is_container(value) and name in mutated:
            report(name, line, "a module-level container changed by a function")
        elif isinstance(value, ast.Call) and not _is_container(value):
            called = _called_name(value)
            if called[:1].isupper() and called not in IMMUTABLE_TYPES:
                report(name, line, f"a module-level {called} instance")
            elif called in {"count", "local", "Lock", "Event", "Semaphore", "Queue"}:
                report(name, line, f"a module-level {called}()")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                if ast.unparse(decorator).split("(")[0] in CACHES:
                    report(node.name, node.lineno, "a process-wide cache")
    return found


def test_the_application_packages_keep_no_module_level_mutable_state() -> None:
    found = [
        finding
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for finding in module_state(str(path.relative_to(ROOT)), path.read_text("utf-8"))
    ]
    assert found == [], (
        "module-level mutable state (build it in bot/app.py open_services and pass it in, or "
        "make it a constant):\n" + "\n".join(found)
    )


def test_every_exception_is_still_there() -> None:
    """An allowed exception that is gone is taken off the list, so it cannot cover a new one."""
    present = set()
    for module, name in ALLOWED:
        source = (ROOT / module).read_text("utf-8")
        tree = ast.parse(source)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if any(isinstance(n, ast.Global) for n in ast.walk(tree)):
            names.add("global")
        if name in names:
            present.add((module, name))
    assert present == set(ALLOWED)


def test_the_check_finds_each_kind_of_module_state() -> None:
    """The rule itself, on small sources: each kind is found, and constants pass."""
    source = (
        "import asyncio, functools, itertools\n"
        "_slots = {}\n"
        "SEEN: list[int] = []\n"
        "TABLE = {'a': 1}\n"
        "WORKER = WorkerPool()\n"
        "LOCK = asyncio.Lock()\n"
        "IDS = itertools.count(1)\n"
        "LIMIT = Backoff([1, 2])\n"
        "def remember(x):\n"
        "    global last\n"
        "    last = x\n"
        "    _slots[x] = 1\n"
        "    SEEN.append(x)\n"
        "    return TABLE[x]\n"
        "@functools.lru_cache(maxsize=8)\n"
        "def cached(x):\n"
        "    return x\n"
    )
    found = {line.split(" ", 1)[1].split(":")[0] for line in module_state("m.py", source)}
    assert found == {"global", "_slots", "SEEN", "WORKER", "LOCK", "IDS", "cached"}
