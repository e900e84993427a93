"""Storage: the SQLite database, sessions and messages, long-term memory, consolidation, the
archive and recall."""


class MemoryLayerError(Exception):
    """Base of the memory layer's errors (not named MemoryError: that is Python's own).

    MemoryLayerError
    ├── MigrationError       memory/db.py                          migrations or schema version
    │                                                               inconsistent (start-up stops)
    ├── SessionClosedError   memory/store.py                       a write to a session already
    │                                                               handed to consolidation
    ├── InvalidCall          memory/consolidation/consolidation.py a model's answer is not a
    │                                                               usable save_memory call
    └── ConsolidationFailed  memory/consolidation/consolidation.py every model of the chain
                                                                    failed; nothing is deleted
    """
