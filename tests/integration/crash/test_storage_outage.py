"""Nothing sent is lost when storage fails: a real full disk and a PostgreSQL server stopped.

The SQLite file lives on a small tmpfs mounted for the test (the tests run as root, as CI
does); "full" is the file system's own ENOSPC, reached by writing a filler file until the disk
takes no more, and freed by deleting it. The PostgreSQL test stops and starts a throwaway
server of its own. Telegram (long polling in a real `bruce run` process, and a webhook),
Discord and the web chat each go through an outage: while it lasts, nothing is acknowledged
(Telegram's offset does not move, the webhook answers 503, the web chat's POST 503), /healthz
says degraded with the reason, and the log says so once; once it is over, every message is
stored once, in order, and answered once. Every wait is for a condition, with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import make_config, running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.fakes.discord_server import FakeDiscordServer, user_payload
from tests.fakes.telegram_server import FakeTelegramServer
from tests.integration.crash.test_restart import Daemon, free_port
from tests.integration.postgres.server import PostgresServer
from tests.integration.support import messages_of

DISK_SIZE = "24m"
OUTAGE = 3.0  # seconds storage stays down, by Bruce's clock (its /healthz says since when)
WITHIN = 60.0  # for a reply once storage is back (retries pause 5 s at most)
ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
BOB = FakeTelegramServer.user(1002, "Bob")
OWNER_ID = 111_000_000_000_000_001
OWNER = user_payload(OWNER_ID, "ada", global_name="Ada Lovelace")


def echo(body: dict[str, Any]) -> str:
    return f"echo: {last_user_text(body)}"


# ---- a small disk that fills up --------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_SIZE mounted under tmp_path (unmounted after the test)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI and `make test` run as root)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)


def fill(disk: Path) -> Path:
    """Write a filler file until the file system answers ENOSPC; returns it (delete it to free
    the space)."""
    filler = disk / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, chunk)
        try:
            os.write(descriptor, b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError("the disk still took a byte after filling it")
    finally:
        os.close(descriptor)
    return filler


class Health:
    """/healthz polled in the background: every answer seen, for the test to check."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Health:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _poll(self) -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    response = await client.get(f"{self._url}/healthz")
                    self.answers.append((response.status_code, response.json()))
                await asyncio.sleep(0.05)

    def degraded(self) -> list[dict[str, Any]]:
        return [body for status, body in self.answers if status == 503]

    def degraded_for(self, seconds: float) -> bool:
        """Bruce has said "degraded" for `seconds` by its own clock: the outage has lasted
        through several retries (0.25 s, 0.5 s, 1 s, ...), not just one failed attempt."""
        return any((body.get("since_seconds") or 0) >= seconds for body in self.degraded())

    @property
    def last(self) -> tuple[int, dict[str, Any]] | None:
        return self.answers[-1] if self.answers else None


CONSOLE_LINE = re.compile(r"^\S+ \[\s*\w+\s*\] (\S+)")


def log_events(lines: list[str]) -> list[str]:
    """The event names of Bruce's log lines (console or JSON format)."""
    events = []
    for line in lines:
        if (console := CONSOLE_LINE.match(line)) is not None:
            events.append(console.group(1))
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and "event" in entry:
                events.append(str(entry["event"]))
    return events


def update_id_of(telegram: FakeTelegramServer, message: dict[str, Any]) -> int:
    return next(uid for uid, update in telegram.queued.items() if update.get("message") is message)


def settled(data_dir: Path) -> bool:
    """Every message answered and every reply's delivery recorded: nothing is writing now."""
    rows = messages_of(data_dir)
    return bool(rows) and all(
        row["status"] in ("done", "sent") for row in rows if row["role"] in ("user", "assistant")
    )


def replies_with(telegram: FakeTelegramServer, chat_id: int, text: str) -> int:
    return sum(text in reply for reply in telegram.texts_to(chat_id))


async def all_answered_once(
    telegram: FakeTelegramServer, expected: dict[int, list[str]], within: float = WITHIN
) -> None:
    """Wait until each text was answered, then check that it was answered exactly once."""
    await telegram.wait_for(
        lambda: all(replies_with(telegram, chat, t) for chat, ts in expected.items() for t in ts),
        within,
    )
    for chat, texts in expected.items():
        for text in texts:
            assert replies_with(telegram, chat, text) == 1, (text, telegram.texts_to(chat))


# ---- Telegram long polling, a real `bruce run`, a full disk ------------------------------------


