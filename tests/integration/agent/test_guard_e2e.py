"""End to end: a reply that claims an action no tool performed is caught and corrected once."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from bruce_bot.channels.console.channel import ConsoleChannel
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text


async def test_fake_claim_is_reprompted_once_and_the_correction_is_delivered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("Done! I've saved your report as news.html.")
    anthropic_fake.script("Sorry — I did not save any file. Here is the summary as text instead.")
    channel = ConsoleChannel()
    async with running_bruce(make_config(tmp_path, anthropic_fake.base_url), channels=[channel]):
        assert await channel.say("make me a report")
        reply = await wait_until(
            lambda: not channel.replies.empty() and channel.replies.get_nowait()
        )
    assert reply.startswith("Sorry — I did not save any file")
    assert len(anthropic_fake.requests) == 2
    check = last_user_text(anthropic_fake.requests[1])
    assert "[Automatic check]" in check and "artifact_save" in check


async def test_a_claim_that_persists_gets_an_honest_note(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("I'll remind you at 8:00 tomorrow.", times=2)
    channel = ConsoleChannel()
    config = make_config(tmp_path, anthropic_fake.base_url)
    async with running_bruce(config, channels=[channel]) as bruce:
        assert await channel.say("remind me tomorrow at 8")
        reply = await wait_until(
            lambda: not channel.replies.empty() and channel.replies.get_nowait()
        )
        assert bruce.database is not None
        async with bruce.database.engine.connect() as connection:
            stored = (
                await connection.execute(
                    text("SELECT content FROM messages WHERE role='assistant'")
                )
            ).scalar_one()
    assert len(anthropic_fake.requests) == 2  # asked once more, never in a loop
    assert "could not confirm that anything was actually scheduled" in reply
    assert stored == reply  # what the user saw is what the history keeps


async def test_an_honest_answer_is_not_second_guessed(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("Would you like me to set a reminder for that?")
    channel = ConsoleChannel()
    async with running_bruce(make_config(tmp_path, anthropic_fake.base_url), channels=[channel]):
        assert await channel.say("I have a dentist appointment on Monday")
        reply = await wait_until(
            lambda: not channel.replies.empty() and channel.replies.get_nowait()
        )
    assert reply == "Would you like me to set a reminder for that?"
    assert len(anthropic_fake.requests) == 1
