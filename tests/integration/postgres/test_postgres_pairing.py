"""Pairing on PostgreSQL with two Bruce processes on one database (two engines, two stores):
an approval or a revocation made in one counts in the other from its next check, without a
notice or a restart; a code approved in both at the same moment lets its holder in once; 64-bit
Discord ids fit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bruce_bot.pairing import PairingError, PairingService
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores

DISCORD_ID = 222_000_000_000_000_001


@pytest.fixture
async def two(postgres_url: str) -> AsyncIterator[tuple[PairingService, PairingService]]:
    await upgrade_schema(postgres_url)
    first, second = Database(postgres_url), Database(postgres_url)
    try:
        yield (
            PairingService(Stores.open(first), {}),
            PairingService(Stores.open(second), {}),
        )
    finally:
        await first.dispose()
        await second.dispose()


async def test_an_approval_in_one_process_counts_in_the_other_at_once(
    two: tuple[PairingService, PairingService],
) -> None:
    daemon, dashboard = two
    offer = await daemon.offer("discord", DISCORD_ID, "mallory", "999")
    assert offer.code is not None
    assert not await daemon.is_approved("discord", DISCORD_ID)
    await dashboard.approve(offer.code.lower(), by="dashboard")
    assert await daemon.is_approved("discord", DISCORD_ID)
    await dashboard.revoke("discord", DISCORD_ID)
    assert not await daemon.is_approved("discord", DISCORD_ID)


async def test_a_code_approved_twice_at_once_works_once(
    two: tuple[PairingService, PairingService],
) -> None:
    daemon, dashboard = two
    offer = await daemon.offer("telegram", 6666, "Mallory", "6666")
    assert offer.code is not None
    outcomes = await asyncio.gather(
        daemon.approve(offer.code, by="cli"),
        dashboard.approve(offer.code, by="dashboard"),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, PairingError)]
    assert len(refused) == 1 and refused[0].not_found
    assert [p.user_id for p in await daemon.people()] == [6666]
