"""Crash-safe firing: a reminder or briefing whose process is killed at the worst moment is still
delivered once, and its run is closed with the right status.

The first half kills the real daemon (`python -m bruce_bot run`, in its own process group) with
SIGKILL at the critical moments, using the real python-telegram-bot against the fake Bot API, the
real Anthropic SDK against the fake Messages API and a real SQLite file: the fake Bot API holds
the reminder's `sendMessage` (before it takes the message, or after it took it but before it
answers), the fake model holds the briefing's request, and the kill lands while they are held.
Then the daemon starts again over the same database and the test counts what the user received,
judged by crash_judge.py: a second copy only of a send in flight at the kill that `deliveries`
does not record, and a reminder delivered (a briefing fired) within `LATE_LIMIT` seconds of Bruce
being up after it was due.
The second half starts from the state a crash of an older Bruce left on disk (a run claimed, its
message never stored), and from damaged rows, in-process with an injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import pytest
import yaml
from structlog.testing import capture_logs

from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.integration.crash.test_restart import free_port
from tests.integration.crash_judge import (
    LATE_LIMIT,
    CommitWindow,
    ProcessLife,
    in_flight_excuse,
    sent_rows,
    uptime_between,
    utc_seconds,
)
from tests.integration.scheduler.test_scheduler import (
    DUE_TIMEOUT,
    ChatChannel,
    ahead,
    create_direct,
    execute,
    runs_of,
    scheduler_config,
    task_row,
)
from tests.integration.support import db_rows

START_TIMEOUT = 30.0
ALICE = 1001
CREATE_REMINDER = {
    "title": "Stretch",
    "execution_mode": "message",
    "content": "Stand up and stretch",
    "run_at": "+2s",
}
CREATE_BRIEFING = {
    "title": "News digest",
    "execution_mode": "agent",
    "content": "Summarise today's news in one line",
    "run_at": "+2s",
}
BRIEFING_ANSWER = "Markets are calm and the sun is out."


class HoldingTelegram(FakeTelegramServer):
    """The fake Bot API, able to hold the next sendMessage whose text starts with a prefix:
    before it takes the message (nothing is delivered, the request hangs) or after it took it
    (the user has it, the answer never comes). The test kills Bruce while it hangs."""

    def __init__(self) -> None:
        super().__init__()
        self._hold: tuple[str, bool] | None = None
        self.held: list[str] = []
        self._never = asyncio.Event()

    def hold_next(self, prefix: str, *, after_delivery: bool) -> None:
        self._hold = (prefix, after_delivery)

    def texts_starting(self, prefix: str, chat_id: int = ALICE) -> list[str]:
        return [text for text in self.texts_to(chat_id) if text.startswith(prefix)]

    def copies_starting(self, prefix: str, chat_id: int = ALICE) -> list[SentMessage]:
        return [sent for sent in self.sent.get(chat_id, []) if sent.plain.startswith(prefix)]

    async def _api_sendMessage(self, params: dict[str, str]) -> Any:
        hold = self._hold
        holding = hold is not None and params.get("text", "").startswith(hold[0])
        if holding:
            self._hold = None
        if holding and hold is not None and not hold[1]:
            await self._hang(params)
        result = await super()._api_sendMessage(params)
        if holding:
            await self._hang(params)
        return result

    async def _hang(self, params: dict[str, str]) -> None:
        self.held.append(params.get("text", ""))
        self._notify()
        await self._never.wait()  # ended with the server


class Daemon:
    """`bruce run` in its own process group, on Telegram and the fake model, killed with
    SIGKILL to the whole group."""

    def __init__(self, tmp_path: Path, telegram: FakeTelegramServer, llm_url: str) -> None:
        self.tmp_path = tmp_path
        self.data_dir = tmp_path / "data"
        self.port = free_port()
        self.config_path = tmp_path / "config.yml"
        config = {
            "app": {"data_dir": str(self.data_dir), "timezone": "UTC"},
            "database": {"url": f"sqlite+aiosqlite:///{self.data_dir / 'bruce.db'}"},
            "llm": {
                "provider": "anthropic",
                "api_key": "test-key",
                "base_url": llm_url,
                "max_retries": 0,
                "timeout_seconds": 60,
            },
            "agent": {"shutdown_timeout_seconds": 1.0},
            "brain": {"enabled": False},
            "channels": {
                "telegram": {
                    "enabled": True,
                    "token": telegram.token,
                    "base_url": telegram.base_url,
                    "allowed_user_ids": [ALICE],
                }
            },
            "tools": {
                "web_search": {"enabled": False},
                "web_fetch": {"enabled": False},
                "artifacts": {"enabled": False},
                "subagents": {"enabled": False},
            },
            "web": {"host": "127.0.0.1", "port": self.port},
        }
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.process: asyncio.subprocess.Process | None = None
        self.runs = 0
        self.lives: list[ProcessLife] = []  # every start, and how it ended (crash_judge.py)

    async def start(self) -> None:
        self.runs += 1
        life = ProcessLife(f"run {self.runs}", time.time())
        self.lives.append(life)
        env = {k: v for k, v in os.environ.items() if k != "BRUCE_CONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        out, err = self._output_files()
        with out, err:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "bruce_bot", "run", "--config", str(self.config_path)),
                cwd=self.tmp_path,
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, killed as one
            )
        await wait_until(self._healthy, timeout=START_TIMEOUT, interval=0.05)
        life.ready_at = time.time()

    def _output_files(self) -> tuple[BinaryIO, BinaryIO]:
        return (
            (self.tmp_path / f"run{self.runs}.out").open("wb"),
            (self.tmp_path / f"run{self.runs}.err").open("wb"),
        )

    async def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.returncode is not None:
            raise AssertionError(f"bruce exited with {self.process.returncode}:\n{self.log()}")
        try:
            async with httpx.AsyncClient(timeout=1) as client:
                response = await client.get(f"http://127.0.0.1:{self.port}/healthz")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def log(self) -> str:
        return (self.tmp_path / f"run{self.runs}.out").read_text(errors="replace")[-6000:] + (
            self.tmp_path / f"run{self.runs}.err"
        ).read_text(errors="replace")[-4000:]

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            life = self.lives[-1]
            life.signal, life.signalled_at = "SIGKILL", time.time()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
            life.exited_at = time.time()

    async def stop(self) -> None:
        """SIGTERM, and wait for a clean exit (what the last process left is then final)."""
        assert self.process is not None
        life = self.lives[-1]
        life.signal, life.signalled_at = "SIGTERM", time.time()
        self.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(self.process.wait(), 20) == 0, self.log()
        life.exited_at = time.time()

    def lateness(self, delivered: SentMessage | None = None) -> float:
        """Seconds Bruce was up between the (one) task's due time and this delivery (None: its
        firing, for a briefing: once fired, it is a turn like any message)."""
        [task] = self.rows("SELECT run_at FROM proactive_tasks")
        due = utc_seconds(task["run_at"])
        fired = utc_seconds(self.runs_of_tasks()[0]["created_at"])
        end = delivered.received_at if delivered is not None else fired
        assert due is not None and end is not None
        return uptime_between(self.lives, due, end, time.time())

    def judge_second_copy(self, copies: list[SentMessage], kind: str) -> str:
        """crash_judge's verdict on the second of two copies of the firing's `kind` message,
        sent by the first run (killed) and the second; fails the test unless excused."""
        first, again = copies
        [message] = self.rows("SELECT id FROM messages WHERE kind = ?", kind)
        deliveries = "SELECT message_id, part, attempt, status, created_at FROM deliveries"
        recorded = sent_rows(self.rows(deliveries)).get((message["id"], 0), [])
        window = CommitWindow()
        window.measure(copies, recorded)
        verdict = in_flight_excuse(
            first, self.lives[0], window, again_at=again.received_at, recorded=recorded
        )
        assert verdict.excused, verdict.why
        return verdict.why

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        return [dict(row) for row in db_rows(self.data_dir, sql, *params)]

    def runs_of_tasks(self) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM task_runs ORDER BY id")


@pytest.fixture
async def telegram() -> AsyncIterator[HoldingTelegram]:
    async with HoldingTelegram() as server:
        yield server


@pytest.fixture
async def daemon(
    tmp_path: Path, telegram: HoldingTelegram, anthropic_fake: FakeAnthropicServer
) -> AsyncIterator[Daemon]:
    bruce = Daemon(tmp_path, telegram, anthropic_fake.base_url)
    try:
        yield bruce
    finally:
        await bruce.kill()


async def schedule_through_the_model(
    telegram: HoldingTelegram, fake: FakeAnthropicServer, arguments: dict[str, Any]
) -> None:
    """Alice asks on Telegram; the model calls proactive_create, then answers "Done."."""
    fake.script(tool_calls=[("proactive_create", arguments)])
    fake.script("Done.")
    telegram.private_text(telegram.user(ALICE, "Alice"), "please schedule it")
    await telegram.wait_for(lambda: "Done." in telegram.texts_to(ALICE), DUE_TIMEOUT)


# ---- reminders -------------------------------------------------------------------------------


async def test_a_reminder_killed_after_its_firing_was_stored_is_sent_once_after_restart(
    daemon: Daemon, telegram: HoldingTelegram, anthropic_fake: FakeAnthropicServer
) -> None:
    telegram.hold_next("⏰", after_delivery=False)
    await daemon.start()
    await schedule_through_the_model(telegram, anthropic_fake, CREATE_REMINDER)
    await telegram.wait_for(lambda: telegram.held, DUE_TIMEOUT)  # APScheduler fired it
    await daemon.kill()

    # The claim, the advance and the reminder were one commit; nothing reached the user.
    [run] = daemon.runs_of_tasks()
    assert run["status"] == "running" and run["message_id"] is not None
    [reminder] = daemon.rows("SELECT * FROM messages WHERE id = ?", run["message_id"])
    assert (reminder["kind"], reminder["status"]) == ("reminder", "pending")
    assert f'"task_run_id": {run["id"]}' in reminder["extra"]
    [task] = daemon.rows("SELECT * FROM proactive_tasks")
    assert task["status"] == "done"
    assert telegram.texts_starting("⏰") == []

    await daemon.start()
    await telegram.wait_for(lambda: telegram.texts_starting("⏰"), DUE_TIMEOUT)
    await daemon.stop()

    assert telegram.texts_starting("⏰") == ["⏰ Stand up and stretch"]
    assert telegram.texts_to(ALICE).count("Done.") == 1
    [delivered] = telegram.copies_starting("⏰")
    assert daemon.lateness(delivered) <= LATE_LIMIT
    [run] = daemon.runs_of_tasks()
    assert run["status"] == "delivered" and run["delivered_at"] is not None
    assert run["attempts"] == 1 and run["error"] is None
    [reminder] = daemon.rows("SELECT * FROM messages WHERE kind = 'reminder'")
    assert reminder["status"] == "sent"


async def test_a_reminder_killed_while_telegram_had_it_is_sent_at_most_twice_and_closed(
    daemon: Daemon, telegram: HoldingTelegram, anthropic_fake: FakeAnthropicServer
) -> None:
    telegram.hold_next("⏰", after_delivery=True)
    await daemon.start()
    await schedule_through_the_model(telegram, anthropic_fake, CREATE_REMINDER)
    await telegram.wait_for(lambda: telegram.held, DUE_TIMEOUT)
    await daemon.kill()
    assert telegram.texts_starting("⏰") == ["⏰ Stand up and stretch"]  # the user has it

    await daemon.start()
    # The answer never reached Bruce: the part in flight may be sent once more, no more.
    await wait_until(
        lambda: daemon.runs_of_tasks()[0]["status"] == "delivered", timeout=DUE_TIMEOUT
    )
    await daemon.stop()
    # The first copy's answer never came: it is unrecorded, so the restart sends it once more.
    assert telegram.texts_starting("⏰") == ["⏰ Stand up and stretch"] * 2
    copies = telegram.copies_starting("⏰")
    daemon.judge_second_copy(copies, "reminder")
    assert daemon.lateness(copies[0]) <= LATE_LIMIT
    [run] = daemon.runs_of_tasks()
    assert run["status"] == "delivered" and run["attempts"] == 1
    assert [r["status"] for r in daemon.rows("SELECT * FROM messages WHERE kind = 'reminder'")] == [
        "sent"
    ]


# ---- briefings -------------------------------------------------------------------------------


async def test_a_briefing_killed_during_its_turn_is_answered_once_after_restart(
    daemon: Daemon, telegram: HoldingTelegram, anthropic_fake: FakeAnthropicServer
) -> None:
    release = asyncio.Event()

    async def model(body: dict[str, Any]) -> str:
        if len(anthropic_fake.requests) == 3:  # the briefing's turn in the first process
            await release.wait()  # never answered: that process is killed meanwhile
        return BRIEFING_ANSWER

    anthropic_fake.responder = model
    try:
        await daemon.start()
        await schedule_through_the_model(telegram, anthropic_fake, CREATE_BRIEFING)
        await anthropic_fake.wait_for_requests(3, DUE_TIMEOUT)
        await daemon.kill()
        [run] = daemon.runs_of_tasks()
        [asked] = daemon.rows("SELECT * FROM messages WHERE id = ?", run["message_id"])
        assert (asked["role"], asked["kind"], asked["status"]) == ("user", "task", "processing")

        await daemon.start()
        await telegram.wait_for(lambda: telegram.texts_starting("📋"), DUE_TIMEOUT)
        await wait_until(lambda: daemon.runs_of_tasks()[0]["status"] == "delivered")
        await daemon.stop()
    finally:
        release.set()

    assert telegram.texts_starting("📋") == [f"📋 News digest\n\n{BRIEFING_ANSWER}"]
    assert daemon.lateness() <= LATE_LIMIT  # fired on time (its turn was then cut)
    assert len(anthropic_fake.requests) == 4  # the cut turn, then its one re-run
    [run] = daemon.runs_of_tasks()
    assert run["status"] == "delivered" and run["attempts"] == 2  # run again once
    [asked] = daemon.rows("SELECT * FROM messages WHERE kind = 'task'")
    assert asked["status"] == "done"
    assert [r["kind"] for r in daemon.rows("SELECT * FROM messages WHERE kind = 'briefing'")] == [
        "briefing"
    ]


async def test_a_briefing_killed_while_telegram_had_its_answer_is_not_run_again(
    daemon: Daemon, telegram: HoldingTelegram, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = lambda body: BRIEFING_ANSWER
    telegram.hold_next("📋", after_delivery=True)
    await daemon.start()
    await schedule_through_the_model(telegram, anthropic_fake, CREATE_BRIEFING)
    await telegram.wait_for(lambda: telegram.held, DUE_TIMEOUT)
    await daemon.kill()
    assert daemon.runs_of_tasks()[0]["status"] == "running"

    await daemon.start()
    await wait_until(
        lambda: daemon.runs_of_tasks()[0]["status"] == "delivered", timeout=DUE_TIMEOUT
    )
    await daemon.stop()
    briefings = telegram.texts_starting("📋")
    assert briefings == [f"📋 News digest\n\n{BRIEFING_ANSWER}"] * 2  # the unanswered one again
    daemon.judge_second_copy(telegram.copies_starting("📋"), "briefing")
    assert len(anthropic_fake.requests) == 3  # answered once: only its delivery was repeated
    [run] = daemon.runs_of_tasks()
    assert run["attempts"] == 1


async def test_a_briefing_run_left_open_by_another_process_closes_when_its_answer_is_out(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    """In a cluster, a process killed after its briefing's answer was stored leaves the run
    `running`; the answer goes out through another process's redelivery, which knows nothing
    of the run and recovered its own crashes long ago. Its settling closes the run (every
    minute, and at its stop) instead of leaving it open for ever."""
    anthropic_fake.responder = lambda body: "Three headlines."
    config = scheduler_config(tmp_path, anthropic_fake)
    channel = ChatChannel()
    async with running_bruce(config, channels=[channel]) as bruce:
        assert bruce.tasks is not None
        task = await create_direct(
            bruce, mode="agent", title="Digest", content="News", run_at="+1h"
        )
        await bruce.tasks.editor.run_now(task.id)
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
        # The state the killed process left: the answer out, its run still open.
        execute(tmp_path, "UPDATE task_runs SET status = 'running', delivered_at = NULL")
    [run] = runs_of(tmp_path, task.id)
    assert run["status"] == "delivered"
    assert channel.texts() == ["📋 Digest\n\nThree headlines."]


# ---- what an older Bruce's crash left on disk ---------------------------------------------------


def claim_without_message(data_dir: Path, task_id: int) -> None:
    """A run claimed for the task's next firing, no message stored: a crash of Bruce before
    firings stored their message with the claim (its `scheduled_for` is the task's, as stored)."""
    execute(
        data_dir,
        "INSERT INTO task_runs (task_id, scheduled_for, status, late_seconds, created_at,"
        " attempts) SELECT id, next_run_at, 'running', 0, created_at, 1 FROM proactive_tasks"
        " WHERE id = ?",
        task_id,
    )


async def test_a_one_shot_claimed_and_advanced_before_a_crash_is_delivered_once_late(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        task = await create_direct(bruce, run_at="+5m", content="Take the pills")
    claim_without_message(tmp_path, task.id)
    execute(tmp_path, "UPDATE proactive_tasks SET status = 'done', next_run_at = NULL")

    later = ChatChannel()
    with capture_logs() as logs:
        async with running_bruce(config, channels=[later], clock=ahead(timedelta(minutes=10))):
            await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
    [text] = later.texts()
    assert text.startswith("⏰ Take the pills (late: was due at ")
    [run] = runs_of(tmp_path, task.id)
    assert run["attempts"] == 2 and run["message_id"] is not None
    assert any(e["event"] == "task_run_fired_again" and e["run_id"] == run["id"] for e in logs)
    assert task_row(tmp_path, task.id)["status"] == "done"

    again = ChatChannel()  # and never again
    async with running_bruce(config, channels=[again], clock=ahead(timedelta(minutes=11))):
        pass
    assert again.sent == []


async def test_a_claimed_firing_still_due_is_taken_over_and_its_task_advanced(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        task = await create_direct(bruce, run_at="+5m", content="Check the oven")
    claim_without_message(tmp_path, task.id)  # the crash came before the task moved on

    later = ChatChannel()
    async with running_bruce(config, channels=[later], clock=ahead(timedelta(minutes=10))):
        await wait_until(lambda: runs_of(tmp_path, task.id)[0]["status"] == "delivered")
    [text] = later.texts()
    assert text.startswith("⏰ Check the oven (late: was due at ")
    [run] = runs_of(tmp_path, task.id)
    assert run["attempts"] == 2
    row = task_row(tmp_path, task.id)
    assert row["status"] == "done" and row["next_run_at"] is None


async def test_a_claimed_firing_older_than_the_grace_period_is_missed_and_told_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake, scheduler={"misfire_grace_seconds": 60})
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        task = await create_direct(bruce, title="Dentist", run_at="+2m", content="Go")
    claim_without_message(tmp_path, task.id)
    execute(tmp_path, "UPDATE proactive_tasks SET status = 'done', next_run_at = NULL")

    later = ChatChannel()
    async with running_bruce(config, channels=[later], clock=ahead(timedelta(minutes=30))):
        await wait_until(lambda: later.sent, DUE_TIMEOUT)
    [notice] = later.texts()
    assert notice.startswith('⏰ I missed a reminder while I was offline: "Dentist"')
    [run] = runs_of(tmp_path, task.id)
    assert run["status"] == "missed" and run["message_id"] is not None

    again = ChatChannel()
    async with running_bruce(config, channels=[again], clock=ahead(timedelta(minutes=31))):
        pass
    assert again.sent == []


async def test_a_claimed_reminder_already_stored_and_sent_is_closed_without_sending_it(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        task = await create_direct(bruce, run_at="+5m", content="Water the plants")
    claim_without_message(tmp_path, task.id)
    execute(tmp_path, "UPDATE proactive_tasks SET status = 'done', next_run_at = NULL")
    execute(  # stored and sent by the old code, which did not link it to its run
        tmp_path,
        "INSERT INTO messages (session_id, role, kind, content, status, created_at)"
        " SELECT session_id, 'assistant', 'reminder', '⏰ Water the plants', 'sent',"
        " datetime(created_at, '+1 second') FROM proactive_tasks WHERE id = ?",
        task.id,
    )

    later = ChatChannel()
    async with running_bruce(config, channels=[later], clock=ahead(timedelta(minutes=10))):
        pass
    assert later.sent == []
    [run] = runs_of(tmp_path, task.id)
    assert run["status"] == "delivered" and run["attempts"] == 1 and run["message_id"]


# ---- damaged rows ------------------------------------------------------------------------------


async def test_broken_tasks_and_runs_are_set_aside_by_id_and_the_rest_fires(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    async with running_bruce(config, channels=[ChatChannel()]) as bruce:
        good = await create_direct(bruce, run_at="+3s", content="Still works")
        broken = await create_direct(bruce, cron="0 9 * * *", content="Bad zone")
        odd = await create_direct(bruce, run_at="+1h", content="Odd run")
        gone = await create_direct(bruce, run_at="+1h", content="Gone")
    execute(
        tmp_path, "UPDATE proactive_tasks SET timezone = 'Mars/Olympus' WHERE id = ?", broken.id
    )
    claim_without_message(tmp_path, odd.id)
    execute(tmp_path, "UPDATE task_runs SET status = 'exploded' WHERE task_id = ?", odd.id)
    claim_without_message(tmp_path, gone.id)
    execute(tmp_path, "DELETE FROM proactive_tasks WHERE id = ?", gone.id)  # foreign keys off

    channel = ChatChannel()
    with capture_logs() as logs:
        async with running_bruce(config, channels=[channel]):
            await wait_until(lambda: channel.sent, DUE_TIMEOUT)
            await wait_until(lambda: runs_of(tmp_path, good.id)[0]["status"] == "delivered")
    assert channel.texts() == ["⏰ Still works"]
    events = {(e["event"], e.get(key)) for e in logs for key in ("task_id", "run_id")}
    [odd_run] = runs_of(tmp_path, odd.id)
    [gone_run] = db_rows(tmp_path, "SELECT * FROM task_runs WHERE task_id = ?", gone.id)
    assert ("task_set_aside", broken.id) in events
    assert ("task_run_status_unknown", odd_run["id"]) in events
    assert ("task_run_orphaned", gone_run["id"]) in events
    assert task_row(tmp_path, broken.id)["status"] == "paused"
    assert odd_run["status"] == "failed" and "exploded" in odd_run["error"]
    assert gone_run["status"] == "failed"
    assert task_row(tmp_path, odd.id)["status"] == "active"  # the task itself is fine

    # Nothing is left to trip over on the next start.
    with capture_logs() as logs:
        async with running_bruce(config, channels=[ChatChannel()]):
            pass
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]


async def test_a_firing_whose_message_cannot_be_stored_leaves_nothing_half_done(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = scheduler_config(tmp_path, anthropic_fake)
    channel = ChatChannel()
    async with running_bruce(config, channels=[channel]) as bruce:
        assert bruce.tasks is not None
        task = await create_direct(bruce, run_at="+1h", content="All or nothing")
        execute(
            tmp_path,
            "CREATE TRIGGER no_reminders BEFORE INSERT ON messages WHEN NEW.kind = 'reminder'"
            " BEGIN SELECT RAISE(ABORT, 'the disk is full'); END",
        )
        with capture_logs() as logs:
            await bruce.tasks.firing.fire(task.id)
        assert [e["task_id"] for e in logs if e["event"] == "task_fire_failed"] == [task.id]
        # The claim and the advance went with the message: the firing is still owed.
        assert runs_of(tmp_path, task.id) == []
        assert task_row(tmp_path, task.id)["status"] == "active"

        execute(tmp_path, "DROP TRIGGER no_reminders")
        await bruce.tasks.firing.fire(task.id)
    assert channel.texts() == ["⏰ All or nothing"]
    [run] = runs_of(tmp_path, task.id)
    assert run["status"] == "delivered" and run["attempts"] == 1
    assert task_row(tmp_path, task.id)["status"] == "done"
