"""Logging: JSON lines with our fields, and secrets scrubbed from every source of log text."""

from __future__ import annotations

import io
import json
import logging

import structlog

from models.logging_setup import REDACTED, SecretRedactor, configure_logging

TOKEN = "424242:AAH-very-secret-token"
KEY = "sk-proj-abcdef123456"


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_structlog_events_are_json_with_their_fields() -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", fmt="json", stream=stream, secrets=[TOKEN, KEY])
    structlog.get_logger("bot.turns").info("turn_finished", chat_id=5, latency_ms=12)
    [event] = _lines(stream)
    assert event["event"] == "turn_finished"
    assert (event["chat_id"], event["latency_ms"], event["level"]) == (5, 12, "info")
    assert "timestamp" in event


def test_secrets_are_scrubbed_from_stdlib_records_and_tracebacks() -> None:
    stream = io.StringIO()
    configure_logging(level="DEBUG", fmt="json", stream=stream, secrets=[TOKEN, KEY])
    # PTB logs URLs with the token; litellm may echo a key in an error; tracebacks too.
    logging.getLogger("telegram.ext.Updater").warning(
        "Error fetching https://api.telegram.org/bot%s/getUpdates", TOKEN
    )
    logging.getLogger("openai").error("Incorrect API key provided: %s", KEY)
    try:
        raise RuntimeError(f"401 for key {KEY} and bot{TOKEN}")
    except RuntimeError:
        structlog.get_logger("bot.app").exception("handler_error", key_hint=KEY[:20])
    text = stream.getvalue()
    assert TOKEN not in text and KEY not in text
    assert text.count(REDACTED) >= 4
    assert "getUpdates" in text and "Traceback" in text


def test_url_encoded_token_is_scrubbed_too() -> None:
    redactor = SecretRedactor([TOKEN])
    assert TOKEN.replace(":", "%3A") not in redactor.scrub(f"GET /bot{TOKEN.replace(':', '%3A')}")


def test_httpx_request_lines_are_silenced_even_at_debug() -> None:
    stream = io.StringIO()
    configure_logging(level="DEBUG", fmt="json", stream=stream, secrets=[TOKEN])
    logging.getLogger("httpx").info('HTTP Request: POST https://x/bot%s/getMe "200 OK"', TOKEN)
    assert stream.getvalue() == ""
    logging.getLogger("httpx").warning("connection pool is full")
    assert "connection pool is full" in stream.getvalue()


def test_console_format_for_humans() -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", fmt="console", stream=stream, secrets=[KEY])
    structlog.get_logger("x").info("bot_started", key=KEY)
    line = stream.getvalue()
    assert "bot_started" in line and not line.startswith("{") and KEY not in line


def test_short_or_empty_secrets_do_not_mangle_text() -> None:
    redactor = SecretRedactor(["", "abc"])
    assert redactor.scrub("abcdef") == "abcdef"
    nested = SecretRedactor([KEY]).scrub({"a": [KEY, ("x", KEY)], "n": 3})
    assert nested == {"a": [REDACTED, ("x", REDACTED)], "n": 3}
