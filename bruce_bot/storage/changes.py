"""The change feed: tells the other Bruce processes on the same database what this one changed.

Stores cache rows in memory; when several processes share one PostgreSQL database, a write by one
must reach the caches of the others. A store publishes a notice (a topic such as `settings` and a
key such as the setting's name) after each write, best inside the write's own transaction so that
it goes out at the commit and never for a rollback; every other process's feed calls the
subscribers of that topic with the key, and they forget or re-read what it names. The key `"*"`
means "anything of the topic may have changed": the feed sends it to every subscriber after it
reconnects from a lost connection, since notices sent meanwhile are gone.

On SQLite there is one process (the instance lock), so `LocalFeed` does nothing at all. On
PostgreSQL, `PostgresFeed` listens (LISTEN/NOTIFY) on one channel over a connection of its own,
checks that connection every few seconds and reconnects with backoff when it is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from sqlalchemy import pool, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

log = structlog.get_logger(__name__)

CHANNEL = "bruce_changes"
EVERYTHING = "*"
# PostgreSQL refuses payloads of 8000 bytes or more; notices are ids and names, far shorter.
MAX_PAYLOAD_BYTES = 1000
CHECK_SECONDS = 5.0  # how often the listening connection is checked (and the check's timeout)
FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 15.0
CONNECT_TIMEOUT_SECONDS = 10.0
PUBLISH_TIMEOUT_SECONDS = 5.0
# The longest a stop waits for each of its two steps (the background task, then the connections).
STOP_TIMEOUT_SECONDS = 2.0
APPLICATION_NAME = "bruce-changes"
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")

Subscriber = Callable[[str], None]


class ChangeFeed(Protocol):
    async def start(self) -> None:
        """Begin listening; never raises when the database is away (it retries meanwhile)."""

    async def stop(self) -> None:
        """Stop listening, within a few seconds whatever the database does."""

    def subscribe(self, topic: str, callback: Subscriber) -> None:
        """Call `callback(key)` on the event loop for every notice of `topic` from another
        process (and with `"*"` after a lost connection)."""

    async def publish(self, topic: str, key: str = "") -> None:
        """Tell the other processes, in a short transaction of its own; never raises."""

    async def publish_with(self, connection: AsyncConnection, topic: str, key: str = "") -> None:
        """Tell the other processes when `connection`'s open transaction commits (never if it
        rolls back)."""


class Refresh:
    """What a subscriber does about notices that take I/O (re-reading settings, reconnecting):
    `work` runs in a task of its own, one run at a time; a notice during a run makes one more
    run after it, so the last run always reads what the last notice announced, however many
    notices came (a save of five settings sends five)."""

    def __init__(self, work: Callable[[], Awaitable[None]], name: str) -> None:
        self._work = work
        self._name = name
        self._again = False
        self._task: asyncio.Task[None] | None = None

    def __call__(self) -> None:
        self._again = True
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def _run(self) -> None:
        while self._again:
            self._again = False
            try:
                await self._work()
            except Exception:  # a notice must never take the process down
                log.exception("change_refresh_failed", name=self._name)

    async def settled(self) -> None:
        """Returns once no run is pending (for an orderly stop, and tests)."""
        while self._task is not None and not self._task.done():
            await self._task


class LocalFeed:
    """One process on SQLite: nobody else to tell, nothing to hear."""

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def subscribe(self, topic: str, callback: Subscriber) -> None:
        pass

    async def publish(self, topic: str, key: str = "") -> None:
        pass

    async def publish_with(self, connection: AsyncConnection, topic: str, key: str = "") -> None:
        pass


def open_feed(url: str, origin: str) -> ChangeFeed:
    """The feed for the database at `url`; `origin` names this process among those sharing it."""
    if make_url(url).get_backend_name() == "postgresql":
        return PostgresFeed(url, origin)
    return LocalFeed()


class PostgresFeed:
    """LISTEN/NOTIFY on `CHANNEL`; payloads are JSON `{"o": origin, "t": topic, "k": key}`."""

    def __init__(
        self,
        database_url: str,
        origin: str,
        *,
        check_seconds: float = CHECK_SECONDS,
        max_retry_seconds: float = MAX_RETRY_SECONDS,
    ) -> None:
        self._origin = origin
        self._check_seconds = check_seconds
        self._max_retry_seconds = max_retry_seconds
        url = make_url(database_url)
        self._where = {"host": url.host, "database": url.database}  # never the password
        # The listener's own connection, outside any pool; named so that an operator (or a test)
        # finds it in pg_stat_activity. PostgreSQL keeps 63 bytes of the name.
        name = f"{APPLICATION_NAME} {origin}"[:63]
        self._listen_engine = create_async_engine(
            database_url,
            poolclass=pool.NullPool,
            connect_args={"server_settings": {"application_name": name}},
        )
        # `publish` is rare (most notices ride on the writer's transaction): one pooled
        # connection, pinged before use, is plenty.
        self._publish_engine: AsyncEngine = create_async_engine(
            database_url, pool_size=1, max_overflow=2, pool_pre_ping=True
        )
        self._subscribers: dict[str, list[Subscriber]] = {}
        self._connection: AsyncConnection | None = None
        self._driver: Any = None  # asyncpg's connection under `_connection`
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # ---- the protocol ----------------------------------------------------------------------

    async def start(self) -> None:
        """Listen before returning when the database answers (so nothing written after the start
        is missed); otherwise go on trying in the background."""
        self._stopping = False
        try:
            await asyncio.wait_for(self._connect(), CONNECT_TIMEOUT_SECONDS)
            first_failed = False
        except Exception as exc:
            log.warning("change_feed_connect_failed", error=repr(exc), **self._where)
            await self._discard()
            first_failed = True
        self._task = asyncio.create_task(self._run(first_failed), name="change-feed")

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # Bounded: a task cancelled inside the driver (a connect, a check) must not hold the
            # stop up; the connection is dropped below anyway.
            await asyncio.wait({task}, timeout=STOP_TIMEOUT_SECONDS)
        # Politely, side by side, each bounded: a silent server costs one timeout, not three.
        await asyncio.gather(
            self._discard(lost=False),
            _dispose(self._listen_engine),
            _dispose(self._publish_engine),
        )
        log.info("change_feed_stopped", origin=self._origin)

    def subscribe(self, topic: str, callback: Subscriber) -> None:
        self._subscribers.setdefault(topic, []).append(callback)

    async def publish(self, topic: str, key: str = "") -> None:
        payload = self._payload(topic, key)
        if payload is None:
            return
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_SECONDS):
                async with self._publish_engine.begin() as connection:
                    await connection.execute(_NOTIFY, {"channel": CHANNEL, "payload": payload})
        except Exception as exc:
            # This notice is lost. When the database was away, the others' feeds lost their
            # connections too, and they refresh everything once back.
            log.warning("change_feed_publish_failed", topic=topic, key=key, error=repr(exc))

    async def publish_with(self, connection: AsyncConnection, topic: str, key: str = "") -> None:
        """pg_notify in the caller's transaction. A failure here is not caught: the transaction
        is aborted by then, so the caller's write fails with it rather than half-succeeding."""
        payload = self._payload(topic, key)
        if payload is not None:
            await connection.execute(_NOTIFY, {"channel": CHANNEL, "payload": payload})

    # ---- listening ---------------------------------------------------------------------------

    async def _run(self, reconnecting: bool) -> None:
        """Watch the connection; after a loss (or a failed first try), reconnect with backoff
        and tell every subscriber that anything may have changed meanwhile."""
        delay = FIRST_RETRY_SECONDS
        while True:
            if reconnecting:
                try:
                    await asyncio.wait_for(self._connect(), CONNECT_TIMEOUT_SECONDS)
                except Exception as exc:
                    log.warning(
                        "change_feed_connect_failed",
                        error=repr(exc),
                        retry_in=delay,
                        **self._where,
                    )
                    await self._discard()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self._max_retry_seconds)
                    continue
                delay = FIRST_RETRY_SECONDS
                self._deliver_everything()
            reason = await self._watch()
            log.warning("change_feed_lost", reason=reason, **self._where)
            await self._discard()
            reconnecting = True

    async def _connect(self) -> None:
        self._lost.clear()
        connection = await self._listen_engine.connect()
        self._connection = connection
        # Autocommit: LISTEN takes effect at once and no transaction stays open while we listen.
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        raw = await connection.get_raw_connection()
        driver: Any = raw.driver_connection  # asyncpg's: SQLAlchemy does not type it
        self._driver = driver
        driver.add_termination_listener(self._terminated)
        await driver.add_listener(CHANNEL, self._notified)
        log.info("change_feed_listening", origin=self._origin, channel=CHANNEL, **self._where)

    async def _watch(self) -> str:
        """Returns why the connection is no longer usable."""
        connection = self._connection
        assert connection is not None
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), self._check_seconds)
                return "terminated"
            except TimeoutError:
                pass
            try:  # a connection that went silent (a dead network) shows only here
                await asyncio.wait_for(connection.execute(text("SELECT 1")), self._check_seconds)
            except Exception as exc:
                return repr(exc)

    async def _discard(self, lost: bool = True) -> None:
        """Drop the listening connection; after a loss without talking to the server."""
        connection, self._connection = self._connection, None
        driver, self._driver = self._driver, None
        if connection is None:
            return
        with contextlib.suppress(Exception):
            if driver is not None:
                if lost:
                    driver.terminate()  # a silent server would only make a polite close wait
                else:  # asyncpg's own timeout: it drops the socket when the server is silent
                    await driver.close(timeout=STOP_TIMEOUT_SECONDS)
        # The driver's connection is closed by now, so SQLAlchemy's close sends nothing: this
        # only hands the connection back (and quiets the garbage collector's warning).
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
                if lost:
                    await connection.invalidate()
                await connection.close()

    def _terminated(self, driver: Any) -> None:
        # Only the connection we listen on: the one dropped before a reconnect reports late.
        if driver is self._driver and not self._stopping:
            self._lost.set()

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            notice = json.loads(payload)
            origin, topic, key = notice["o"], notice["t"], notice["k"]
            if not all(isinstance(part, str) for part in (origin, topic, key)):
                raise TypeError("origin, topic and key must be strings")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("change_feed_bad_notice", payload=payload[:200], error=repr(exc))
            return
        if origin == self._origin:
            return  # our own write: our caches are already true
        self._deliver(topic, key)

    def _deliver(self, topic: str, key: str) -> None:
        for callback in list(self._subscribers.get(topic, ())):
            try:
                callback(key)
            except Exception:
                log.exception("change_feed_subscriber_failed", topic=topic, key=key)

    def _deliver_everything(self) -> None:
        log.info("change_feed_refreshing_everything", topics=sorted(self._subscribers))
        for topic in list(self._subscribers):
            self._deliver(topic, EVERYTHING)

    def _payload(self, topic: str, key: str) -> str | None:
        payload = _encode(self._origin, topic, key)
        if len(payload.encode()) <= MAX_PAYLOAD_BYTES:
            return payload
        # A cut key would name something else: "everything of the topic" is always true.
        log.warning("change_feed_key_too_long", topic=topic[:100], key=key[:100])
        payload = _encode(self._origin, topic, EVERYTHING)
        if len(payload.encode()) <= MAX_PAYLOAD_BYTES:
            return payload
        log.warning("change_feed_notice_dropped", topic=topic[:100], origin=self._origin[:100])
        return None


async def _dispose(engine: AsyncEngine) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
            await engine.dispose()


def _encode(origin: str, topic: str, key: str) -> str:
    return json.dumps({"o": origin, "t": topic, "k": key}, separators=(",", ":"))
