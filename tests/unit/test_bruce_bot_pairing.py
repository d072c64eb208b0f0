"""Pairing codes and approvals over a real SQLite file (bruce_bot/pairing.py and
storage/pairing.py), on an injected clock: what a stranger is given, what the owner may do with
it, and the bad input the owner may type."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bruce_bot.domain import SessionKey
from bruce_bot.pairing import (
    ALPHABET,
    CODE_VALID_FOR,
    WELCOME,
    PairingError,
    PairingService,
    normalised,
    shown,
    who,
)
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores

OWNER, MALLORY, TRUDY = 1001, 6666, 7777
START = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}"
    await upgrade_schema(url)
    database = Database(url)
    try:
        yield Stores.open(database)
    finally:
        await database.dispose()


def service(stores: Stores, clock: Clock) -> PairingService:
    return PairingService(stores, {"telegram": [OWNER], "discord": []}, clock=clock)


async def test_a_stranger_gets_one_code_that_stays_theirs_until_it_expires(stores: Stores) -> None:
    clock = Clock()
    pairing = service(stores, clock)
    first = await pairing.offer("telegram", MALLORY, "Mallory", "6666")
    assert first.code is not None and first.minutes_left == 30
    assert len(first.code) == 9 and first.code[4] == "-"
    assert all(char in ALPHABET for char in first.code.replace("-", ""))
    clock.now += timedelta(minutes=10)
    again = await pairing.offer("telegram", MALLORY, "Mallory", "6666")
    assert again.code == first.code and again.minutes_left == 20
    clock.now = START + CODE_VALID_FOR
    assert await pairing.pending() == []
    with pytest.raises(PairingError, match="expired"):
        await pairing.approve(first.code, by="cli")
    fresh = await pairing.offer("telegram", MALLORY, "Mallory", "6666")
    assert fresh.code is not None and fresh.code != first.code


async def test_at_most_ten_wait_per_channel(stores: Stores) -> None:
    pairing = service(stores, Clock())
    for user_id in range(1, 11):
        assert (await pairing.offer("telegram", user_id, "", str(user_id))).code is not None
    assert (await pairing.offer("telegram", 11, "", "11")).code is None
    assert (await pairing.offer("discord", 11, "", "11")).code is not None  # another channel
    assert (await pairing.offer("telegram", 2, "", "2")).code is not None  # still theirs


@pytest.mark.parametrize(
    ("user_id", "username", "name", "shown"),
    [
        (6666, "mallory", "Mallory", "6666 @mallory — name they chose: “Mallory”"),
        (6666, "", "Mallory", "6666 — name they chose: “Mallory”"),
        (6666, "mallory", "@mallory", "6666 @mallory"),  # the name only repeats the handle
        (6666, "", "", "6666"),
        (6666, "m", "Alice\u202e\u200b\nthe owner", "6666 @m — name they chose: “Alice the owner”"),
        (6666, "", "A" * 100, f"6666 — name they chose: “{'A' * 63}…”"),
    ],
)
def test_who_shows_the_id_and_username_first_and_the_chosen_name_last_as_theirs(
    user_id: int, username: str, name: str, shown: str
) -> None:
    assert who(user_id, username, name) == shown


async def test_a_code_works_once_in_any_case_and_the_person_is_welcomed(stores: Stores) -> None:
    pairing = service(stores, Clock())
    offer = await pairing.offer("telegram", MALLORY, "Mallory", "6666")
    assert offer.code is not None
    assert not await pairing.is_approved("telegram", MALLORY)
    person = await pairing.approve(f"  {offer.code.lower().replace('-', ' ')} ", by="dashboard")
    assert (person.channel, person.user_id, person.name) == ("telegram", MALLORY, "Mallory")
    assert await pairing.is_approved("telegram", MALLORY)
    assert not await pairing.is_approved("discord", MALLORY)
    with pytest.raises(PairingError, match="used, denied or has expired") as refused:
        await pairing.approve(offer.code, by="dashboard")
    assert refused.value.not_found
    # "You're in" waits in the stranger's chat for the outbox (none here: the CLI's case).
    session = await stores.sessions.find(SessionKey("telegram", "6666"))
    assert session is not None
    [welcome] = await stores.messages.recent(session.id)
    assert (welcome.role, welcome.content, welcome.status) == ("assistant", WELCOME, "pending")
    people = await pairing.people()
    assert [(p.channel, p.user_id, p.source, p.revocable) for p in people] == [
        ("telegram", OWNER, "config", False),
        ("telegram", MALLORY, "dashboard", True),
    ]


async def test_deny_and_revoke(stores: Stores) -> None:
    pairing = service(stores, Clock())
    offer = await pairing.offer("discord", TRUDY, "Trudy", "555")
    assert offer.code is not None
    denied = await pairing.deny(offer.code)
    assert denied.user_id == TRUDY
    with pytest.raises(PairingError):
        await pairing.approve(offer.code, by="cli")
    assert not await pairing.is_approved("discord", TRUDY)
    again = await pairing.offer("discord", TRUDY, "Trudy", "555")
    assert again.code is not None
    await pairing.approve(again.code, by="cli")
    await pairing.revoke("discord", TRUDY)
    assert not await pairing.is_approved("discord", TRUDY)
    with pytest.raises(PairingError, match="not approved") as missing:
        await pairing.revoke("discord", TRUDY)
    assert missing.value.not_found
    with pytest.raises(PairingError, match=r"allowed_user_ids in config\.yml") as yaml_user:
        await pairing.revoke("telegram", OWNER)
    assert not yaml_user.value.not_found


@pytest.mark.parametrize(
    ("typed", "wrong"),
    [
        ("K7QM-X3P", "has 7 letters"),
        ("K7QM-X3PA9", "has 9 letters"),
        ("K0QM-X3PA", "'0' never appear"),
        ("hello", "has 5 letters and digits and 'LO' never appear"),
        ("", "has 0 letters"),
    ],
)
def test_a_malformed_code_is_refused_naming_what_is_wrong(typed: str, wrong: str) -> None:
    with pytest.raises(PairingError, match=wrong) as refused:
        normalised(typed)
    assert "K7QM-X3PA" in str(refused.value)


def test_codes_read_in_any_case_with_or_without_the_dash() -> None:
    assert normalised("k7qm-x3pa") == normalised("K7QMX3PA") == normalised(" k7qm x3pa ")
    assert shown(normalised("k7qmx3pa")) == "K7QM-X3PA"
