"""Scheduled tasks in the Telegram surface: a due task's run and its one message, the ▶ resume
button of a paused task, the /stats line.

The task scheduler (reminders/scheduler.py, kind "task") calls `TaskDelivery` once per
attempt of an occurrence it claimed; the delivery resumes the occurrence wherever its
`task_runs` row says it stands (reminders/task_runs.py), so a crash or a Telegram error at any
point neither loses the run nor sends its answer twice:

1. Checks before any money is spent: the task still stands (a ❌ since the claim), its setter
   is still allowed, it is not too late (TASK_MAX_LATE_HOURS: a run hours late is skipped with
   one line), the setter's budget is not spent (skipped with one line; the next run stays).
2. The run (agent/task_run.py), as its own asyncio task so the ❌ of /reminders can stop it
   (`stop`): no answer then, and the loop has recorded what it spent.
3. The answer is stored in the row, then sent as ONE message: first its header, whose id is
   stored, then the answer edited into it. After a crash the edit is made again, and Telegram
   answers "message is not modified" if it had been made: the answer is in the chat once. The
   message is kept in the chat's session as the bot's own words (never as the user's), marked
   as a task's answer and, when the run read untrusted content, as untrusted too.
4. A run that fails after the transport's retries and fallbacks says so in one line with the
   reason and the next time; three in a row pause a repeating task, and the line says how to
   resume it. A chat the bot can no longer reach stops its tasks and reminders.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

import structlog
from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    Update,
)
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError
from telegram.ext import CallbackQueryHandler

from agent.task_run import TaskAnswer, TaskRequest, TaskRunner
from bot.config import Settings
from bot.handlers.access import user_allowed, user_language
from bot.handlers.chat_admins import is_group
from bot.handlers.reminders import _stop_reason, _topic_gone
from bot.services import App, Context, Services
from bot.turns.limits import TurnGuard
from bot.ui.flood import penalty_seconds
from bot.ui.i18n import t
from bot.ui.keyboards import callback_row_id
from bot.ui.pending_texts import send_pending
from bot.ui.task_texts import (
    answer_message,
    failed_line,
    header,
    short_task,
    skipped_budget_line,
    skipped_late_line,
)
from bot.ui.turn_texts import failure_reason
from memory.pending_writes import PendingWrites
from memory.provenance import TASK as TASK_PROVENANCE
from memory.provenance import Provenance
from memory.store import Store
from memory.timezones import chat_zone_of
from models.catalog import ModelEntry
from models.types import TransportError
from primitives.clock import Clock
from primitives.tasks import stop_tasks
from reminders.book import Claim, Reminder, ReminderBook
from reminders.scheduler import Delivered, DeliveryOutcome, RetryLater, Settled, Stopped
from reminders.task_runs import TaskRun, TaskRuns, finish_in

log = structlog.get_logger("bot.tasks")

RESUME_PREFIX = "tk:r:"
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
Pace = Callable[[int], Awaitable[None]]
ChatModel = Callable[[int], Awaitable[ModelEntry]]


@dataclass(frozen=True)
class _Line:
    """A line to send instead of an answer (skipped, failed), with the run's final state."""

    text: str
    state: str | None  # None: the state is written already (a failed run counted)
    markup: InlineKeyboardMarkup | None = None


def resume_keyboard(task: Reminder, lang: str | None) -> InlineKeyboardMarkup:
    label = f"{t('task_resume_button', lang)} {short_task(task.text, 20)}"
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=f"{RESUME_PREFIX}{task.id}")]]
    )


