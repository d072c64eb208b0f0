"""Proactive tasks end to end: reminders and briefings fire on time, exactly once, across restarts.

Real SQLite file, real APScheduler with its SQLAlchemy job store, the real Anthropic SDK against
the fake server (scripted to call the scheduling tools), and a recording chat channel. Due times
are one to four seconds away; every wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from structlog.testing import capture_logs

from bruce_bot.app import Bruce
from bruce_bot.channels.base import DeliveryError, InboxPort
from bruce_bot.config import Config
from bruce_bot.domain import InboundMessage, OutboundMessage, SessionKey, utcnow
from bruce_bot.scheduler import runs as task_runs
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.scheduler.timing import describe_lateness
from bruce_bot.storage.tasks import TaskRecord
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.support import (
    ManualClock,
    all_text,
    block_text,
    config_for,
    db_rows,
    last_tool_results,
)

SAO_PAULO = ZoneInfo("America/Sao_Paulo")
SCHEDULING_TOOLS = {"proactive_create", "proactive_list", "proactive_cancel"}
DUE_TIMEOUT = 15.0  # a task due in a few seconds must have fired well within this
# Where the tests on a manual clock start: a fixed moment, the same on every run and at any
# time of day, decades ahead of the real clock, so that the jobs APScheduler runs on real time
# never fire by themselves (a Tuesday, 09:00:30 in São Paulo).
FIXED_START = datetime(2099, 6, 16, 12, 0, 30, tzinfo=ZoneInfo("UTC"))


class ChatChannel:
    """A chat platform that records what it delivers, per chat; chats in `refusing` are gone
    (every send fails permanently, as when the bot was blocked)."""

    name = "chat"
    max_message_chars = 4096

    def __init__(self) -> None:
        self.inbox: InboxPort | None = None
        self.sent: list[tuple[str, str]] = []
        self.attempts: list[tuple[str, str]] = []
        self.refusing: set[str] = set()

    async def start(self, inbox: InboxPort) -> None:
        self.inbox = inbox

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        self.attempts.append((message.chat_id, message.text))
        if message.chat_id in self.refusing:
            raise DeliveryError("Forbidden: bot was blocked by the user", permanent=True)
        self.sent.append((message.chat_id, message.text))

    async def typing(self, chat_id: str) -> None:
        return None

    def texts(self, chat_id: str = "alice") -> list[str]:
        return [text for chat, text in self.sent if chat == chat_id]

    def texts_starting(self, prefix: str, chat_id: str = "alice") -> list[str]:
        return [text for text in self.texts(chat_id) if text.startswith(prefix)]


# ---- helpers -------------------------------------------------------------------------------


def scheduler_config(tmp_path: Path, fake: FakeAnthropicServer, **overrides: Any) -> Config:
    return config_for(tmp_path, fake.base_url, **overrides)


def gateway(channel: ChatChannel) -> InboxPort:
    assert channel.inbox is not None, "the channel was not started"
    return channel.inbox


async def say(channel: ChatChannel, chat_id: str, text: str) -> None:
    submission = await gateway(channel).submit(
        InboundMessage("chat", chat_id, text, user_id=chat_id, user_name=chat_id)
    )
    assert submission.accepted, submission


async def call_tool(
    fake: FakeAnthropicServer,
    channel: ChatChannel,
    tool: str,
    arguments: dict[str, Any],
    chat_id: str = "alice",
) -> dict[str, Any]:
    """The user asks; the model calls `tool` once, then answers "Done."; returns the tool_result
    block the model got back."""
    fake.script(tool_calls=[(tool, arguments)])
    fake.script("Done.")
    before = len(fake.requests)
    replies = len(channel.texts(chat_id))
    await say(channel, chat_id, f"please use {tool}")
    # A reminder due meanwhile may arrive before or after the answer.
    await wait_until(lambda: "Done." in channel.texts(chat_id)[replies:])
    assert len(fake.requests) == before + 2
    [result] = last_tool_results(fake.requests[before + 1])
    return result


async def create_by_model(
    fake: FakeAnthropicServer, channel: ChatChannel, chat_id: str = "alice", **arguments: Any
) -> tuple[int, str]:
    """proactive_create through the model; returns the task id and the tool's result text."""
    result = await call_tool(fake, channel, "proactive_create", arguments, chat_id)
    text = block_text(result)
    assert not result.get("is_error"), text
    assert text.startswith("Task "), text
    return int(text.split()[1]), text


