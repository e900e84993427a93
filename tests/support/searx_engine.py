"""Debian's `searx` package (1.1.0, the engine SearXNG was forked from, same JSON API) run on
127.0.0.1 with a settings file of the test's own.

The package ships no default settings.yml (Debian removed it), so the settings are the
package's example file with our server section and one engine: searx's generic `json_engine`,
pointed at a URL on loopback the test chooses (`enable_http`, since searx otherwise mounts only
https). Without internet every stock engine would find nothing anyway; this way the only
traffic is on 127.0.0.1. searx 1.1.0 has no `search.formats` setting (SearXNG added it): its
JSON API is always on, so its 403 is shown against the fake (tests/fakes/web.py).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import yaml

EXAMPLE_SETTINGS = Path("/usr/share/doc/searx/examples/settings.yml")
START_TIMEOUT = 60.0


def searx_available() -> bool:
    return shutil.which("searx-run") is not None and EXAMPLE_SETTINGS.is_file()


def require_searx() -> None:
    """Skip where searx is not installed, except in CI (.ci/run installs it): there its
    absence is a failure, not a skip."""
    if searx_available():
        return
    if os.environ.get("CI"):
        pytest.fail("searx is not installed: .ci/run installs it (apt-get install searx)")
    pytest.skip("Debian's searx is not installed (apt-get install searx)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def settings(port: int, engine_url: str) -> dict:
    data = yaml.safe_load(EXAMPLE_SETTINGS.read_text(encoding="utf-8"))
    data["server"].update(
        port=port, bind_address="127.0.0.1", secret_key=secrets.token_hex(16), image_proxy=False
    )
    data["general"]["debug"] = False
    data["outgoing"]["request_timeout"] = 3.0
    data["engines"] = [
        {
            "name": "loopback",
            "engine": "json_engine",
            "shortcut": "lb",
            "categories": "general",
            "search_url": engine_url + "?q={query}",
            "results_query": "results",
            "url_query": "url",
            "title_query": "title",
            "content_query": "content",
            "enable_http": True,
            "timeout": 3.0,
        }
    ]
    return data


@asynccontextmanager
async def real_searx(engine_url: str, folder: Path) -> AsyncIterator[str]:
    """searx serving on a free port of 127.0.0.1 while the block runs; yields its base URL."""
    port = _free_port()
    path = folder / "settings.yml"
    path.write_text(yaml.safe_dump(settings(port, engine_url)), encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SEARX_SETTINGS_PATH": str(path)}
    log = (folder / "searx.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        "searx-run", env=env, cwd=folder, stdout=log, stderr=asyncio.subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with asyncio.timeout(START_TIMEOUT), httpx.AsyncClient(trust_env=False) as client:
            while True:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"searx exited: {(folder / 'searx.log').read_text()[-2000:]}"
                    )
                try:
                    if (await client.get(f"{base}/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        yield base
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        log.close()
