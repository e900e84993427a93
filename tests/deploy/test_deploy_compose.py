"""deploy/compose.yaml, read by a real parser: Debian's docker-compose resolves it with `config`
(no daemon needed; .ci/run installs it). What is checked is the file as compose understands it:
the bot's service restarts a bot its healthcheck killed (an init as PID 1, the image's own
HEALTHCHECK, a restart policy), and it reaches SearXNG, whose secret comes only from the
environment. The healthcheck itself runs against a real bot in tests/deploy/test_deploy_image.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.host_tools import need
from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
SECRET = "a-test-secret-of-searxng-0123456789abcdef"


def compose_config(
    tmp_path: Path, compose_text: str | None = None, files: dict[str, str] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` on a copy of deploy/ (its compose file replaced by
    `compose_text` if given, `files` written beside it) and an empty mnemobot.env (the
    settings file the README has the operator write; the repository has none)."""
    compose = need("docker-compose")
    copy = tmp_path / "deploy"
    copy.mkdir()
    shutil.copy(DEPLOY / "compose.yaml", copy)
    if compose_text is not None:
        (copy / "compose.yaml").write_text(compose_text, encoding="utf-8")
    shutil.copytree(DEPLOY / "searxng", copy / "searxng")
    (copy / "mnemobot.env").write_text("", encoding="utf-8")
    for name, content in (files or {}).items():
        (copy / name).write_text(content, encoding="utf-8")
    return subprocess.run(
        [compose, "-f", str(copy / "compose.yaml"), "config"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def config(tmp_path: Path) -> dict[str, Any]:
    done = compose_config(tmp_path, SEARXNG_SECRET=SECRET)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_bot_service_restarts_a_bot_its_healthcheck_killed(config: dict[str, Any]) -> None:
    bot = config["services"]["mnemobot"]
    assert bot["build"]["dockerfile"] == "deploy/Dockerfile"
    # The image's HEALTHCHECK applies (tests/deploy/test_deploy_image.py runs it): not
    # replaced here.
    assert "healthcheck" not in bot
    # Without an init the bot is PID 1, which nothing inside the container can kill.
    assert bot["init"] is True
    assert bot["restart"] in {"always", "unless-stopped", "on-failure"}
    assert bot["environment"]["DATABASE_PATH"].startswith("/data/")
    assert any(volume.endswith(":/data:rw") for volume in bot["volumes"])


def test_the_bot_has_a_memory_backstop(config: dict[str, Any]) -> None:
    bot = config["services"]["mnemobot"]
    assert str(bot["mem_limit"]).lower() in {"2g", str(2 * 1024**3)}
    assert bot["restart"] in {"always", "unless-stopped", "on-failure"}


def test_the_bot_reaches_searxng_whose_secret_is_the_operators(config: dict[str, Any]) -> None:
    bot, searxng = config["services"]["mnemobot"], config["services"]["searxng"]
    assert bot["environment"]["WEB_SEARCH_URL"] == "http://searxng:8080"
    # The backend needs no allowance of the pages' own: no private host serves pages.
    assert "WEB_ALLOW_PRIVATE" not in bot["environment"]
    assert searxng["image"].split(":")[0] == "searxng/searxng"
    assert searxng["environment"]["SEARXNG_SECRET"] == SECRET
    assert "ports" not in searxng, "only the bot may reach SearXNG"
    [mount] = [v for v in searxng["volumes"] if v.endswith(":/etc/searxng/settings.yml:ro")]
    settings = yaml.safe_load(Path(mount.split(":")[0]).read_text(encoding="utf-8"))
    assert settings["use_default_settings"] is True
    assert {"html", "json"} <= set(settings["search"]["formats"]), "the bot reads JSON"
    assert settings["server"]["limiter"] is False
    assert "secret_key" not in settings["server"], "the secret comes from SEARXNG_SECRET"


def test_compose_refuses_to_run_searxng_without_a_secret(tmp_path: Path) -> None:
    done = compose_config(tmp_path)
    assert done.returncode != 0
    assert "SEARXNG_SECRET" in done.stderr


def test_the_mcp_lines_once_uncommented_mount_the_config_read_only(tmp_path: Path) -> None:
    """The compose file shows how to give the bot an MCP_CONFIG: its two commented lines,
    uncommented as the README says, mount the file read-only where MCP_CONFIG points."""
    text = (DEPLOY / "compose.yaml").read_text(encoding="utf-8")
    for line in (
        "# MCP_CONFIG: /etc/mnemobot/mcp.json",
        "# - ./mcp.json:/etc/mnemobot/mcp.json:ro",
    ):
        assert line in text
        text = text.replace(line, line.removeprefix("# "))
    done = compose_config(tmp_path, text, {"mcp.json": '{"mcpServers": {}}'}, SEARXNG_SECRET=SECRET)
    assert done.returncode == 0, done.stderr
    bot = yaml.safe_load(done.stdout)["services"]["mnemobot"]
    assert bot["environment"]["MCP_CONFIG"] == "/etc/mnemobot/mcp.json"
    mcp_file = tmp_path / "deploy" / "mcp.json"
    assert f"{mcp_file}:/etc/mnemobot/mcp.json:ro" in bot["volumes"]
