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

import random

import litellm  # tests/conftest.py has set its offline flags (primitives/litellm_env.py)
import pytest

from models import tokens
from tests.support.e2e_bot import wait_until
from tests.support.memory_sessions import (
    claude_code_session,
    locomo_conversations,
    oasst_multilingual,
)
from tests.support.testdata_texts import texts_by_folder


@pytest.fixture(autouse=True)
def litellm_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare with litellm's own count. The provider worker's module
    (models/worker/child.py) turns litellm's counter off when it is imported, and a test that
    imports every module (tests/test_exception_bases.py) imports it into this process too:
    litellm.token_counter then answers 0 for everything."""
    monkeypatch.setattr(litellm, "disable_token_counter", False)


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


async def test_before_the_encoding_is_loaded_a_text_counts_the_estimate(monkeypatch) -> None:
    """A bill counted before the encoding is ready errs high, never low."""
    monkeypatch.setattr(tokens, "_encoding", None)
    monkeypatch.setattr(tokens, "_load_started", False)
    text = "東京の天気はどうですか"
    assert tokens.count_text(text) == tokens.estimate_tokens(text) == 17
    # ... and the first such count started loading it, off the caller's thread.
    await wait_until(lambda: tokens._encoding is not None, "the encoding to load", 60.0)
    assert tokens.count_text(text) == litellm.token_counter(model="gpt-4o", text=text) == 8


def test_the_estimate_is_at_least_the_real_count_of_every_text_in_testdata() -> None:
    """The estimate fits prompts, documents and chunks into budgets and paces requests: it must
    never undercount. Every text of ../shared/testdata: the naughty strings (zalgo, format and
    control characters, RTL, emoji), multilingual conversations, LoCoMo, markdown stress, a
    real agent transcript, Telegram exports and updates, the emoji list; whole files too."""
    tokens.load()
    folders = texts_by_folder()
    assert len(folders) >= 8 and all(len(texts) > 300 for texts in folders.values())
    under = []
    for folder, texts in folders.items():
        for text in texts:
            real = tokens.count_text(text)
            if tokens.estimate_tokens(text) < real:
                under.append((folder, real, tokens.estimate_tokens(text), text[:60]))
    assert under == []


def test_the_bound_holds_whatever_the_order_of_a_texts_non_ascii_characters() -> None:
    """Real characters in orders no word has (merges broken, every character its own token at
    worst): the bound rests on how many characters of each script a text has, not on the
    words of the texts it was checked on. Every non-ASCII text of ../shared/testdata (but the
    naughty strings, adversarial already) up to 4,000 characters, its ASCII left in place."""
    tokens.load()
    shuffle = random.Random(5).shuffle
    checked = 0
    under = []
    for folder, texts in texts_by_folder().items():
        if folder == "blns":
            continue
        for text in texts:
            if text.isascii() or len(text) > 4000:
                continue
            chars = list(text)
            where = [i for i, char in enumerate(chars) if ord(char) > 127]
            moved = [chars[i] for i in where]
            shuffle(moved)
            for i, char in zip(where, moved, strict=True):
                chars[i] = char
            shuffled = "".join(chars)
            checked += 1
            if tokens.estimate_tokens(shuffled) < tokens.count_text(shuffled):
                under.append((folder, shuffled[:60]))
    assert checked > 5000
    assert under == []


def test_the_estimate_overcounts_english_less_than_twice() -> None:
    """A bound is easy to be (a token per byte is one); a budget filled by it must still hold
    what it could. English (LoCoMo's turns and summaries): at most twice the real count on
    average, and at most twice in all."""
    tokens.load()
    texts = [
        text
        for _, sessions, _ in locomo_conversations()
        for session in sessions
        for text in [*session.turns, session.summary]
        if text
    ]
    assert len(texts) > 2000
    ratios = [tokens.estimate_tokens(t) / tokens.count_text(t) for t in texts]
    assert min(ratios) >= 1.0
    assert sum(ratios) / len(ratios) <= 2.0
    whole = "\n".join(texts)
    assert 1.0 <= tokens.estimate_tokens(whole) / tokens.count_text(whole) <= 2.0


def test_the_messages_estimate_frames_texts_as_the_count_does_and_bounds_it() -> None:
    """What a request costs against a tokens-per-minute window: the same bound, over the
    messages as OpenAI frames them; an image part at what the costliest provider counts for one
    (Anthropic, ~1,600), where the exact count takes litellm's 765 for gpt-4o."""
    tokens.load()
    windows = [m for m in oasst_multilingual(60)] + claude_code_session(120)
    messages = [{"role": m.role, "content": m.content} for m in windows]
    for i in range(0, len(messages), 6):
        window = messages[i : i + 6]
        assert tokens.estimate_messages(window) >= tokens.count_messages(window)
    text_part = {"type": "text", "text": "東京の天気は"}
    image_part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    calls = [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}]
    without = [{"role": "user", "content": [text_part]}, *calls]
    with_image = [{"role": "user", "content": [text_part, image_part]}, *calls]
    assert tokens.count_messages(with_image) - tokens.count_messages(without) == 765
    assert tokens.estimate_messages(with_image) - tokens.estimate_messages(without) == 1600
    assert tokens.estimate_messages(with_image) >= tokens.count_messages(with_image)