@dataclass
class TaskDelivery:
    """Runs due tasks and sends their answers; the task scheduler calls it per attempt."""

    bot: Bot
    settings: Settings
    store: Store
    book: ReminderBook
    runs: TaskRuns
    runner: TaskRunner
    guard: TurnGuard
    pending: PendingWrites
    chat_model: ChatModel
    # The reminders' per-chat pacing (bot/handlers/reminders.py): a task's message and a ⏰
    # message of the same chat never share a second.
    pace: Pace
    clock: Clock[datetime]
    _running: dict[int, asyncio.Task[TaskAnswer]] = field(default_factory=dict)
    _stopped: set[int] = field(default_factory=set)

    def stop(self, task_id: int) -> None:
        """The task was cancelled: a run of it under way ends now, without an answer."""
        running = self._running.get(task_id)
        if running is not None and not running.done():
            self._stopped.add(task_id)
            running.cancel()  # synchronous (a /cancel's handler): the run's own await ends it

    @property
    def max_late(self) -> timedelta:
        return timedelta(hours=self.settings.TASK_MAX_LATE_HOURS)

    async def __call__(self, claim: Claim, late: bool) -> DeliveryOutcome:
        outcome = await self._deliver(claim)
        if isinstance(outcome, Stopped):
            await self.runs.finish(claim.delivery_id, "stopped", reason=outcome.reason)
        return outcome

    async def _deliver(self, claim: Claim) -> DeliveryOutcome:
        task = claim.reminder
        run = await self.runs.begin(claim)
        lang = await self.store.get_chat_language(task.chat_id)
        if run.state == "running":
            checked = await self._check(claim, lang)
            if isinstance(checked, _Line | Settled | Stopped):
                return await self._conclude(claim, checked, lang)
            answered = await self._run(claim, lang)
            if not isinstance(answered, TaskAnswer):
                return await self._conclude(claim, answered, lang)
            if answered.text is None:
                log.info("task_nothing_to_report")
                await self.runs.finish(claim.delivery_id, "nothing",
                                       cost_usd=answered.usage.cost_usd)  # fmt: skip
                return Settled("sent")
            await self.runs.answered(
                claim.delivery_id,
                answered.text,
                untrusted=answered.untrusted,
                held=[w.id for w in answered.held],
                cost_usd=answered.usage.cost_usd,
            )
            run = await self.runs.get(claim.delivery_id) or run
        if run.state == "failed":  # counted before a crash or a refused send: told now
            current = await self.book.get(task.chat_id, task.id)
            paused = current is not None and current.paused
            failures = current.failures if current is not None else task.failures
            line = failed_line(task, run.reason or "", current, lang, failures=failures,
                               paused=paused)  # fmt: skip
            markup = resume_keyboard(task, lang) if paused else None
            return await self._conclude(claim, _Line(line, None, markup), lang)
        if run.state in ("answered", "sending"):
            return await self._send_answer(claim, run, lang)
        return Settled("sent")  # a final state whose delivery row stayed open

    # --- before the run ------------------------------------------------------------------

    async def _check(self, claim: Claim, lang: str | None) -> _Line | Settled | Stopped | None:
        task = claim.reminder
        current = await self.book.get(task.chat_id, task.id)
        if current is None or current.state in ("cancelled", "stopped"):
            await self.runs.finish(claim.delivery_id, "cancelled")
            return Settled("stopped")
        if task.user_id is not None and not user_allowed(self.settings, task.user_id):
            return Stopped("not_allowed")
        if self.clock() - claim.due_at > self.max_late:
            log.info("task_skipped_late", due_at=str(claim.due_at))
            line = skipped_late_line(task, claim.due_at, self.settings.TASK_MAX_LATE_HOURS,
                                     current, lang)  # fmt: skip
            return _Line(line, "skipped_late")
        if task.user_id is not None:
            refused = await self.guard.check_budget(task.user_id)
            if refused is not None:
                log.info("task_skipped_budget", cap=refused.reply_key)
                limit = str(refused.reply_values.get("limit", ""))
                return _Line(skipped_budget_line(task, limit, current, lang), "skipped_budget")
        return None

    # --- the run -------------------------------------------------------------------------

    async def _run(self, claim: Claim, lang: str | None) -> TaskAnswer | _Line | Settled:
        task = claim.reminder
        chat_zone = chat_zone_of(task.time_zone if task.zone_known else None)
        request = TaskRequest(
            task_id=task.id,
            chat_id=task.chat_id,
            user_id=task.user_id,
            user_name=task.user_name,
            text=task.text,
            repeat=task.repeat,
            model_id=(await self.chat_model(task.chat_id)).id,
            chat_zone=chat_zone,
            topic_id=task.topic_id,
        )
        running = asyncio.create_task(self.runner.run(request), name=f"task-run-{task.id}")
        self._running[task.id] = running
        try:
            await asyncio.wait({running})
        except asyncio.CancelledError:  # the bot is stopping: the run goes on after the start
            await stop_tasks([running])
            raise
        finally:
            self._running.pop(task.id, None)
        if running.cancelled():
            self._stopped.discard(task.id)
            log.info("task_run_cancelled")
            await self.runs.finish(claim.delivery_id, "cancelled")
            return Settled("stopped")
        error = running.exception()
        if error is None:
            answer = running.result()
            log.info("task_ran", model=answer.model_id,
                     cost_usd=round(answer.usage.cost_usd, 6), untrusted=answer.untrusted,
                     held=len(answer.held), nothing=answer.text is None)  # fmt: skip
            return answer
        if isinstance(error, TransportError):
            reason = failure_reason(error, lang)
        elif isinstance(error, TimeoutError):
            reason = t("task_reason_time", lang, seconds=f"{self.runner.seconds:g}")
        else:
            log.error("task_run_error", exc_info=error)
            reason = t("task_reason_internal", lang)
        counted = await self.runs.failed(claim, reason)
        log.warning("task_failed", failures=counted.failures, paused=counted.paused)
        current = await self.book.get(task.chat_id, task.id)
        line = failed_line(task, reason, current, lang, failures=counted.failures,
                           paused=counted.paused)  # fmt: skip
        markup = resume_keyboard(task, lang) if counted.paused else None
        return _Line(line, None, markup)

    # --- sending -------------------------------------------------------------------------

    async def _conclude(
        self, claim: Claim, outcome: _Line | Settled | Stopped, lang: str | None
    ) -> DeliveryOutcome:
        if not isinstance(outcome, _Line):
            return outcome
        sent = await self._send_line(claim.reminder, outcome.text, outcome.markup)
        if not isinstance(sent, Message):
            return sent
        state = outcome.state

        def also(conn: sqlite3.Connection, now: str) -> None:
            if state is not None:
                finish_in(conn, claim.delivery_id, state, now, message_id=sent.message_id)

        return Delivered(sent.message_id, outcome.text, media={"kind": "task_note"}, also=also)

    async def _send_line(
        self, task: Reminder, text: str, markup: InlineKeyboardMarkup | None
    ) -> Message | RetryLater | Stopped:
        topic = task.topic_id
        for _ in range(2):
            await self.pace(task.chat_id)
            try:
                return await self.bot.send_message(
                    task.chat_id, text, message_thread_id=topic, reply_markup=markup
                )
            except TelegramError as error:
                if topic is not None and _topic_gone(error):
                    topic = None
                    continue
                return self._retry_or_stop(task, error)
        return RetryLater()

    def _retry_or_stop(self, task: Reminder, error: TelegramError) -> RetryLater | Stopped:
        if isinstance(error, RetryAfter):
            return RetryLater(penalty_seconds(error))
        reason = _stop_reason(error) if isinstance(error, Forbidden | BadRequest) else None
        if reason is not None:
            return Stopped(reason)
        if isinstance(error, ChatMigrated):
            log.warning("task_chat_migrated", new_chat_id=error.new_chat_id)
        else:
            log.warning("task_send_failed", error=str(error))
        return RetryLater()

    async def _send_answer(self, claim: Claim, run: TaskRun, lang: str | None) -> DeliveryOutcome:
        """The answer's one message: the header sent (its id kept), then the answer edited in.
        Made again after a crash, the edit is answered "not modified": never a second copy."""
        task = claim.reminder
        message = answer_message(task, run.answer or "", lang)
        previews = NO_PREVIEW if run.untrusted else None
        message_id = run.message_id
        for _ in range(2):
            if message_id is None:
                sent = await self._send_line(task, header(task), None)
                if not isinstance(sent, Message):
                    return sent
                message_id = sent.message_id
                await self.runs.sending(claim.delivery_id, message_id)
            edited = await self._edit(task, message_id, message.html, message.plain, previews)
            if edited is None:
                break
            if edited != "gone":
                return edited
            # The header was deleted before the answer reached it: the answer is not in the
            # chat, so it goes in a message of its own.
            log.info("task_header_gone", message_id=message_id)
            await self.runs.message_lost(claim.delivery_id)
            message_id = None
        else:
            return RetryLater()
        if run.held:
            writes = await self.pending.by_ids(list(run.held))
            await send_pending(self.bot, writes, lang, self.runner.agent.held,
                               reply_to_message_id=message_id,
                               message_thread_id=task.topic_id)  # fmt: skip
        media: dict[str, object] = {"kind": "task", "task_id": task.id}
        # A run that read a page: while its answer is in view, later writes wait for a tap, and
        # the memory writer sees a stub instead of it.
        source = Provenance(TASK_PROVENANCE, task.text, chars=len(message.plain))
        provenance = source if run.untrusted else None

        def also(conn: sqlite3.Connection, now: str) -> None:
            finish_in(conn, claim.delivery_id, "delivered", now, message_id=message_id)

        log.info("task_delivered", message_id=message_id)
        return Delivered(message_id, message.plain, media=media, provenance=provenance, also=also)

    async def _edit(
        self,
        task: Reminder,
        message_id: int,
        rendered: str,
        plain: str,
        previews: LinkPreviewOptions | None,
    ) -> Literal["gone"] | RetryLater | Stopped | None:
        """None when the message now holds the answer; "gone" when it no longer exists."""
        for use_html in (True, False):
            await self.pace(task.chat_id)
            try:
                await self.bot.edit_message_text(
                    rendered if use_html else plain,
                    task.chat_id,
                    message_id,
                    parse_mode=ParseMode.HTML if use_html else None,
                    link_preview_options=previews,
                )
                return None
            except BadRequest as error:
                text = error.message.lower()
                if "not modified" in text:
                    return None  # made before a crash: the answer is there
                if "message to edit not found" in text:
                    return "gone"
                if use_html and _stop_reason(error) is None:
                    continue  # the HTML refused: once more as plain text
                return self._retry_or_stop(task, error)
            except TelegramError as error:
                return self._retry_or_stop(task, error)
        return None


