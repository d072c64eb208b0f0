"""Session leases on a real PostgreSQL server: two inboxes (two processes' worth of Bruce's
inbox, each with its own engine and its own lease owner) take messages of the same chats.

The turn is a recorder standing in for the agent: it notes which inbox answered which messages
and finishes them the way a turn does (`finish_turn`). What a user would notice is asserted:
every message answered once, in the order it was sent, however the messages were spread over
the two processes; a process that dies is taken over once its lease lapses, and not before.
(The same through `bruce run` subprocesses and Telegram is in test_cluster.py.)
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest
from sqlalchemy import text

from bruce_bot.domain import InboundMessage, SessionKey
from bruce_bot.messaging.inbox import Inbox, InboxSettings, QueuedMessage
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.leases import Claimant, PostgresLeases
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores
from tests.conftest import wait_until

LEASE_SECONDS = 1.0
WITHIN = 20.0


@dataclass
class Process:
    """One process's inbox over the shared database, and the turns it ran."""

    name: str
    stores: Stores
    inbox: Inbox
    leases: PostgresLeases
    turns: list[tuple[int, list[str]]] = field(default_factory=list)  # (session, texts)
    # Every process's turns in the order they finished: (process, session, texts).
    ledger: list[tuple[str, int, list[str]]] = field(default_factory=list)
    think: float = 0.0
    hold: asyncio.Event | None = None  # a turn waits for it: the process "hangs" in the turn


async def open_process(name: str, url: str, peers: list[Process]) -> Process:
    database = Database(url)
    claimant = Claimant(f"test:{name}", LEASE_SECONDS)  # one process: its leases and claims
    stores = Stores.open(database, claimant=claimant)
    leases = PostgresLeases(database.engine, claimant)
    process: Process

    async def turn(session: SessionRecord, batch: list[QueuedMessage]) -> None:
        if process.hold is not None:
            await process.hold.wait()
        await asyncio.sleep(process.think)
        await stores.messages.finish_turn(
            session.id, [item.id for item in batch], "done", f"re {batch[-1].text}", "chat"
        )
        process.turns.append((session.id, [item.text for item in batch]))
        process.ledger.append((name, session.id, [item.text for item in batch]))

    async def announce(session_id: int) -> None:  # what the change feed does between processes
        for peer in peers:
            if peer is not process:
                peer.inbox.poke(session_id)

    inbox = Inbox(
        stores,
        turn,
        leases,
        InboxSettings({"web"}, max_concurrent_sessions=8, max_message_chars=10_000),
        announce=announce,
    )
    process = Process(name, stores, inbox, leases, ledger=peers[0].ledger if peers else [])
    peers.append(process)
    return process


@pytest.fixture
async def processes(postgres_url: str) -> AsyncIterator[list[Process]]:
    await upgrade_schema(postgres_url)
    peers: list[Process] = []
    yield peers
    for process in peers:
        process.inbox.stop_intake()
        if process.hold is not None:
            process.hold.set()
        await process.inbox.drain(5)
        await process.stores.database.dispose()


def message(chat: str, text: str) -> InboundMessage:
    return InboundMessage("web", chat, text, user_id="u", user_name="U")


def answered(processes: Sequence[Process], session_id: int) -> list[tuple[str, list[str]]]:
    return [(name, texts) for name, sid, texts in processes[0].ledger if sid == session_id]


def flatten(turns: Sequence[tuple[str, list[str]]]) -> list[str]:
    return [text for _, texts in turns for text in texts]


async def test_messages_of_one_chat_spread_over_two_processes_are_answered_once_in_order(
    processes: list[Process], postgres_url: str
) -> None:
    seed = random.randrange(1_000_000)
    print(f"seed={seed}")
    rng = random.Random(seed)
    first = await open_process("a", postgres_url, processes)
    second = await open_process("b", postgres_url, processes)
    first.think = second.think = 0.05
    chats = [f"chat-{n}" for n in range(3)]
    sent: dict[str, list[str]] = {chat: [] for chat in chats}
    for number in range(60):
        chat = rng.choice(chats)
        text = f"{chat} #{number:02d}"
        sent[chat].append(text)
        # The same chat's messages reach either process, as behind a load balancer.
        assert (await rng.choice([first, second]).inbox.submit(message(chat, text))).accepted
        if rng.random() < 0.3:
            await asyncio.sleep(rng.uniform(0, 0.08))

    async def everything_answered() -> bool:
        return sum(len(texts) for p in processes for _, texts in p.turns) == 60

    await wait_until(everything_answered, WITHIN)
    for chat in chats:
        session = await first.stores.sessions.get_or_create(SessionKey("web", chat))
        turns = answered(processes, session.id)
        assert flatten(turns) == sent[chat], (seed, chat, turns)
    # Both processes did some of the work: the test spread it, and leases let it move.
    assert first.turns and second.turns, seed


