"""What the container image holds, laid out without a Docker daemon.

`build_image(dockerfile, context, root)` reads deploy/Dockerfile and does what it says, into a
temporary directory: the COPY lines copy the build context (less what .dockerignore leaves out),
the project's `pip install` runs with the same flags, and `--from` copies go from stage to stage.
The result says what the image would run (WORKDIR, ENV, CMD, HEALTHCHECK), so a test can start
the bot from there, outside the checkout, and learn whether the image can start at all.

One stand-in, and only one: the Dockerfile installs requirements.lock into /opt/venv, and here
that venv is the test's own (`make` built it from the same lock, and nothing of ours is installed
in it). Every file of ours comes from what the Dockerfile copies and installs. An instruction this
module does not know stops the build, so a new kind of line is read here before it is trusted.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The image's /opt/venv: the venv this test runs in, built from the same hashed lock.
IMAGE_VENV = "/opt/venv"
HOST_VENV_BIN = Path(sys.executable).parent
# Where a `pip install` into /opt/venv puts our packages, inside a stage's root.
SITE = "opt/venv/site-packages"

KNOWN = {"FROM", "ENV", "RUN", "COPY", "WORKDIR", "USER", "VOLUME", "EXPOSE", "HEALTHCHECK",
         "STOPSIGNAL", "CMD", "LABEL"}  # fmt: skip
# What a build may run besides pip: it makes users, folders and the venv, and checks things.
_OTHER_COMMANDS = ("python -m venv", "groupadd", "useradd", "mkdir", "chown", "!", "find")


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    name: str | None
    root: Path
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)


@dataclass
class Image:
    """The last stage: its files under `root`, and what `docker run` would start."""

    root: Path
    workdir: Path
    env: dict[str, str]
    cmd: list[str]
    healthcheck: list[str]

    @property
    def site(self) -> Path:
        return self.root / SITE

    def run_env(self, **overrides: str) -> dict[str, str]:
        """The image's environment for a process started on this machine: /opt/venv/bin is the
        test's venv, our packages come only from the image's site-packages."""
        env = dict(self.env)
        env["PATH"] = env.get("PATH", os.environ["PATH"]).replace(
            f"{IMAGE_VENV}/bin", str(HOST_VENV_BIN)
        )
        env["PYTHONPATH"] = str(self.site)
        env["HOME"] = str(self.root)
        return env | overrides

    def argv(self, command: list[str], env: dict[str, str]) -> list[str]:
        """`command` with its program found on the image's PATH, as Docker's exec form does."""
        program = shutil.which(command[0], path=env["PATH"])
        assert program is not None, f"{command[0]} is not on the image's PATH"
        return [program, *command[1:]]


def instructions(dockerfile: Path) -> list[Instruction]:
    """The Dockerfile's instructions, comment lines dropped and continued lines joined."""
    found: list[Instruction] = []
    pending = ""
    for raw in dockerfile.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, args = pending.partition(" ")
        found.append(Instruction(keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return found


def ignored(dockerignore: Path) -> re.Pattern[str]:
    """.dockerignore as one pattern over context-relative paths (`*` stays within a folder,
    `**` crosses folders). A path is left out when it or a folder above it matches; without the
    file nothing is left out, as with Docker."""
    rules: list[str] = []
    lines = dockerignore.read_text(encoding="utf-8").splitlines() if dockerignore.exists() else []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!"), "exceptions (!) in .dockerignore are not understood here"
        pattern = re.escape(line.strip("/"))
        pattern = pattern.replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        pattern = pattern.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        rules.append(pattern)
    return re.compile(rf"(?:{'|'.join(rules) or '(?!)'})(?:/.*)?")


def _copy_tree(source: Path, target: Path, skip: re.Pattern[str] | None, base: Path) -> None:
    """Docker's copy of `source` to `target`: a folder's contents, or one file."""
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        return
    for folder, dirs, files in os.walk(source):
        here = Path(folder)
        relative = here.relative_to(base).as_posix()

        def left_out(name: str, relative: str = relative) -> bool:
            path = name if relative == "." else f"{relative}/{name}"
            return skip is not None and skip.fullmatch(path) is not None

        dirs[:] = [d for d in dirs if not left_out(d)]
        (target / here.relative_to(source)).mkdir(parents=True, exist_ok=True)
        for name in files:
            if not left_out(name) and not (here / name).is_symlink():
                shutil.copy2(here / name, target / here.relative_to(source) / name)


def _inside(stage: Stage, path: str) -> Path:
    absolute = path if path.startswith("/") else f"{stage.workdir.rstrip('/')}/{path}"
    return stage.root / absolute.lstrip("/")


def _copy(
    stage: Stage, args: str, stages: dict[str, Stage], context: Path, skip: re.Pattern[str]
) -> None:
    words = shlex.split(args)
    options = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    *sources, dest = paths
    origin: Stage | None = None
    for option in options:
        name, _, value = option[2:].partition("=")
        if name == "from":
            origin = stages[value]
        else:
            assert name == "chown", f"COPY {option} is not understood here"
    for source in sources:
        if origin is None:
            from_path, base, skip_here = context / source, context, skip
            assert from_path.exists(), f"COPY {source}: not in the build context"
        else:
            from_path, base, skip_here = _inside(origin, source), origin.root, None
        target = _inside(stage, dest)
        if from_path.is_file() and (dest.endswith("/") or target.is_dir()):
            target = target / from_path.name
        if from_path.exists():
            _copy_tree(from_path, target, skip_here, base)


def _run(stage: Stage, args: str) -> None:
    """Of a RUN line, only our project's `pip install` does anything here; the dependencies'
    install (`-r requirements.lock`) is the test venv's stand-in; other commands change nothing
    the bot is made of, and an unknown one stops the build."""
    assert not args.startswith("["), "RUN in exec form is not understood here"
    for command in (part.strip() for part in args.split("&&")):
        words = shlex.split(command)
        if len(words) >= 3 and words[0].endswith("/pip") and words[1] == "install":
            if "-r" in words:
                assert "--require-hashes" in words, "dependencies must be installed by hash"
                continue
            flags = [w for w in words[2:] if w.startswith("-")]
            [source] = [w for w in words[2:] if not w.startswith("-")]
            venv = str(Path(words[0]).parent.parent)
            assert venv == IMAGE_VENV, f"the project goes into {IMAGE_VENV}, not {venv}"
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", *flags,
                 "--target", str(stage.root / SITE), str(_inside(stage, source))],
                check=True, capture_output=True,
                env={**os.environ, "PIP_NO_INDEX": "1"},
            )  # fmt: skip
        else:
            assert command.startswith(_OTHER_COMMANDS), f"RUN {command!r} is not understood here"


