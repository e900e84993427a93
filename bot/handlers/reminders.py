"""Reminders in the Telegram surface: /timezone, /reminders with its ❌ buttons, and the delivery
of fired reminders through the Bot API.

The scheduler (reminders/scheduler.py) is built with `TelegramDelivery` and started in post_init
by bot/app.py; it first resends what a crash left unconfirmed, and the book wakes it whenever
the model sets or cancels a reminder. Delivery uses the application's Bot, so every ⏰ message
goes through the same rate limiter as replies (AIORateLimiter: Telegram's ~30 messages/s
overall, 20/min per group) and keeps Telegram's one message per second per chat; a RetryAfter is
waited out, never retried into, and a network error is retried with back-off by the scheduler
only when the send certainly never reached Telegram: a 502, a timeout or a cut connection may
come after Telegram delivered it, so such a send is not repeated. A chat that blocked the bot or
no longer exists stops its reminders instead of being retried forever. A group that became a
supergroup takes its reminders along (bot/handlers/migration.py), and a reminder set in a forum
topic goes back to that topic, or to the chat once the topic is gone. A reminder costs no model
call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import httpx
import structlog
from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    Update,
)
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError
from telegram.ext import CallbackQueryHandler, CommandHandler, filters

from bot.config import Settings
from bot.handlers.access import say, user_allowed, user_language
from bot.handlers.chat_admins import is_group
from bot.incoming import clean_text
from bot.services import App, Context, Services
from bot.ui.flood import penalty_seconds
from bot.ui.i18n import t
from bot.ui.keyboards import callback_row_id
from bot.ui.reminder_texts import (
    ListPage,
    button_label,
    fired_html,
    fired_text,
    list_page,
    local_date,
)
from memory.store import Store
from memory.timezones import to_local, zone
from primitives.clock import Clock
from reminders.book import Claim, Reminder, ReminderBook, ReminderStats
from reminders.scheduler import (
    Delivered,
    DeliveryOutcome,
    Failed,
    RetryLater,
    Stopped,
    Unknown,
)

log = structlog.get_logger("bot.reminders")

CANCEL_PREFIX = "rm:x:"
PAGE_PREFIX = "rm:p:"
ZONE_PREFIX = "tz:"
# Offered as buttons by a bare /timezone: one per region our users come from, at least.
COMMON_ZONES = (
    "Europe/Lisbon",
    "Europe/London",
    "Europe/Berlin",
    "Europe/Istanbul",
    "America/New_York",
    "America/Sao_Paulo",
    "Asia/Jakarta",
    "Asia/Tokyo",
    "UTC",
)
# Telegram: about one message per second per chat. Sends spaced by exactly 1.0 s here arrive
# some milliseconds closer together there (the loop, the connection), and half of them were
# answered 429 by a limiter that counts a full second; a tenth of a second covers the lag our
# loop is allowed (under 100 ms, benchmarks/reminders.py --storm).
PER_CHAT_INTERVAL_S = 1.1
# Reminders bot-wide, just under Telegram's ~30 messages per second: AIORateLimiter's bucket
# lets a burst of 30 through at once and then 30/s, more than 30 within one second, which
# Telegram answers with 429s; spacing the reminders evenly keeps a burst of 1,000 free of them.
REMINDERS_PER_SECOND = 29.0


# --- delivery ---------------------------------------------------------------------------------


def _stop_reason(error: TelegramError) -> str | None:
    """Why a chat can no longer be written to, or None when the error is not about the chat."""
    text = error.message.lower()
    if isinstance(error, Forbidden):
        if "blocked" in text:
            return "blocked"
        if "deactivated" in text:
            return "user_deactivated"
        if "kicked" in text or "not a member" in text:
            return "removed_from_chat"
        return "forbidden"
    if isinstance(error, BadRequest) and "chat not found" in text:
        return "chat_not_found"
    return None


def _topic_gone(error: TelegramError) -> bool:
    """The forum topic a reminder was set in was deleted or closed since (the Bot API's texts:
    "Bad Request: message thread not found", "Bad Request: TOPIC_CLOSED")."""
    text = error.message.lower()
    return isinstance(error, BadRequest) and (
        "message thread not found" in text or "topic_closed" in text
    )


# httpx's errors that are raised before any byte of the request reached the server.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def never_left(error: TelegramError) -> bool:
    """Whether a failed send certainly did not reach Telegram (no connection was made, or none
    was free), so sending it again cannot make a second message. Anything else (an HTTP 5xx
    such as Telegram's 502, a read timeout, a connection cut while waiting for the answer) may
    have come after Telegram delivered it: the Bot API's answer is all that was lost."""
    return isinstance(error.__cause__, _NEVER_SENT)


# A send may change its target twice on the way (the chat moved to a new id, the topic is
# gone); more than that is not a reason to loop.
MAX_RETARGETS = 2
OnMigrated = Callable[[int, int], Awaitable[object]]


@dataclass
class TelegramDelivery:
    """Sends fired reminders; the scheduler calls it once per attempt."""

    bot: Bot
    settings: Settings
    store: Store
    clock: Clock[datetime]
    # Told (old id, new id) when a send finds the chat moved: the chat's data follows it.
    on_migrated: OnMigrated | None = None
    # Per chat, the earliest moment its next reminder may leave (monotonic): each send takes
    # the chat's next free second and moves this on, so sends of one chat never share a second.
    _chat_free_at: dict[int, float] = field(default_factory=dict)
    _next_slot: float = 0.0  # the earliest moment the next reminder may leave (monotonic)

    async def __call__(self, claim: Claim, late: bool) -> DeliveryOutcome:
        reminder = claim.reminder
        chat_id, topic_id = reminder.chat_id, reminder.topic_id
        if reminder.user_id is not None and not user_allowed(self.settings, reminder.user_id):
            return Stopped("not_allowed")  # the allowlist changed since it was set
        lang = await self.store.get_chat_language(chat_id)
        plain = fired_text(reminder, claim.due_at, late=late, lang=lang, now=self.clock())
        for _ in range(MAX_RETARGETS + 1):
            await self._pace(chat_id)
            try:
                message = await self._send(chat_id, topic_id, plain, reminder, html=True)
            except RetryAfter as error:  # the scheduler tries again after it (bot/ui/flood.py)
                wait = penalty_seconds(error)
                log.warning("reminder_flood_control", retry_after_s=wait)
                return RetryLater(wait)
            except ChatMigrated as error:
                # The group became a supergroup: its data moves there, and so does this one.
                log.warning("reminder_chat_migrated", new_chat_id=error.new_chat_id)
                if self.on_migrated is not None:
                    await self.on_migrated(chat_id, error.new_chat_id)
                chat_id = error.new_chat_id
                # The rest of this delivery's lines are about the new chat (the scheduler's
                # bound context is restored when the delivery ends).
                structlog.contextvars.bind_contextvars(chat_id=chat_id)
                continue
            except (Forbidden, BadRequest) as error:
                if topic_id is not None and _topic_gone(error):
                    # Better in the main chat than lost with its topic.
                    log.warning("reminder_topic_gone_sent_to_chat", topic_id=topic_id,
                                error=error.message)  # fmt: skip
                    topic_id = None
                    continue
                reason = _stop_reason(error)
                if reason is not None:
                    return Stopped(reason)
                try:  # a message Telegram refuses as HTML: once more as plain text
                    message = await self._send(chat_id, topic_id, plain, reminder, html=False)
                except TelegramError as again:
                    return Failed(again.message)
            except TelegramError as error:  # 5xx, timeouts, connection errors
                log.warning("reminder_send_failed", error=str(error))
                if never_left(error):
                    return RetryLater()
                return Unknown(str(error))
            moved = chat_id if chat_id != reminder.chat_id else None
            return Delivered(message.message_id, plain, chat_id=moved)
        return RetryLater()

    async def _send(
        self, chat_id: int, topic_id: int | None, plain: str, reminder: Reminder, *, html: bool
    ) -> Message:
        if html:
            text = fired_html(plain, reminder, group=chat_id < 0)
            return await self.bot.send_message(
                chat_id, text, parse_mode=ParseMode.HTML, message_thread_id=topic_id
            )
        return await self.bot.send_message(chat_id, plain, message_thread_id=topic_id)

    async def _pace(self, chat_id: int) -> None:
        """Keep one message per second per chat (two reminders due together in one chat would
        otherwise earn a flood penalty for the second) and REMINDERS_PER_SECOND bot-wide.

        A chat's seconds are handed out in turn and only ever move forward: a send that left
        never sets them back (it did once, and a retry or a new claim arriving while ten of the
        chat's reminders waited took a second already promised: 927 of Telegram's 429s in a
        storm of 200 reminders in 2 chats, 164 sent in 5 minutes)."""
        now = time.monotonic()
        slot = max(now, self._next_slot)
        self._next_slot = slot + 1.0 / REMINDERS_PER_SECOND
        if slot > now:
            await asyncio.sleep(slot - now)
            now = time.monotonic()
        if len(self._chat_free_at) > 4096:
            for old in [c for c, at in self._chat_free_at.items() if at < now]:
                del self._chat_free_at[old]
        turn = max(now, self._chat_free_at.get(chat_id, now))
        self._chat_free_at[chat_id] = turn + PER_CHAT_INTERVAL_S
        if turn > now:
            await asyncio.sleep(turn - now)


# --- /stats ----------------------------------------------------------------------------------


async def reminder_stats_text(services: Services, lang: str | None) -> str:
    """The /stats line about reminders."""
    book = services.reminders.book
    stats: ReminderStats = await book.stats(book.clock())
    return t(
        "stats_reminders",
        lang,
        pending=stats.pending,
        sent=stats.sent_today,
        late=stats.late_today,
        stopped=stats.stopped_reminders,
        chats=stats.stopped_chats,
    )


# --- handlers ---------------------------------------------------------------------------------


async def _may_set_zone(update: Update, context: Context) -> bool:
    """A group's time zone sets every member's reminder times: its admins change it. An
    anonymous admin writes as the group itself (sender_chat), which only admins can."""
    chat = update.effective_chat
    if not is_group(chat):
        return True
    assert chat is not None
    message = update.effective_message
    if update.callback_query is None and message is not None and message.sender_chat is not None:
        return message.sender_chat.id == chat.id
    user = update.effective_user
    if user is None:
        return False
    return await context.bot_data.services.chat_admins.is_admin(context.bot, chat.id, user.id)


def _zone_keyboard() -> InlineKeyboardMarkup:
    buttons = [InlineKeyboardButton(z, callback_data=f"{ZONE_PREFIX}{z}") for z in COMMON_ZONES]
    return InlineKeyboardMarkup([buttons[i : i + 3] for i in range(0, len(buttons), 3)])


def _now_in(book: ReminderBook, name: str, lang: str | None) -> str:
    return local_date(to_local(book.clock(), zone(name)), lang)


async def timezone_command(update: Update, context: Context) -> None:
    """`/timezone Area/City` sets the chat's zone; bare, it shows the zone and some buttons."""
    message = update.effective_message
    if message is None:
        return
    lang = user_language(update)
    book = context.bot_data.services.reminders.book
    wanted = clean_text(" ".join(context.args or [])).strip()
    if not wanted:
        current = await book.chat_zone(message.chat_id)
        if current.known:
            text = t("timezone_current", lang, zone=current.name,
                     now=_now_in(book, current.name, lang))  # fmt: skip
        else:
            text = t("timezone_unset", lang)
        await say(message, text, reply_markup=_zone_keyboard())
        return
    if not await _may_set_zone(update, context):
        await say(message, t("timezone_admins_only", lang))
        return
    name = await book.set_chat_zone(message.chat_id, wanted)
    if name is None:
        await say(message, t("timezone_unknown", lang, name=wanted[:64]))
        return
    log.info("timezone_set", zone=name)
    await say(message, t("timezone_set", lang, zone=name, now=_now_in(book, name, lang)))


async def timezone_callback(update: Update, context: Context) -> None:
    query = update.callback_query
    if query is None:
        return
    lang = user_language(update)
    book = context.bot_data.services.reminders.book
    if query.message is None:
        await query.answer()
        return
    if not await _may_set_zone(update, context):
        await query.answer(t("timezone_admins_only", lang), show_alert=True)
        return
    name = await book.set_chat_zone(query.message.chat.id, (query.data or "")[len(ZONE_PREFIX) :])
    if name is None:
        await query.answer(t("timezone_unknown", lang, name=(query.data or "")[3:64]))
        return
    log.info("timezone_set", zone=name, via="keyboard")
    text = t("timezone_set", lang, zone=name, now=_now_in(book, name, lang))
    await query.answer()
    try:
        await query.edit_message_text(text)
    except TelegramError as exc:  # pressed twice: "message is not modified"
        log.debug("timezone_not_edited", error=str(exc))


def _list_keyboard(listing: ListPage) -> InlineKeyboardMarkup | None:
    """A ❌ button per reminder shown and, when there are several pages, a row ◀ n/N ▶ (the
    middle one shows this page again: a cancel pressed on it reads the page from there)."""
    rows = [
        [InlineKeyboardButton(button_label(r), callback_data=f"{CANCEL_PREFIX}{r.id}")]
        for r in listing.shown
    ]
    if listing.pages > 1:
        page = listing.page
        nav = []
        if page > 0:
            nav.append(InlineKeyboardButton("◀", callback_data=f"{PAGE_PREFIX}{page - 1}"))
        nav.append(
            InlineKeyboardButton(
                f"{page + 1}/{listing.pages}", callback_data=f"{PAGE_PREFIX}{page}"
            )
        )
        if page + 1 < listing.pages:
            nav.append(InlineKeyboardButton("▶", callback_data=f"{PAGE_PREFIX}{page + 1}"))
        rows.append(nav)
    return InlineKeyboardMarkup(rows) if rows else None


def _page_shown(message: object) -> int:
    """The page a /reminders message shows: the middle button of its ◀ n/N ▶ row (0 when it
    has one page only). Read from the message itself, so no state is kept per message."""
    markup = getattr(message, "reply_markup", None)
    for row in getattr(markup, "inline_keyboard", ()) or ():
        for button in row:
            data = getattr(button, "callback_data", None)
            text = getattr(button, "text", "")
            if isinstance(data, str) and "/" in text:
                page = callback_row_id(data, PAGE_PREFIX)
                if page is not None:
                    return page
    return 0


async def _show_page(query: CallbackQuery, pending: list[Reminder], lang: str | None,
                     page: int) -> None:  # fmt: skip
    listing = list_page(pending, lang, page)
    try:
        await query.edit_message_text(listing.text, reply_markup=_list_keyboard(listing))
    except TelegramError as exc:  # "message is not modified"
        log.debug("reminders_not_edited", error=str(exc))


async def reminders_command(update: Update, context: Context) -> None:
    """/reminders: the chat's pending reminders, each with a ❌ button that cancels it, in
    pages when they do not fit one message."""
    message = update.effective_message
    if message is None:
        return
    lang = user_language(update)
    pending = await context.bot_data.services.reminders.book.pending(message.chat_id)
    listing = list_page(pending, lang)
    await say(message, listing.text, reply_markup=_list_keyboard(listing))


async def page_callback(update: Update, context: Context) -> None:
    """◀ or ▶ (or the page number): the list again, at that page, in the same message."""
    query = update.callback_query
    if query is None:
        return
    page = callback_row_id(query.data, PAGE_PREFIX)
    await query.answer()
    if query.message is None or page is None:
        return
    pending = await context.bot_data.services.reminders.book.pending(query.message.chat.id)
    await _show_page(query, pending, user_language(update), page)


async def cancel_callback(update: Update, context: Context) -> None:
    """A ❌ press. The reminder must belong to the chat the button was pressed in: a button
    (or forged callback data) from another chat cancels nothing."""
    query = update.callback_query
    if query is None:
        return
    lang = user_language(update)
    reminder_id = callback_row_id(query.data, CANCEL_PREFIX)
    if query.message is None or reminder_id is None:
        await query.answer(t("reminder_cancel_gone", lang), show_alert=True)
        return
    chat_id = query.message.chat.id
    book = context.bot_data.services.reminders.book
    if is_group(query.message.chat):
        # In a group: the member who set it, or an admin (bot/handlers/chat_admins.py).
        reminder = await book.get(chat_id, reminder_id)
        presser = query.from_user.id
        if (
            reminder is not None
            and reminder.user_id not in (None, presser)
            and not await context.bot_data.services.chat_admins.is_admin(
                context.bot, chat_id, presser
            )
        ):
            log.info("reminder_cancel_not_yours", reminder_id=reminder_id)
            await query.answer(t("reminder_cancel_not_yours", lang), show_alert=True)
            return
    cancelled = await book.cancel(chat_id, reminder_id)
    if cancelled is None:
        log.info("reminder_cancel_refused", reminder_id=reminder_id)
        await query.answer(t("reminder_cancel_gone", lang), show_alert=True)
    else:
        log.info("reminder_cancelled", reminder_id=cancelled.id, via="button")
        await query.answer(t("reminder_cancel_done", lang, text=cancelled.text[:150]))
    await _show_page(query, await book.pending(chat_id), lang, _page_shown(query.message))


def register_reminder_handlers(application: App) -> None:
    new_messages = filters.UpdateType.MESSAGE
    application.add_handler(CommandHandler("timezone", timezone_command, filters=new_messages))
    application.add_handler(CommandHandler("reminders", reminders_command, filters=new_messages))
    application.add_handler(CallbackQueryHandler(cancel_callback, pattern=f"^{CANCEL_PREFIX}"))
    application.add_handler(CallbackQueryHandler(page_callback, pattern=f"^{PAGE_PREFIX}"))
    application.add_handler(CallbackQueryHandler(timezone_callback, pattern=f"^{ZONE_PREFIX}"))
