"""The few building blocks every layer shares, below `models` in the import order and free of
any other package of ours: stopping a task (`tasks`), waiting for an event or a timeout
(`waits`), a back-off schedule (`backoff`), the clock type and its defaults (`clock`), frames
for text that is data, not instructions (`framing`), litellm's environment flags
(`litellm_env`), the command line of a child interpreter of this tree (`interpreter`), and the
root of our exceptions (`MnemobotError`, here).

One of each, so a new supervisor, retry or child process finds the helper instead of writing a
sixth copy that drifts from the others.
"""


class MnemobotError(Exception):
    """Root of every exception the project defines: each layer's base derives from it, so a
    caller that must tell our failures from a library's catches one class.

    MnemobotError
    ├── BotError          bot/__init__.py
    ├── WebError          web/__init__.py
    ├── McpClientError    mcp_client/__init__.py
    ├── RemindersError    reminders/__init__.py
    ├── MediaError        media/__init__.py
    ├── MemoryLayerError  memory/__init__.py
    └── ModelsError       models/__init__.py

    Every class under it ends in `Error` (ruff's N818 checks the names).
    """
