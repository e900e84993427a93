"""litellm's environment flags, in one place.

litellm reads them at import time: without them importing it does a network GET for the cost
map, and Groq streams without usage try to download a tokenizer for 20+ s when offline. They
must be in the environment before litellm is first imported, in any process (the provider
worker, a benchmark, a test that starts a bot), so every such place uses these.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

LITELLM_FLAGS: dict[str, str] = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "true",
}


def keep_litellm_offline(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set the flags in `environ` where it does not set them already (an operator's choice
    stands)."""
    for name, value in LITELLM_FLAGS.items():
        environ.setdefault(name, value)
