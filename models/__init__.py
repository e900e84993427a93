"""Model catalog, gateways and the transport layer.

litellm reads these flags at import time: without them importing it does a network GET for the
cost map, and Groq streams without usage try to download a tokenizer for 20+ s when offline.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
