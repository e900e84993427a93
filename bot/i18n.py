"""The bot's own words, per Telegram language, with English as the fallback.

Keys are stable identifiers; handlers call `t(key, lang, **values)`. Add English first; other
languages may lag and then fall back to English per key.
"""

from __future__ import annotations

SUPPORTED_LANGUAGES = ("en", "pt", "id", "tr", "ja")

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "start": (
            "Hi {name}! I am mnemobot, a chat assistant that remembers what matters "
            "across sessions.\n\nJust write to me. Commands:\n{commands}"
        ),
        "help": (
            "Write a message and I answer with this chat's model, streaming the reply as it "
            "is written.\n\n{commands}\n\nIn groups I answer when mentioned or replied to."
        ),
        "cmd_start": "Introduce the bot",
        "cmd_help": "How to use the bot",
        "cmd_model": "Choose the model for this chat",
        "cmd_new": "Start a new session",
        "cmd_cancel": "Stop the reply being written",
        "new_session": "New session started.",
        "not_allowed": (
            "Sorry, this is a private bot. Your Telegram user id is {user_id}; "
            "ask the owner to add it to ALLOWED_USER_IDS."
        ),
        "text_only": "Sorry, I can only read text messages for now. Please write your message.",
        "empty_message": "Please write something after mentioning me.",
        "model_menu": "Current model: {label}. Choose a model for this chat:",
        "model_set": "Model for this chat: {label}.",
        "model_unknown": "Unknown model {model_id!r}. Use /model to see the models you can pick.",
        "model_refused": "That model is not available.",
        "model_none": "No model is available: the owner has not configured any provider key.",
        "tier_frontier": "frontier",
        "tier_balanced": "balanced",
        "tier_fast": "fast",
        "tier_custom": "custom",
        "nothing_to_cancel": "Nothing to cancel.",
        "cancelled": "Stopped.",
        "reply_cancelled": "(stopped)",
        "answered_by": "Answered by {label} (fallback for {requested}).",
        "model_restarted": "{from_label} stopped answering; continuing with {to_label}.",
        "all_models_failed": (
            "Sorry, no model could answer right now ({reason}). Your message is saved; "
            "please try again in a minute."
        ),
        "reason_rate_limit": "rate limited",
        "reason_quota": "provider quota exhausted",
        "reason_auth": "provider key rejected",
        "reason_unavailable": "provider unavailable",
        "reason_timeout": "timed out",
        "reason_empty": "empty answer",
        "reason_bad_request": "request refused",
        "reason_other": "provider error",
        "internal_error": "Sorry, something went wrong on my side. Your message is saved.",
        "cmd_memory": "Show what I remember about you",
        "cmd_forget": "Clear my long-term memory (asks first)",
        "cmd_recall": "Search past conversations: /recall QUERY",
        "memory_empty": "I have no long-term memory for this chat yet.",
        "memory_header": "What I remember (long-term memory):",
        "memory_pending": "{count} earlier session(s) are still being saved to memory.",
        "forget_confirm": (
            "Clear the long-term memory and the searchable history of this chat? "
            "This cannot be undone."
        ),
        "forget_yes": "Yes, forget",
        "forget_no": "Keep it",
        "forget_done": "Done: long-term memory and history cleared.",
        "forget_kept": "Nothing was cleared.",
        "recall_usage": "Write what to look for, e.g. /recall postgres migration",
        "recall_too_long": "That query is too long; use at most {limit} characters.",
        "recall_none": "Nothing in the history matches {query!r}.",
        "recall_header": "Best matches for {query!r}:",
    },
}


def normalise_language(code: str | None) -> str:
    """Telegram sends IETF tags such as 'pt-br'; keep the primary subtag if we speak it."""
    if not code:
        return "en"
    primary = code.split("-")[0].split("_")[0].lower()
    return primary if primary in SUPPORTED_LANGUAGES else "en"


def t(key: str, lang: str | None = None, **values: object) -> str:
    """The message `key` in `lang` (falling back to English), formatted with `values`."""
    language = normalise_language(lang)
    template = MESSAGES.get(language, {}).get(key) or MESSAGES["en"][key]
    return template.format(**values) if values else template
