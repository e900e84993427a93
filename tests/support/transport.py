"""Transports and gateways over the fake providers, with the keys the fakes expect: what the
provider-side tests build their subject from (the `transport` fixture in tests/conftest.py is
one of these)."""

from __future__ import annotations

from tests.fakes.providers import FakeProvider
from tests.support.shared_workers import shared_workers

TG_TOKEN = "123456:TEST-TOKEN"


# Keys the fakes see; tests assert on them (and that they never reach logs).
TEST_KEYS = {
    "openai": "sk-test-openai-0001",
    "groq": "gsk_test_groq_0001",
    "anthropic": "sk-ant-test-0001",
}


def make_gateways(
    openai: FakeProvider,
    groq: FakeProvider,
    anthropic: FakeProvider,
    rps: dict[str, float] | None = None,
):
    """Gateways over the three fakes, one test key each (requests per second per gateway)."""
    rps = rps or {}
    from models.gateways import Gateway

    fakes = {"openai": openai, "groq": groq, "anthropic": anthropic}
    return {
        name: Gateway(name, name, fp.base_url, (TEST_KEYS[name],), rps.get(name, 50.0))
        for name, fp in fakes.items()
    }


def make_transport(openai: FakeProvider, groq: FakeProvider, anthropic: FakeProvider, **options):
    """A Transport over the three fakes with the default catalog and fast backoff, on the
    session's shared provider workers unless `workers=` names others."""
    from models.catalog import load_catalog
    from models.transport import Transport

    options.setdefault("backoff", (0.01, 0.02, 0.04))
    options.setdefault("retry_after_cap", 0.5)
    options.setdefault("workers", shared_workers())
    return Transport(load_catalog(), make_gateways(openai, groq, anthropic), **options)