async def test_full_disk_holds_telegram_updates_back_and_answers_them_once_space_returns(
    tmp_path: Path, small_disk: Path
) -> None:
    data_dir = small_disk / "data"
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(responder=echo) as llm,
    ):
        telegram_section = {
            "enabled": True,
            "token": telegram.token,
            "base_url": telegram.base_url,
            "allowed_user_ids": [ALICE.id, BOB.id],
            "streaming": False,
        }
        daemon = Daemon(
            tmp_path,
            llm.base_url,
            app={"data_dir": str(data_dir)},
            database={"url": f"sqlite+aiosqlite:///{data_dir / 'bruce.db'}"},
            channels={"telegram": telegram_section},
        )
        try:
            await daemon.start()
            telegram.private_text(ALICE, "warm-up")
            await all_answered_once(telegram, {ALICE.id: ["warm-up"]})
            await wait_until(lambda: settled(data_dir), timeout=WITHIN)

            filler = fill(small_disk)
            sent = {
                ALICE.id: ["alice-one", "alice-two", "alice-three"],
                BOB.id: ["bob-one", "bob-two"],
            }
            async with Health(daemon.url) as health:
                telegram.private_text(ALICE, "alice-one")
                telegram.private_text(BOB, "bob-one")
                telegram.private_text(ALICE, "alice-two")
                telegram.private_text(ALICE, "alice-three")
                telegram.private_text(BOB, "bob-two")
                await wait_until(lambda: health.degraded_for(OUTAGE), timeout=WITHIN, interval=0.05)
                # Tried and refused: not confirmed to Telegram, not answered, not stored.
                assert telegram.pending_updates == 5
                assert telegram.texts_to(BOB.id) == []
                assert telegram.texts_to(ALICE.id) == ["echo: warm-up"]
                [body, *_] = health.degraded()
                assert body["status"] == "degraded"
                assert "the disk is full" in body["reason"]

                filler.unlink()  # space is back
                await all_answered_once(telegram, sent)
                await wait_until(lambda: health.last is not None and health.last[0] == 200)
            await telegram.wait_for(lambda: telegram.pending_updates == 0)

            # Stored once each, each chat's in the order they were sent.
            users = [row for row in messages_of(data_dir, "user") if row["content"] != "warm-up"]
            session_of = {row["content"]: row["session_id"] for row in users}
            for texts in sent.values():
                session = session_of[texts[0]]
                assert [r["content"] for r in users if r["session_id"] == session] == texts

            telegram.private_text(BOB, "after")  # and life goes on
            await all_answered_once(telegram, {BOB.id: ["after"]})
        finally:
            await daemon.kill()

    stderr = (tmp_path / "run1.err").read_text(errors="replace").splitlines()
    events = log_events(stderr)
    assert events.count("storage_unavailable") == 1, events
    assert events.count("storage_recovered") == 1
    assert "telegram_submit_failed" not in events  # no message was given up as lost


# ---- Telegram webhook and the web chat, a full disk -------------------------------------------


async def test_full_disk_answers_the_webhook_503_and_the_web_chat_503_until_space_returns(
    small_disk: Path,
) -> None:
    data_dir = small_disk / "data"
    port = free_port()
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(responder=echo) as llm,
    ):
        section = {
            "enabled": True,
            "token": telegram.token,
            "base_url": telegram.base_url,
            "allowed_user_ids": [ALICE.id],
            "streaming": False,
            "mode": "webhook",
            "webhook": {
                "url": f"http://127.0.0.1:{port}/hook",
                "listen": "127.0.0.1",
                "port": port,
            },
        }
        config = make_config(
            data_dir, llm.base_url, web={"enabled": True}, channels={"telegram": section}
        )
        async with running_bruce(config) as bruce, Health(bruce.web_url or "") as health:
            telegram.private_text(ALICE, "warm-up")
            await all_answered_once(telegram, {ALICE.id: ["warm-up"]})
            await wait_until(lambda: settled(data_dir), timeout=WITHIN)

            filler = fill(small_disk)
            first = update_id_of(telegram, telegram.private_text(ALICE, "hook-one"))
            second = update_id_of(telegram, telegram.private_text(ALICE, "hook-two"))
            await telegram.wait_for(lambda: (first, 503) in telegram.webhook_deliveries, WITHIN)
            async with web_client(bruce) as web:
                refused = await web.post("/api/chat/messages", json={"text": "web-one"})
                assert refused.status_code == 503
                assert refused.headers["Retry-After"] == "5"
                assert (
                    "cannot save messages right now (the disk is full)" in refused.json()["error"]
                )
                assert "Send it again" in refused.json()["error"]
                await wait_until(lambda: health.degraded_for(OUTAGE), timeout=WITHIN, interval=0.05)
                assert telegram.texts_to(ALICE.id) == ["echo: warm-up"]

                filler.unlink()
                await all_answered_once(telegram, {ALICE.id: ["hook-one", "hook-two"]})
                accepted = await web.post("/api/chat/messages", json={"text": "web-one"})
                assert accepted.status_code == 202, accepted.text
            deliveries = telegram.webhook_deliveries
            for update_id in (first, second):
                statuses = [status for uid, status in deliveries if uid == update_id]
                assert statuses[-1] == 200 and statuses.count(200) == 1, statuses
            await wait_until(lambda: health.last is not None and health.last[0] == 200)

    contents = [row["content"] for row in messages_of(data_dir, "user")]
    assert contents == ["warm-up", "hook-one", "hook-two", "web-one"]


