"""End to end: the allowlist, group mention rules, and messages that are not text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.ui.i18n import t
from tests.fakes.telegram import utf16_units
from tests.support.e2e_bot import FRIEND, OWNER, STRANGER, TESTDATA, bot_under_test, real_update

GROUP = -100123456


async def test_stranger_gets_one_line_with_their_id_and_costs_nothing(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        [answer] = await bot.ask(STRANGER, "hello, can I use you?", user_id=STRANGER)
        assert answer.text == t("not_allowed", user_id=STRANGER)
        assert str(STRANGER) in answer.text and "\n" not in answer.text
        # Told once an hour, not once a message (tests/e2e/test_e2e_hardening.py).
        again = bot.tg.push(bot.tg.make_text_update(STRANGER, STRANGER, "/model"))
        await bot.wait_handled(again)
        assert bot.texts(STRANGER) == [answer.text]
        assert not any(fp.requests for fp in bot.providers.values()), "no provider request"
        assert await bot.rows("SELECT * FROM messages") == []
        assert await bot.rows("SELECT * FROM chats WHERE chat_id = ?", (STRANGER,)) == []


async def test_everyone_is_a_stranger_when_the_allowlist_is_empty(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, ALLOWED_USER_IDS="") as bot:
        [answer] = await bot.ask(OWNER, "hi")
        assert answer.text == t("not_allowed", user_id=OWNER)
        assert not bot.model_requests()


async def test_admins_may_chat_too(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path, ALLOWED_USER_IDS="", ADMIN_USER_IDS=str(OWNER)) as bot:
        [answer] = await bot.ask(OWNER, "hi")
        assert answer.text == "echo: hi"


async def test_group_answers_only_when_mentioned_or_replied_to(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        group = {"chat_type": "supergroup"}
        # Chatter not addressed to the bot: ignored, not stored, no model call.
        bot.say(GROUP, "anyone seen my keys?", **group)
        bot.say(GROUP, "ask @someone_else_bot maybe", user_id=FRIEND, **group)
        # Mentioned: answered, with the mention stripped from what the model sees.
        [answer] = await bot.ask(GROUP, "@mnemo_test_bot what is 2+2? 🤔", **group)
        assert answer.text == "echo: what is 2+2? 🤔"
        # Replying to one of the bot's messages counts as addressing it.
        # The model also gets the answer replied to, framed as a quote.
        [second] = await bot.ask(GROUP, "and 3+3?", reply_to_bot=True, user_id=FRIEND, **group)
        assert second.text.startswith("echo: [The user is replying to an earlier message.")
        assert "\necho: what is 2+2? 🤔\n" in second.text and second.text.endswith("\nand 3+3?")
        # A mention in the middle of the text, in other letter case (Telegram usernames are
        # case-insensitive), after astral characters: entity offsets count UTF-16 units.
        text = "𝔥𝔢𝔩𝔩𝔬 @Mnemo_Test_Bot, bye"
        start = text.index("@")
        mention = {
            "type": "mention",
            "offset": utf16_units(text[:start]),
            "length": utf16_units("@Mnemo_Test_Bot"),
        }
        assert mention["offset"] == 11  # not 6: each of the five letters is two units
        [third] = await bot.ask(GROUP, text, entities=[mention], **group)
        assert third.text == "echo: 𝔥𝔢𝔩𝔩𝔬 , bye"

        sent = [r.body["messages"][-1]["content"] for _, r in bot.chat_requests()]
        assert [sent[0], sent[2]] == ["what is 2+2? 🤔", "𝔥𝔢𝔩𝔩𝔬 , bye"]
        assert sent[1] == second.text.removeprefix("echo: ")
        # Stored as it arrived, the quoted answer beside it as data; framed where the model reads.
        stored = await bot.rows(
            "SELECT content, media FROM messages WHERE role = 'user' ORDER BY id"
        )
        assert [r["content"] for r in stored] == [sent[0], "and 3+3?", sent[2]]
        assert json.loads(stored[1]["media"])["quote"] == "echo: what is 2+2? 🤔"
        # In a group the bot's answers quote the message they answer.
        assert all(m.raw_text for m in bot.messages(GROUP))
        sends = [c for c in bot.tg.calls_of("sendMessage") if c.params["chat_id"] == GROUP]
        assert all("reply_parameters" in c.params for c in sends)


def exported_message(slug: str, message_id: int, *, bot_is: str | None = None) -> tuple[str, list]:
    """A real group message (Teknologi Umum export) as the Bot API sends it: its text and its
    mention entities with UTF-16 offsets, from the export's own text_entities. `bot_is`
    names the mentioned user who stands for our bot (their @name becomes the bot's)."""
    data = json.loads(
        (TESTDATA / "tg-export-tgif" / f"{slug}.exported.json").read_text(encoding="utf-8")
    )
    [raw] = [m for m in data["messages"] if m["id"] == message_id]
    text, entities = "", []
    for part in raw["text_entities"]:
        piece = part["text"]
        if part["type"] == "mention":
            piece = "@mnemo_test_bot" if piece == bot_is else piece
            entities.append({"type": "mention", "offset": utf16_units(text), "length": 0})
            entities[-1]["length"] = utf16_units(piece)
        text += piece
    return text, entities


async def test_real_group_messages_are_answered_only_when_their_mention_is_the_bot(
    tmp_path: Path,
) -> None:
    async with bot_under_test(tmp_path) as bot:
        group = {"chat_type": "supergroup"}
        # Two real mentions of other people: not for the bot, ignored.
        text, entities = exported_message("pujangga-kode-2", 235403)
        assert [e["type"] for e in entities] == ["mention", "mention"]
        bot.say(GROUP, text, entities=entities, **group)
        # A real mention at the start, then one in the middle before ")." — as the bot.
        text, entities = exported_message("disable-service-gcp-ingress", 269046, bot_is="@zasdaym")
        [first] = await bot.ask(GROUP, text, entities=entities, **group)
        assert first.text == "echo: pak, di gcp Ingress disable backend service gimana ya"
        text, entities = exported_message("software-testing", 242714, bot_is="@RonnyGunawan")
        [second] = await bot.ask(GROUP, text, entities=entities, **group)
        assert second.text.startswith("echo: but yes, some language are best")
        assert "@" not in second.text and second.text.endswith("om-om ).")
        sent = [r.body["messages"][-1]["content"] for _, r in bot.chat_requests()]
        assert sent == [first.text.removeprefix("echo: "), second.text.removeprefix("echo: ")]


async def test_text_mention_of_the_bot_counts(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        text = "Mnemo please summarise"
        entity = {
            "type": "text_mention",
            "offset": 0,
            "length": 5,
            "user": {"id": bot.tg.bot_id, "is_bot": True, "first_name": "Mnemo"},
        }
        [answer] = await bot.ask(GROUP, text, chat_type="group", entities=[entity])
        assert answer.text == "echo: please summarise"


async def test_group_stranger_is_told_only_when_addressing_the_bot(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        group = {"chat_type": "supergroup", "user_id": STRANGER}
        bot.say(GROUP, "just chatting", **group)
        [answer] = await bot.ask(GROUP, "@mnemo_test_bot hi", **group)
        assert answer.text == t("not_allowed", user_id=STRANGER)
        assert len(bot.messages(GROUP)) == 1
        assert not bot.model_requests()


# Photos, voice notes and documents are read now (tests/e2e/test_e2e_media.py).
@pytest.mark.parametrize("payload", ["message_with_sticker.json", "message_with_location.json"])
async def test_non_text_messages_get_a_polite_answer(tmp_path: Path, payload: str) -> None:
    async with bot_under_test(tmp_path) as bot:
        bot.tg.push(real_update(payload, OWNER, OWNER))
        await bot.wait_messages(OWNER, 1)
        assert bot.texts(OWNER) == [t("text_only")]
        assert not bot.model_requests()
        assert await bot.rows("SELECT * FROM messages") == []


async def test_non_text_from_a_stranger_or_unaddressed_in_a_group(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        in_group = real_update("message_with_photo.json", GROUP, OWNER)
        in_group["message"]["chat"]["type"] = "supergroup"
        bot.tg.push(in_group)  # a photo in a group, not for the bot: ignored
        bot.tg.push(real_update("message_with_voice.json", STRANGER, STRANGER))
        await bot.wait_messages(STRANGER, 1)
        assert bot.texts(STRANGER) == [t("not_allowed", user_id=STRANGER)]
        # The group photo was seen (the next update is answered) but not answered.
        await bot.ask(GROUP, "@mnemo_test_bot ping", chat_type="supergroup")
        assert bot.texts(GROUP) == ["echo: ping"]
        assert bot.tg.calls_of("getFile") == [] and bot.tg.downloads == []


async def test_a_bare_mention_asks_for_text_and_costs_nothing(tmp_path: Path) -> None:
    async with bot_under_test(tmp_path) as bot:
        [answer] = await bot.ask(GROUP, "@mnemo_test_bot", chat_type="supergroup")
        assert answer.text == t("empty_message")
        assert not bot.model_requests()
        assert await bot.rows("SELECT * FROM messages") == []
