"""What a turn hands its caller: the writes it held reach the list the caller passed in, the
answer reaches `AgentDone`, and nothing about held writes in `AgentDone` can disagree with the
list. Real AgentLoop, Store and litellm over HTTP against the fake providers on loopback.

The held writes and the spends stored with the answer once shared one name in the loop, so the
turn's end reported cost records as held writes; a turn that holds writes and then answers,
with spends of several rounds, is the case that showed it.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path

from agent.events import AgentDone, AgentEvent, ToolRound
from agent.loop import AgentLoop, AgentTurn
from agent.tools.memory import ChatTools, Receipt
from memory.db import Database
from memory.pending_writes import PendingWrite
from memory.store import Store
from memory.timezones import chat_zone_of
from models.transport import Transport
from primitives.clock import utc_now
from tests.fakes.providers import FakeProvider, Reply, ToolCallReply
from tests.support.transport import make_transport

CHAT, USER = 7, 70
FACTS = ["I am allergic to penicillin.", "My sister is called Ada."]


async def test_a_turn_that_holds_writes_then_answers_hands_over_the_held_writes(
    tmp_path: Path, fake_openai, fake_groq, fake_anthropic
) -> None:
    db = await Database.open(tmp_path / "db.sqlite3")
    transport = make_transport(fake_openai, fake_groq, fake_anthropic)
    try:
        await held_then_answered(db, transport, fake_openai)
    finally:
        await transport.aclose()
        await db.close()


async def held_then_answered(db: Database, transport: Transport, openai: FakeProvider) -> None:
    store = Store(db, utc_now)
    agent = AgentLoop(
        store=store,
        transport=transport,
        catalog=transport.catalog,
        tools=ChatTools(db, memory_max_chars=4000, clock=store.clock),
    )
    # Words of someone else in the turn: both writes wait for the asker's tap.
    openai.script(
        "gpt-5",
        ToolCallReply("remember", {"fact": FACTS[0]}, also=[("remember", {"fact": FACTS[1]})]),
        Reply("I will keep both once you confirm."),
    )
    stored = await store.add_message(CHAT, "user", "Remember these two things.", user_id=USER)
    turn = AgentTurn(CHAT, USER, stored.session_id, "gpt-5", chat_zone_of(None), others_words=True)
    receipts: list[Receipt] = []
    held: list[PendingWrite] = []
    async with aclosing(agent.run(turn, receipts=receipts, pending=held)) as run:
        events: list[AgentEvent] = [event async for event in run]

    done = events[-1]
    assert isinstance(done, AgentDone)
    assert done.text == "I will keep both once you confirm."
    assert (done.steps, done.untrusted) == (1, True)
    [tool_round] = [e for e in events if isinstance(e, ToolRound)]
    assert [o.pending for o in tool_round.outcomes] == held
    # Held, not written: no receipt, and the list holds the two writes as stored.
    assert receipts == []
    assert [(w.tool, json.loads(w.arguments)["fact"]) for w in held] == [
        ("remember", FACTS[0]),
        ("remember", FACTS[1]),
    ]
    rows = await db.fetchall("SELECT id, tool, state FROM pending_writes ORDER BY id")
    assert [(r["id"], r["tool"]) for r in rows] == [(w.id, "remember") for w in held]
    # Whatever the end event says about held writes agrees with the list.
    assert tuple(getattr(done, "pending", held)) == tuple(held)
    # Each round's spend is recorded once: the tool round's and the answer's.
    usage = await db.fetchall("SELECT model_id FROM usage ORDER BY id")
    assert [u["model_id"] for u in usage] == ["gpt-5", "gpt-5"]
