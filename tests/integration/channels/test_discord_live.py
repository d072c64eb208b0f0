"""Live replies on Discord end to end: real discord.py inside a running Bruce against the fake
Discord, the fake Anthropic server streaming its answers in the API's wire format.

The user sees one message, edited as the answer is written (a tool's status line in between),
that becomes the final reply; an answer over 2000 characters continues in new messages; a rate
limit on edits is waited out.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bruce_bot.app import Bruce
from bruce_bot.channels.discord.channel import DiscordChannel
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.discord_server import FakeDiscordServer
from tests.integration.channels.test_discord import OWNER, OWNER_ID
from tests.integration.support import messages_of

WITHIN = 15.0
REPORT = "<html><body><h1>Rain in Lisbon</h1></body></html>"
PREAMBLE = "Let me put that into a report for you."
STATUS = "💾 Saving lisbon.html …"
ANSWER = "Your **report** on the rain in Lisbon is saved: umbrellas advised all week long."


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


@contextlib.asynccontextmanager
async def live_bruce(
    tmp_path: Path, llm: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> AsyncIterator[Bruce]:
    # The web app on (a free loopback port): saved artifacts get their link from it.
    config = make_config(
        tmp_path, llm.base_url, channels={"discord": discord_fake.discord_config([OWNER_ID])}
    )
    channel = DiscordChannel(config.channels.discord)
    channel.live_interval = 0.05  # a test need not wait a second between edits
    async with running_bruce(config, channels=[channel]) as bruce:
        await discord_fake.wait_for_session()
        yield bruce


def script_report_turn(llm: FakeAnthropicServer, answer: str = ANSWER) -> None:
    llm.script(
        PREAMBLE,
        tool_calls=[
            ("artifact_save", {"filename": "lisbon.html", "title": "L", "content": REPORT})
        ],
    )
    llm.script(answer, delay_seconds=0.3)  # the model takes a moment after the tool
    llm.stream_pause_seconds = 0.01


def in_order(seen: list[str], *wanted: str) -> bool:
    """Each of `wanted` among `seen` in this order: a status line ("…") whole, any other text
    as it was being written (a beginning of it, or all of it)."""
    position = 0
    for text in seen:
        if position == len(wanted):
            break
        goal = wanted[position]
        if text == goal or (not goal.endswith("…") and text and goal.startswith(text)):
            position += 1
    return position == len(wanted)


def posted_texts(discord_fake: FakeDiscordServer, channel_id: int) -> list[dict[str, Any]]:
    """The bot's text messages in the channel (the report saved in the turn also arrives as
    an attachment: see test_files_back.py)."""
    return [
        m
        for m in discord_fake.sent
        if int(m["channel_id"]) == channel_id and not m.get("attachments")
    ]


async def settled(tmp_path: Path) -> None:
    await wait_until(
        lambda: any(row["status"] == "sent" for row in messages_of(tmp_path, "assistant")), WITHIN
    )


async def test_one_message_is_edited_as_the_answer_is_written_and_becomes_the_reply(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    script_report_turn(anthropic_fake)
    async with live_bruce(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "write me a report on the weather in Lisbon")
        await settled(tmp_path)
        dm = discord_fake.dm_channel_id(OWNER_ID)
        [posted] = posted_texts(discord_fake, dm)
    history = discord_fake.edits[int(posted["id"])]
    assert in_order(history, PREAMBLE, STATUS, ANSWER)
    assert history[-1] == ANSWER  # the stored reply, as every reply is sent (Markdown)
    assert len(history) == len(set(history))  # never an edit that changes nothing
    assert all(request["stream"] is True for request in anthropic_fake.requests)


async def test_a_long_answer_continues_in_new_messages_the_first_edited_in(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    paragraph = "Lisbon will be rainy, then sunny, then rainy again, all week long. " * 8
    long_answer = "\n\n".join([paragraph.strip()] * 6)  # about 3300 characters
    script_report_turn(anthropic_fake, long_answer)
    anthropic_fake.stream_pause_seconds = 0.0
    async with live_bruce(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "a long report please")
        await settled(tmp_path)
        dm = discord_fake.dm_channel_id(OWNER_ID)
        posted = posted_texts(discord_fake, dm)
    first, *rest = posted
    finals = [discord_fake.edits[int(m["id"])][-1] for m in posted]
    assert rest and len(discord_fake.edits[int(first["id"])]) > 1  # the live one, edited in
    assert all(len(discord_fake.edits[int(m["id"])]) == 1 for m in rest)  # the others posted
    assert all(len(text) <= 2000 for text in finals)
    assert " ".join(finals).split() == long_answer.split()


async def test_a_rate_limited_edit_is_retried_and_the_reply_still_arrives(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, discord_fake: FakeDiscordServer
) -> None:
    discord_fake.fail_edits(429, retry_after=0.3, times=2)
    script_report_turn(anthropic_fake)
    async with live_bruce(tmp_path, anthropic_fake, discord_fake):
        await discord_fake.send_dm(OWNER, "write me a report on the weather in Lisbon")
        await settled(tmp_path)
        dm = discord_fake.dm_channel_id(OWNER_ID)
        [posted] = posted_texts(discord_fake, dm)
    assert discord_fake.edits[int(posted["id"])][-1] == ANSWER
    assert ("PATCH", f"/channels/{dm}/messages/{posted['id']}") in discord_fake.rest_requests
