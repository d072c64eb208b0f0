"""The outbox delivers each stored reply exactly once, records every attempt, drops none."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import text

from bruce_bot.app import Bruce
from bruce_bot.channels.base import DeliveryError, InboxPort
from bruce_bot.domain import InboundMessage, OutboundMessage, SessionKey
from bruce_bot.messaging.outbox import MAX_ATTEMPTS
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer


class FlakyChannel:
    """A platform that fails on demand: `failures` is a list of errors raised by the next sends."""

    name = "flaky"
    max_message_chars = 100

    def __init__(self) -> None:
        self.failures: list[DeliveryError] = []
        self.delivered: list[str] = []
        self.inbox: InboxPort | None = None

    async def start(self, inbox: InboxPort) -> None:
        self.inbox = inbox

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.delivered.append(message.text)

    async def typing(self, chat_id: str) -> None:
        return None


async def _rows(bruce: Bruce, sql: str) -> list[tuple]:
    assert bruce.database is not None
    async with bruce.database.engine.connect() as connection:
        return [tuple(row) for row in await connection.execute(text(sql))]


async def _say(channel: FlakyChannel, words: str) -> None:
    assert channel.inbox is not None
    await channel.inbox.submit(InboundMessage("flaky", "chat-1", words, user_id="1"))


async def test_transient_failures_are_retried_and_delivered_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("All good.")
    channel = FlakyChannel()
    channel.failures = [
        DeliveryError("502", retry_after=0.01),
        DeliveryError("timeout", retry_after=0.01),
    ]
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        await _say(channel, "hello")
        await wait_until(lambda: channel.delivered)
        await wait_until(
            lambda: _rows(bruce, "SELECT 1 FROM messages WHERE role='assistant' AND status='sent'")
        )
        attempts = await _rows(bruce, "SELECT attempt, status FROM deliveries ORDER BY id")
    assert channel.delivered == ["All good."]
    assert attempts == [(1, "retrying"), (2, "retrying"), (3, "sent")]


async def test_rate_limits_are_waited_out_without_using_up_the_attempts(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    # Sends racing for one chat's allowance can meet "retry after" more often than the outbox
    # tries a failing send: waited out, they must not leave the reply for a minute later.
    anthropic_fake.script("Worth the wait.")
    channel = FlakyChannel()
    limited = DeliveryError("429 Too Many Requests", retry_after=0.01, rate_limited=True)
    channel.failures = [limited] * (MAX_ATTEMPTS + 2) + [DeliveryError("502", retry_after=0.01)]
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        await _say(channel, "hello")
        await wait_until(
            lambda: _rows(bruce, "SELECT 1 FROM messages WHERE role='assistant' AND status='sent'")
        )
        attempts = await _rows(bruce, "SELECT attempt, status FROM deliveries ORDER BY id")
    assert channel.delivered == ["Worth the wait."]
    tries = MAX_ATTEMPTS + 4  # six rate limits, one failure, then through
    assert attempts == [(n, "retrying") for n in range(1, tries)] + [(tries, "sent")]


async def test_a_permanent_failure_is_not_retried_and_is_visible(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("You will never see this.")
    channel = FlakyChannel()
    channel.failures = [DeliveryError("bot was blocked by the user", permanent=True)]
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        await _say(channel, "hello")
        failed = await wait_until(
            lambda: _rows(
                bruce, "SELECT status FROM messages WHERE role='assistant' AND status='failed'"
            )
        )
        attempts = await _rows(bruce, "SELECT attempt, status, error FROM deliveries")
    assert failed == [("failed",)]
    assert attempts == [(1, "failed", "bot was blocked by the user")]
    assert channel.delivered == []


async def test_an_undelivered_reply_is_redelivered_without_repeating_sent_parts(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    long_answer = "\n\n".join(f"Part {i}: " + "x" * 60 for i in range(3))  # three parts of ≤100
    anthropic_fake.script(long_answer)
    channel = FlakyChannel()
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        # The first part goes out, then the platform stays down through every retry.
        channel.failures = []
        original_send = channel.send

        async def send_then_fail(message: OutboundMessage) -> None:
            if channel.delivered:
                raise DeliveryError("503 Service Unavailable", retry_after=0.001)
            await original_send(message)

        channel.send = send_then_fail  # type: ignore[method-assign]
        await _say(channel, "tell me a long story")
        await wait_until(
            lambda: _rows(
                bruce, "SELECT 1 FROM messages WHERE role='assistant' AND status='undelivered'"
            )
        )
        assert [p.split(":")[0] for p in channel.delivered] == ["Part 0"]
        channel.send = original_send  # type: ignore[method-assign]
        assert bruce.outbox is not None
        assert await bruce.outbox.redeliver() == 1
        status = await _rows(bruce, "SELECT status FROM messages WHERE role='assistant'")
    assert [p.split(":")[0] for p in channel.delivered] == ["Part 0", "Part 1", "Part 2"]
    assert status == [("sent",)]


async def test_a_reply_stored_before_a_crash_is_delivered_at_start_up(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = make_config(tmp_path, anthropic_fake.base_url)
    async with running_bruce(config, channels=[FlakyChannel()]) as bruce:
        assert bruce.stores is not None
        session = await bruce.stores.sessions.get_or_create(SessionKey("flaky", "chat-1"))
        # What a crash between storing and sending leaves behind: a pending reply.
        await bruce.stores.messages.add_outbound(session.id, "Stored before the crash.", "chat")
    channel = FlakyChannel()
    async with running_bruce(config, channels=[channel]):
        await wait_until(lambda: channel.delivered)
    assert channel.delivered == ["Stored before the crash."]
    assert anthropic_fake.requests == []  # delivered from storage, no new LLM call


class GatedChannel(FlakyChannel):
    """Holds the send of the text "first" until `gate` is set; notes what the deliveries table
    held when each send began (`seen`)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.started: list[str] = []
        self.seen: dict[str, list[tuple]] = {}
        self.bruce: Bruce | None = None

    async def send(self, message: OutboundMessage) -> None:
        self.started.append(message.text)
        if self.bruce is not None:
            self.seen[message.text] = await _rows(
                self.bruce, "SELECT chat_id, status FROM deliveries ORDER BY id"
            )
        if message.text == "first":
            await self.gate.wait()
        self.delivered.append(message.text)


