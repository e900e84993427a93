"""deploy/README.md names files, make targets, subcommands, services and units: each must exist,
so following it never ends on "no such file". The commands it shares with the units must be the
units' own (the backup by hand is the timer's command; the database it restores is the one the
unit and the compose file use)."""

from __future__ import annotations

import importlib.util
import re
import subprocess

import yaml

from bot.__main__ import build_parser
from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
GUIDE = (DEPLOY / "README.md").read_text(encoding="utf-8")
READMES = GUIDE + (REPO / "README.md").read_text(encoding="utf-8")
# The text with continued shell lines joined, so a command reads as one line.
JOINED = re.sub(r"\\\n\s*", "", GUIDE)
FILE = re.compile(r"[\w./-]+\.(?:service|timer|yaml|yml|py|toml|lock|md|example)\b|\.dockerignore")


def _unit_values(name: str, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", (DEPLOY / name).read_text(encoding="utf-8"), re.M)


def test_every_file_named_exists() -> None:
    named = {m.group(0) for m in FILE.finditer(GUIDE)} - {"TRANSCRIPT.md", "MEMORY.md"}
    missing = {
        name
        for name in named
        if not name.startswith("/")  # paths on the server, checked below
        and not (REPO / name).exists()
        and not (DEPLOY / name).exists()
    }
    assert missing == set()
    assert {"mnemobot.service", "compose.yaml", "searxng/settings.yml"} <= named


def test_every_make_target_named_exists() -> None:
    targets = set(re.findall(r"\bmake ([\w.][\w./-]*)", READMES))
    assert {"run", "test", ".venv/bin/.runtime"} <= targets
    for target in targets:
        done = subprocess.run(
            ["make", "-n", target], cwd=REPO, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, (target, done.stderr)


def test_every_subcommand_and_module_named_exists() -> None:
    [subparsers] = [a for a in build_parser()._actions if a.dest == "command"]
    named = set(re.findall(r"python -m bot (\w+)", READMES))
    assert named and named <= set(subparsers.choices), named - set(subparsers.choices)
    for module in set(re.findall(r"python -m (bot\.[\w.]+)", READMES)):
        assert importlib.util.find_spec(module) is not None, module


def test_every_compose_service_and_unit_named_exists() -> None:
    services = set(yaml.safe_load((DEPLOY / "compose.yaml").read_text("utf-8"))["services"])
    for line in re.findall(r"docker.compose -f deploy/compose\.yaml (.*)", JOINED):
        verb, *rest = line.split("#")[0].split("|")[0].split()
        if verb in {"exec", "logs", "stop", "start", "run", "pull", "restart"}:
            [service, *_] = [word for word in rest if not word.startswith("-")]
            assert service in services, line
    for line in re.findall(r"systemctl (.*)", JOINED):
        for unit in re.findall(r"\bmnemobot[\w.-]*", line.split("#")[0]):
            name = unit if unit.endswith((".service", ".timer")) else f"{unit}.service"
            assert (DEPLOY / name).exists(), line


def test_the_commands_shared_with_the_units_are_theirs() -> None:
    [backup] = _unit_values("mnemobot-backup.service", "ExecStart")
    assert f"sudo -u mnemobot {backup}" in JOINED, "the backup by hand is the timer's command"
    [unit_database] = [
        value.removeprefix("DATABASE_PATH=")
        for value in _unit_values("mnemobot.service", "Environment")
        if value.startswith("DATABASE_PATH=")
    ]
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text("utf-8"))
    compose_database = compose["services"]["mnemobot"]["environment"]["DATABASE_PATH"]
    for database in (unit_database, compose_database):
        assert re.search(rf"cp \S+ {re.escape(database)}\b", JOINED), f"no restore to {database}"
        assert f"{database}-wal" in JOINED, f"the restore removes {database}-wal"
    assert "--init" in re.findall(r"docker run .*", JOINED)[0], "the healthcheck needs an init"