# --- /stats and the ▶ button -------------------------------------------------------------


async def task_stats_text(services: Services, lang: str | None) -> str:
    stats = await services.tasks.runs.stats(services.reminders.book.clock())
    return t(
        "stats_tasks",
        lang,
        scheduled=stats.scheduled,
        paused=stats.paused,
        ran=stats.ran_today,
        skipped=stats.skipped_today,
        failed=stats.failed_today,
    )


async def resume_callback(update: Update, context: Context) -> None:
    """▶ on a paused task: it runs again from its next time. In a group, its setter or an admin."""
    query = update.callback_query
    if query is None:
        return
    services = context.bot_data.services
    lang = user_language(update)
    task_id = callback_row_id(query.data, RESUME_PREFIX)
    if query.message is None or task_id is None:
        await query.answer(t("task_resume_gone", lang), show_alert=True)
        return
    chat_id = query.message.chat.id
    if is_group(query.message.chat):
        task = await services.reminders.book.get(chat_id, task_id)
        presser = query.from_user.id
        if (
            task is not None
            and task.user_id not in (None, presser)
            and not await services.chat_admins.is_admin(context.bot, chat_id, presser)
        ):
            await query.answer(t("reminder_cancel_not_yours", lang), show_alert=True)
            return
    resumed = await services.tasks.runs.resume(chat_id, task_id)
    if resumed is None:
        await query.answer(t("task_resume_gone", lang), show_alert=True)
        return
    log.info("task_resumed", chat_id=chat_id, task_id=task_id)
    await query.answer(t("task_resumed", lang, text=short_task(resumed.text, 150)))
    try:
        await query.edit_message_reply_markup(None)
    except TelegramError as exc:
        log.debug("resume_button_kept", error=str(exc))


def register_task_handlers(application: App) -> None:
    application.add_handler(CallbackQueryHandler(resume_callback, pattern=f"^{RESUME_PREFIX}"))
