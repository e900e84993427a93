"""Every token count we make ourselves, without importing litellm into the bot.

Three questions, three answers, one module:
- `count_text` / `count_messages`: what the provider will bill (usage we record when it
  reported none): gpt-4o's tokenizer, exactly as litellm counts.
- `estimate_tokens`: an upper bound that never loads the tokenizer, for fitting text into a
  budget (the prompt, a document, a consolidation chunk): overcounting is safe there.
- `estimate_prompt_tokens`: a quick guess of a request's size that never loads the tokenizer,
  for pacing it against a provider's tokens-per-minute window on every call.


litellm lives in the provider worker (models/worker.py); importing it here as well would cost
the bot about 150 MB of memory for one function. `litellm.token_counter(model="gpt-4o", ...)`
is tiktoken's o200k_base plus OpenAI's per-message framing (3 tokens a message, 1 for a name,
3 to prime the reply, long texts encoded in pieces); we count the same way, exactly, with the
same encoding files, the ones litellm bundles
(found without importing it), so nothing is ever downloaded. tiktoken is pinned in
requirements.lock as litellm's own dependency. The encoding itself is loaded only once an
estimate is asked for (`count_text`).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

# An image part, as OpenAI counts a 1024×1024 picture in high detail (85 + 4 tiles × 170).
IMAGE_PART_TOKENS = 765


_encoding: Any = None
_loading = threading.Lock()
_load_started = False


def _load() -> None:
    global _encoding
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils"
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled / "tokenizers")
    import tiktoken

    _encoding = tiktoken.get_encoding("o200k_base")


def load() -> None:
    """Load the encoding now, in this thread (tests; `count_text` loads it in the background)."""
    if _encoding is None:
        _load()


def _start_loading() -> None:
    global _load_started
    with _loading:
        if _load_started:
            return
        _load_started = True
    threading.Thread(target=_load, name="tokenizer-load", daemon=True).start()


def count_text(text: str) -> int:
    """o200k_base tokens of `text`. The encoding takes ~80 MB and ~0.25 s of CPU to load, for
    estimates a bot may never need (providers report usage): it is loaded the first time one is
    asked for, in the background, and until then a text counts a token per 4 bytes of UTF-8
    (a CJK character is 3 bytes and usually one token or more, so this undercounts less than
    characters / 4)."""
    if not text:
        return 0
    encoding = _encoding
    if encoding is None:
        _start_loading()
        return -(-len(text.encode("utf-8", "surrogatepass")) // 4)
    return len(encoding.encode(text, disallowed_special=()))


def count_messages(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of `messages` as OpenAI frames chat messages."""
    total = 3
    for message in messages:
        total += 3 + count_text(str(message.get("role") or ""))
        if message.get("name"):
            total += 1 + count_text(str(message["name"]))
        content = message.get("content")
        if isinstance(content, str):
            total += count_text(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") in ("image_url", "image"):
                    total += IMAGE_PART_TOKENS
                else:
                    total += count_text(str(part.get("text") or ""))
        for call in message.get("tool_calls") or []:
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            total += count_text(str(function.get("name") or ""))
            total += count_text(str(function.get("arguments") or ""))
    return total


def estimate_tokens(text: str) -> int:
    """A deliberately pessimistic token count: 2.5 UTF-8 bytes per token.

    English runs ~4 characters per token and CJK ~1 token per character (3 bytes); dividing the
    byte length by 2.5 overestimates both, so a chunk that fits here fits the real tokenizer.
    """
    return len(text.encode("utf-8")) * 2 // 5 + 1


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> float:
    """Roughly what a request costs against a token limit: ~4 characters per token of its
    texts. Cheap enough for every call on the chat loop; the provider's headers correct it."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            parts = [part for part in content if isinstance(part, dict)]
            chars += sum(len(str(part.get("text", ""))) for part in parts)
    return chars / 4