def _env(stage: Stage, args: str) -> None:
    for pair in shlex.split(args):
        name, sep, value = pair.partition("=")
        assert sep, f"ENV {args!r}: only the NAME=value form is understood here"
        stage.env[name] = re.sub(
            r"\$(\w+)", lambda m: stage.env.get(m.group(1), os.environ.get(m.group(1), "")), value
        )


def _exec_form(args: str) -> list[str]:
    words = json.loads(args)
    assert isinstance(words, list), "CMD must be in exec form"
    return [str(w) for w in words]


def build_image(dockerfile: Path, context: Path, root: Path) -> Image:
    """Do what `docker build -f dockerfile context` does to the files, under `root`."""
    skip = ignored(context / ".dockerignore")
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for number, step in enumerate(instructions(dockerfile)):
        assert step.keyword in KNOWN, f"{step.keyword} is not understood here"
        if step.keyword == "FROM":
            words = step.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stage = Stage(name, root / f"stage{number}")
            stage.root.mkdir(parents=True)
            if name:
                stages[name] = stage
            continue
        assert stage is not None, "an instruction before FROM"
        if step.keyword == "ENV":
            _env(stage, step.args)
        elif step.keyword == "WORKDIR":
            stage.workdir = step.args
            _inside(stage, "").mkdir(parents=True, exist_ok=True)
        elif step.keyword == "COPY":
            _copy(stage, step.args, stages, context, skip)
        elif step.keyword == "RUN":
            _run(stage, step.args)
        elif step.keyword == "CMD":
            stage.cmd = _exec_form(step.args)
        elif step.keyword == "HEALTHCHECK":
            _, _, command = step.args.partition("CMD ")
            stage.healthcheck = _exec_form(command)
    assert stage is not None, "no FROM"
    return Image(
        root=stage.root,
        workdir=_inside(stage, ""),
        env=stage.env,
        cmd=stage.cmd,
        healthcheck=stage.healthcheck,
    )
