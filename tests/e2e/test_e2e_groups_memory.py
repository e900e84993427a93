"""Memory in a group chat: only the member who asked /forget may confirm it, and the
consolidation is told who said what, so memory lines can say whom they are about.

Real data: two speakers of a LoCoMo conversation, with their own words."""

from __future__ import annotations

import json
from pathlib import Path

from bot.ui.i18n import t
from tests.support.consolidation_stack import good_call
from tests.support.e2e_bot import FRIEND, OWNER, bot_under_test
from tests.support.memory_sessions import framed
from tests.support.paths import TESTDATA

GROUP = -100777001
IN_GROUP = {"chat_type": "supergroup"}
LOCOMO = TESTDATA / "locomo" / "conv-26.json"


async def test_only_the_asker_can_confirm_a_forget_in_a_group(tmp_path: Path) -> None:
    """Only who sent /forget may press its Yes; another allowed member's press is refused."""
    async with bot_under_test(tmp_path) as bot:
        await bot.set_memory(GROUP, "- Caroline: researching adoption agencies")
        [prompt] = await bot.ask(GROUP, "/forget", **IN_GROUP)
        yes, no = prompt.button_data()

        for data in (yes, no):  # another member: neither button does anything
            press = bot.tg.make_callback_update(GROUP, FRIEND, data, message_id=prompt.message_id)
            bot.tg.push(press)
            press_id = press["callback_query"]["id"]
            await bot.wait(
                lambda press_id=press_id: any(
                    c.method == "answerCallbackQuery"
                    and c.params.get("callback_query_id") == press_id
                    for c in bot.tg.calls
                )
            )
        refusals = bot.tg.calls_of("answerCallbackQuery")
        assert [(c.params["text"], c.params["show_alert"]) for c in refusals] == [
            (t("forget_not_yours"), True)
        ] * 2
        [memory] = await bot.rows(
            "SELECT content FROM long_term_memory WHERE chat_id = ?", (GROUP,)
        )
        assert memory["content"] == "- Caroline: researching adoption agencies"
        assert bot.tg.bot_messages(GROUP)[-1].text == prompt.text  # still asking

        # The asker's own press does it.
        bot.tg.push(bot.tg.make_callback_update(GROUP, OWNER, yes, message_id=prompt.message_id))
        await bot.wait(lambda: bot.tg.bot_messages(GROUP)[-1].text == t("forget_done"))
        [memory] = await bot.rows(
            "SELECT content FROM long_term_memory WHERE chat_id = ?", (GROUP,)
        )
        assert memory["content"] == ""


async def test_the_consolidation_transcript_names_each_group_speaker(tmp_path: Path) -> None:
    """A group's transcript names each speaker (a transcript that said only "user" would leave
    the memory unable to say whom a fact is about)."""
    [first, second] = json.loads(LOCOMO.read_text())["session_1"][:2]
    speakers = {first["speaker"]: OWNER, second["speaker"]: FRIEND}
    async with bot_under_test(tmp_path, CONSOLIDATION_RETRY_DELAYS="1") as bot:
        bot.groq.set_default("*", good_call())
        for said in (first, second):
            await bot.ask(
                GROUP,
                f"@mnemo_test_bot {said['text']}",
                user_id=speakers[said["speaker"]],
                first_name=said["speaker"],
                **IN_GROUP,
            )
        await bot.ask(GROUP, "/new", **IN_GROUP)
        await bot.consolidations_settled(GROUP)
        [request] = [r for r in bot.groq.requests if not r.stream]
        system, user = (m["content"] for m in request.body["messages"])
        transcript = framed(user, "transcript")
        for said in (first, second):
            who = f"{said['speaker']} (id {speakers[said['speaker']]})"
            assert f"] user {who}: {said['text']}" in transcript
        assert "a memory line says whom it is about" in system