# ---- Discord, a full disk ----------------------------------------------------------------------


async def test_full_disk_keeps_discord_messages_until_they_can_be_stored(small_disk: Path) -> None:
    data_dir = small_disk / "data"
    async with (
        FakeDiscordServer() as discord_fake,
        FakeAnthropicServer(responder=echo) as llm,
    ):
        section = discord_fake.discord_config([OWNER_ID], streaming=False)
        config = make_config(
            data_dir, llm.base_url, web={"enabled": True}, channels={"discord": section}
        )
        async with (
            running_bruce(config, tools=ToolRegistry()) as bruce,
            Health(bruce.web_url or "") as health,
        ):
            await discord_fake.wait_for_session()
            await discord_fake.send_dm(OWNER, "warm-up")
            dm = discord_fake.dm_channel_id(OWNER_ID)
            assert await discord_fake.wait_for_sent(dm) == ["echo: warm-up"]
            await wait_until(lambda: settled(data_dir), timeout=WITHIN)

            filler = fill(small_disk)
            texts = ["discord-one", "discord-two", "discord-three"]
            for text in texts:
                await discord_fake.send_dm(OWNER, text)
            await wait_until(lambda: health.degraded_for(OUTAGE), timeout=WITHIN, interval=0.05)
            assert discord_fake.texts(dm) == ["echo: warm-up"]  # held, and not refused

            filler.unlink()
            await discord_fake.wait_for(
                lambda: all(any(t in sent for sent in discord_fake.texts(dm)) for t in texts),
                WITHIN,
            )
            for text in texts:
                assert sum(text in sent for sent in discord_fake.texts(dm)) == 1
            await wait_until(lambda: health.last is not None and health.last[0] == 200)

    contents = [row["content"] for row in messages_of(data_dir, "user")]
    assert contents == ["warm-up", *texts]


# ---- PostgreSQL stopped and started under load -------------------------------------------------


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A throwaway server of this test's own: it is stopped and started again."""
    server = PostgresServer.throwaway()
    try:
        yield server
    finally:
        server.stop()


async def test_postgres_stopped_under_load_loses_nothing(
    tmp_path: Path, own_postgres: PostgresServer
) -> None:
    url = own_postgres.create_database()
    async with (
        FakeTelegramServer() as telegram,
        FakeAnthropicServer(responder=echo) as llm,
    ):
        section = {
            "enabled": True,
            "token": telegram.token,
            "base_url": telegram.base_url,
            "allowed_user_ids": [ALICE.id, BOB.id],
            "streaming": False,
        }
        daemon = Daemon(
            tmp_path, llm.base_url, database={"url": url}, channels={"telegram": section}
        )
        expected: dict[int, list[str]] = {ALICE.id: [], BOB.id: []}

        def say(user: Any, text: str) -> None:
            telegram.private_text(user, text)
            expected[user.id].append(text)

        try:
            await daemon.start()
            say(ALICE, "warm-up")
            await all_answered_once(telegram, {ALICE.id: ["warm-up"]})
            async with Health(daemon.url) as health:
                for number in range(3):  # on their way when the server goes
                    say(ALICE if number % 2 else BOB, f"before-{number}")
                await asyncio.to_thread(own_postgres.pause)
                for number in range(5):
                    say(BOB if number % 2 else ALICE, f"during-{number}")
                await wait_until(lambda: health.degraded_for(OUTAGE), timeout=WITHIN, interval=0.05)
                reason = health.degraded()[0]["reason"]
                assert "database" in reason, reason
                answered = {chat: list(telegram.texts_to(chat)) for chat in expected}
                await asyncio.to_thread(own_postgres.resume)
                for number in range(2):
                    say(ALICE if number % 2 else BOB, f"after-{number}")
                await all_answered_once(telegram, expected)
                await wait_until(lambda: health.last is not None and health.last[0] == 200)
            # While the server was down, none of the "during" messages was answered.
            for texts in answered.values():
                assert not [t for t in texts if "during-" in t], texts
        finally:
            await daemon.kill()

    with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(False)) as db:
        rows = db.execute(
            "SELECT s.chat_id, m.content FROM messages m JOIN sessions s ON s.id = m.session_id "
            "WHERE m.role = 'user' ORDER BY m.id"
        ).fetchall()
    for chat, texts in expected.items():
        assert [content for chat_id, content in rows if chat_id == str(chat)] == texts
    own_postgres.drop_database(url)
