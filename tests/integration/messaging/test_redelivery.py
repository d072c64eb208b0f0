"""Redelivery sends what several chats are owed side by side, each chat's replies in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bruce_bot.app import Bruce
from bruce_bot.channels.base import DeliveryError
from bruce_bot.domain import InboundMessage, OutboundMessage
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.messaging.test_outbox import FlakyChannel, _rows


async def test_replies_owed_to_several_chats_are_redelivered_side_by_side(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    chats = ["chat-1", "chat-2", "chat-3"]
    for chat in chats:
        anthropic_fake.script(f"Answer for {chat}.")
    channel = FlakyChannel()
    async with running_bruce(
        make_config(tmp_path, anthropic_fake.base_url), channels=[channel]
    ) as bruce:
        # The platform stays down through every retry: the three replies are left undelivered.
        original_send = channel.send

        async def down(message: OutboundMessage) -> None:
            raise DeliveryError("503 Service Unavailable", retry_after=0.001)

        channel.send = down  # type: ignore[method-assign]
        assert channel.inbox is not None
        for chat in chats:
            await channel.inbox.submit(InboundMessage("flaky", chat, "hello", user_id="1"))
        undelivered = "SELECT 1 FROM messages WHERE role='assistant' AND status='undelivered'"
        await wait_until(lambda: _count(bruce, undelivered, len(chats)))

        # Back up, but each send takes until every chat's send has started: one chat after
        # the other would never get there.
        started: list[str] = []
        all_started = asyncio.Event()

        async def slow(message: OutboundMessage) -> None:
            started.append(message.chat_id)
            if len(started) == len(chats):
                all_started.set()
            await asyncio.wait_for(all_started.wait(), timeout=10)
            await original_send(message)

        channel.send = slow  # type: ignore[method-assign]
        assert bruce.outbox is not None
        assert await bruce.outbox.redeliver() == len(chats)
        sent = await _rows(bruce, "SELECT status FROM messages WHERE role='assistant'")
    assert sorted(started) == chats
    assert sorted(channel.delivered) == sorted(f"Answer for {chat}." for chat in chats)
    assert sent == [("sent",)] * len(chats)


async def _count(bruce: Bruce, sql: str, wanted: int) -> bool:
    return len(await _rows(bruce, sql)) == wanted
