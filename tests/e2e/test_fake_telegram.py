"""The fake Bot API speaks to the real python-telegram-bot the way Telegram does.

Every other Telegram test trusts this fake, so these tests pin the behaviours they rely on:
PTB's request encoding decoded correctly, Telegram's error texts mapped to PTB's exceptions,
HTML validated like tdlib, UTF-16 length limits, long polling with offsets, flood penalties.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, EndPointNotFound, InvalidToken, NetworkError, RetryAfter
from telegram.ext import Application, CommandHandler, ContextTypes, MessageHandler, filters

from tests.fakes.loopback import loopback_server
from tests.fakes.telegram import NOT_MODIFIED, FakeTelegram, parse_html
from tests.support.paths import TESTDATA
from tests.support.transport import TG_TOKEN as TOKEN
from tests.support.waits import within


async def test_get_me_identifies_the_bot(bot: Bot, tg: FakeTelegram) -> None:
    me = await bot.get_me()
    assert me.id == 123456
    assert me.username == "mnemo_test_bot"
    assert me.is_bot
    assert tg.calls[0].method == "getMe"


async def test_wrong_token_is_unauthorized(tg: FakeTelegram) -> None:
    with pytest.raises(InvalidToken):
        async with Bot("999:WRONG", base_url=tg.base_url):
            pass


async def test_send_message_decodes_ptb_form_encoding(bot: Bot, tg: FakeTelegram) -> None:
    """Strings arrive as strings (even "123"), other values JSON-decoded (ints, dicts)."""
    markup = InlineKeyboardMarkup([[InlineKeyboardButton("GPT", callback_data="m:gpt")]])
    sent = await bot.send_message(42, "123", reply_markup=markup)
    call = tg.calls_of("sendMessage")[0]
    assert call.params["chat_id"] == 42
    assert call.params["text"] == "123"
    assert call.params["reply_markup"] == {
        "inline_keyboard": [[{"text": "GPT", "callback_data": "m:gpt"}]]
    }
    assert sent.message_id == tg.bot_messages(42)[0].message_id
    assert sent.reply_markup == markup


async def test_html_entities_have_utf16_offsets(bot: Bot, tg: FakeTelegram) -> None:
    sent = await bot.send_message(7, "😀 <b>bold</b> &amp; <i>it</i>", parse_mode=ParseMode.HTML)
    assert sent.text == "😀 bold & it"
    assert [(e.type, e.offset, e.length) for e in sent.entities] == [
        (MessageEntity.BOLD, 3, 4),
        (MessageEntity.ITALIC, 10, 2),
    ]
    shown = tg.bot_messages(7)[0]
    assert shown.raw_text == "😀 <b>bold</b> &amp; <i>it</i>"
    assert shown.parse_mode == "HTML"


async def test_pre_code_language_and_links(bot: Bot) -> None:
    sent = await bot.send_message(
        7,
        '<pre><code class="language-python">x = 1 &lt; 2</code></pre> <a href="https://a.b/?q=1&amp;r=2">l</a>',
        parse_mode=ParseMode.HTML,
    )
    assert sent.text == "x = 1 < 2 l"
    pre, link = sent.entities
    assert (pre.type, pre.language, pre.offset, pre.length) == ("pre", "python", 0, 9)
    assert (link.type, link.url) == ("text_link", "https://a.b/?q=1&r=2")


@pytest.mark.parametrize(
    ("html", "error"),
    [
        ("<b>open", 'Can\'t find end tag corresponding to start tag "b"'),
        ("<b><i>x</b></i>", 'Unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
        ("x</b>", "Unexpected end tag at byte offset 1"),
        ("<div>x</div>", 'Unsupported start tag "div" at byte offset 0'),
        ("é<br>", 'Unsupported start tag "br" at byte offset 2'),
        ("a < b", 'Unsupported start tag "" at byte offset 2'),
        ('<span class="x">s</span>', 'Tag "span" must have class "tg-spoiler" at byte offset 0'),
        ("<b", "Unclosed start tag at byte offset 0"),
    ],
)
async def test_invalid_html_is_rejected_like_telegram(bot: Bot, html: str, error: str) -> None:
    with pytest.raises(BadRequest) as caught:
        await bot.send_message(7, html, parse_mode=ParseMode.HTML)
    # PTB capitalises the description (and lower-cases the rest), so compare case-insensitively.
    assert caught.value.message.lower() == f"can't parse entities: {error}".lower()


def test_bare_ampersand_and_greater_than_are_literal() -> None:
    """tdlib keeps an '&' that starts no entity, and a lone '>', as plain characters."""
    assert parse_html("a & b > c &nbsp; &#x1F600; &#65;") == ("a & b > c &nbsp; 😀 A", [])


def test_validator_accepts_the_converter_expected_outputs() -> None:
    """Every expected HTML output in formatter-chatgpt-telegram's upstream test suite (which
    its authors checked against Telegram) is accepted by the fake's validator."""
    upstream = TESTDATA / "tg-markdown" / "formatter-chatgpt-telegram" / "test_parser.py"
    outputs = _expected_outputs(upstream.read_text())
    assert len(outputs) > 40
    for html in outputs:
        parse_html(html)  # raises EntityParseError on anything Telegram would refuse


