"""Model catalog, gateways and the transport layer.

Importing it sets litellm's environment flags (primitives/litellm_env.py) before anything here
can import litellm: the provider worker imports this package first.
"""

from primitives import MnemobotError
from primitives.litellm_env import keep_litellm_offline

keep_litellm_offline()


class ModelsError(MnemobotError):
    """Base of the models layer's errors.

    ModelsError
    ├── CatalogError           models/catalog.py     the catalog (built-in or a user file) is
    │                                                 inconsistent
    ├── TransportError         models/types.py       every model tried failed (`attempts` says
    │                                                 how)
    ├── ProviderCallError      models/worker/ipc.py  a call failed in the worker, classified there
    ├── FrameError             models/worker/ipc.py  a frame that cannot be a message
    └── LocalError             models/worker/ipc.py  failed on our side of the wire, never the
        │                                             provider's doing
        ├── WorkerLostError                           the worker stopped answering or died
        └── CallNotEncodedError                       the call could not be pickled
    """