async def test_a_frozen_process_is_taken_over_once_its_lease_lapsed_and_its_late_reply_dropped(
    processes: list[Process], postgres_url: str
) -> None:
    first = await open_process("a", postgres_url, processes)
    second = await open_process("b", postgres_url, processes)
    first.hold = asyncio.Event()  # "a" takes the chat and then never finishes its turn
    assert (await first.inbox.submit(message("chat", "hello"))).accepted
    session = await first.stores.sessions.get_or_create(SessionKey("web", "chat"))
    await wait_until(lambda: first.leases.holds(session.id), WITHIN)
    # While "a" is alive (its lease renewed), "b" leaves the chat alone, even at recovery.
    assert (await second.inbox.submit(message("chat", "are you there?"))).accepted
    await first.leases.renew()
    assert await second.inbox.recover() == 0
    assert second.turns == []

    # "a" freezes: its lease is no longer renewed. Once it lapsed, "b" answers both messages.

    async def taken_over() -> bool:
        await second.inbox.recover()
        return bool(second.turns)

    await wait_until(taken_over, WITHIN, interval=0.2)
    await wait_until(lambda: not second.inbox.busy_sessions, WITHIN)
    assert answered(processes, session.id) == [("b", ["hello", "are you there?"])]

    # "a" was only frozen: it wakes up and finishes its turn, but the messages are b's now, so
    # its reply is dropped and nothing is answered twice.
    first.hold.set()
    await wait_until(lambda: not first.inbox.busy_sessions, WITHIN)
    assert answered(processes, session.id) == [("b", ["hello", "are you there?"])]
    replies = await first.stores.messages.recent(session.id)
    assert [m.content for m in replies if m.role == "assistant"] == ["re are you there?"]
    assert not first.leases.holds(session.id)


async def _row_locks_waited_for(stores: Stores) -> bool:
    async with stores.database.engine.connect() as connection:
        waiting = await connection.execute(text("SELECT count(*) FROM pg_locks WHERE NOT granted"))
        return bool(waiting.scalar())


async def test_a_session_taken_while_a_renewal_runs_is_still_held_and_renewed(
    processes: list[Process], postgres_url: str
) -> None:
    # A worker takes a session while the renewal's update is under way: the update does not
    # see the new row, and must not judge it lost (its worker would stop while the row lived
    # on, renewed, with nobody to answer the chat).
    first = await open_process("a", postgres_url, processes)
    old = await first.stores.sessions.get_or_create(SessionKey("web", "old"))
    new = await first.stores.sessions.get_or_create(SessionKey("web", "new"))
    assert await first.leases.acquire(old.id)
    async with first.stores.database.engine.connect() as blocker:
        # Another transaction holds the old lease's row: the renewal waits on it, mid-update.
        await blocker.execute(
            text("SELECT 1 FROM session_leases WHERE session_id = :sid FOR UPDATE"),
            {"sid": old.id},
        )
        renewing = asyncio.create_task(first.leases.renew())
        await wait_until(lambda: _row_locks_waited_for(first.stores), WITHIN)
        assert await first.leases.acquire(new.id)
        await blocker.rollback()
    assert await renewing == set()
    assert first.leases.holds(new.id) and first.leases.holds(old.id)
    assert await first.leases.renew() == set()


async def test_a_lease_no_worker_holds_is_let_lapse_and_its_session_recovered(
    processes: list[Process], postgres_url: str
) -> None:
    # A lease row of ours that no worker has (its release failed while the database was away,
    # or its turn found it taken over) is not renewed: it lapses, and the session's waiting
    # message is taken by a recovery round instead of waiting for this process to die.
    first = await open_process("a", postgres_url, processes)
    session = await first.stores.sessions.get_or_create(SessionKey("web", "chat"))
    assert await first.stores.messages.add_inbound(session.id, message("chat", "hi"), "hi")
    assert await first.leases.acquire(session.id)
    first.leases.forget(session.id)

    async def orphaned_after_a_renewal() -> bool:
        await first.leases.renew()
        return session.id in await first.leases.orphaned(["web"])

    await wait_until(orphaned_after_a_renewal, WITHIN, interval=0.2)