async def test_messages_to_one_chat_go_one_at_a_time_each_recorded_before_the_next(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = GatedChannel()
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        assert bruce.outbox is not None
        channel.bruce = bruce
        first = asyncio.create_task(bruce.outbox.deliver(OutboundMessage("flaky", "1", "first")))
        await wait_until(lambda: channel.started == ["first"])
        second = asyncio.create_task(bruce.outbox.deliver(OutboundMessage("flaky", "1", "second")))
        # Another chat is not held up by this one.
        assert await bruce.outbox.deliver(OutboundMessage("flaky", "2", "elsewhere")) == "sent"
        assert channel.started == ["first", "elsewhere"]  # "second" waits for its chat's turn
        channel.gate.set()
        assert await asyncio.gather(first, second) == ["sent", "sent"]
    assert channel.delivered == ["elsewhere", "first", "second"]
    # The first was on disk, sent, before the second send to that chat began.
    assert ("1", "sent") in channel.seen["second"]


class SlowAnswerChannel(FlakyChannel):
    """The platform takes the first part at once and answers slowly: the send returns once
    `answer` is set, while the chat already shows the part."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def send(self, message: OutboundMessage) -> None:
        self.delivered.append(message.text)
        if len(self.delivered) == 1:
            await self.answer.wait()


def _cancelled_tasks() -> list[asyncio.Task]:
    return [task for task in asyncio.all_tasks() if task.cancelling()]


async def test_a_stop_whose_grace_ends_mid_send_records_the_part_and_runs_no_turn_again(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    # A graceful stop (SIGTERM) whose grace ran out while a part was on its way: the chat had
    # it, so it must be on disk (the restart sends only the rest) and the message it answers
    # stays answered (not run again: a second, different answer).
    long_answer = "\n\n".join(f"Part {i}: " + "x" * 60 for i in range(3))  # three parts of ≤100
    anthropic_fake.script(long_answer)
    config = make_config(tmp_path, anthropic_fake.base_url, agent={"shutdown_timeout_seconds": 0})
    channel = SlowAnswerChannel()
    bruce = Bruce(config, channels=[channel])
    await bruce.start()
    try:
        await _say(channel, "tell me a long story")
        await wait_until(lambda: channel.delivered)
        stopping = asyncio.create_task(bruce.stop())
        await wait_until(_cancelled_tasks)  # the grace is over: the turn was cancelled
        assert not stopping.done()  # the send under way is let finish
        channel.answer.set()
        await stopping
    finally:
        if not bruce.parts or not stopping.done():
            await bruce.stop()
    later = FlakyChannel()
    async with running_bruce(config, channels=[later]) as bruce:
        await wait_until(
            lambda: _rows(bruce, "SELECT 1 FROM messages WHERE role='assistant' AND status='sent'")
        )
        asked = await _rows(bruce, "SELECT status FROM messages WHERE role='user'")
    assert [p.split(":")[0] for p in channel.delivered] == ["Part 0"]
    assert [p.split(":")[0] for p in later.delivered] == ["Part 1", "Part 2"]
    assert asked == [("done",)]
    assert len(anthropic_fake.requests) == 1  # the turn was not run again