def _expected_outputs(source: str) -> list[str]:
    """Pull the `expected_output = \"\"\"...\"\"\"` strings out of the upstream test file."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id.startswith("expected"):
                if isinstance(node.value.value, str):
                    found.append(node.value.value)
    return found


async def test_length_is_counted_in_utf16_after_entity_parsing(bot: Bot, tg: FakeTelegram) -> None:
    emoji = "😀" * 2048  # 2048 code points, 4096 UTF-16 units: exactly the limit
    await bot.send_message(1, f"<b>{emoji}</b>", parse_mode=ParseMode.HTML)
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(1, emoji + "x")
    # Tags do not count: 4096 visible units wrapped in markup are fine.
    await bot.send_message(1, "<i>" + "a" * 4096 + "</i>", parse_mode=ParseMode.HTML)
    assert len(tg.bot_messages(1)) == 2


async def test_empty_text_is_rejected(bot: Bot) -> None:
    with pytest.raises(BadRequest, match="Message text is empty"):
        await bot.send_message(1, "  \n ")
    with pytest.raises(BadRequest, match="Message text is empty"):
        await bot.send_message(1, "<b> </b>", parse_mode=ParseMode.HTML)


async def test_edit_updates_current_text_and_not_modified(bot: Bot, tg: FakeTelegram) -> None:
    sent = await bot.send_message(5, "draft")
    await bot.edit_message_text("final <b>x</b>", 5, sent.message_id, parse_mode=ParseMode.HTML)
    with pytest.raises(BadRequest) as caught:
        await bot.edit_message_text("final <b>x</b>", 5, sent.message_id, parse_mode="HTML")
    assert NOT_MODIFIED.removeprefix("Bad Request: ").lower() in caught.value.message.lower()
    # Same visible text but different entities is a real modification.
    await bot.edit_message_text("final x", 5, sent.message_id)
    shown = tg.bot_messages(5)[0]
    assert (shown.text, shown.edits, shown.entities) == ("final x", 2, [])
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", 5, 999)


async def test_edit_too_long_uses_telegrams_edit_error(bot: Bot) -> None:
    sent = await bot.send_message(5, "short")
    with pytest.raises(BadRequest, match="Message_too_long"):
        await bot.edit_message_text("a" * 4097, 5, sent.message_id)


async def test_injected_retry_after_and_bad_request(bot: Bot, tg: FakeTelegram) -> None:
    tg.inject_error("sendMessage", count=2, retry_after=7)
    for _ in range(2):
        with pytest.raises(RetryAfter) as caught:
            await bot.send_message(3, "hi")
        assert caught.value.retry_after == 7
    await bot.send_message(3, "hi")
    tg.inject_error("editMessageText", description="Bad Request: something odd")
    with pytest.raises(BadRequest, match="Something odd"):
        await bot.edit_message_text("x", 3, 1)
    assert [c.ok for c in tg.calls_of("sendMessage")] == [False, False, True]
    assert len(tg.bot_messages(3)) == 1


async def test_injected_bad_gateway_every_tenth_send(bot: Bot, tg: FakeTelegram) -> None:
    """A proxy's 502 on one send in ten, with the Bot API's own body: PTB raises NetworkError."""
    tg.inject_error("sendMessage", count=2, status=502, every=10)
    for n in range(1, 31):
        if n in (10, 20):
            with pytest.raises(NetworkError, match="Bad Gateway"):
                await bot.send_message(3, f"m{n}")
        else:
            await bot.send_message(3, f"m{n}")
    calls = tg.calls_of("sendMessage")
    assert [i + 1 for i, c in enumerate(calls) if not c.ok] == [10, 20]  # then count is spent
    assert {c.error for c in calls if not c.ok} == {"Bad Gateway"}
    assert len(tg.bot_messages(3)) == 28


async def test_a_502_after_delivery_leaves_the_message_in_the_chat(
    bot: Bot, tg: FakeTelegram
) -> None:
    """Telegram's 502 can come after it delivered: one fault in two here does (the 10th send's,
    then not the 20th's, then the 30th's), and the client only hears "Bad Gateway"."""
    tg.inject_error("sendMessage", count=3, status=502, every=10, delivered_every=2)
    for n in range(1, 31):
        if n % 10 == 0:
            with pytest.raises(NetworkError, match="Bad Gateway"):
                await bot.send_message(3, f"m{n}")
        else:
            await bot.send_message(3, f"m{n}")
    failed = [c for c in tg.calls_of("sendMessage") if not c.ok]
    assert [(c.params["text"], c.delivered) for c in failed] == [
        ("m10", True), ("m20", False), ("m30", True),
    ]  # fmt: skip
    texts = [m.text for m in tg.bot_messages(3)]
    assert "m10" in texts and "m20" not in texts and "m30" in texts and len(texts) == 29


async def test_flood_limits_penalise_and_extend_while_retried(bot: Bot, tg: FakeTelegram) -> None:
    tg.enforce_flood_limits = True
    first = await bot.send_message(9, "one")
    with pytest.raises(RetryAfter):
        await bot.send_message(9, "two")
    with pytest.raises(RetryAfter):  # still inside the penalty
        await bot.send_message(9, "three")
    await bot.send_message(10, "other chat is not penalised")
    # Edits are limited per message, counting from when it was sent.
    with pytest.raises(RetryAfter):
        await bot.edit_message_text("one!", 9, first.message_id)
    assert [(v.method, v.chat_id, v.message_id) for v in tg.flood_violations] == [
        ("sendMessage", 9, None),
        ("sendMessage", 9, None),
        ("editMessageText", 9, first.message_id),
    ]
    assert [v.during_penalty for v in tg.flood_violations] == [False, True, False]
    assert [m.text for m in tg.bot_messages(9)] == ["one"]


async def test_chat_action_commands_callbacks_and_misc(bot: Bot, tg: FakeTelegram) -> None:
    assert await bot.send_chat_action(4, ChatAction.TYPING)
    assert tg.calls_of("sendChatAction")[0].params["action"] == "typing"
    from telegram import BotCommand

    await bot.set_my_commands([BotCommand("new", "New session"), BotCommand("model", "Model")])
    assert [c["command"] for c in tg.commands[next(iter(tg.commands))]] == ["new", "model"]
    assert [c.command for c in await bot.get_my_commands()] == ["new", "model"]
    assert await bot.answer_callback_query("17", text="ok")
    sent = await bot.send_message(4, "x")
    assert await bot.delete_message(4, sent.message_id)
    assert tg.bot_messages(4) == []
    with pytest.raises(EndPointNotFound):
        await bot.do_api_request("noSuchMethod")


async def test_drafts_only_in_private_chats(bot: Bot, tg: FakeTelegram) -> None:
    assert await bot.send_message_draft(11, 5, "partial <b>te</b>", parse_mode=ParseMode.HTML)
    draft = tg.drafts(11)[0]
    assert (draft["draft_id"], draft["parsed_text"]) == (5, "partial te")
    with pytest.raises(BadRequest, match="Textdraft_peer_invalid"):
        await bot.send_message_draft(-100123, 5, "x")
    assert tg.bot_messages(11) == []


async def test_get_updates_offsets_and_long_poll(bot: Bot, tg: FakeTelegram) -> None:
    first = tg.push(tg.make_text_update(1, 2, "hello"))
    second = tg.push(tg.make_text_update(1, 2, "/new"))
    updates = await bot.get_updates(timeout=0)
    assert [u.update_id for u in updates] == [first, second]
    assert updates[1].message.text == "/new"
    assert updates[1].message.entities[0].type == MessageEntity.BOT_COMMAND
    assert [u.update_id for u in await bot.get_updates(offset=second)] == [second]
    assert await bot.get_updates(offset=second + 1, timeout=0) == ()

    poll = asyncio.create_task(bot.get_updates(offset=second + 1, timeout=5))
    await tg.wait_for(lambda: len(tg.calls_of("getUpdates")) == 4)
    third = tg.push(tg.make_text_update(1, 2, "later"))
    assert [u.update_id for u in await within(poll, 5)] == [third]


async def test_real_update_payloads_pass_through(bot: Bot, tg: FakeTelegram) -> None:
    """Real captured messages (text, sticker, photo) reach PTB unchanged, in order."""
    payloads = json.loads((TESTDATA / "tg-updates" / "teloxide_test_payloads.json").read_text())
    by_name = {p["test_fn"]: p["json"] for p in payloads if p["test_fn"].startswith("de_")}
    for name in ("de_text", "de_sticker", "de_image"):
        tg.push({"message": by_name[name]})
    text, sticker, photo = await bot.get_updates(timeout=0)
    assert text.message.text == by_name["de_text"]["text"]
    assert sticker.message.sticker is not None and sticker.message.text is None
    assert photo.message.photo
    assert text.update_id < sticker.update_id < photo.update_id


async def test_mentions_replies_and_callbacks(bot: Bot, tg: FakeTelegram) -> None:
    sent = await bot.send_message(
        -100777,
        "pick",
        reply_markup=InlineKeyboardMarkup([[InlineKeyboardButton("A", callback_data="m:a")]]),
    )
    tg.push(tg.make_text_update(-100777, 2, "hey @mnemo_test_bot 😀", chat_type="supergroup"))
    tg.push(tg.make_text_update(-100777, 2, "and you", chat_type="supergroup", reply_to_bot=True))
    tg.push(tg.make_callback_update(-100777, 2, "m:a", message_id=sent.message_id))
    mention, reply, press = await bot.get_updates(timeout=0)
    entity = mention.message.entities[0]
    assert (entity.type, mention.message.parse_entity(entity)) == ("mention", "@mnemo_test_bot")
    assert reply.message.reply_to_message.from_user.id == bot.id
    assert reply.message.reply_to_message.message_id == sent.message_id
    assert press.callback_query.data == "m:a"
    assert press.callback_query.message.message_id == sent.message_id
    assert press.callback_query.message.reply_markup.inline_keyboard[0][0].callback_data == "m:a"


async def test_application_polls_and_replies(tg: FakeTelegram) -> None:
    """A real PTB Application runs its polling loop against the fake end to end."""

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text(
            f"echo: {update.effective_message.text}", do_quote=True
        )

    async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text("started")

    app = Application.builder().token(TOKEN).base_url(tg.base_url).build()
    app.add_handler(CommandHandler("start", start))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0.0, timeout=1)
        user_message = tg.make_text_update(50, 60, "привет 👋🏽")
        tg.push(user_message)
        tg.push(tg.make_text_update(50, 60, "/start"))
        await tg.wait_for(lambda: len(tg.bot_messages(50)) == 2)
        await app.updater.stop()
        await app.stop()
    texts = [m.text for m in tg.bot_messages(50)]
    assert texts == ["echo: привет 👋🏽", "started"]
    reply = tg.bot_messages(50)[0]
    assert reply.reply_to_message_id == user_message["message"]["message_id"]
    assert tg.calls_of("deleteWebhook")


async def test_webhook_delivery_to_a_local_server(tg: FakeTelegram) -> None:
    """With a webhook set, pushed updates are POSTed in order with the secret header."""
    from aiohttp import web

    received: list[tuple[int, str | None]] = []

    async def hook(request: web.Request) -> web.Response:
        body = await request.json()
        received.append((body["update_id"], request.headers.get("X-Telegram-Bot-Api-Secret-Token")))
        # The first delivery fails once: the fake must retry, not drop the update.
        return web.Response(status=500 if len(received) == 1 else 200)

    app = web.Application()
    app.router.add_post("/tg", hook)
    async with loopback_server(app) as receiver, Bot(TOKEN, base_url=tg.base_url) as bot:
        await bot.set_webhook(f"{receiver}/tg", secret_token="s3cret")
        with pytest.raises(Exception, match="Conflict"):
            await bot.get_updates()
        one = tg.push(tg.make_text_update(1, 2, "a"))
        two = tg.push(tg.make_text_update(1, 2, "b"))
        await tg.wait_for(lambda: len(received) == 3)
        assert received == [(one, "s3cret"), (one, "s3cret"), (two, "s3cret")]
        assert (await bot.get_webhook_info()).pending_update_count == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/start", [("bot_command", "/start")]),
        ("/help@mnemo_test_bot now", [("bot_command", "/help@mnemo_test_bot")]),
        ("hi /new please", [("bot_command", "/new")]),
        ("/dev/null; touch /tmp/blns.fail ; echo", []),  # a real naughty string: no command
        ("a/b and <b>/x</b>", []),
        ("ask @mnemo_test_bot 😀 @mnemo_test_bot", [("mention", "@mnemo_test_bot")] * 2),
    ],
)
async def test_commands_and_mentions_are_found_like_tdlib(
    bot: Bot, tg: FakeTelegram, text: str, expected: list[tuple[str, str]]
) -> None:
    tg.push(tg.make_text_update(1, 2, text))
    [update] = await bot.get_updates(timeout=0)
    message = update.message
    assert [(e.type, message.parse_entity(e)) for e in message.entities] == expected
