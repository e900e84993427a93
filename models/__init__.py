"""Model catalog, gateways and the transport layer.

litellm reads these flags at import time: without them importing it does a network GET for the
cost map, and Groq streams without usage try to download a tokenizer for 20+ s when offline.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


class ModelsError(Exception):
    """Base of the models layer's errors.

    ModelsError
    ├── CatalogError         models/catalog.py     the catalog (built-in or a user file) is
    │                                               inconsistent
    ├── TransportError       models/types.py       every model tried failed (`attempts` says how)
    ├── ProviderFailure      models/worker/ipc.py  a call failed in the worker, classified there
    ├── FrameError           models/worker/ipc.py  a frame that cannot be a message
    └── LocalFailure         models/worker/ipc.py  failed on our side of the wire, never the
        │                                           provider's doing
        ├── WorkerLost                              the worker stopped answering or died
        └── CallNotEncoded                          the call could not be pickled
    """
