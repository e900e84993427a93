"""What the transport asks of the provider workers, in one place.

models/transport.py depends on this small interface, not on the process pool: the bot runs
`WorkerPool` (models/worker/pool.py, litellm in child processes), and the transport's unit
tests swap in tests/fakes/workers.py, which runs the worker's own code on the test's loop with
no process, as httpx's transports are swapped in tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from models.worker.ipc import ClientSpec
from models.worker.wire import SendGate, WireRecord


class ProviderWorkers(Protocol):
    async def call(
        self, name: str, kwargs: dict[str, Any], wire: WireRecord, gate: SendGate | None
    ) -> Any:
        """litellm's `acompletion` ("completion") or `atranscription` ("transcription") with
        `kwargs` (`client` a ClientSpec). `wire` receives the HTTP status, headers and error
        body; `gate` (the pacer's slot) lets the request leave and hears when it left. A
        provider's failure is raised as ProviderCallError; ours as a LocalError (WorkerLostError,
        CallNotEncodedError); a stream comes back as an async iterator of chunks with `aclose`."""
        ...

    async def wait_ready(self) -> None:
        """Until calls can be taken (a worker starting is our delay, not the provider's)."""
        ...

    async def warm_up(self, specs: Sequence[ClientSpec], model_names: Sequence[str]) -> None:
        """Build these HTTP clients and load what these models' first calls load, now."""
        ...

    def new_pool(self) -> int:
        """A `ClientSpec.pool` id no other transport of these workers has: each transport's
        HTTP clients are kept, and closed, apart from the others'."""
        ...

    async def close_pool(self, pool: int) -> None:
        """Close the HTTP clients of one transport (`ClientSpec.pool`)."""
        ...

    def status(self) -> list[dict[str, Any]]:
        """Each worker, for /stats and /healthz."""
        ...
