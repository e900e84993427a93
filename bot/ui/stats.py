"""The texts of /usage and /stats: numbers from the database and the transport, in the user's
language.

Gathering stays in memory/ (`UsageLedger`, `consolidation_stats`) and models/
(`Transport.status()`); this module only turns those figures into plain text, so the same
figures could feed a web page. Plain text, not HTML: model ids and error details are data and
must not be parsed as markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from bot.ui.i18n import t
from bot.ui.money import money
from memory.consolidation.stats import ConsolidationStats, consolidation_stats
from memory.db import Database
from memory.pending_writes import PendingWrites
from memory.store import from_iso, to_iso
from memory.usage import PeriodUsage, UsageLedger, UsageReport, UserTotal, day_start
from primitives.clock import Clock, utc_now


def tokens(count: int) -> str:
    return f"{count:,}"


_PURPOSE_KEYS = {
    "consolidation": "usage_purpose_consolidation",
    "transcription": "usage_purpose_transcription",
    "task": "usage_purpose_task",
    "web": "usage_purpose_web",
    "mcp": "usage_purpose_mcp",
}


def _purpose(purpose: str, lang: str | None) -> str:
    return t(_PURPOSE_KEYS.get(purpose, "usage_purpose_chat"), lang)


def _period_lines(period: PeriodUsage, heading_key: str, lang: str | None) -> list[str]:
    lines = [t(heading_key, lang, tokens=tokens(period.total_tokens), cost=money(period.cost_usd))]
    for line in period.lines:
        text = t(
            "usage_line",
            lang,
            model=line.model_id,
            purpose=_purpose(line.purpose, lang),
            calls=line.calls,
            tokens=tokens(line.total_tokens),
            cost=money(line.cost_usd),
        )
        lines.append(text + (" *" if line.estimated_calls else ""))
    return lines


def usage_text(
    report: UsageReport,
    lang: str | None,
    *,
    own: bool = True,
    web_calls: tuple[int, int] | None = None,
) -> str:
    """One user's (or the whole bot's) today and month, by model, consolidation included;
    `web_calls` (today's count, the daily cap) adds the web line, above the footnotes."""
    web = [t("usage_web", lang, count=web_calls[0], cap=web_calls[1])] if web_calls else []
    if own:
        title = t("usage_title_self", lang)
    elif report.user_id is None:
        title = t("usage_title_bot", lang)
    else:
        title = t("usage_title_user", lang, user_id=report.user_id)
    if not report.month.lines:
        return "\n".join([title, t("usage_none", lang), *web])
    lines = [title]
    lines += _period_lines(report.today, "usage_today", lang)
    lines += _period_lines(report.month, "usage_month", lang)
    lines += web
    lines.append(
        t(
            "usage_memory_note",
            lang,
            cost=money(report.month.cost_for("consolidation")),
            tokens=tokens(report.month.tokens_for("consolidation")),
        )
    )
    if any(line.estimated_calls for line in report.month.lines):
        lines.append(t("usage_estimated_note", lang))
    return "\n".join(lines)


def everyone_text(totals: list[UserTotal], bot: UsageReport, lang: str | None) -> str:
    """The admins' overview: every user this month, then the whole bot."""
    lines = [t("usage_everyone_title", lang)]
    for row in totals:
        lines.append(
            t(
                "usage_everyone_line",
                lang,
                user=row.user_id if row.user_id is not None else "?",
                today_cost=money(row.today_cost_usd),
                month_cost=money(row.month_cost_usd),
                month_tokens=tokens(row.month_tokens),
                memory_cost=money(row.month_consolidation_cost_usd),
            )
        )
    if not totals:
        lines.append(t("usage_none", lang))
    lines.append(
        t(
            "usage_bot_total",
            lang,
            today_tokens=tokens(bot.today.total_tokens),
            today_cost=money(bot.today.cost_usd),
            month_tokens=tokens(bot.month.total_tokens),
            month_cost=money(bot.month.cost_usd),
        )
    )
    return "\n".join(lines)


def _ago(stamp: str, now: datetime) -> str:
    minutes = max(0, int((now - from_iso(stamp)).total_seconds() // 60))
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def _gateway_line(name: str, state: Mapping[str, Any], lang: str | None) -> str:
    if not state.get("configured", True):
        return t("stats_gateway_off", lang, gateway=name)
    keys = state.get("keys") or []
    available = sum(1 for key in keys if key.get("available"))
    breaker = str(state.get("breaker", "?"))
    if breaker != "closed":
        breaker = f"{breaker.upper()} ({state.get('open_for_s', 0)} s)"
    return t(
        "stats_gateway",
        lang,
        gateway=name,
        breaker=breaker,
        failures=state.get("consecutive_failures", 0),
        keys_ok=available,
        keys=len(keys),
    )


def stats_text(
    consolidation: ConsolidationStats,
    transport_status: Mapping[str, Any],
    spend_today: PeriodUsage,
    lang: str | None,
    *,
    now: datetime,
    turns_in_flight: int | None = None,
    outcomes_days: int = 7,
    held: Mapping[tuple[str, str], int] | None = None,
) -> str:
    """/stats for admins: is memory keeping up, which models fail how, what it costs today,
    and the tool calls held for a tap today (`held`: (tool, state) -> calls)."""
    c = consolidation
    lines = [t("stats_title", lang)]
    lines.append(t("stats_queue", lang, pending=c.pending, running=c.running, done=c.done))
    if c.oldest_pending_at:
        lines.append(
            t(
                "stats_oldest",
                lang,
                at=c.oldest_pending_at[:16].replace("T", " "),
                ago=_ago(c.oldest_pending_at, now),
            )
        )
    lines.append(t("stats_failed_jobs", lang, count=c.failed_awaiting_retry))
    if c.mean_attempts_per_saved:
        lines.append(
            t(
                "stats_mean_attempts",
                lang,
                mean=f"{c.mean_attempts_per_saved:.2f}",
                max=c.max_attempts_per_saved,
            )
        )
    lines.append("")
    lines.append(t("stats_outcomes", lang, days=outcomes_days))
    if not c.outcomes:
        lines.append(t("stats_none", lang))
    for model_id in sorted(c.outcomes):
        counts = c.outcomes[model_id]
        ordered = sorted(counts.items(), key=lambda kv: (kv[0] != "saved", -kv[1], kv[0]))
        detail = ", ".join(f"{outcome} {count}" for outcome, count in ordered)
        lines.append(f"• {model_id}: {detail}")
    lines.append("")
    lines.append(t("stats_gateways", lang))
    gateways: Mapping[str, Any] = transport_status.get("gateways", {})
    for name in sorted(gateways):
        lines.append(_gateway_line(name, gateways[name], lang))
        queue = gateways[name].get("queue")
        if queue and gateways[name].get("configured", True):
            lines.append(
                t(
                    "stats_gateway_queue",
                    lang,
                    waiting=queue.get("waiting", 0),
                    chat=queue.get("waiting_chat", 0),
                    background=queue.get("waiting_background", 0),
                    longest=f"{queue.get('longest_wait_s', 0.0):.1f}",
                )
            )
    models: Mapping[str, Any] = transport_status.get("models", {})
    tripped = sorted(m for m, s in models.items() if s.get("breaker", "closed") != "closed")
    for model_id in tripped:
        state = models[model_id]
        lines.append(
            t(
                "stats_model_breaker",
                lang,
                model=model_id,
                breaker=str(state.get("breaker")).upper(),
                seconds=state.get("open_for_s", 0),
            )
        )
    lines.append("")
    lines.append(
        t(
            "stats_spend_today",
            lang,
            tokens=tokens(spend_today.total_tokens),
            cost=money(spend_today.cost_usd),
            chat_cost=money(spend_today.cost_for("chat")),
            memory_cost=money(spend_today.cost_for("consolidation")),
        )
    )
    if held:
        lines.append(t("stats_held", lang, detail=held_detail(held)))
    if turns_in_flight is not None:
        lines.append(t("stats_turns_in_flight", lang, count=turns_in_flight))
    workers: list[Mapping[str, Any]] = transport_status.get("workers", [])
    if workers:
        lines.append(t("stats_workers", lang))
    for worker in workers:
        rss = worker.get("rss_mib")
        lines.append(
            t(
                "stats_worker",
                lang,
                number=worker.get("number"),
                pid=worker.get("pid") or "-",
                state=worker.get("state"),
                rss=f"{rss:.0f}" if rss is not None else "-",
                calls=worker.get("in_flight", 0),
                restarts=worker.get("restarts", 0),
            )
        )
    return "\n".join(lines)


def held_detail(held: Mapping[tuple[str, str], int]) -> str:
    """ "web_read 2 (dropped 1, kept 1); remember 1 (pending 1)": per tool, by state."""
    tools = sorted({tool for tool, _ in held})
    parts = []
    for tool in tools:
        states = sorted((state, n) for (name, state), n in held.items() if name == tool)
        detail = ", ".join(f"{state} {n}" for state, n in states)
        parts.append(f"{tool} {sum(n for _, n in states)} ({detail})")
    return "; ".join(parts)


async def build_stats_text(
    db: Database,
    transport_status: Mapping[str, Any],
    lang: str | None,
    *,
    clock: Clock[datetime] = utc_now,
    outcomes_days: int = 7,
    turns_in_flight: int | None = None,
) -> str:
    """Gather the figures for /stats and render them."""
    now = clock()
    since = to_iso(now - timedelta(days=outcomes_days))
    consolidation = await consolidation_stats(db, since)
    bot_usage = await UsageLedger(db, lambda: now).report(None)
    held = await PendingWrites(db, lambda: now).counts_since(day_start(now))
    return stats_text(
        consolidation,
        transport_status,
        bot_usage.today,
        lang,
        now=now,
        turns_in_flight=turns_in_flight,
        outcomes_days=outcomes_days,
        held=held,
    )
