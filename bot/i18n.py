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
        # usage, budgets, limits, /stats, shutdown
        "cmd_usage": "Your tokens and cost",
        "cmd_stats": "Bot statistics (admins)",
        "usage_title_self": "Your usage (days and months in UTC):",
        "usage_title_user": "Usage of user {user_id} (UTC):",
        "usage_title_bot": "Usage of the whole bot (UTC):",
        "usage_none": "No usage yet.",
        "usage_today": "Today: {tokens} tokens, {cost}",
        "usage_month": "This month: {tokens} tokens, {cost}",
        "usage_line": "  • {model} ({purpose}): {tokens} tokens, {cost}, requests: {calls}",
        "usage_purpose_chat": "chat",
        "usage_purpose_consolidation": "memory",
        "usage_memory_note": (
            "Included this month: {tokens} tokens, {cost} of background memory work for you."
        ),
        "usage_everyone_title": "Everyone this month (UTC):",
        "usage_everyone_line": (
            "  • {user}: today {today_cost}, month {month_cost} "
            "({month_tokens} tokens, memory {memory_cost})"
        ),
        "usage_bot_total": (
            "Whole bot: today {today_tokens} tokens, {today_cost}; "
            "this month {month_tokens} tokens, {month_cost}."
        ),
        "usage_admin_only": "Only admins can see other users' usage.",
        "usage_bad_args": "Use /usage, or /usage USER_ID to see one user (admins).",
        "budget_user_daily": (
            "You have reached your daily budget of {limit}, so I did not send this message to "
            "a model. I can answer again tomorrow (UTC). Your memory is kept."
        ),
        "budget_user_monthly": (
            "You have reached your monthly budget of {limit}, so I did not send this message "
            "to a model. I can answer again next month (UTC). Your memory is kept."
        ),
        "budget_bot_daily": (
            "This bot has reached its daily budget of {limit}, so I did not send this message "
            "to a model. Please try again tomorrow (UTC)."
        ),
        "budget_bot_monthly": (
            "This bot has reached its monthly budget of {limit}, so I did not send this "
            "message to a model. Please try again next month (UTC)."
        ),
        "rate_limited": (
            "You are sending messages faster than this bot allows. Please wait {seconds} s; "
            "messages sent meanwhile are not answered."
        ),
        "input_too_long": (
            "Your message is too long ({length} characters; the limit is {limit}), so I did "
            "not read it. Please shorten it."
        ),
        "admin_only": "This command is for the bot's admins.",
        "shutting_down": "The bot is restarting; please send your message again in a minute.",
        "reply_interrupted": "(interrupted: the bot restarted; please ask again)",
        "stats_title": "mnemobot statistics",
        "stats_queue": "Memory queue: {pending} pending, {running} running, {done} done",
        "stats_oldest": "Oldest waiting job: since {at} UTC ({ago} ago)",
        "stats_failed_jobs": "Failed jobs waiting for a retry: {count}",
        "stats_mean_attempts": "Models tried per saved job: {mean} on average, at most {max}",
        "stats_outcomes": "Consolidation outcomes per model, last {days} days:",
        "stats_none": "  (none yet)",
        "stats_gateways": "Gateways:",
        "stats_gateway": (
            "  • {gateway}: breaker {breaker}, failures in a row {failures}, "
            "keys available {keys_ok}/{keys}"
        ),
        "stats_gateway_off": "  • {gateway}: no key configured",
        "stats_model_breaker": "  • model {model}: breaker {breaker} ({seconds} s)",
        "stats_spend_today": (
            "Spend today (UTC): {tokens} tokens, {cost} (chat {chat_cost}, memory {memory_cost})"
        ),
        "stats_turns_in_flight": "Replies being written now: {count}",
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