async def session_id(bruce: Bruce, chat_id: str) -> int:
    assert bruce.stores is not None
    return (await bruce.stores.sessions.get_or_create(SessionKey("chat", chat_id))).id


async def create_direct(bruce: Bruce, chat_id: str = "alice", **fields: Any) -> TaskRecord:
    """A task made through the task service (what the tool calls), for set-ups."""
    assert bruce.tasks is not None
    values: dict[str, Any] = {
        "title": "Reminder",
        "mode": "message",
        "content": "Take the pills",
        "run_at": None,
        "cron": None,
        "timezone": None,
        **fields,
    }
    return await bruce.tasks.planner.create(
        NewTask(
            session_id=await session_id(bruce, chat_id), channel="chat", chat_id=chat_id, **values
        )
    )


def task_row(data_dir: Path, task_id: int) -> sqlite3.Row:
    [row] = db_rows(data_dir, "SELECT * FROM proactive_tasks WHERE id = ?", task_id)
    return row


def runs_of(data_dir: Path, task_id: int) -> list[sqlite3.Row]:
    return db_rows(data_dir, "SELECT * FROM task_runs WHERE task_id = ? ORDER BY id", task_id)


def job_ids(data_dir: Path) -> set[str]:
    return {row["id"] for row in db_rows(data_dir, "SELECT id FROM apscheduler_jobs")}


def execute(data_dir: Path, sql: str, *params: Any) -> None:
    connection = sqlite3.connect(data_dir / "bruce.db", timeout=10)
    try:
        connection.execute(sql, params)
        connection.commit()
    finally:
        connection.close()


def stored_utc(value: str) -> datetime:
    return datetime.fromisoformat(value).replace(tzinfo=ZoneInfo("UTC"))


def ahead(delta: timedelta) -> Callable[[], datetime]:
    """A clock running `delta` ahead of the real one: Bruce was down that much longer."""
    return lambda: utcnow() + delta


def local_hhmm(moment: datetime) -> str:
    return moment.astimezone(SAO_PAULO).strftime("%H:%M")


async def assert_restart_delivers_nothing(config: Config, data_dir: Path, task_id: int) -> None:
    """One more restart, later still: nothing is sent again and no firing is added."""
    again = ChatChannel()
    async with running_bruce(config, channels=[again], clock=ahead(timedelta(minutes=11))):
        pass
    assert again.sent == []
    assert len(runs_of(data_dir, task_id)) == 1


def tool_names(body: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in body.get("tools") or []}


# ---- message mode ----------------------------------------------------------------------------


