"""A reply waiting for its chat's turn stays its process's on a real PostgreSQL server.

Two outboxes (two processes' worth, each with its own engine and claimant) share the database.
Process a stores two replies to one chat; the first is stuck at the platform (as behind a rate
limit), so the second waits in the chat's line for longer than a claim lasts. Redelivery sweeps
of both processes run meanwhile: neither may take the waiting reply (the cluster chaos test
found a sweep sending such a reply a second time). Once the platform answers, each reply
reaches the chat exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from bruce_bot.domain import OutboundMessage, SessionKey, utcnow
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.leases import Claimant
from bruce_bot.storage.stores import Stores
from tests.conftest import wait_until

LEASE_SECONDS = 1.0
WITHIN = 20.0


class HeldChannel:
    """A platform that records what it got and holds a send until it is let go."""

    name = "web"
    max_message_chars = 4000

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def send(self, message: OutboundMessage) -> None:
        self.holding.set()
        await self.release.wait()
        self.sent.append(message.text)

    async def typing(self, chat_id: str) -> None:
        return None


@pytest.fixture
async def two(
    postgres_url: str,
) -> AsyncIterator[tuple[list[tuple[Stores, Outbox]], HeldChannel]]:
    await upgrade_schema(postgres_url)
    channel = HeldChannel()
    made: list[tuple[Stores, Outbox]] = []
    for name in ("a", "b"):
        claimant = Claimant(f"test:{name}", LEASE_SECONDS)
        stores = Stores.open(Database(postgres_url), claimant=claimant)
        outbox = Outbox(
            stores.messages, stores.deliveries, stores.sessions, {"web": channel}, shared=True
        )
        made.append((stores, outbox))
    yield made, channel
    channel.release.set()
    for stores, _ in made:
        await stores.database.dispose()


async def test_a_reply_waiting_in_its_chats_line_is_sent_once_though_its_claim_outlived(
    two: tuple[list[tuple[Stores, Outbox]], HeldChannel],
) -> None:
    processes, channel = two
    stores_a, outbox_a = processes[0]
    session = await stores_a.sessions.get_or_create(SessionKey("web", "chat-1"))
    first = await stores_a.messages.add_outbound(session.id, "first", "chat")
    second = await stores_a.messages.add_outbound(session.id, "second", "chat")
    stored_at = utcnow()

    def reply(message_id: int, text: str) -> OutboundMessage:
        return OutboundMessage("web", "chat-1", text, message_id, "chat")

    sending = [
        asyncio.create_task(outbox_a.deliver(reply(first, "first"))),
        asyncio.create_task(outbox_a.deliver(reply(second, "second"))),
    ]
    await asyncio.wait_for(channel.holding.wait(), WITHIN)  # the first is at the platform

    async def claims_outlived() -> bool:
        # Precondition: both original claims (stamped at storage, LEASE_SECONDS) have lapsed.
        return (utcnow() - stored_at).total_seconds() > 2.5 * LEASE_SECONDS

    await wait_until(claims_outlived, WITHIN)
    # Neither process's redelivery sweep may take them: a keeps its claims while it delivers.
    since = stored_at - timedelta(minutes=5)
    for stores, _ in processes:
        assert await stores.messages.claim_undelivered(since, ["web"], shared=True) == []
    async with stores_a.database.engine.connect() as connection:
        rows = (
            await connection.execute(
                text("SELECT lease_owner, lease_until FROM messages WHERE id IN (:a, :b)"),
                {"a": first, "b": second},
            )
        ).all()
    assert {row.lease_owner for row in rows} == {"test:a"}, rows
    assert all(_later(row.lease_until, stored_at) for row in rows), rows
    channel.release.set()
    assert await asyncio.wait_for(asyncio.gather(*sending), WITHIN) == ["sent", "sent"]
    assert channel.sent == ["first", "second"]


def _later(value: datetime, than: datetime) -> bool:
    return value.replace(tzinfo=than.tzinfo) > than
