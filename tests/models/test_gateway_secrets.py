"""Keys go to the gateway they belong to, and nowhere else.

A catalog file declares gateways with a base URL and the variable holding their keys; nothing
it says may send the bot token, the webhook secret or another provider's keys to its host, or
any key over plain http across a network. A gateway that answers with a redirect is not
followed: httpx drops only `Authorization` on the way, so Anthropic's `x-api-key` would reach
whatever host the redirect names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.app import prepare
from bot.config import load_settings
from models.calls import CallOptions
from models.catalog import CatalogError, load_catalog
from models.gateways import Gateway
from models.transport import Transport
from models.types import Outcome, TransportError
from tests.fakes.loopback import loopback_server
from tests.fakes.providers import FakeProvider, Reply
from tests.support.shared_workers import shared_workers
from tests.support.transport import TEST_KEYS

TOKEN = "123456:SECRET-bot-token"
GATEWAY: dict[str, Any] = {
    "name": "house",
    "protocol": "openai-compatible",
    "base_url": "https://llm.example.org/v1",
    "api_key_env": "HOUSE_API_KEY",
}


def _catalog(path: Path, *gateways: dict[str, Any]) -> Path:
    models = [{"id": "house-model", "gateway": gateways[0]["name"], "wire_name": "m"}]
    path.write_text(json.dumps({"gateways": list(gateways), "models": models}), encoding="utf-8")
    return path


def _start(catalog: Path, **env: str) -> None:
    """What `python -m bot` does before it contacts anything: settings, then the catalog."""
    prepare(
        load_settings(
            TELEGRAM_BOT_TOKEN=TOKEN,
            OPENAI_API_KEY="sk-openai",
            MODEL_CATALOG_FILE=str(catalog),
            **env,
        )
    )


@pytest.mark.parametrize(
    "variable",
    [
        "TELEGRAM_BOT_TOKEN",
        "WEBHOOK_SECRET",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GROQ_API_KEY",
        "DATABASE_PATH",
    ],
)
def test_a_gateway_cannot_take_its_keys_from_the_bots_own_settings(
    tmp_path: Path, variable: str
) -> None:
    catalog = _catalog(tmp_path / "c.json", {**GATEWAY, "api_key_env": variable})
    with pytest.raises(CatalogError) as refused:
        _start(catalog)
    line = str(refused.value)
    assert line == (
        f"MODEL_CATALOG_FILE: gateway 'house': api_key_env {variable} is one of the bot's own "
        "settings; give the gateway a variable of its own (e.g. HOUSE_API_KEY)"
    )
    assert TOKEN not in line


def test_two_gateways_on_different_hosts_cannot_share_a_key_variable(tmp_path: Path) -> None:
    other = {**GATEWAY, "name": "elsewhere", "base_url": "https://collector.example.net/v1"}
    catalog = _catalog(tmp_path / "c.json", GATEWAY, other)
    with pytest.raises(CatalogError) as refused:
        _start(catalog)
    assert str(refused.value) == (
        "MODEL_CATALOG_FILE: gateway 'elsewhere': api_key_env HOUSE_API_KEY already holds the "
        "keys of gateway 'house' on another host"
    )
    # The same host under two protocols (OpenRouter's OpenAI and Anthropic endpoints) may.
    anthropic_side = {
        **GATEWAY,
        "name": "house-anthropic",
        "protocol": "anthropic",
        "base_url": "https://llm.example.org/anthropic",
    }
    shared = _catalog(tmp_path / "d.json", GATEWAY, anthropic_side)
    _start(shared, HOUSE_API_KEY="house-key")


@pytest.mark.parametrize(
    "base_url",
    [
        "http://llm.example.org/v1",  # a name resolves anywhere
        "http://93.184.215.14/v1",  # a public address
        "http://169.254.169.254/v1",  # link-local: a cloud's metadata service
        "http://[2606:4700:4700::1111]:8000/v1",
        "http://198.51.100.7/v1",  # documentation range: Python calls it private, it is not ours
    ],
)
def test_keys_are_not_sent_in_the_clear_across_a_network(tmp_path: Path, base_url: str) -> None:
    catalog = _catalog(tmp_path / "c.json", {**GATEWAY, "base_url": base_url})
    with pytest.raises(CatalogError) as refused:
        _start(catalog)
    assert str(refused.value) == (
        "MODEL_CATALOG_FILE: gateway 'house': base_url must be https:// (plain http only to a "
        "loopback or private address, e.g. http://127.0.0.1:11434/v1)"
    )


@pytest.mark.parametrize(
    "base_url",
    [
        "https://llm.example.org/v1",
        "http://127.0.0.1:11434/v1",
        "http://localhost:8000/v1",
        "http://[::1]:8000/v1",
        "http://10.1.2.3:4000/v1",
        "http://192.168.1.20/v1",
        "http://172.17.0.2:11434/v1",  # a container on Docker's default bridge
    ],
)
def test_https_anywhere_and_plain_http_on_the_local_network_are_accepted(
    tmp_path: Path, base_url: str
) -> None:
    catalog = _catalog(tmp_path / "c.json", {**GATEWAY, "base_url": base_url})
    [spec] = load_catalog(catalog).gateways
    assert spec.base_url == base_url


# --- redirects ------------------------------------------------------------------------------


def _redirector(target: str) -> web.Application:
    """A gateway that answers every request with a 307 to `target`."""

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(target + request.path.split("/v1", 1)[-1])

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    return app


@pytest.mark.parametrize(
    ("protocol", "model_id", "base_suffix"),
    [
        ("anthropic", "claude-haiku-4-5", ""),
        ("groq", "llama-3.1-8b", "/openai/v1"),
        ("openai", "gpt-4.1", "/v1"),  # the OpenAI SDK's client
    ],
)
async def test_a_redirect_is_not_followed_with_the_key(
    fake_anthropic: FakeProvider,
    fake_groq: FakeProvider,
    fake_openai: FakeProvider,
    protocol: str,
    model_id: str,
    base_suffix: str,
) -> None:
    # The redirect leads to a working fake on another port: followed, it would answer there.
    target = {"anthropic": fake_anthropic, "groq": fake_groq, "openai": fake_openai}[protocol]
    target.set_default("*", Reply("answered where the redirect pointed"))
    redirect = _redirector(target.base_url.removesuffix("/v1") + "/v1")
    async with loopback_server(redirect) as redirector:
        gateways = {
            protocol: Gateway(protocol, protocol, redirector + base_suffix, (TEST_KEYS[protocol],))
        }
        transport = Transport(
            load_catalog(),
            gateways,
            backoff=(0.01,),
            retry_after_cap=0.1,
            workers=shared_workers(),
        )
        try:
            with pytest.raises(TransportError) as failed:
                await transport.complete(
                    model_id,
                    [{"role": "user", "content": "hi"}],
                    CallOptions(timeout=30, walk_chain=False),
                )
            assert failed.value.attempts[0].outcome != Outcome.SUCCESS
            assert failed.value.attempts[0].status_code == 307
            assert target.requests == []  # neither the key nor the prompt went there
        finally:
            await transport.aclose()
