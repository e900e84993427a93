"""No secret ever reaches the database: after a run with faults on every gateway (a rejected
key among several, rate limits, server errors, a consolidation), every byte of the SQLite
files is searched for the bot token, every provider key and the webhook secret."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.providers import Reply
from tests.support.e2e_bot import OWNER, TOKEN, bot_under_test, query, wait_until
from tests.support.memory_sessions import oasst_multilingual

# Several keys per gateway, written as people write them (comma-separated, spaces).
KEYS = {
    "openai": ["sk-openai-at-rest-key-A1", "sk-openai-at-rest-key-B2"],
    "anthropic": ["sk-ant-at-rest-key-A1", "sk-ant-at-rest-key-B2"],
    "groq": ["gsk-groq-at-rest-key-A1", "gsk-groq-at-rest-key-B2"],
}
WEBHOOK_SECRET = "whsec-at-rest-0c9f3e"


def forms(secret: str) -> list[str]:
    """The secret, and the masked form OpenAI echoes in its 401 ("sk-**********y-B2")."""
    return [secret, f"{secret[:3]}{'*' * 10}{secret[-4:]}"]


def leaks(database: Path, secrets: list[str]) -> list[str]:
    """Every secret form found in the database's files (main, WAL, shared memory), raw bytes:
    live rows, free pages and journal alike."""
    files = [p for p in database.parent.iterdir() if p.name.startswith(database.name)]
    assert any(p.name == database.name for p in files)
    found = []
    for path in files:
        data = path.read_bytes()
        found += [
            f"{path.name}: {form!r}" for s in secrets for form in forms(s) if form.encode() in data
        ]
    return found


async def test_no_secret_reaches_the_database_after_a_run_with_faults(tmp_path: Path) -> None:
    database = tmp_path / "mnemobot.sqlite3"
    settings = {f"{name.upper()}_API_KEY": " , ".join(keys) for name, keys in KEYS.items()}
    async with bot_under_test(
        tmp_path,
        WEBHOOK_SECRET=WEBHOOK_SECRET,
        MEMORY_WINDOW=6,
        MEMORY_KEEP_RECENT=2,
        ADMIN_USER_IDS=str(OWNER),
        **settings,
    ) as bot:
        # One key of each gateway is rejected with the provider's real 401 (OpenAI's echoes
        # the key's ends); the others meet rate limits and server errors now and then.
        for name, keys in KEYS.items():
            bot.providers[name].invalid_keys.add(keys[1])
            bot.providers[name].set_failure_mix(
                0.3, ["rate_limit_429", "server_500", "bad_gateway_502"], seed=7
            )
        bot.openai.set_default("*", Reply("Noted, thank you."))
        turns = [m.content for m in oasst_multilingual(40) if m.role == "user"][:8]
        for text in turns:
            await bot.ask(OWNER, text[:500])
            await bot.wait_idle(OWNER)
        await bot.ask(OWNER, "/new")
        await bot.ask(OWNER, "/usage")
        await bot.ask(OWNER, "/stats")
        # Consolidation (window and /new) ran against the faulty Groq keys too.
        await wait_until(
            lambda: query(database, "SELECT COUNT(*) AS n FROM consolidation_attempts")[0]["n"] > 0,
            "a consolidation attempt",
        )
        used = {r.api_key for fp in bot.providers.values() for r in fp.requests}
        # The run did meet what it claims: both keys of the chat and consolidation gateways
        # (the rejected ones included), and the last fallback's gateway.
        assert set(KEYS["openai"] + KEYS["groq"]) <= used
        assert used & set(KEYS["anthropic"])
        assert query(database, "SELECT COUNT(*) AS n FROM messages")[0]["n"] > 0
    secrets = [TOKEN, WEBHOOK_SECRET, *(k for keys in KEYS.values() for k in keys)]
    assert leaks(database, secrets) == []


def test_the_scan_finds_a_secret_wherever_sqlite_put_it(tmp_path: Path) -> None:
    import sqlite3

    database = tmp_path / "probe.sqlite3"
    conn = sqlite3.connect(database)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x TEXT)")
    conn.execute("INSERT INTO t VALUES (?)", ("Incorrect API key provided: sk-**********y-B2.",))
    conn.commit()
    assert leaks(database, [KEYS["openai"][1]]) == ["probe.sqlite3-wal: 'sk-**********y-B2'"]
    conn.close()
