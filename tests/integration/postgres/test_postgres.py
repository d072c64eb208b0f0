"""Bruce on a real PostgreSQL server: migrations, the message path and the scheduler, in one process
(several processes sharing the database, and their election of the one that runs the scheduler,
are in test_cluster.py).

Each test gets a fresh database on the server of `tests/integration/postgres/server.py`; Bruce talks
to it through asyncpg (and APScheduler's job store through psycopg), the model is the fake Messages
API, and the test reads the rows back with psycopg. Every wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from apscheduler.schedulers.base import STATE_PAUSED
from psycopg.rows import dict_row
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from bruce_bot.app import Bruce, StartupError
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.config import Config
from bruce_bot.domain import InboundMessage, SessionKey
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.scheduler.service import create_scheduler, start_paused
from bruce_bot.storage import database
from bruce_bot.storage.database import SCHEMA_HEAD, upgrade_schema
from bruce_bot.storage.fulltext import described_by_models
from bruce_bot.storage.models import Base
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.tools.registry import Tool, ToolContext, ToolRegistry
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.support import config_for, next_reply, user_texts

DUE_TIMEOUT = 15.0


# ---- helpers -------------------------------------------------------------------------------


def rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """Rows of a query, read with psycopg outside Bruce."""
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, row_factory=dict_row) as connection:
        return connection.execute(sql, params).fetchall()  # type: ignore[arg-type]


def pg_config(tmp_path: Path, fake: FakeAnthropicServer, url: str, **overrides: Any) -> Config:
    return config_for(tmp_path, fake.base_url, database={"url": url}, **overrides)


class ShoutTool(Tool):
    """Answers in capitals, with a NUL character (which PostgreSQL text cannot hold) inside."""

    name = "shout"
    description = "Say the text in capitals."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return arguments["text"].upper() + "\x00!"


async def create_reminder(bruce: Bruce, content: str, run_at: str = "+1s") -> TaskRecord:
    assert bruce.stores is not None and bruce.tasks is not None
    session = await bruce.stores.sessions.get_or_create(SessionKey("console", "local"))
    return await bruce.tasks.planner.create(
        NewTask(
            session_id=session.id,
            channel="console",
            chat_id="local",
            title="Reminder",
            mode="message",
            content=content,
            run_at=run_at,
            cron=None,
            timezone=None,
        )
    )


def run_statuses(url: str, task_id: int) -> list[str]:
    query = "SELECT status FROM task_runs WHERE task_id = %s ORDER BY id"
    return [row["status"] for row in rows(url, query, task_id)]


async def delivered_once(url: str, task_id: int) -> None:
    """The task's one firing is recorded as delivered (the ledger is written after sending)."""
    await wait_until(lambda: run_statuses(url, task_id) == ["delivered"])


# ---- schema --------------------------------------------------------------------------------


async def test_migrations_build_the_models_schema_once_even_from_two_processes_at_once(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.yml"
    config.write_text(
        json.dumps({"app": {"data_dir": str(tmp_path)}, "database": {"url": postgres_url}})
    )
    upgrades = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bruce_bot", "db", "upgrade", "--config", str(config),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        for _ in range(2)
    ]  # fmt: skip
    for upgrade in upgrades:
        output, _ = await asyncio.wait_for(upgrade.communicate(), 30)
        assert upgrade.returncode == 0, output.decode()
        assert "database is up to date" in output.decode()

    sync_url = database.sync_url(postgres_url)
    engine = create_engine(sync_url)
    try:
        tables = set(inspect(engine).get_table_names())
        with engine.connect() as connection:
            # (The memories' full-text index is no model's: tests/integration/
            # test_postgres_memories.py checks it.)
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "include_object": described_by_models}
            )
            differences = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert tables == set(Base.metadata.tables) | {"alembic_version"}
    assert differences == []  # column types, indexes and constraints as the models say
    assert rows(postgres_url, "SELECT version_num FROM alembic_version") == [
        {"version_num": SCHEMA_HEAD}
    ]

    def no_alembic(url: str) -> bool:
        raise AssertionError("alembic was loaded for a database that is up to date")

    monkeypatch.setattr(database, "_upgrade_blocking", no_alembic)
    await upgrade_schema(postgres_url)


