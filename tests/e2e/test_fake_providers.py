"""The fakes must behave like the providers, or every transport test proves nothing.

These talk to the fakes over real HTTP with aiohttp and with the real litellm.
"""

from __future__ import annotations

import json

import aiohttp
import litellm
import pytest

from tests.fakes.providers import FakeProvider, Fault, Reply, ToolCallReply


async def _post(fp: FakeProvider, body: dict, key: str = "sk-x") -> tuple[int, str, dict]:
    path = "/v1/messages" if fp.kind == "anthropic" else "/chat/completions"
    headers = {"x-api-key": key} if fp.kind == "anthropic" else {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(fp.base_url + path, json=body, headers=headers) as resp:
            return resp.status, await resp.text(), {k.lower(): v for k, v in resp.headers.items()}


@pytest.mark.parametrize("kind", ["openai", "groq", "anthropic"])
async def test_records_requests_and_echoes_by_default(kind: str) -> None:
    async with FakeProvider(kind) as fp:
        body = {"model": "m-1", "messages": [{"role": "user", "content": "héllo"}]}
        status, text, _ = await _post(fp, body, key="k-123")
        assert status == 200
        assert "echo: héllo" in text  # raw UTF-8 on the wire, as the providers send it
        [req] = fp.requests
        assert (req.model, req.api_key, req.stream) == ("m-1", "k-123", False)
        assert req.body["messages"][0]["content"] == "héllo"


async def test_base_urls_follow_each_providers_convention() -> None:
    async with (
        FakeProvider("openai") as o,
        FakeProvider("groq") as g,
        FakeProvider("anthropic") as a,
    ):
        assert o.base_url.endswith("/v1")
        assert g.base_url.endswith("/openai/v1")
        assert not a.base_url.endswith("/v1")


async def test_script_steps_are_consumed_in_order_per_model_then_default() -> None:
    async with FakeProvider("openai") as fp:
        fp.script("m-a", Fault("server_500"), Reply("second"))
        fp.set_default("*", Reply("default"))
        body = {"model": "m-a", "messages": [{"role": "user", "content": "x"}]}
        results = [(await _post(fp, body))[:2] for _ in range(3)]
        assert results[0][0] == 500
        assert "second" in results[1][1]
        assert "default" in results[2][1]
        other = await _post(fp, {**body, "model": "m-b"})
        assert "default" in other[1]
        fp.reset()
        assert fp.requests == []
        assert "echo: x" in (await _post(fp, body))[1]


async def test_groq_responses_carry_service_tier() -> None:
    async with FakeProvider("groq") as fp:
        _, text, _ = await _post(fp, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
        payload = json.loads(text)
        assert payload["service_tier"] == "on_demand"
        assert "x_groq" in payload


async def test_fault_bodies_and_retry_after_header() -> None:
    async with FakeProvider("openai") as fp:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        fp.script("*", Fault("rate_limit_429", retry_after=7), Fault("throttling_in_200"))
        status, text, headers = await _post(fp, body)
        assert status == 429 and headers["retry-after"] == "7"
        assert json.loads(text)["error"]["code"] == "rate_limit_exceeded"
        status, text, _ = await _post(fp, body)
        assert status == 200 and json.loads(text)["code"] == "Throttling.RateQuota"
    with pytest.raises(ValueError):
        Fault("no_such_fault")


async def test_each_fake_serves_its_own_providers_429() -> None:
    """The providers' real bodies, verbatim, each from its own provider."""
    body = {"model": "llama-3.3-70b-versatile", "messages": [{"role": "user", "content": "x"}]}
    async with FakeProvider("groq") as groq:
        groq.script("*", Fault("rate_limit_429"), Fault("rate_limit_429", retry_after=30))
        status, text, headers = await _post(groq, body)
        error = json.loads(text)["error"]
        assert status == 429 and headers["retry-after"] == "2"  # 1.5 s, rounded up
        assert error["type"] == "tokens" and error["code"] == "rate_limit_exceeded"
        assert error["message"].startswith(
            "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_x` "
            "service tier `on_demand` on tokens per minute (TPM): Limit 12000, Used 11000, "
            "Requested 2000. Please try again in 1.5s. Need more tokens? Upgrade to Dev Tier"
        )
        status, text, headers = await _post(groq, body)
        assert headers["retry-after"] == "30"
        assert "Please try again in 30s." in json.loads(text)["error"]["message"]
    async with FakeProvider("anthropic") as anthropic:
        anthropic.script("*", Fault("rate_limit_429", retry_after=9))
        status, text, headers = await _post(anthropic, body)
        payload = json.loads(text)
        assert status == 429 and headers["retry-after"] == "9"
        assert payload["type"] == "error" and payload["error"]["type"] == "rate_limit_error"
    async with FakeProvider("openai") as openai:
        openai.script("*", Fault("rate_limit_429"))
        status, text, _ = await _post(openai, body)
        assert json.loads(text)["error"]["message"].startswith("Rate limit reached for gpt-4.1")


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("groq", "quota_429"),
        ("anthropic", "quota_429"),
        ("groq", "overloaded_529"),
        ("openai", "overloaded_529"),
        ("groq", "anthropic_rate_limit_429"),
        ("openai", "anthropic_rate_limit_429"),
    ],
)
async def test_a_fake_refuses_another_providers_fault(kind: str, fault: str) -> None:
    async with FakeProvider(kind) as fp:
        with pytest.raises(ValueError, match="never sends it"):
            fp.script("*", Fault(fault))
        with pytest.raises(ValueError, match="never sends it"):
            fp.set_default("*", Fault(fault))


