"""Token counts for our own usage estimates, without importing litellm into the bot.

litellm lives in the provider worker (models/worker.py); importing it here as well would cost
the bot about 150 MB of memory for one function. `litellm.token_counter(model="gpt-4o", ...)`
is tiktoken's o200k_base plus OpenAI's per-message framing (3 tokens a message, 1 for a name,
3 to prime the reply); we do the same with the same encoding files, the ones litellm bundles
(found without importing it), so nothing is ever downloaded. tiktoken is pinned in
requirements.lock as litellm's own dependency.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path
from typing import Any

# An image part, as OpenAI counts a 1024×1024 picture in high detail (85 + 4 tiles × 170).
IMAGE_PART_TOKENS = 765


@cache
def _encoding() -> Any:
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils"
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled / "tokenizers")
    import tiktoken

    return tiktoken.get_encoding("o200k_base")


def count_text(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=())) if text else 0


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