async def test_a_database_that_does_not_exist_stops_the_start_with_what_to_do(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, postgres_url: str
) -> None:
    missing = make_url(postgres_url).set(database="bruce_no_such_db").render_as_string(False)
    config = pg_config(tmp_path, anthropic_fake, missing)
    with pytest.raises(StartupError, match=r"bruce_no_such_db.*must exist"):
        await Bruce(config, tools=ToolRegistry([]), channels=[]).start()


# ---- the message path ------------------------------------------------------------------------


async def test_a_message_is_answered_with_a_tool_and_every_row_is_stored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, postgres_url: str
) -> None:
    anthropic_fake.script(tool_calls=[("shout", {"text": "hello"})])
    anthropic_fake.script("They said HELLO.")
    console = ConsoleChannel()
    long_name = "Ana " + "de Souza " * 30  # longer than the column: kept, cut to its length
    message = InboundMessage(
        "console", "local", "Shout hello", user_id="u1", user_name=long_name,
        platform_message_id="msg-1",
    )  # fmt: skip
    config = pg_config(tmp_path, anthropic_fake, postgres_url)
    async with running_bruce(
        config, tools=ToolRegistry([ShoutTool()]), channels=[console]
    ) as bruce:
        assert bruce.stores is not None
        first = await bruce.inbox.submit(message)
        assert first.accepted
        assert await next_reply(console.replies) == "They said HELLO."
        again = await bruce.inbox.submit(message)  # the platform delivered it twice
        assert (again.accepted, again.reason) == (False, "duplicate")
        await wait_until(lambda: bruce.inbox.busy_sessions == 0)
        [session] = await bruce.stores.sessions.list_recent()  # ORDER BY ... NULLS LAST
        assert session.last_message_at is not None and session.last_message_at.tzinfo is not None
        for prompt in ("Be brief.", "Be very brief."):  # an insert, then an update
            await bruce.stores.settings.set("agent.system_prompt", {"text": prompt})

    user, reply = rows(postgres_url, "SELECT * FROM messages ORDER BY id")
    assert (user["role"], user["status"], user["platform_message_id"]) == ("user", "done", "msg-1")
    assert user["author"] == long_name[:128]
    assert (reply["role"], reply["status"], reply["content"]) == (
        "assistant", "sent", "They said HELLO.",
    )  # fmt: skip
    assert reply["extra"] == {"answers": [user["id"]]}  # a JSON column
    [execution] = rows(postgres_url, "SELECT * FROM tool_executions")
    assert (execution["tool_name"], execution["output"], execution["error"]) == (
        "shout", "HELLO!", None,
    )  # fmt: skip
    assert execution["session_id"] == session.id and execution["turn"] == 1
    calls = rows(postgres_url, "SELECT * FROM llm_calls WHERE purpose = 'agent' ORDER BY id")
    assert len(calls) == 2 and all(call["input_tokens"] > 0 for call in calls)
    assert {call["session_id"] for call in calls} == {session.id}
    [delivery] = rows(postgres_url, "SELECT * FROM deliveries")
    assert (delivery["message_id"], delivery["status"]) == (reply["id"], "sent")
    [setting] = rows(postgres_url, "SELECT key, value FROM settings")
    assert setting == {"key": "agent.system_prompt", "value": {"text": "Be very brief."}}


async def test_a_message_cut_short_by_a_stop_is_answered_by_the_next_start(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, postgres_url: str
) -> None:
    release = asyncio.Event()

    async def model(body: dict[str, Any]) -> str:
        await release.wait()
        return f"answer to {user_texts(body)[-1]}"

    anthropic_fake.responder = model
    config = pg_config(
        tmp_path, anthropic_fake, postgres_url, agent={"shutdown_timeout_seconds": 0.1}
    )
    console = ConsoleChannel()
    first = Bruce(config, tools=ToolRegistry([]), channels=[console])
    await first.start()
    try:
        assert await console.say("Do I need an umbrella?")
        await anthropic_fake.wait_for_requests(1)
    finally:
        await first.stop()
    assert [r["status"] for r in rows(postgres_url, "SELECT status FROM messages")] == ["pending"]

    release.set()
    again = ConsoleChannel()
    async with running_bruce(config, tools=ToolRegistry([]), channels=[again]):
        assert await next_reply(again.replies) == "answer to Do I need an umbrella?"
    statuses = rows(postgres_url, "SELECT role, status FROM messages ORDER BY id")
    assert statuses == [
        {"role": "user", "status": "done"},
        {"role": "assistant", "status": "sent"},
    ]