async def test_failure_mix_is_deterministic_for_a_seed() -> None:
    async def run() -> list[int]:
        async with FakeProvider("openai") as fp:
            fp.set_failure_mix(0.5, ["server_500"], seed=42)
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
            return [(await _post(fp, body))[0] for _ in range(20)]

    first, second = await run(), await run()
    assert first == second
    assert 500 in first and 200 in first


@pytest.mark.parametrize("kind", ["openai", "groq", "anthropic"])
async def test_real_litellm_parses_text_tool_calls_and_streams(kind: str) -> None:
    async with FakeProvider(kind) as fp:
        common = {
            "model": f"{kind}/m-1",
            "api_base": fp.base_url,
            "api_key": "k",
            "max_retries": 0,
            "timeout": 5,
            "messages": [{"role": "user", "content": "hi"}],
        }
        fp.script("*", Reply("世界 ok", prompt_tokens=11, completion_tokens=3))
        response = await litellm.acompletion(**common)
        assert response.choices[0].message.content == "世界 ok"
        assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 3)

        fp.script("*", ToolCallReply(arguments={"history_entry": "a", "memory_update": "b"}))
        tools = [{"type": "function", "function": {"name": "save_memory", "parameters": {
            "type": "object", "properties": {"history_entry": {"type": "string"}}}}}]  # fmt: skip
        response = await litellm.acompletion(**common, tools=tools)
        call = response.choices[0].message.tool_calls[0]
        assert call.function.name == "save_memory"
        assert json.loads(call.function.arguments) == {"history_entry": "a", "memory_update": "b"}

        fp.script("*", Reply("ünïcödé 👩‍💻 streamed", chunk_chars=3, split_utf8=True))
        stream = await litellm.acompletion(
            **common, stream=True, stream_options={"include_usage": True}
        )
        text = ""
        usage = None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            usage = getattr(chunk, "usage", None) or usage
        assert text == "ünïcödé 👩‍💻 streamed"
        assert usage is not None and usage.completion_tokens > 0
        assert fp.requests[-1].stream is True


@pytest.mark.parametrize("kind", ["openai", "groq", "anthropic"])
async def test_computed_tool_arguments_are_written_once_when_the_fake_answers(kind: str) -> None:
    """A time "in 3 seconds" must be written when the model answers, not when it was scripted."""
    async with FakeProvider(kind) as fp:
        seen_requests: list[int] = []

        def when() -> dict[str, str]:
            seen_requests.append(len(fp.requests))
            return {"when": f"written after {len(fp.requests)} request(s)"}

        fp.script("*", ToolCallReply("first", when, also=[("second", lambda: {"n": 2})]))
        assert seen_requests == []  # scripting writes nothing
        tools = [{"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {}}}} for name in ("first", "second")]  # fmt: skip
        response = await litellm.acompletion(
            model=f"{kind}/m-1", api_base=fp.base_url, api_key="k", max_retries=0, timeout=5,
            messages=[{"role": "user", "content": "hi"}], tools=tools,
        )  # fmt: skip
        calls = response.choices[0].message.tool_calls
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("first", {"when": "written after 1 request(s)"}),
            ("second", {"n": 2}),
        ]
        assert seen_requests == [1]  # once, with the request in hand
