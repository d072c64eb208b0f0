"""Several Bruce processes on one PostgreSQL database keep their caches true through the change
feed (LISTEN/NOTIFY): what one writes, the others see.

Each test gets a fresh database on the server of `tests/integration/postgres/server.py` and plays
two processes in one event loop: two `Stores`, each on an engine and a `PostgresFeed` of its own
with its own origin. A third set of stores without a feed stands for a writer whose notices were
lost. The listener's connection is killed with `pg_terminate_backend`, and a relay in front of the
server goes silent (nothing passes, nothing closes) to stand for a server that is gone. Every wait
is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs

from bruce_bot.domain import SessionKey
from bruce_bot.storage.changes import APPLICATION_NAME, PostgresFeed
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.summaries import Summary
from tests.conftest import wait_until

CHECK_SECONDS = 0.2  # how often the listener checks its connection, in these tests
PROMPT = "agent.system_prompt"


# ---- helpers -------------------------------------------------------------------------------


def new_feed(url: str, origin: str) -> PostgresFeed:
    return PostgresFeed(url, origin, check_seconds=CHECK_SECONDS, max_retry_seconds=0.5)


@contextlib.asynccontextmanager
async def process(url: str, origin: str) -> AsyncIterator[Stores]:
    """The stores of one Bruce process, with its feed listening."""
    database = Database(url)
    feed = new_feed(url, origin)
    await feed.start()
    try:
        yield Stores.open(database, feed)
    finally:
        await feed.stop()
        await database.dispose()


@pytest.fixture
async def processes(postgres_url: str) -> AsyncIterator[tuple[Stores, Stores]]:
    await upgrade_schema(postgres_url)
    async with process(postgres_url, "first") as first, process(postgres_url, "second") as second:
        yield first, second


@contextlib.asynccontextmanager
async def unannounced(url: str) -> AsyncIterator[Stores]:
    """Stores that write without telling anyone (a writer whose notices were lost)."""
    database = Database(url)
    try:
        yield Stores.open(database)
    finally:
        await database.dispose()


def sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as connection:
        return connection.execute(query, params).fetchall()  # type: ignore[arg-type]


def listener_pids(url: str, origin: str) -> list[int]:
    query = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s"
    )
    return [row[0] for row in sql(url, query, f"{APPLICATION_NAME} {origin}")]


def recorder(stores: Stores, topic: str) -> list[str]:
    """The keys of the notices of `topic` that `stores`' feed hears, in order."""
    heard: list[str] = []
    stores.feed.subscribe(topic, heard.append)
    return heard


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Relay:
    """A TCP relay in front of the server. `freeze` makes the network go silent: nothing passes
    either way and nothing is closed, the worst a client can meet."""

    def __init__(self, url: str) -> None:
        target = make_url(url)
        self._target = (target.host or "127.0.0.1", target.port or 5432)
        self.port = free_port()
        self.url = target.set(port=self.port).render_as_string(hide_password=False)
        self._server: asyncio.Server | None = None
        self._frozen = False
        self._writers: list[asyncio.StreamWriter] = []
        self._serving: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    def freeze(self) -> None:
        self._frozen = True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        if self._serving:  # the aborted streams end their relays
            await asyncio.wait(self._serving, timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        self._writers.append(writer)
        if self._frozen:
            return  # accepted, never answered
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers.append(up_writer)
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if not self._frozen:
                writer.write(data)
                await writer.drain()
        if not self._frozen:
            writer.close()


# ---- what one process writes, the other sees -------------------------------------------------


async def test_a_setting_written_by_one_process_is_seen_by_the_other(
    processes: tuple[Stores, Stores],
) -> None:
    first, second = processes
    assert await second.settings.get(PROMPT) is None  # cached as unset

    await first.settings.set(PROMPT, {"text": "Answer in French."})
    await wait_until(lambda: second.settings.get(PROMPT), timeout=5)
    assert await second.settings.get(PROMPT) == {"text": "Answer in French."}

    await first.settings.unset(PROMPT)
    await wait_until(lambda: _is_none(second.settings.get(PROMPT)), timeout=5)


async def _is_none(value: Any) -> bool:
    return await value is None


async def test_a_session_changed_by_one_process_changes_the_record_the_other_holds(
    processes: tuple[Stores, Stores],
) -> None:
    first, second = processes
    key = SessionKey("telegram", "100")
    held = await second.sessions.get_or_create(key)  # as a running turn holds it
    session = await first.sessions.get_or_create(key)
    assert session.id == held.id

    await first.sessions.set_title(session.id, "Trip to Lisbon")
    await first.sessions.set_active_skills(session.id, ["travel", "budget"])
    await first.sessions.set_active_workflow(session.id, "planning")
    assert await first.sessions.set_nickname(session.id, "lisbon")
    await first.sessions.set_context_start(session.id, 42)
    await wait_until(
        lambda: (
            (
                held.title,
                held.active_skills,
                held.active_workflow,
                held.nickname,
                held.context_start_message_id,
            )
            == ("Trip to Lisbon", ["travel", "budget"], "planning", "lisbon", 42)
        ),
        timeout=5,
    )
    assert await second.sessions.get(session.id) is held

    # The chat became a supergroup with a new id: the other process's record and index follow.
    assert await first.sessions.move_chat(key, "-100200") is session
    await wait_until(lambda: held.chat_id == "-100200", timeout=5)
    assert await second.sessions.find(SessionKey("telegram", "-100200")) is held
    assert await second.sessions.find(key) is None


async def test_a_summary_and_goals_written_by_one_process_are_seen_by_the_other(
    processes: tuple[Stores, Stores],
) -> None:
    first, second = processes
    session = await first.sessions.get_or_create(SessionKey("console", "local"))
    assert await second.summaries.latest(session.id) is None  # cached
    assert await second.goals.open_tree(session.id) == ()  # cached

    await first.summaries.save(session.id, "They planned a trip.", 10)
    await wait_until(
        lambda: _equals(second.summaries.latest(session.id), Summary("They planned a trip.", 10)),
        timeout=5,
    )

    goal = await first.goals.add(session.id, "Book the flights", None)
    await wait_until(lambda: second.goals.open_tree(session.id), timeout=5)
    assert [g.description for g in await second.goals.open_tree(session.id)] == ["Book the flights"]
    await first.goals.complete(goal)
    await wait_until(lambda: _equals(second.goals.open_tree(session.id), ()), timeout=5)


async def _equals(value: Any, expected: Any) -> bool:
    return await value == expected


# ---- who hears what ------------------------------------------------------------------------


async def test_a_process_does_not_hear_its_own_notices(
    processes: tuple[Stores, Stores],
) -> None:
    first, second = processes
    first_heard, second_heard = recorder(first, "probe"), recorder(second, "probe")

    await first.feed.publish("probe", "from first")
    await second.feed.publish("probe", "from second")

    # Notices arrive in commit order: once the later one is heard, the earlier one was not.
    await wait_until(lambda: "from second" in first_heard, timeout=5)
    await wait_until(lambda: "from first" in second_heard, timeout=5)
    assert first_heard == ["from second"]
    assert second_heard == ["from first"]


async def test_a_rolled_back_write_notifies_nobody(
    processes: tuple[Stores, Stores],
) -> None:
    first, second = processes
    heard = recorder(second, "session")
    taken = await first.sessions.get_or_create(SessionKey("console", "a"))
    other = await first.sessions.get_or_create(SessionKey("console", "b"))
    assert await first.sessions.set_nickname(taken.id, "scout")
    await wait_until(lambda: heard == [str(taken.id)], timeout=5)

    with pytest.raises(RuntimeError):
        async with first.database.engine.begin() as connection:
            await first.feed.publish_with(connection, "session", "rolled back")
            raise RuntimeError("changed my mind")
    assert not await first.sessions.set_nickname(other.id, "scout")  # taken: rolled back
    await first.sessions.set_title(other.id, "Second thoughts")

    await wait_until(lambda: len(heard) >= 2, timeout=5)
    assert heard == [str(taken.id), str(other.id)]


# ---- a lost connection ---------------------------------------------------------------------


async def test_changes_missed_while_the_listener_was_away_are_seen_once_it_reconnects(
    postgres_url: str, processes: tuple[Stores, Stores]
) -> None:
    _first, second = processes
    held = await second.sessions.get_or_create(SessionKey("console", "local"))
    assert await second.settings.get(PROMPT) is None
    assert await second.summaries.latest(held.id) is None
    assert await second.goals.open_tree(held.id) == ()

    # Written without a notice, as if it had been sent while the listener was away.
    async with unannounced(postgres_url) as quiet:
        await quiet.settings.set(PROMPT, {"text": "Be brief."})
        await quiet.sessions.set_title(held.id, "Renamed elsewhere")
        await quiet.summaries.save(held.id, "Missed summary.", 3)
        await quiet.goals.add(held.id, "Missed goal", None)
    assert await second.settings.get(PROMPT) is None  # still the cache: nobody told it
    assert held.title is None

    [pid] = listener_pids(postgres_url, "second")
    with capture_logs() as logs:
        sql(postgres_url, "SELECT pg_terminate_backend(%s)", pid)
        await wait_until(lambda: held.title == "Renamed elsewhere", timeout=10)
    events = [entry["event"] for entry in logs]
    assert events.index("change_feed_lost") < events.index("change_feed_listening")
    assert await second.settings.get(PROMPT) == {"text": "Be brief."}
    assert await second.summaries.latest(held.id) == Summary("Missed summary.", 3)
    assert [goal.description for goal in await second.goals.open_tree(held.id)] == ["Missed goal"]
    [new_pid] = listener_pids(postgres_url, "second")
    assert new_pid != pid


async def test_the_feed_starts_while_the_server_is_away_and_listens_once_it_is_back(
    postgres_url: str,
) -> None:
    relay = Relay(postgres_url)  # not started yet: connections are refused
    feed = new_feed(relay.url, "late")
    heard: list[str] = []
    feed.subscribe("probe", heard.append)
    try:
        with capture_logs() as logs:
            await asyncio.wait_for(feed.start(), 5)  # does not raise
        assert "change_feed_connect_failed" in [entry["event"] for entry in logs]

        await relay.start()
        await wait_until(lambda: "*" in heard, timeout=10)  # whatever it may have missed
        async with process(postgres_url, "other") as other:
            await wait_until(_heard_after_publish(other, heard, "hello"), timeout=5)
    finally:
        await feed.stop()
        await relay.close()


def _heard_after_publish(stores: Stores, heard: list[str], key: str) -> Any:
    async def check() -> bool:
        if key not in heard:
            await stores.feed.publish("probe", key)  # again: the first may beat the LISTEN
        return key in heard

    return check


@pytest.mark.parametrize("when", ["idle", "after noticing the loss"])
async def test_stop_returns_promptly_when_the_server_has_gone_silent(
    postgres_url: str, when: str
) -> None:
    relay = Relay(postgres_url)
    await relay.start()
    feed = new_feed(relay.url, "stranded")
    try:
        with capture_logs() as logs:
            await feed.start()
            assert "change_feed_listening" in [entry["event"] for entry in logs]
            relay.freeze()
            if when == "after noticing the loss":  # it is reconnecting into the silence now
                await wait_until(
                    lambda: "change_feed_lost" in [entry["event"] for entry in logs], timeout=5
                )
            started = time.monotonic()
            await asyncio.wait_for(feed.stop(), 15)
            assert time.monotonic() - started < 8
    finally:
        await relay.close()
