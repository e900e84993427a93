"""Storage: the SQLite database, sessions and messages, long-term memory, consolidation, the
archive and recall."""

from primitives import MnemobotError


class MemoryLayerError(MnemobotError):
    """Base of the memory layer's errors (not named MemoryError: that is Python's own).

    MemoryLayerError
    ├── MigrationError       memory/db.py                          migrations or schema version
    │                                                               inconsistent (start-up stops)
    ├── SessionClosedError   memory/store.py                       a write to a session already
    │                                                               handed to consolidation
    ├── InvalidCallError     memory/consolidation/consolidation.py a model's answer is not a
    │                                                               usable save_memory call
    └── ConsolidationError   memory/consolidation/consolidation.py every model of the chain
                                                                    failed; nothing is deleted
    """
