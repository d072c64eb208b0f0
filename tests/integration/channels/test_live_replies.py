"""Live replies through the whole daemon: the model's text streams to the channel while it is
written, a status line shows while a tool runs, and the stored reply is what the chat is left
with — after a guard correction too, and when the final message cannot be shown live.

The model is the fake Anthropic server (streaming in the API's wire format), the channel a
console channel that records what a live reply was asked to show (the platform adapters are
tested against their own fakes in test_telegram_live.py and test_discord.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sqlalchemy import text

from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.domain import OutboundMessage
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer

REPORT = "<html><body><h1>Rain in Lisbon</h1><p>Umbrellas advised all week.</p></body></html>"


class RecordedLive:
    """A live reply that keeps, in order, what it was asked to show."""

    def __init__(self, channel: LiveConsoleChannel, fail_finish: int) -> None:
        self.channel = channel
        self.written = ""
        self.events: list[tuple[str, str]] = []
        self._fresh = False
        self._fail_finish = fail_finish

    async def text(self, delta: str) -> None:
        if self._fresh:
            self.written, self._fresh = "", False
        self.written += delta
        self.events.append(("text", self.written))

    async def restart(self) -> None:
        self._fresh = True
        self.events.append(("restart", ""))

    async def status(self, line: str) -> None:
        self.written, self._fresh = "", False
        self.events.append(("status", line))

    async def finish(self, message: OutboundMessage) -> None:
        if self._fail_finish > 0:
            self._fail_finish -= 1
            raise DeliveryError("the live message is gone", retry_after=0.01)
        self.events.append(("final", message.text))
        self.channel.replies.put_nowait(message.text)

    async def abandon(self) -> None:
        self.events.append(("abandon", ""))


class LiveConsoleChannel(ConsoleChannel):
    def __init__(self, *, fail_finish: int = 0) -> None:
        super().__init__()
        self.lives: list[RecordedLive] = []
        self._fail_finish = fail_finish

    def live_reply(self, chat_id: str, metadata: Mapping[str, object]) -> RecordedLive:
        live = RecordedLive(self, self._fail_finish)
        self.lives.append(live)
        return live


def kinds(events: list[tuple[str, str]]) -> list[str]:
    """The kinds of events, runs of texts as one."""
    out: list[str] = []
    for kind, _ in events:
        if not (out and out[-1] == kind == "text"):
            out.append(kind)
    return out


async def stored_reply(bruce: object) -> str:
    database = bruce.database  # type: ignore[attr-defined]
    async with database.engine.connect() as connection:
        result = await connection.execute(
            text("SELECT content FROM messages WHERE role='assistant' ORDER BY id DESC LIMIT 1")
        )
        return str(result.scalar_one())


async def test_answer_streams_with_a_status_line_while_the_tool_runs(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(
        "Let me put that into a report for you.",
        tool_calls=[
            ("artifact_save", {"filename": "lisbon.html", "title": "Lisbon", "content": REPORT})
        ],
    )
    answer = "Here is your report on the rain in Lisbon — umbrellas advised all week. " * 2
    anthropic_fake.script(answer.strip())
    channel = LiveConsoleChannel()
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        assert await channel.say("write me a report on the weather in Lisbon")
        final = await wait_until(
            lambda: not channel.replies.empty() and channel.replies.get_nowait()
        )
        stored = await stored_reply(bruce)
    [live] = channel.lives

    assert all(request.get("stream") is True for request in anthropic_fake.requests)
    assert kinds(live.events) == ["restart", "text", "status", "restart", "text", "final"]
    texts = [shown for kind, shown in live.events if kind == "text"]
    assert texts[0] != "Let me put that into a report for you."  # it came in pieces
    assert "Let me put that into a report for you." in texts
    assert ("status", "💾 Saving lisbon.html …") in live.events
    assert texts[-1] == answer.strip()
    assert final == stored == answer.strip()


async def test_the_corrected_answer_is_the_one_the_chat_is_left_with(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("Done! I've saved your report as news.html.")
    anthropic_fake.script("Sorry — I did not save any file. Here is the summary as text instead.")
    channel = LiveConsoleChannel()
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        assert await channel.say("make me a report")
        final = await wait_until(
            lambda: not channel.replies.empty() and channel.replies.get_nowait()
        )
        stored = await stored_reply(bruce)
    [live] = channel.lives
    shown = [text for kind, text in live.events if kind == "text"]
    assert "Done! I've saved your report as news.html." in shown  # streamed, then corrected
    assert kinds(live.events) == ["restart", "text", "restart", "text", "final"]
    assert (
        final == stored == "Sorry — I did not save any file. Here is the summary as text instead."
    )
    assert [kind for kind, _ in live.events].count("final") == 1


async def test_a_final_message_that_cannot_be_shown_live_is_delivered_whole_later(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("The answer is forty-two, as the books say.")
    channel = LiveConsoleChannel(fail_finish=99)  # the live message keeps failing
    config = make_config(tmp_path, anthropic_fake.base_url)
    async with running_bruce(config, channels=[channel]) as bruce:
        assert await channel.say("what is the answer?")
        [live] = await wait_until(lambda: channel.lives)
        await wait_until(lambda: ("abandon", "") in live.events, timeout=20)
        assert channel.replies.empty()  # nothing shown as final yet
        assert bruce.outbox is not None
        delivered = await bruce.outbox.redeliver()
        final = await wait_until(
            lambda: not channel.replies.empty() and channel.replies.get_nowait()
        )
        stored = await stored_reply(bruce)
    assert delivered == 1
    assert final == stored == "The answer is forty-two, as the books say."
