"""The change feed on SQLite: one process, so nothing is sent, nothing is heard, and the stores over
it keep serving their caches without asking anyone. And what the caching stores do with a notice
from another process, delivered here by hand (the real feed is tested on PostgreSQL in
tests/integration/postgres/test_postgres_changes.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bruce_bot.domain import SessionKey
from bruce_bot.storage.changes import LocalFeed, PostgresFeed, Refresh, open_feed
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores
from bruce_bot.storage.summaries import Summary
from tests.conftest import wait_until


async def test_the_local_feed_sends_nothing_and_calls_no_subscriber(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}"
    await upgrade_schema(url)
    database = Database(url)
    feed = LocalFeed()
    heard: list[str] = []
    feed.subscribe("settings", heard.append)
    await feed.start()
    try:
        stores = Stores.open(database, feed)
        await feed.publish("settings", "agent.system_prompt")
        async with database.engine.begin() as connection:
            await feed.publish_with(connection, "settings", "agent.system_prompt")
        await stores.settings.set("agent.system_prompt", {"text": "Be brief."})
        assert await stores.settings.get("agent.system_prompt") == {"text": "Be brief."}
    finally:
        await feed.stop()
        await database.dispose()
    assert heard == []
    assert stores.feed is feed


def test_stores_opened_without_a_feed_get_the_local_one(tmp_path: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}")
    assert isinstance(Stores.open(database).feed, LocalFeed)


def test_the_feed_follows_the_database_kind() -> None:
    assert isinstance(open_feed("sqlite+aiosqlite:///bruce.db", "here"), LocalFeed)
    assert isinstance(open_feed("postgresql+asyncpg://bruce:secret@db/bruce", "here"), PostgresFeed)


# ---- what the stores do with a notice (delivered by hand, two engines on one SQLite file) ---


class HandFeed(LocalFeed):
    """A feed whose notices the test delivers, as another process's would arrive."""

    def __init__(self) -> None:
        self.subscribers: dict[str, list[Callable[[str], None]]] = {}

    def subscribe(self, topic: str, callback: Callable[[str], None]) -> None:
        self.subscribers.setdefault(topic, []).append(callback)

    def deliver(self, topic: str, key: str) -> None:
        for callback in self.subscribers.get(topic, []):
            callback(key)


@pytest.fixture
async def two_processes(tmp_path: Path) -> AsyncIterator[tuple[Stores, Stores, HandFeed]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}"
    await upgrade_schema(url)
    first_db, second_db = Database(url), Database(url)
    feed = HandFeed()
    try:
        yield Stores.open(first_db), Stores.open(second_db, feed), feed
    finally:
        await first_db.dispose()
        await second_db.dispose()


async def test_a_session_notice_refreshes_the_held_record_in_place_and_follows_a_moved_chat(
    two_processes: tuple[Stores, Stores, HandFeed],
) -> None:
    first, second, feed = two_processes
    key = SessionKey("telegram", "7")
    held = await second.sessions.get_or_create(key)
    session = await first.sessions.get_or_create(key)
    await first.sessions.set_title(session.id, "Renamed")
    await first.sessions.move_chat(key, "-1007")
    assert (held.title, held.chat_id) == (None, "7")  # nobody told it yet

    feed.deliver("session", str(session.id))
    await wait_until(lambda: held.chat_id == "-1007", timeout=5)
    assert held.title == "Renamed"
    assert await second.sessions.find(SessionKey("telegram", "-1007")) is held
    assert await second.sessions.find(key) is None


async def test_a_refresh_never_moves_the_last_message_time_back(
    two_processes: tuple[Stores, Stores, HandFeed],
) -> None:
    first, second, feed = two_processes
    held = await second.sessions.get_or_create(SessionKey("console", "local"))
    now = datetime.now(UTC)
    second.sessions.touch(held.id, now)  # ahead of the row until the turn persists it
    await first.sessions.set_title(held.id, "Later")

    feed.deliver("session", "*")
    await wait_until(lambda: held.title == "Later", timeout=5)
    assert held.last_message_at == now


async def test_notices_make_settings_summaries_and_goals_read_again(
    two_processes: tuple[Stores, Stores, HandFeed],
) -> None:
    first, second, feed = two_processes
    session = await first.sessions.get_or_create(SessionKey("console", "local"))
    assert await second.settings.get("agent.system_prompt") is None
    assert await second.summaries.latest(session.id) is None
    assert await second.goals.open_tree(session.id) == ()
    await first.settings.set("agent.system_prompt", {"text": "Hi."})
    await first.summaries.save(session.id, "So far.", 5)
    await first.goals.add(session.id, "Ship it", None)
    assert await second.settings.get("agent.system_prompt") is None  # cached

    feed.deliver("settings", "agent.system_prompt")
    feed.deliver("summary", str(session.id))
    feed.deliver("goals", "*")
    assert await second.settings.get("agent.system_prompt") == {"text": "Hi."}
    assert await second.summaries.latest(session.id) == Summary("So far.", 5)
    assert [goal.description for goal in await second.goals.open_tree(session.id)] == ["Ship it"]

    feed.deliver("summary", "not a session id")  # logged and ignored


# ---- Refresh: what a subscriber does about notices that take I/O ---------------------------


async def test_a_refresh_runs_once_more_after_notices_during_a_run_never_two_at_once() -> None:
    gate, runs, running = asyncio.Event(), list[int](), list[int]()

    async def work() -> None:
        running.append(1)
        assert len(running) == 1, "two runs at once"
        runs.append(len(runs))
        await gate.wait()
        running.pop()

    refresh = Refresh(work, "test")
    refresh()
    await asyncio.sleep(0)  # the first run has begun and waits
    for _ in range(5):  # five notices during it: one more run, not five
        refresh()
    gate.set()
    await refresh.settled()
    assert runs == [0, 1]


async def test_a_failing_refresh_is_logged_and_the_next_notice_runs_it_again() -> None:
    calls: list[int] = []

    async def work() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database gone")

    refresh = Refresh(work, "flaky")
    with capture_logs() as logs:
        refresh()
        await refresh.settled()
        refresh()
        await refresh.settled()
    assert len(calls) == 2
    assert [entry["name"] for entry in logs if entry["event"] == "change_refresh_failed"] == [
        "flaky"
    ]
