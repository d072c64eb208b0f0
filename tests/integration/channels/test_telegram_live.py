"""Live replies on Telegram end to end: real python-telegram-bot inside a running Bruce against
the fake Bot API, the fake Anthropic server streaming its answers in the API's wire format.

A user in a private chat sees drafts grow (`sendMessageDraft`) and then one final message; in a
group, one message that is edited as the answer is written and becomes the final reply; a tool's
status line shows in between. Edits respect Telegram's 429 and never repeat a text.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

from bruce_bot.app import Bruce
from bruce_bot.channels.telegram.channel import TelegramChannel
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.integration.channels.test_telegram import ALICE, GROUP, WITHIN
from tests.integration.support import messages_of

REPORT = "<html><body><h1>Rain in Lisbon</h1><p>Umbrellas all week.</p></body></html>"
PREAMBLE = "Let me put that into a report for you."
STATUS = "💾 Saving lisbon.html …"
ANSWER = "Your **report** on the rain in Lisbon is saved: umbrellas advised all week long."
SHOWN_ANSWER = "Your report on the rain in Lisbon is saved: umbrellas advised all week long."


@contextlib.asynccontextmanager
async def live_bruce(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    llm: FakeAnthropicServer,
    *,
    interval: float = 0.05,
) -> AsyncIterator[Bruce]:
    settings = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id],
    }
    # The web app on (a free loopback port): saved artifacts get their link from it.
    config = make_config(tmp_path, llm.base_url, channels={"telegram": settings})
    channel = TelegramChannel(config.channels.telegram)
    channel.live_interval = interval  # a test need not wait a second between edits
    async with running_bruce(config, channels=[channel]) as bruce:
        yield bruce


def script_report_turn(llm: FakeAnthropicServer, answer: str = ANSWER) -> None:
    llm.script(
        PREAMBLE,
        tool_calls=[
            ("artifact_save", {"filename": "lisbon.html", "title": "Lisbon", "content": REPORT})
        ],
    )
    # The model takes a moment before answering, as it does after a tool: the status line shows.
    llm.script(answer, delay_seconds=0.3)
    llm.stream_pause_seconds = 0.01  # the answer arrives over a while, as a model writes it


async def settled(tmp_path: Path) -> None:
    """The reply is stored and its delivery over."""
    await wait_until(
        lambda: any(row["status"] == "sent" for row in messages_of(tmp_path, "assistant")), WITHIN
    )


def in_order(seen: list[str], *wanted: str) -> bool:
    """Each of `wanted` is among `seen`, in this order (other texts may come between): a text
    ending in "…" wanted whole, any other as it was being written (the text so far, or all)."""
    position = 0
    for text in seen:
        if position == len(wanted):
            break
        goal = wanted[position]
        if text == goal or (not goal.endswith("…") and text and goal.startswith(text)):
            position += 1
    return position == len(wanted)


async def test_private_chat_sees_drafts_then_one_final_message(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    script_report_turn(anthropic_fake)
    async with live_bruce(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "write me a report on the weather in Lisbon")
        [final] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
        drafts = telegram.drafts.get(ALICE.id, [])

    seen = [draft.plain for draft in drafts]
    assert in_order(seen, PREAMBLE, STATUS, ANSWER)  # the model's own words, as they came
    assert len({draft.draft_id for draft in drafts}) == 1  # one draft, animated
    assert final.plain == SHOWN_ANSWER and final.parse_mode == "HTML"  # formatted as ever
    assert final.edits == [SHOWN_ANSWER]  # sent once, never edited
    assert [m for m in telegram.sent[ALICE.id]] == [final]  # exactly one message
    assert all(request["stream"] is True for request in anthropic_fake.requests)


async def test_group_sees_one_message_edited_into_the_final_reply(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    script_report_turn(anthropic_fake)
    async with live_bruce(tmp_path, telegram, anthropic_fake):
        asked = telegram.group_text(GROUP, ALICE, "write me a report on Lisbon", mention=True)

        def final_shown() -> SentMessage | None:
            sent = telegram.sent.get(GROUP, [])
            return sent[0] if sent and sent[0].parse_mode == "HTML" else None

        message = await wait_until(final_shown, WITHIN)
        calls = [params for method, params in telegram.calls if method == "editMessageText"]

    assert telegram.sent[GROUP] == [message]  # one message, no second one
    assert message.reply_to == asked["message_id"]  # it answers the user, as replies do
    assert in_order(message.edits, PREAMBLE, STATUS, ANSWER)
    assert message.edits[-1] == message.plain == SHOWN_ANSWER  # formatted at the end
    assert GROUP not in telegram.drafts  # no drafts in a group
    texts = [(c["message_id"], c["text"]) for c in calls]
    assert all(a != b for a, b in itertools.pairwise(texts))  # never the same twice
    assert len(message.edits) == len(calls) + 1  # every edit changed something: none refused


async def test_drafts_unavailable_fall_back_to_an_edited_message(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    telegram.refuse_drafts()  # a Bot API server older than 9.3
    script_report_turn(anthropic_fake)
    async with live_bruce(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "write me a report on the weather in Lisbon")

        def final_shown() -> SentMessage | None:
            sent = telegram.sent.get(ALICE.id, [])
            return sent[0] if sent and sent[0].plain == SHOWN_ANSWER else None

        message = await wait_until(final_shown, WITHIN)
    assert telegram.sent[ALICE.id] == [message]
    assert in_order(message.edits, PREAMBLE, STATUS, ANSWER)
    assert message.parse_mode == "HTML"


async def test_edits_wait_out_a_rate_limit(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    telegram.refuse_drafts()
    telegram.rate_limit_next("editMessageText", retry_after=1)
    script_report_turn(anthropic_fake)
    async with live_bruce(tmp_path, telegram, anthropic_fake):
        telegram.private_text(ALICE, "write me a report on the weather in Lisbon")
        message = await wait_until(
            lambda: (
                (sent := telegram.sent.get(ALICE.id)) and sent[0].plain == SHOWN_ANSWER and sent[0]
            ),
            WITHIN,
        )
        stamps = [
            (at, method)
            for at, method in telegram.call_times
            if method in ("sendMessage", "editMessageText")
        ]
    assert telegram.sent[ALICE.id] == [message]
    refused_at = stamps[1][0]  # the first edit: answered 429, retry after 1 s
    assert stamps[2][0] - refused_at >= 1.0  # nothing changed it before Telegram allowed


async def test_a_long_final_answer_is_split_the_first_part_edited_in(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    paragraph = "Lisbon will be rainy, then sunny, then rainy again, all week long. " * 20
    long_answer = "\n\n".join([paragraph.strip()] * 5)  # about 6800 characters
    script_report_turn(anthropic_fake, long_answer)
    anthropic_fake.stream_pause_seconds = 0.0
    async with live_bruce(tmp_path, telegram, anthropic_fake):
        telegram.group_text(GROUP, ALICE, "a long report please", mention=True)
        await settled(tmp_path)
        sent = telegram.sent[GROUP]
    first, *rest = sent
    assert len(first.edits) > 1 and first.parse_mode == "HTML"  # the live one, edited into place
    assert all(len(message.edits) == 1 for message in rest)  # the others sent as they are
    assert all(len(message.plain) <= 4096 for message in sent)
    assert " ".join(message.plain for message in sent).split() == long_answer.split()


async def test_a_claim_the_guard_corrects_is_written_over_in_the_same_message(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    claim = "Done! I've saved your report as news.html."
    correction = "Sorry — I did not save any file. Here is the summary as text instead."
    anthropic_fake.script(claim)
    anthropic_fake.script(correction, delay_seconds=0.2)
    anthropic_fake.stream_pause_seconds = 0.01
    async with live_bruce(tmp_path, telegram, anthropic_fake):
        telegram.group_text(GROUP, ALICE, "make me a report", mention=True)
        await settled(tmp_path)
    [message] = telegram.sent[GROUP]  # one message: the claim was never a reply of its own
    assert in_order(message.edits, claim, correction)
    assert message.plain == correction  # what the chat is left with is the corrected answer
    [row] = messages_of(tmp_path, "assistant")
    assert row["content"] == correction