async def test_relative_reminder_arrives_in_the_same_chat_without_an_llm_call(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    async with running_bruce(scheduler_config(tmp_path, anthropic_fake), channels=[channel]):
        task_id, result = await create_by_model(
            anthropic_fake,
            channel,
            title="Stretch",
            execution_mode="message",
            content="Stand up and stretch",
            run_at="+1s",
        )
        requests_before = len(anthropic_fake.requests)
        await wait_until(lambda: channel.texts_starting("⏰"), DUE_TIMEOUT)
        assert channel.texts_starting("⏰") == ["⏰ Stand up and stretch"]
        assert channel.texts("bob") == []
        assert len(anthropic_fake.requests) == requests_before  # message mode: no LLM
        await wait_until(lambda: runs_of(tmp_path, task_id)[0]["status"] == "delivered")

        # The reminder is part of the conversation: the model sees it in the next turn.
        anthropic_fake.script("You're welcome.")
        await say(channel, "alice", "thanks, done")
        await wait_until(lambda: channel.texts()[-1] == "You're welcome.")
        assert "⏰ Stand up and stretch" in all_text(anthropic_fake.requests[-1])

    assert "next run" in result and "(America/Sao_Paulo, UTC-0300)" in result
    row = task_row(tmp_path, task_id)
    assert row["status"] == "done" and row["next_run_at"] is None
    [run] = runs_of(tmp_path, task_id)
    assert run["status"] == "delivered" and run["delivered_at"] is not None
    assert run["late_seconds"] < 5
    history = db_rows(
        tmp_path, "SELECT kind, status FROM messages WHERE content = ?", "⏰ Stand up and stretch"
    )
    assert [tuple(r) for r in history] == [("reminder", "sent")]


async def test_absolute_iso_reminder_fires_and_the_result_states_the_local_time(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    async with running_bruce(scheduler_config(tmp_path, anthropic_fake), channels=[channel]):
        due = (utcnow() + timedelta(seconds=2)).astimezone(SAO_PAULO)
        naive_local = due.strftime("%Y-%m-%dT%H:%M:%S")  # read in the user's timezone
        task_id, result = await create_by_model(
            anthropic_fake,
            channel,
            title="Tea",
            execution_mode="message",
            content="The tea is ready",
            run_at=naive_local,
        )
        await wait_until(lambda: channel.texts_starting("⏰"), DUE_TIMEOUT)
    assert channel.texts_starting("⏰") == ["⏰ The tea is ready"]
    expected = due.replace(microsecond=0)
    assert stored_utc(task_row(tmp_path, task_id)["run_at"]) == expected
    assert f"{expected:%A, %Y-%m-%d %H:%M} (America/Sao_Paulo, UTC-0300)" in result
    assert [r["status"] for r in runs_of(tmp_path, task_id)] == ["delivered"]


async def test_reminders_fire_on_time_with_a_zero_grace_period(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    """The grace period is about downtime: a job that fires a few milliseconds after its time
    is on time (APScheduler, given the grace as its misfire time, would drop it)."""
    config = scheduler_config(tmp_path, anthropic_fake, scheduler={"misfire_grace_seconds": 0})
    channel = ChatChannel()
    async with running_bruce(config, channels=[channel]) as bruce:
        task = await create_direct(bruce, run_at="+1s", content="On time")
        await wait_until(lambda: channel.sent, DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
    assert channel.texts() == ["⏰ On time"]


async def test_a_recurring_task_in_another_timezone_states_both_local_times(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    async with running_bruce(scheduler_config(tmp_path, anthropic_fake), channels=[channel]):
        task_id, result = await create_by_model(
            anthropic_fake,
            channel,
            title="Berlin stand-up",
            execution_mode="message",
            content="Stand-up in Berlin",
            cron="0 9 * * 1-5",  # crontab numbering: Monday to Friday
            timezone="Europe/Berlin",
        )
    row = task_row(tmp_path, task_id)
    following = stored_utc(row["next_run_at"])
    berlin = following.astimezone(ZoneInfo("Europe/Berlin"))
    assert berlin.strftime("%H:%M") == "09:00" and berlin.weekday() < 5
    assert row["timezone"] == "Europe/Berlin"
    assert f"{berlin:%A, %Y-%m-%d} 09:00 (Europe/Berlin" in result
    assert f"{following.astimezone(SAO_PAULO):%H:%M} (America/Sao_Paulo, UTC-0300)" in result
    assert "then on cron '0 9 * * 1-5'" in result
    [job] = db_rows(
        tmp_path, "SELECT next_run_time FROM apscheduler_jobs WHERE id = ?", f"task-{task_id}"
    )
    assert job["next_run_time"] == following.timestamp()


async def test_a_schedule_the_model_got_wrong_comes_back_as_an_error_it_can_fix(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    async with running_bruce(scheduler_config(tmp_path, anthropic_fake), channels=[channel]):
        wrong = {"title": "X", "execution_mode": "message", "content": "x"}
        cases = [
            ({**wrong, "run_at": "2020-01-01T09:00"}, "in the past"),
            ({**wrong, "run_at": "+2 minutes"}, "not a relative time"),
            ({**wrong, "cron": "0 8 * *"}, "needs five"),
            ({**wrong, "cron": "61 8 * * *"}, "minute field '61'"),
            ({**wrong, "cron": "0 0 31 2 *"}, "never fires"),
            ({**wrong, "run_at": "+1m", "cron": "0 8 * * *"}, "exactly one of run_at"),
            ({**wrong}, "exactly one of run_at"),
            ({**wrong, "run_at": "+1m", "timezone": "Mars/Base"}, "unknown timezone"),
        ]
        for arguments, problem in cases:
            result = await call_tool(anthropic_fake, channel, "proactive_create", arguments)
            assert result.get("is_error") is True
            assert problem in block_text(result)
    assert db_rows(tmp_path, "SELECT * FROM proactive_tasks") == []


# ---- agent mode ------------------------------------------------------------------------------


async def test_agent_briefing_runs_the_instruction_without_scheduling_tools(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    async with running_bruce(scheduler_config(tmp_path, anthropic_fake), channels=[channel]):
        task_id, _ = await create_by_model(
            anthropic_fake,
            channel,
            title="News digest",
            execution_mode="agent",
            content="Summarise today's news in one line",
            run_at="+1s",
        )
        scheduling_request = anthropic_fake.requests[-1]
        anthropic_fake.script("Markets are calm and the sun is out.")
        await wait_until(lambda: channel.texts_starting("📋"), DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, task_id)[0]["status"] != "running")

    assert channel.texts_starting("📋") == [
        "📋 News digest\n\nMarkets are calm and the sun is out."
    ]
    briefing = anthropic_fake.requests[-1]
    assert "Summarise today's news in one line" in all_text(briefing)
    assert SCHEDULING_TOOLS <= tool_names(scheduling_request)
    assert not SCHEDULING_TOOLS & tool_names(briefing)
    assert tool_names(briefing)  # the other tools stay available
    [run] = runs_of(tmp_path, task_id)
    assert run["status"] == "delivered" and run["error"] is None
    answer = db_rows(
        tmp_path,
        "SELECT kind FROM messages WHERE role = 'assistant' AND content LIKE '%sun is out%'",
    )
    assert [r["kind"] for r in answer] == ["briefing"]
    assert task_row(tmp_path, task_id)["status"] == "done"
    # The Usage page tells the briefing's LLM call from the chat turn that set it up.
    purposes = db_rows(tmp_path, "SELECT purpose FROM llm_calls ORDER BY id")
    assert [r["purpose"] for r in purposes][-1] == "briefing"
    assert {r["purpose"] for r in purposes[:-1]} == {"agent"}


async def test_agent_briefing_that_fails_tells_the_user_and_records_the_failure(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    async with running_bruce(scheduler_config(tmp_path, anthropic_fake), channels=[channel]):
        task_id, _ = await create_by_model(
            anthropic_fake,
            channel,
            title="News digest",
            execution_mode="agent",
            content="Summarise today's news",
            run_at="+1s",
        )
        anthropic_fake.script(error=529)  # overloaded; llm.max_retries is 0 in tests
        await wait_until(lambda: channel.texts_starting("⚠️"), DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, task_id)[0]["status"] != "running")

    [warning] = channel.texts_starting("⚠️")
    assert warning.startswith("⚠️ Couldn't run News digest: ")
    assert "language model" in warning
    assert channel.texts_starting("📋") == []
    [run] = runs_of(tmp_path, task_id)
    assert run["status"] == "failed"
    assert "Couldn't run News digest" in run["error"]


# ---- list, cancel, /reminders ----------------------------------------------------------------


async def test_list_and_cancel_in_one_chat_only(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    # On a manual clock: the tasks come due only when the test says so, however long the model
    # turns in between take (on the real clock, the first one could fire before it was cancelled).
    clock, channel = ManualClock(FIXED_START), ChatChannel()
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[channel], clock=clock) as bruce:
        plants, _ = await create_by_model(
            anthropic_fake,
            channel,
            title="Water the plants",
            execution_mode="message",
            content="Water the plants",
            run_at="+3s",
        )
        call, _ = await create_by_model(
            anthropic_fake,
            channel,
            title="Call mom",
            execution_mode="message",
            content="Call mom",
            run_at="+4s",
        )
        assert stored_utc(task_row(tmp_path, call)["next_run_at"]) == FIXED_START + timedelta(
            seconds=4
        )

        listed = block_text(await call_tool(anthropic_fake, channel, "proactive_list", {}))
        assert f"#{plants} Water the plants" in listed and f"#{call} Call mom" in listed
        assert "(America/Sao_Paulo, UTC-0300)" in listed
        assert "No active tasks" in block_text(
            await call_tool(anthropic_fake, channel, "proactive_list", {}, chat_id="bob")
        )

        # Bob cannot cancel Alice's task, even knowing its id.
        refused = await call_tool(
            anthropic_fake, channel, "proactive_cancel", {"task_id": plants}, chat_id="bob"
        )
        assert refused.get("is_error") is True
        assert f"no active task {plants} in this conversation" in block_text(refused)
        assert task_row(tmp_path, plants)["status"] == "active"

        cancelled = await call_tool(
            anthropic_fake, channel, "proactive_cancel", {"task_id": plants}
        )
        assert block_text(cancelled) == f"Task {plants} ('Water the plants') cancelled."
        again = await call_tool(anthropic_fake, channel, "proactive_cancel", {"task_id": plants})
        assert again.get("is_error") is True

        reminders = await gateway(channel).describe_reminders("chat", "alice")
        assert f"#{call} Call mom" in reminders and "Water the plants" not in reminders
        assert "next run" in reminders
        assert "no active reminders" in await gateway(channel).describe_reminders("chat", "bob")
        assert channel.texts_starting("⏰") == []  # nothing came due yet

        # Both come due. The cancelled task has no job left to fire it; one that fires anyway
        # (a job the cancel raced with) delivers nothing. The other fires as its job would.
        assert job_ids(tmp_path) == {f"task-{call}"}
        clock.advance(timedelta(seconds=5))
        assert bruce.tasks is not None
        await bruce.tasks.firing.fire(plants)
        await bruce.tasks.firing.fire(call)
        await wait_until(lambda: channel.texts_starting("⏰"), DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, call)[0]["status"] == "delivered")

    assert channel.texts_starting("⏰") == ["⏰ Call mom"]  # on time: no "late" note
    assert task_row(tmp_path, plants)["status"] == "cancelled"
    assert runs_of(tmp_path, plants) == []
    assert f"task-{plants}" not in job_ids(tmp_path)
    [run] = runs_of(tmp_path, call)
    assert stored_utc(run["scheduled_for"]) == FIXED_START + timedelta(seconds=4)
    assert run["late_seconds"] == 1.0
    assert channel.texts("bob") == ["Done.", "Done."]


# ---- restarts --------------------------------------------------------------------------------


async def test_a_task_persists_across_a_restart_and_fires_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    first = ChatChannel()
    async with running_bruce(config, channels=[first]):
        task_id, _ = await create_by_model(
            anthropic_fake,
            first,
            title="Stand-up",
            execution_mode="message",
            content="Stand-up meeting",
            run_at="+3s",
        )
    assert f"task-{task_id}" in job_ids(tmp_path)
    assert first.texts_starting("⏰") == []

    second = ChatChannel()
    async with running_bruce(config, channels=[second]):
        await wait_until(lambda: second.texts_starting("⏰"), DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, task_id)[0]["status"] == "delivered")
    assert second.texts_starting("⏰") == ["⏰ Stand-up meeting"]
    assert len(runs_of(tmp_path, task_id)) == 1
    assert task_row(tmp_path, task_id)["status"] == "done"
    assert f"task-{task_id}" not in job_ids(tmp_path)


async def test_reminder_missed_while_down_is_delivered_once_late(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        task = await create_direct(bruce, run_at="+5m", content="Take the pills")
    assert task.next_run_at is not None

    # Bruce comes back ten minutes later (its clock says so; APScheduler's does not).
    later = ChatChannel()
    async with running_bruce(config, channels=[later], clock=ahead(timedelta(minutes=10))):
        await wait_until(lambda: later.texts_starting("⏰"), DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
    note = describe_lateness(task.next_run_at, utcnow() + timedelta(minutes=10), SAO_PAULO)
    assert note.startswith(f" (late: was due at {local_hhmm(task.next_run_at)}")
    assert later.texts() == [f"⏰ Take the pills{note}"]
    [run] = runs_of(tmp_path, task.id)
    assert 290 < run["late_seconds"] < 330
    assert task_row(tmp_path, task.id)["status"] == "done"
    assert f"task-{task.id}" not in job_ids(tmp_path)

    # Another restart delivers nothing more (stop waits for any firing under way).
    await assert_restart_delivers_nothing(config, tmp_path, task.id)


async def test_reminder_older_than_the_grace_period_is_missed_and_told_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake, scheduler={"misfire_grace_seconds": 60})
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        task = await create_direct(
            bruce, title="Dentist", run_at="+2m", content="Go to the dentist"
        )
    assert task.next_run_at is not None

    later = ChatChannel()
    async with running_bruce(config, channels=[later], clock=ahead(timedelta(minutes=10))):
        await wait_until(lambda: later.sent, DUE_TIMEOUT)
    [notice] = later.texts()
    assert "missed" in notice and '"Dentist"' in notice
    assert local_hhmm(task.next_run_at) in notice
    assert not notice.startswith("⏰ Go to the dentist")  # not delivered as if on time
    row = task_row(tmp_path, task.id)
    assert row["status"] == "missed" and row["next_run_at"] is None
    [run] = runs_of(tmp_path, task.id)
    assert run["status"] == "missed" and run["delivered_at"] is None
    assert f"task-{task.id}" not in job_ids(tmp_path)

    await assert_restart_delivers_nothing(config, tmp_path, task.id)


async def test_recurring_task_missed_five_times_catches_up_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    # On a manual clock at second 30 of a minute, far ahead of the real one: the first Bruce
    # cannot fire the task itself, whatever second the real clock shows.
    clock = ManualClock(FIXED_START)
    async with running_bruce(config, channels=[ChatChannel()], clock=clock) as bruce:
        task = await create_direct(bruce, title="Pulse", cron="* * * * *", content="Pulse check")
    assert task.next_run_at == FIXED_START.replace(second=0) + timedelta(minutes=1)
    assert runs_of(tmp_path, task.id) == []
    # Down for five minutes: back at 12:05:30 UTC, the firings of 12:01 to 12:05 were missed.
    behind = task.next_run_at
    clock.advance(timedelta(minutes=5))

    later = ChatChannel()
    async with running_bruce(config, channels=[later], clock=clock):
        await wait_until(lambda: later.sent, DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
        row = task_row(tmp_path, task.id)
    note = describe_lateness(behind, clock.now, SAO_PAULO)
    assert note == f" (late: was due at {local_hhmm(behind)})"
    assert later.texts() == [f"⏰ Pulse check{note}"]  # once, not once per missed minute
    [run] = runs_of(tmp_path, task.id)
    assert stored_utc(run["scheduled_for"]) == behind
    assert run["late_seconds"] == (clock.now - behind).total_seconds() == 270.0
    following = stored_utc(row["next_run_at"])
    assert row["status"] == "active"
    assert following == clock.now.replace(second=0) + timedelta(minutes=1)  # the next minute
    # The job that fires it next is back in the job store, at that same time.
    [job] = db_rows(
        tmp_path, "SELECT next_run_time FROM apscheduler_jobs WHERE id = ?", f"task-{task.id}"
    )
    assert job["next_run_time"] == following.timestamp()


# ---- at most once ----------------------------------------------------------------------------


async def test_the_same_firing_triggered_twice_is_delivered_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    async with running_bruce(
        scheduler_config(tmp_path, anthropic_fake), channels=[channel]
    ) as bruce:
        assert bruce.tasks is not None
        task = await create_direct(bruce, run_at="+1h", content="Once only")
        await asyncio.gather(bruce.tasks.firing.fire(task.id), bruce.tasks.firing.fire(task.id))
        await bruce.tasks.firing.fire(task.id)  # and once more, later
    assert channel.texts() == ["⏰ Once only"]
    [run] = runs_of(tmp_path, task.id)
    assert run["status"] == "delivered"
    assert stored_utc(run["scheduled_for"]) == task.next_run_at


async def test_a_chat_that_refuses_delivery_pauses_the_task_without_retrying(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    channel = ChatChannel()
    channel.refusing.add("gone")
    with capture_logs() as logs:
        async with running_bruce(
            scheduler_config(tmp_path, anthropic_fake), channels=[channel]
        ) as bruce:
            assert bruce.tasks is not None
            once = await create_direct(bruce, chat_id="gone", run_at="+1s", content="Hello?")
            daily = await create_direct(bruce, chat_id="gone", cron="0 9 * * *", content="Daily")
            await wait_until(lambda: task_row(tmp_path, once.id)["status"] == "paused", DUE_TIMEOUT)
            await bruce.tasks.firing.fire(daily.id)
            assert task_row(tmp_path, daily.id)["status"] == "paused"
            assert f"task-{daily.id}" not in job_ids(tmp_path)  # never fired again
            listed = await gateway(channel).describe_reminders("chat", "gone")

    assert channel.sent == []
    assert channel.attempts == [("gone", "⏰ Hello?"), ("gone", "⏰ Daily")]  # one attempt each
    for task in (once, daily):
        [run] = runs_of(tmp_path, task.id)
        assert run["status"] == "failed" and "failed" in run["error"]
    paused = [entry for entry in logs if entry["event"] == "task_paused"]
    assert [entry["task_id"] for entry in paused] == [once.id, daily.id]
    assert all(entry["chat_id"] == "gone" for entry in paused)
    assert "no active reminders" in listed


class UnreachableChannel(ChatChannel):
    """A platform that is down (every send fails, but not for good) until `back` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.back = False

    async def send(self, message: OutboundMessage) -> None:
        if not self.back:
            self.attempts.append((message.chat_id, message.text))
            raise DeliveryError("Bad Gateway", retry_after=0.01)
        await super().send(message)


async def test_an_undelivered_reminder_closes_its_run_once_the_redelivery_gets_it_out(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_runs, "SETTLE_INTERVAL_SECONDS", 0.05)
    channel = UnreachableChannel()
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[channel]) as bruce:
        assert bruce.tasks is not None and bruce.outbox is not None
        task = await create_direct(bruce, run_at="+1h", content="Eventually")
        await bruce.tasks.firing.fire(task.id)
        [run] = runs_of(tmp_path, task.id)
        assert run["status"] == "undelivered"  # open: the outbox has not given up on it
        assert channel.sent == [] and len(channel.attempts) == 4

        channel.back = True
        assert await bruce.outbox.redeliver() == 1  # what the periodic redelivery does
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
    assert channel.texts() == ["⏰ Eventually"]
    [run] = runs_of(tmp_path, task.id)
    assert run["delivered_at"] is not None and run["error"] is None
    assert task_row(tmp_path, task.id)["status"] == "done"  # not paused: nothing refused it


async def test_a_briefing_whose_answer_is_undelivered_closes_its_run_once_it_gets_out(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_runs, "SETTLE_INTERVAL_SECONDS", 0.05)
    channel = UnreachableChannel()
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[channel]) as bruce:
        assert bruce.tasks is not None and bruce.outbox is not None
        task = await create_direct(
            bruce, title="Digest", mode="agent", run_at="+1h", content="Sum up the news"
        )
        anthropic_fake.script("All quiet.")
        await bruce.tasks.firing.fire(task.id)
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] != "running")
        [run] = runs_of(tmp_path, task.id)
        assert run["status"] == "undelivered" and "undelivered" in run["error"]

        channel.back = True
        assert await bruce.outbox.redeliver() == 1
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
    assert channel.texts() == ["📋 Digest\n\nAll quiet."]
    assert len(anthropic_fake.requests) == 1  # the answer was redelivered, not run again


# ---- a damaged job store ---------------------------------------------------------------------


async def test_corrupt_and_orphan_jobs_do_not_stop_bruce(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        valid = await create_direct(bruce, run_at="+3s", content="Still here")
        doomed = await create_direct(bruce, run_at="+1h", content="Deleted")
    execute(tmp_path, "DELETE FROM proactive_tasks WHERE id = ?", doomed.id)  # its job remains
    execute(
        tmp_path,
        "INSERT INTO apscheduler_jobs (id, next_run_time, job_state) VALUES (?, ?, ?)",
        "task-9999",
        utcnow().timestamp() + 1,
        b"\x80\x04not a pickle at all",
    )
    assert {f"task-{doomed.id}", "task-9999", f"task-{valid.id}"} <= job_ids(tmp_path)

    channel = ChatChannel()
    async with running_bruce(config, channels=[channel]):
        await wait_until(lambda: channel.sent, DUE_TIMEOUT)
        await wait_until(lambda: runs_of(tmp_path, valid.id)[0]["status"] == "delivered")
    assert channel.texts() == ["⏰ Still here"]
    assert job_ids(tmp_path) == set()
    assert db_rows(tmp_path, "SELECT * FROM task_runs WHERE task_id <> ?", valid.id) == []


async def test_startup_recreates_a_missing_job(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        task = await create_direct(bruce, run_at="+3s", content="Job or no job")
    execute(tmp_path, "DELETE FROM apscheduler_jobs")

    channel = ChatChannel()
    async with running_bruce(config, channels=[channel]):
        assert f"task-{task.id}" in job_ids(tmp_path)
        await wait_until(lambda: channel.sent, DUE_TIMEOUT)
    assert channel.texts() == ["⏰ Job or no job"]
    assert [r["status"] for r in runs_of(tmp_path, task.id)] == ["delivered"]


class ElsewhereChannel(ChatChannel):
    """Another platform (say Telegram) that only the daemon has enabled."""

    name = "elsewhere"


async def test_a_process_without_the_tasks_channel_leaves_it_for_one_that_has_it(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    daemon_channel = ElsewhereChannel()
    async with running_bruce(config, channels=[ChatChannel(), daemon_channel]) as bruce:
        assert bruce.tasks is not None and bruce.stores is not None
        session = await bruce.stores.sessions.get_or_create(SessionKey("elsewhere", "bob"))
        task = await bruce.tasks.planner.create(
            NewTask(
                session_id=session.id,
                channel="elsewhere",
                chat_id="bob",
                title="Call mum",
                mode="message",
                content="Call mum",
                run_at="+2s",
                cron=None,
                timezone=None,
            )
        )

    # Like `bruce chat`: a process with another channel only. The task comes due meanwhile.
    console_like = ChatChannel()
    async with running_bruce(config, channels=[console_like]) as bruce:
        assert bruce.tasks is not None
        await wait_until(lambda: utcnow() > task.next_run_at + timedelta(seconds=1), 10)
        await bruce.tasks.firing.fire(task.id)  # as APScheduler would
    assert task_row(tmp_path, task.id)["status"] == "active"  # not failed, not paused
    assert runs_of(tmp_path, task.id) == []

    # The daemon, with the channel, delivers it once on its next start.
    back = ElsewhereChannel()
    async with running_bruce(config, channels=[ChatChannel(), back]):
        await wait_until(lambda: back.texts_starting("⏰", "bob"), DUE_TIMEOUT)
    assert back.texts("bob") == ["⏰ Call mum"]
    assert len(runs_of(tmp_path, task.id)) == 1
