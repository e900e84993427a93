"""Structured logging: structlog for our events, the same pipeline for stdlib loggers.

Here in models/ (the lowest layer) so the bot and its provider worker processes
(models/worker/child.py) log through one scrubbing pipeline.

Secrets (the bot token, every provider key) are scrubbed from every event, including records
that PTB, httpx or litellm emit through `logging`, because the bot token is part of every Bot
API URL and a leaked key costs money. httpx request logs are silenced for the same reason.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any

import structlog

REDACTED = "[REDACTED]"

# Libraries whose INFO logs are noise or carry secrets (httpx logs every URL, token included).
_QUIET_LOGGERS = {
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
    "LiteLLM": logging.WARNING,
    "LiteLLM Router": logging.WARNING,
    "LiteLLM Proxy": logging.WARNING,
    "telegram.ext.Updater": logging.INFO,
    "aiosqlite": logging.WARNING,
}


class SecretRedactor:
    """A structlog processor replacing every known secret in every string of an event.

    Secrets shorter than 6 characters are ignored: redacting "abc" everywhere would mangle
    ordinary text while protecting nothing real.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        for secret in secrets:
            if secret and len(secret) >= 6 and secret not in self._secrets:
                self._secrets.append(secret)
                # The bot token also appears URL-encoded (":" → "%3A") in some URLs.
                encoded = secret.replace(":", "%3A")
                if encoded != secret:
                    self._secrets.append(encoded)
        # Longest first so a secret containing another is replaced whole.
        self._secrets.sort(key=len, reverse=True)

    def scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            for secret in self._secrets:
                if secret in value:
                    value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.scrub(v) for v in value)
        if isinstance(value, BaseException):
            return self.scrub(repr(value))
        return value

    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in list(event_dict.items()):
            event_dict[key] = self.scrub(value)
        return event_dict


_redactor = SecretRedactor()
_configured = False  # set once configure_logging has routed everything through the redactor


def redactor() -> SecretRedactor:
    """The process-wide redactor; the app registers every secret it loads here."""
    return _redactor


def _render_exceptions_then_scrub(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    # Tracebacks are rendered to text first so that secrets inside them get scrubbed too.
    event_dict = structlog.processors.format_exc_info(logger, method_name, event_dict)
    return _redactor(logger, method_name, event_dict)


def configure_logging(
    *,
    level: str = "INFO",
    fmt: str | None = None,
    secrets: Iterable[str] = (),
    stream: Any = None,
) -> None:
    """Route structlog and stdlib logging through one redacting pipeline.

    `fmt` is "json" or "console"; None picks console on a TTY and JSON otherwise (a service
    manager or container collects JSON lines).
    """
    global _configured
    stream = stream if stream is not None else sys.stderr
    _redactor.add(secrets)
    _configured = True
    if fmt is None:
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    renderer: Any = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            _render_exceptions_then_scrub,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_mnemobot", False):
            root.removeHandler(old)
    handler._mnemobot = True  # type: ignore[attr-defined]  # our mark, found by the loop above
    root.addHandler(handler)
    root.setLevel(level)
    for name, quiet_level in _QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(max(quiet_level, logging.getLevelName(level)))

    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


# --- uncaught exceptions ------------------------------------------------------------------------
#
# A traceback that escapes to stderr bypasses the pipeline above: PTB's InvalidToken names the
# token ("The token `123:ABC` was rejected by the server."), and journald or Docker keep stderr.
# So every way an exception can end up on stderr without us is routed through the redactor:
# the main thread (sys.excepthook), other threads (threading.excepthook), and exceptions the
# event loop only reports (its exception handler).


def scrubbed_traceback(exc: BaseException) -> str:
    """The traceback text of `exc` with every registered secret replaced."""
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return str(_redactor.scrub(text))


def scrubbed_line(exc: BaseException) -> str:
    """One line naming the exception, secrets replaced (for the self-hoster's console)."""
    return str(_redactor.scrub(f"{type(exc).__name__}: {exc}"))


def log_crash(event: str, exc: BaseException | None, **fields: Any) -> None:
    """Log an exception nobody handled. Before `configure_logging` ran, structlog's default
    pipeline has no redactor, so the scrubbed traceback is written to stderr directly."""
    if _configured:
        try:
            structlog.get_logger("bot.crash").critical(event, exc_info=exc, **fields)
            return
        except Exception:  # logging itself broke: still never write the raw text
            pass
    text = scrubbed_traceback(exc) if exc is not None else ""
    sys.stderr.write(f"{event} {_redactor.scrub(str(fields)) if fields else ''}\n{text}")


_log_uncaught = log_crash


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    _log_uncaught("uncaught_exception", exc.with_traceback(tb))


def _thread_excepthook(args: Any) -> None:
    if args.exc_type is SystemExit:
        return
    exc = args.exc_value if args.exc_value is not None else args.exc_type()
    thread = getattr(args.thread, "name", None)
    _log_uncaught("uncaught_thread_exception", exc, thread=thread)


def loop_exception_handler(loop: Any, context: dict[str, Any]) -> None:
    """asyncio's handler for exceptions nobody awaited (e.g. a failed background task)."""
    exc = context.get("exception")
    message = context.get("message", "")
    _log_uncaught("event_loop_exception", exc, detail=str(message))


def install_exception_hooks() -> None:
    """Route uncaught exceptions of every thread through the scrubbing pipeline. Idempotent;
    the event loop's handler is installed by whoever runs the loop (`loop_exception_handler`)."""
    import threading

    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
