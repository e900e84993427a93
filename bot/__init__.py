"""The Telegram surface: handlers, turns, the app's wiring, its CLI. The only package that knows
Telegram."""

from primitives import MnemobotError


class BotError(MnemobotError):
    """Base of the bot layer's own errors; each says in one line what the operator must fix.

    BotError
    ├── ConfigError        bot/config.py      a setting is missing or invalid (start-up stops)
    ├── BackupError        bot/cli/backup.py  `python -m bot backup` could not make the copy
    └── MessageSavedError  bot/turns/turn.py  a chat turn broke after storing the user's
                                              message (its cause chained); the error reply
                                              says the message is kept
    """