async def test_a_long_conversation_is_folded_into_a_summary(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, postgres_url: str
) -> None:
    def model(body: dict[str, Any]) -> str:
        if body["model"] == "claude-haiku-4-5":  # the background model
            return "Summary: Ana is planning a trip to Lisbon."
        return f"ack: {user_texts(body)[-1]}"

    anthropic_fake.responder = model
    config = pg_config(
        tmp_path,
        anthropic_fake,
        postgres_url,
        llm={"model": "claude-sonnet-4-6", "background_model": "claude-haiku-4-5"},
        agent={"history_max_messages": 6, "summary_keep_messages": 2},
    )
    console = ConsoleChannel()
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]):
        for i in range(1, 5):
            assert await console.say(f"message {i}")
            assert await next_reply(console.replies) == f"ack: message {i}"
        [summary] = await wait_until(lambda: rows(postgres_url, "SELECT * FROM session_summaries"))
        assert summary["content"] == "Summary: Ana is planning a trip to Lisbon."
        assert await console.say("and now?")
        assert await next_reply(console.replies) == "ack: and now?"
    last = [body for body in anthropic_fake.requests if body["model"] == "claude-sonnet-4-6"][-1]
    assert "Ana is planning a trip to Lisbon" in str(last["system"])
    assert "message 1" not in user_texts(last)


# ---- the scheduler -----------------------------------------------------------------------------


async def test_a_reminder_fires_once_from_the_postgresql_job_store(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, postgres_url: str
) -> None:
    console = ConsoleChannel()
    config = pg_config(tmp_path, anthropic_fake, postgres_url)
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        assert bruce.tasks is not None and bruce.tasks.is_leader  # alone: it leads at once
        later = await create_reminder(bruce, "Water the plants", run_at="+1h")
        [job] = rows(postgres_url, "SELECT * FROM apscheduler_jobs")
        assert job["id"] == f"task-{later.id}"
        assert pickle.loads(job["job_state"])["args"] == (later.id,)  # a bytea column

        soon = await create_reminder(bruce, "Stretch")
        assert await next_reply(console.replies, DUE_TIMEOUT) == "⏰ Stretch"
        await delivered_once(postgres_url, soon.id)
        assert soon.next_run_at is not None  # the same firing again is refused by the ledger
        assert await bruce.stores.tasks.start_run(soon.id, soon.next_run_at, 0.0) is None
    [task] = rows(
        postgres_url, "SELECT status, next_run_at FROM proactive_tasks WHERE id = %s", soon.id
    )
    assert task == {"status": "done", "next_run_at": None}
    assert [j["id"] for j in rows(postgres_url, "SELECT id FROM apscheduler_jobs")] == [
        f"task-{later.id}"
    ]
    assert console.replies.empty()


async def test_processes_starting_together_on_a_new_database_all_get_their_scheduler(
    postgres_url: str,
) -> None:
    # Each creates APScheduler's job table if it is missing: on a new database they race, and
    # without a retry the losers' start failed ("apscheduler_jobs" already exists).
    await upgrade_schema(postgres_url)
    zone = ZoneInfo("UTC")
    schedulers = [create_scheduler(database.sync_url(postgres_url), zone, 60) for _ in range(3)]
    try:
        await asyncio.gather(*(start_paused(scheduler) for scheduler in schedulers))
        assert all(scheduler.state == STATE_PAUSED for scheduler in schedulers)
    finally:
        for scheduler in schedulers:
            if scheduler.running:
                scheduler.shutdown(wait=False)
