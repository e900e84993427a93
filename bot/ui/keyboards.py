"""The /model inline keyboard and the short callback keys it carries.

callback_data is at most 64 bytes and comes back from the client unverified, so it carries only
a short key; the handler re-resolves the key against the models available *now* on every press.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from bot.ui.i18n import has_text, t
from models.catalog import ModelEntry

MODEL_PREFIX = "m:"
HASHED_PREFIX = "mh:"
CALLBACK_LIMIT = 64
CURRENT_MARK = "✅ "


# The largest row id SQLite stores (a signed 64-bit integer): a longer number in a button was
# written by no button of ours, and binding it would raise OverflowError in the handler.
MAX_ROW_ID = 2**63 - 1


def callback_row_id(data: str | None, prefix: str) -> int | None:
    """The row id a button of ours carries after `prefix` (`rm:x:17`), or None for data no
    button of ours holds: other digits than ASCII ones (`mr:²` passed isdigit() and broke
    int()), a number past SQLite's range, a sign, a space, nothing at all."""
    if data is None or not data.startswith(prefix):
        return None
    raw = data[len(prefix) :]
    if not raw or not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        return None
    number = int(raw)
    return number if number <= MAX_ROW_ID else None


def model_callback_data(model_id: str) -> str:
    """`m:<id>` when it fits in 64 bytes, else `mh:<12 hex of sha256(id)>`."""
    direct = MODEL_PREFIX + model_id
    if len(direct.encode("utf-8")) <= CALLBACK_LIMIT:
        return direct
    return HASHED_PREFIX + hashlib.sha256(model_id.encode("utf-8")).hexdigest()[:12]


def is_model_callback(data: object) -> bool:
    """PTB hands a pattern the callback data as it is (a string from Telegram, or None)."""
    return isinstance(data, str) and data.startswith((MODEL_PREFIX, HASHED_PREFIX))


def resolve_model_callback(data: str, available: Sequence[ModelEntry]) -> ModelEntry | None:
    """The available model a callback names, or None (hidden, unknown, stale or crafted)."""
    for entry in available:
        if model_callback_data(entry.id) == data:
            return entry
    return None


def tier_label(tier: str, lang: str | None) -> str:
    key = f"tier_{tier}"
    return t(key, lang) if has_text(key, "en") else tier


def model_keyboard(
    available: Sequence[ModelEntry], current: str | None, lang: str | None
) -> InlineKeyboardMarkup:
    """One button per available model, labelled with its tier, the current one marked."""
    rows = []
    for entry in available:
        mark = CURRENT_MARK if entry.id == current else ""
        text = f"{mark}{entry.label} · {tier_label(entry.tier, lang)}"
        rows.append([InlineKeyboardButton(text, callback_data=model_callback_data(entry.id))])
    return InlineKeyboardMarkup(rows)
