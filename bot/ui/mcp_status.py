"""The text of /mcp: each MCP server's state, tools, calls and failures today, and last error,
in the admin's language. Plain text: a server's error line is data, never markup."""

from __future__ import annotations

from collections.abc import Sequence

from bot.ui.i18n import t
from mcp_client.hub import ServerStatus

MAX_ERROR_CHARS = 200


def mcp_status_text(
    statuses: Sequence[ServerStatus], warnings: Sequence[str], lang: str | None
) -> str:
    if not statuses:
        return t("mcp_none", lang)
    lines = [t("mcp_title", lang)]
    for status in statuses:
        lines.append(
            t(
                "mcp_server",
                lang,
                name=status.name,
                state=t(f"mcp_state_{status.state}", lang),
                tools=status.tools,
                offered=status.offered,
                calls=status.calls_today,
                failures=status.failures_today,
                restarts=status.restarts,
            )
        )
        if status.next_try_in is not None:
            lines.append(t("mcp_next_try", lang, seconds=round(status.next_try_in)))
        if status.last_error:
            error = " ".join(status.last_error.split())[:MAX_ERROR_CHARS]
            lines.append(t("mcp_last_error", lang, error=error))
    lines.extend(t("mcp_warning", lang, warning=warning) for warning in warnings)
    return "\n".join(lines)
