"""models/tokens.py: our usage estimates count as litellm.token_counter does, without litellm.

litellm encodes long texts in pieces of a few thousand characters (and samples very long ones),
so on long messages its count is off the exact one by a few tokens; ours is tiktoken's exact
count with the same encoding and message framing: within 1 %, and equal on short texts.

The bot process does not import litellm (it runs in the provider worker); the estimates that
bill a cancelled or broken attempt must still match what litellm would have counted. Checked
on real multilingual conversations (oasst2: Chinese, Japanese, Korean, Russian, Arabic, Thai,
...) from ../shared/testdata.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import litellm

from models import tokens
from tests.e2e_bot import wait_until
from tests.memory_sessions import oasst_multilingual


def test_counts_match_litellm_on_real_multilingual_messages() -> None:
    tokens.load()
    messages = [{"role": m.role, "content": m.content} for m in oasst_multilingual(60)]
    assert len({m["content"][:1] for m in messages}) > 10  # many scripts, not one
    exact = 0
    for i in range(0, len(messages), 6):
        window = messages[i : i + 6]
        ours = tokens.count_messages(window)
        theirs = litellm.token_counter(model="gpt-4o", messages=window)
        assert abs(ours - theirs) <= theirs / 100
        exact += ours == theirs
        for message in window:
            if len(message["content"]) < 500:
                text = message["content"]
                assert tokens.count_text(text) == litellm.token_counter(model="gpt-4o", text=text)
    assert exact >= 5  # most windows count the same to the token


async def test_before_the_encoding_is_loaded_a_text_counts_a_token_per_4_bytes(
    monkeypatch,
) -> None:
    monkeypatch.setattr(tokens, "_encoding", None)
    monkeypatch.setattr(tokens, "_load_started", False)
    text = "東京の天気はどうですか"  # 11 characters, 33 bytes of UTF-8
    assert tokens.count_text(text) == 9
    # ... and the first such count started loading it, off the caller's thread.
    await wait_until(lambda: tokens._encoding is not None, "the encoding to load", 10.0)
    assert tokens.count_text(text) == litellm.token_counter(model="gpt-4o", text=text)


def test_the_budget_estimate_never_undercounts_real_multilingual_messages() -> None:
    """`estimate_tokens` fits prompts, documents and chunks into budgets: it must be at least
    the real tokenizer's count, in every script (a token per 4 bytes undercounts 12 of these
    60 messages, per 4 characters 36)."""
    tokens.load()
    texts = [m.content for m in oasst_multilingual(60)]
    assert len({text[:1] for text in texts}) > 10  # many scripts, not one
    for text in texts:
        assert tokens.estimate_tokens(text) >= tokens.count_text(text), text[:40]


def test_the_pacing_estimate_counts_a_quarter_token_per_character_of_text() -> None:
    messages = [
        {"role": "system", "content": "x" * 40},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "東京の天気は"},  # 6 characters, whatever their bytes
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
    ]
    assert tokens.estimate_prompt_tokens(messages) == (40 + 6) / 4
