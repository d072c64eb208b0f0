"""The chaos test's machinery (tests/integration/crash/test_chaos.py): a seeded plan of Telegram
messages, a model that answers each one by naming it, the real daemon in its own process group
stopped by a signal at seeded moments and started again over the same SQLite file, and the
ledger that counts what reached the fake Bot API (with Telegram's sending limits on) against the
plan.

Every answer names what it answers, and which answer it is: `[r7 part 2/3] re msg-c2-014
msg-c2-015.` (`r7`: the model's 7th final answer; one line like it opens each part of a long
answer). The same text twice at Telegram is therefore one stored reply sent twice, while two
different answers naming one message mean it was answered twice. Reminders arrive as
`⏰ rem-c2-014`, briefings as a reply naming `brief-c2-014`.

A second copy of a part (or of a reminder) is excused only by crash_judge.py's rules: its first
copy was in flight at a SIGKILL of the process that sent it (Telegram answered it later than the
commit window measured in this run before the kill), `deliveries` does not record it sent, and
no later send of that process proves it had moved on. Nothing is excused after a SIGTERM: a
graceful stop must finish or record what it sends. A reminder is late past crash_judge's
`LATE_LIMIT` seconds of uptime after its due time; what is left stuck at the end (a message
waiting or in a turn, a stored reply unsent or never seen at Telegram, a task or run still
open), and a chaos phase with too few stops, fail the run.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import os
import random
import re
import signal
import socket
import sqlite3
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import yaml

from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer, SendLimits, SentMessage
from tests.integration.crash_judge import (
    LATE_LIMIT,
    CommitWindow,
    Recorded,
    Verdict,
    busy_uptime,
    lateness_problem,
    sent_rows,
    too_few_stops,
    uptime_between,
)
from tests.integration.crash_judge import in_flight_excuse as judge_in_flight

# A message, or a briefing as it comes back from the scheduler, named in the model's answers.
LABEL = re.compile(r"\b(?:msg|brief)-c\d+-\d+\b")
HEADER = re.compile(r"\[(r\d+) part (\d+)/(\d+)\] re ([^.\]]*)\.")
REMINDER_TEXT = re.compile(r"⏰ (rem-c\d+-\d+)")
# The cluster judge's slack (cluster_support.py, through `in_flight_excuse` below) until it
# moves to crash_judge.py's measured window; the SQLite chaos judge no longer uses them.
COMMIT_SLACK = 0.5
SIGNAL_SLACK = 0.1
FILLER = "Nothing more to add here, this sentence only makes the answer long. " * 34
SUMMARY_MARK = "<new_messages>"
# What marks an error or a warning in the daemon's log, as text or as JSON lines.
TROUBLE_MARKS = ("traceback", "[error", "[warning", '"level": "error"', '"level": "warning"')


def some_of(labels: Sequence[str], most: int = 4) -> str:
    """Labels for a report line: the first few and how many more."""
    shown = " ".join(labels[:most])
    return shown + (f" (+{len(labels) - most} more)" if len(labels) > most else "")


# ---- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """One user message of the plan and what it asks the model for."""

    label: str  # msg-c2-014: chat 2, its 14th message
    user_id: int  # the private chat's id too
    gap: float  # seconds after the previous message of the plan
    think: float  # seconds the model takes over its answer
    parts: int  # Telegram messages its answer takes (long answers: 3)
    reminder_in: int | None = None  # a message-mode reminder due this many seconds later
    briefing_in: int | None = None  # an agent-mode briefing due this many seconds later

    @property
    def suffix(self) -> str:
        return self.label.removeprefix("msg-")

    @property
    def reminder(self) -> str:
        return f"rem-{self.suffix}"

    @property
    def briefing(self) -> str:
        return f"brief-{self.suffix}"

    @property
    def text(self) -> str:
        words = [self.label, "hello Bruce"]
        if self.reminder_in:
            words.append(f"please remind me in {self.reminder_in} seconds")
        if self.briefing_in:
            words.append(f"and prepare me a short briefing in {self.briefing_in} seconds")
        if self.parts > 1:
            words.append("and tell me everything at length")
        return ", ".join(words)


def make_plan(rng: random.Random, user_ids: Sequence[int], count: int) -> list[Ask]:
    """`count` messages spread over the chats, about 3 a second; some slow to answer, some long,
    some asking for a reminder (message mode) or a briefing (agent mode) a few seconds later."""
    numbers = dict.fromkeys(user_ids, 0)
    plan: list[Ask] = []
    for _ in range(count):
        user_id = rng.choice(list(user_ids))
        numbers[user_id] += 1
        roll = rng.random()
        plan.append(
            Ask(
                label=f"msg-c{list(user_ids).index(user_id) + 1}-{numbers[user_id]:03d}",
                user_id=user_id,
                gap=min(1.5, max(0.02, rng.expovariate(1 / 0.3))),
                think=rng.uniform(0.5, 2.0) if rng.random() < 0.3 else rng.uniform(0.02, 0.2),
                parts=3 if rng.random() < 0.1 else 1,
                reminder_in=rng.randint(3, 9) if roll < 0.15 else None,
                briefing_in=rng.randint(4, 10) if 0.15 <= roll < 0.21 else None,
            )
        )
    return plan


# ---- the model -----------------------------------------------------------------------------


def _blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


class ChaosModel:
    """The fake Anthropic server's responder: answers every message in view that no answer in
    view names yet, the way a model answers what is new in a conversation. It first calls
    `proactive_create` for the reminders and briefings those messages ask for (unless this turn
    already did), then names them all in one answer."""

    def __init__(self, plan: Iterable[Ask]) -> None:
        self._asks = {ask.label: ask for ask in plan}
        self._numbers = itertools.count(1)
        self.answers: dict[str, tuple[str, ...]] = {}  # r7 -> the labels it names
        self.seen: dict[str, tuple[str, ...]] = {}  # r7 -> every label its request showed
        self.refused: dict[str, str] = {}  # reminder/briefing title -> why it was not asked for
        self.tool_errors: list[str] = []

    def __call__(self, body: dict[str, Any]) -> AnthropicReply:
        messages = body.get("messages") or []
        user_texts = [
            block.get("text", "")
            for message in messages
            if message.get("role") == "user"
            for block in _blocks(message)
            if block.get("type") == "text"
        ]
        if any(SUMMARY_MARK in text for text in user_texts):
            return AnthropicReply("A long test conversation; every message was answered.")
        named: set[str] = set()
        asked_for: set[str] = set()
        for message in messages:
            for block in _blocks(message):
                if message.get("role") == "assistant" and block.get("type") == "text":
                    named.update(LABEL.findall(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    asked_for.add(str((block.get("input") or {}).get("title")))
                elif block.get("type") == "tool_result" and block.get("is_error"):
                    self.tool_errors.append(str(block.get("content"))[:300])
        pending = list(
            dict.fromkeys(
                label for text in user_texts for label in LABEL.findall(text) if label not in named
            )
        )
        can_schedule = any(
            tool.get("name") == "proactive_create" for tool in body.get("tools") or []
        )
        calls: list[tuple[str, dict[str, Any]]] = []
        for label in pending:
            ask = self._asks.get(label)
            if ask is None:
                continue
            wanted = []
            if ask.reminder_in:
                wanted.append((ask.reminder, "message", ask.reminder, ask.reminder_in))
            if ask.briefing_in:
                wanted.append(
                    (ask.briefing, "agent", f"{ask.briefing}: sum up my day", ask.briefing_in)
                )
            for title, mode, content, seconds in wanted:
                if title in asked_for:
                    continue
                if not can_schedule:
                    tasks = [text for text in user_texts if text.startswith("[Scheduled task")]
                    self.refused[title] = (
                        f"the turn answering {label} offered no proactive_create (its request "
                        f"held {len(tasks)} scheduled-task message(s): "
                        f"{[LABEL.findall(text) for text in tasks]}; it answered "
                        f"{some_of(pending)})"
                    )
                    continue
                arguments = {
                    "title": title,
                    "execution_mode": mode,
                    "content": content,
                    "run_at": f"+{seconds}s",
                }
                calls.append(("proactive_create", arguments))
        if calls:
            return AnthropicReply(tool_calls=calls, delay_seconds=0.05)
        tag = f"r{next(self._numbers)}"
        self.answers[tag] = tuple(pending)
        self.seen[tag] = tuple(label for text in user_texts for label in LABEL.findall(text))
        asks = [self._asks[label] for label in pending if label in self._asks]
        parts = max((ask.parts for ask in asks), default=1)
        think = asks[-1].think if asks else 0.1  # as slow as answering the newest message
        names = " ".join(pending) or "nothing new"
        text = "\n\n".join(
            f"[{tag} part {part}/{parts}] re {names}." + (f" {FILLER}" if parts > 1 else "")
            for part in range(1, parts + 1)
        )
        return AnthropicReply(text, delay_seconds=think)


# ---- the daemon ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(slots=True)
class Run:
    """One process of the daemon, from spawn to exit (times are `time.time()`)."""

    number: int
    spawned_at: float
    ready_at: float | None = None
    signal: str | None = None  # how it was stopped
    signalled_at: float | None = None
    exited_at: float | None = None
    returncode: int | None = None
    label: str = ""  # how reports name it ("process b" in a cluster); default "run 3"

    def holds(self, moment: float) -> bool:
        return self.spawned_at <= moment <= (self.exited_at or float("inf"))

    @property
    def name(self) -> str:
        return self.label or f"run {self.number}"


class ChaosDaemon:
    """`python -m bruce_bot run` in its own process group (so a signal reaches all of it), one
    config in `workdir`, each run's output in its own files. The database is a SQLite file in
    `workdir` unless `config` has a `database` section of its own (PostgreSQL: a cluster)."""

    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {**config, "app": {**config.get("app", {}), "data_dir": str(self.data_dir)}}
        config["database"] = config.get("database") or {
            "url": f"sqlite+aiosqlite:///{self.data_dir / 'bruce.db'}"
        }
        config["web"] = {"host": "127.0.0.1", "port": self.port}
        self.config_path = workdir / "config.yml"
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.runs: list[Run] = []
        self.process: asyncio.subprocess.Process | None = None

    async def spawn(self) -> Run:
        assert self.process is None or self.process.returncode is not None
        run = Run(len(self.runs) + 1, time.time())
        self.runs.append(run)
        env = {key: value for key, value in os.environ.items() if key != "BRUCE_CONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        out, err = self._output(run)
        with out, err:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bruce_bot",
                "run",
                "--config",
                str(self.config_path),
                cwd=self.workdir,
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group
            )
        SPAWNED.add(self.process.pid)
        return run

    def _output(self, run: Run) -> tuple[BinaryIO, BinaryIO]:
        return (
            (self.workdir / f"run{run.number}.out").open("wb"),
            (self.workdir / f"run{run.number}.err").open("wb"),
        )

    async def wait_ready(self, within: float) -> bool:
        """Poll /healthz until it answers (True), the process exits or `within` runs out."""
        process, run = self.process, self.runs[-1]
        assert process is not None
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(timeout=1) as client:
            while process.returncode is None and time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/healthz")).status_code == 200:
                        run.ready_at = time.time()
                        return True
                await asyncio.sleep(0.05)
        return False

    async def stop(self, sig: signal.Signals, within: float = 60.0) -> Run:
        """Signal the whole process group and wait for the exit; SIGKILL after `within`."""
        process, run = self.process, self.runs[-1]
        assert process is not None
        if process.returncode is None:
            run.signal, run.signalled_at = sig.name, time.time()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                await asyncio.wait_for(process.wait(), within)
            except TimeoutError:
                run.signal = f"{sig.name}, then SIGKILL after {within:.0f} s"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        run.exited_at = run.exited_at or time.time()
        run.returncode = process.returncode
        SPAWNED.discard(process.pid)
        return run

    def stderr_lines(self, run: Run) -> list[str]:
        path = self.workdir / f"run{run.number}.err"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        path = self.data_dir / "bruce.db"
        if not path.exists():
            return []
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        connection.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in connection.execute(sql, params).fetchall()]
        except sqlite3.Error as exc:
            return [{"error": f"{type(exc).__name__}: {exc}"}]
        finally:
            connection.close()


# Every `bruce run` process group this interpreter started: whatever ends the test session (a
# pytest-timeout, Ctrl-C, a fixture that failed before its cleanup), none outlives it.
SPAWNED: set[int] = set()


@atexit.register
def _kill_spawned() -> None:
    for pgid in SPAWNED:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


# ---- the ledger ----------------------------------------------------------------------------


@dataclass(slots=True)
class Copy:
    """One message as Telegram took it."""

    sent: SentMessage
    run: int  # the process that sent it (0: none found)


@dataclass(slots=True)
class Findings:
    problems: list[str] = field(default_factory=list)
    excused: list[str] = field(default_factory=list)  # duplicates a SIGKILL explains
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Deliveries:
    """What Bruce's database says it sent: the stored message of each answer (r7) and of each
    reminder (rem-c2-014), their `deliveries` rows recording parts sent, and the commit window
    measured from those rows against the copies Telegram took."""

    replies: dict[str, int] = field(default_factory=dict)  # r7 -> message id
    reminders: dict[str, int] = field(default_factory=dict)  # rem-c2-014 -> message id
    statuses: dict[int, str] = field(default_factory=dict)  # message id -> its status
    sent: dict[tuple[int, int], list[Recorded]] = field(default_factory=dict)
    window: CommitWindow = field(default_factory=CommitWindow)

    def recorded(self, message_id: int | None, part: int) -> list[Recorded]:
        return self.sent.get((message_id, part), []) if message_id is not None else []


def _utc(value: Any) -> float | None:
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


class Ledger:
    """What arrived at the fake Bot API, sorted into answers (by answer and part), reminders
    and everything else, with the timeline of runs to tell which process sent what (or
    `sender`, when several run at once: the number of the one that sent a message)."""

    def __init__(
        self,
        telegram: FakeTelegramServer,
        runs: Sequence[Run],
        sender: Callable[[SentMessage], int] | None = None,
    ) -> None:
        self.runs = runs
        self._sender = sender
        self.parts: dict[tuple[str, int], list[Copy]] = defaultdict(list)  # (r7, 2) -> copies
        self.answer_of: dict[str, tuple[int, tuple[str, ...], int]] = {}  # r7 -> (n, names, chat)
        self.answered_by: dict[str, set[str]] = defaultdict(set)  # label -> answers naming it
        self.reminders: dict[str, list[Copy]] = defaultdict(list)
        self.others: list[Copy] = []
        for chat_id, messages in telegram.sent.items():
            for sent in messages:
                run = self._sender(sent) if self._sender else self.run_at(sent.received_at)
                copy = Copy(sent, run)
                header = HEADER.search(sent.plain)
                reminder = REMINDER_TEXT.search(sent.plain)
                if header:
                    tag, part, total = header.group(1), int(header.group(2)), int(header.group(3))
                    names = tuple(LABEL.findall(header.group(4)))
                    self.parts[(tag, part)].append(copy)
                    self.answer_of[tag] = (total, names, chat_id)
                    for name in names:
                        self.answered_by[name].add(tag)
                elif reminder:
                    self.reminders[reminder.group(1)].append(copy)
                else:
                    self.others.append(copy)
        for copies in [*self.parts.values(), *self.reminders.values()]:
            copies.sort(key=lambda c: c.sent.received_at)

    def run_at(self, moment: float) -> int:
        return next((run.number for run in reversed(self.runs) if run.holds(moment)), 0)

    def complete(self, label: str) -> bool:
        """Some answer names `label` and all of its parts arrived."""
        for tag in self.answered_by.get(label, ()):
            total = self.answer_of[tag][0]
            if all(self.parts.get((tag, part)) for part in range(1, total + 1)):
                return True
        return False

    def first_delivery(self, label: str) -> float | None:
        moments = [
            self.parts[(tag, 1)][0].sent.received_at
            for tag in self.answered_by.get(label, ())
            if self.parts.get((tag, 1))
        ]
        return min(moments, default=None)


def in_flight_excuse(
    first: SentMessage,
    runs: Sequence[Run],
    ledger: Ledger,
    tag: str | None,
    part: int | None,
    t: Callable[[float | None], str],
) -> str | None:
    """The cluster judge's excuse (cluster_support.py) until it moves to crash_judge.py: why a
    second copy of `first` was fair, or (starting with "not") why it was not: it was in flight
    (`COMMIT_SLACK`, `SIGNAL_SLACK`) when a SIGKILL hit the run of `runs` that sent it (`t`
    writes a moment). The SQLite chaos judge uses crash_judge.py's stricter rules."""
    for run in runs:
        stopped = run.signalled_at
        if stopped is None or not run.spawned_at <= first.received_at <= stopped + SIGNAL_SLACK:
            continue
        in_flight = first.answered_at is None or first.answered_at > stopped - COMMIT_SLACK
        if not in_flight:
            return (
                f"not in flight: Telegram answered {stopped - (first.answered_at or 0):.2f} s "
                f"before the {run.signal} of {run.name}, which had not recorded it"
            )
        if tag is not None and part is not None:
            later = [
                copy
                for (other_tag, other_part), copies in ledger.parts.items()
                if other_tag == tag and other_part > part
                for copy in copies
                if first.received_at < copy.sent.received_at <= stopped
            ]
            if later:
                return (
                    f"not in flight only: part {part} was not recorded although {run.name} "
                    f"had gone on to send a later part before its {run.signal}"
                )
        if run.signal != "SIGKILL":
            return f"not excused: in flight at the {run.signal} of {run.name}"
        return f"in flight at the SIGKILL of {run.name} ({t(stopped)})"
    return "not stopped: the same process or a live one sent it twice"


class Scenario:
    """What the test drove, and the judgement of what arrived."""

    def __init__(
        self,
        seed: int,
        stop_signal: signal.Signals,
        plan: Sequence[Ask],
        telegram: FakeTelegramServer,
        model: ChaosModel,
        daemon: ChaosDaemon | None,
    ) -> None:
        self.seed = seed
        self.stop_signal = stop_signal
        self.plan = plan
        self.telegram = telegram
        self.model = model
        self.daemon = daemon
        self.pushed: list[Ask] = []
        self.started = time.time()
        self.stops = 0  # by `stop_signal`, at the seeded moments
        self.notes: list[str] = []
        self.failures: list[str] = []  # what the harness saw go wrong (judged as problems)
        self.deliveries = Deliveries()  # read by `judge`

    # ---- what the judgement reads (a cluster's scenario reads its processes and PostgreSQL) -

    @property
    def title(self) -> str:
        return f"chaos with {self.stop_signal.name}"

    @property
    def runs(self) -> Sequence[Run]:
        """Every run of the daemon; a `Copy.run` is a number of one of them (from 1)."""
        return self._daemon.runs

    def run_name(self, number: int) -> str:
        """How the reports name the run a `Copy` came from."""
        return f"run {number}"

    def ledger(self) -> Ledger:
        return Ledger(self.telegram, self.runs)

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Rows of a query on Bruce's database (SQLite's dialect, `?` parameters)."""
        return self._daemon.rows(sql, *params)

    def replies_claiming(self, message_id: Any) -> list[dict[str, Any]]:
        """The stored replies whose `extra.answers` lists this user message."""
        return self.rows(
            "SELECT m.id, m.status, substr(m.content, 1, 90) AS content FROM messages m, "
            "json_each(m.extra, '$.answers') a WHERE m.role = 'assistant' AND a.value = ?",
            message_id,
        )

    def stderr_lines(self, run: Run) -> list[str]:
        return self._daemon.stderr_lines(run)

    @property
    def _daemon(self) -> ChaosDaemon:
        assert self.daemon is not None, "a scenario without a daemon overrides what reads it"
        return self.daemon

    # ---- expectations ----------------------------------------------------------------------

    @property
    def expected_reminders(self) -> list[Ask]:
        return [ask for ask in self.pushed if ask.reminder_in]

    @property
    def expected_briefings(self) -> list[Ask]:
        return [ask for ask in self.pushed if ask.briefing_in]

    def everything_arrived(self) -> bool:
        ledger = self.ledger()
        return (
            all(ledger.complete(ask.label) for ask in self.pushed)
            and all(ledger.reminders.get(ask.reminder) for ask in self.expected_reminders)
            and all(ledger.complete(ask.briefing) for ask in self.expected_briefings)
        )

    def quiet(self) -> bool:
        """Nothing left for Bruce to do: no message waiting or in a turn, no reply unsent, no
        task still to fire."""
        busy = self.rows(
            "SELECT count(*) AS n FROM messages WHERE (role = 'user' AND status IN "
            "('pending', 'processing')) OR (role = 'assistant' AND status IN "
            "('pending', 'undelivered'))"
        )
        tasks = self.rows("SELECT count(*) AS n FROM proactive_tasks WHERE status = 'active'")
        return bool(busy and tasks) and busy[0].get("n") == 0 and tasks[0].get("n") == 0

    # ---- judgement -------------------------------------------------------------------------

    def t(self, moment: float | None) -> str:
        return "never" if moment is None else f"+{moment - self.started:.2f}s"

    def judge(self) -> Findings:
        ledger = self.ledger()
        findings = Findings(problems=list(self.failures))
        self.deliveries = self.read_deliveries(ledger)
        for ask in self.pushed:
            self._judge_answered(ask.label, ledger, findings)
        for ask in self.expected_briefings:
            self._judge_answered(ask.briefing, ledger, findings)
            self._judge_task(ask.briefing, ledger.first_delivery(ask.briefing), findings)
        for ask in self.expected_reminders:
            copies = ledger.reminders.get(ask.reminder, [])
            if not copies:
                findings.problems.append(
                    f"LOST reminder {ask.reminder} (asked by {ask.label}): never delivered; "
                    + self._task_story(ask.reminder)
                )
            self._judge_task(ask.reminder, copies[0].sent.received_at if copies else None, findings)
        for (tag, part), copies in sorted(ledger.parts.items()):
            total, names, _ = ledger.answer_of[tag]
            self._judge_copies(
                f"{tag} part {part}/{total} (re {some_of(names)})",
                copies,
                ledger,
                findings,
                tag=tag,
                part=part,
            )
        for title, copies in sorted(ledger.reminders.items()):
            fired = self.rows(
                "SELECT id, status, extra FROM messages WHERE role = 'assistant' AND kind = "
                "'reminder' AND content LIKE ?",
                f"⏰ {title}%",
            )
            if len(fired) > 1:  # separate firings, not one reminder sent again
                findings.problems.append(
                    f"FIRED {len(fired)} TIMES reminder {title}: stored as {fired}; copies at "
                    + ", ".join(
                        f"{self.t(c.sent.received_at)} ({self.run_name(c.run)})" for c in copies
                    )
                )
                continue
            self._judge_copies(f"reminder {title}", copies, ledger, findings)
        for tag, (total, names, chat_id) in sorted(ledger.answer_of.items()):
            missing = [p for p in range(1, total + 1) if not ledger.parts.get((tag, p))]
            if missing:
                findings.problems.append(
                    f"LOST part(s) {missing} of {total} of answer {tag} (re {some_of(names)}); "
                    + self._reply_story(tag)
                )
            if not names:
                findings.problems.append(
                    f"EXTRA answer {tag} to chat {chat_id} named nothing new: every message its "
                    "turn could see was answered already (by a turn outside whose batch it was)"
                )
        for copy in ledger.others:
            findings.problems.append(
                f"UNEXPECTED message to chat {copy.sent.chat_id} at {self.t(copy.sent.received_at)}"
                f" ({self.run_name(copy.run)}): {copy.sent.plain[:160]!r}"
            )
        for run in self.runs:
            if run.signal is None or (run.signal == "SIGTERM" and run.returncode not in (0, -15)):
                findings.problems.append(
                    f"EXIT {run.name} ended with rc={run.returncode} after "
                    f"{run.signal or 'no signal: it exited by itself'}; its stderr ends: "
                    + " | ".join(self.stderr_lines(run)[-5:])
                )
            elif "then SIGKILL" in run.signal:
                findings.problems.append(f"HUNG {run.name}: {run.signal}")
        for error in self.model.tool_errors:
            findings.problems.append(f"TOOL ERROR seen by the model: {error}")
        self._judge_leftovers(ledger, findings)
        findings.stats = self._stats(ledger, findings)
        return findings

    def read_deliveries(self, ledger: Ledger) -> Deliveries:
        """The stored replies and reminders, their rows in `deliveries`, and the commit window
        measured from them: each row against the copy it records, and each next part of a
        reply sent at its first attempt against the previous part's answer."""
        found = Deliveries()
        for row in self.rows("SELECT id, status, content FROM messages WHERE role = 'assistant'"):
            if "id" not in row:
                continue
            content = str(row.get("content") or "")
            found.statuses[int(row["id"])] = str(row.get("status"))
            if header := HEADER.search(content):
                found.replies.setdefault(header.group(1), int(row["id"]))
            elif reminder := REMINDER_TEXT.match(content):
                found.reminders.setdefault(reminder.group(1), int(row["id"]))
        found.sent = sent_rows(
            self.rows("SELECT message_id, part, attempt, status, created_at FROM deliveries")
        )
        window = found.window
        for tag, (total, _, _) in ledger.answer_of.items():
            mid = found.replies.get(tag)
            window.measure_reply(
                [
                    [(copy.sent, copy.run) for copy in ledger.parts.get((tag, part), [])]
                    for part in range(1, total + 1)
                ],
                [found.recorded(mid, part) for part in range(total)],
            )
        for title, copies in ledger.reminders.items():
            mid = found.reminders.get(title)
            window.measure([copy.sent for copy in copies], found.recorded(mid, 0))
        return found

    def _judge_leftovers(self, ledger: Ledger, findings: Findings) -> None:
        """Nothing may be left half-done once Bruce settled and stopped gracefully: no message
        waiting or in a turn, no stored reply unsent (or stored as sent and never seen at
        Telegram), no one-shot task still active, no run of one still open."""
        stuck = self.rows(
            "SELECT id, role, kind, status, substr(content, 1, 50) AS content FROM messages "
            "WHERE (role = 'user' AND status IN ('pending', 'processing')) OR "
            "(role = 'assistant' AND status != 'sent')"
        )
        for row in stuck:
            what = "UNSENT stored reply" if row.get("role") == "assistant" else "STUCK message"
            findings.problems.append(f"{what}: {row}")
        arrived = {**dict.fromkeys(ledger.answer_of), **dict.fromkeys(ledger.reminders)}
        stored = {**self.deliveries.replies, **self.deliveries.reminders}
        for name, mid in sorted(stored.items()):
            if name not in arrived and self.deliveries.statuses.get(mid) == "sent":
                findings.problems.append(
                    f"NEVER ARRIVED {name}: message {mid} is stored as sent, Telegram never "
                    f"took it; deliveries {self.deliveries.recorded(mid, 0)}"
                )
        for row in self.rows(
            "SELECT id, title, status, next_run_at FROM proactive_tasks WHERE status = 'active'"
        ):
            findings.problems.append(f"STUCK task: {row}")
        for row in self.rows(
            "SELECT id, task_id, status, attempts, error FROM task_runs WHERE status != 'delivered'"
        ):
            findings.problems.append(f"STUCK run of a task: {row}")

    def _judge_answered(self, label: str, ledger: Ledger, findings: Findings) -> None:
        tags = sorted(ledger.answered_by.get(label, ()), key=lambda tag: int(tag[1:]))
        if not tags:
            generated = [tag for tag, names in self.model.answers.items() if label in names]
            story = self._message_story(label, generated)
            if label.startswith("brief-"):
                story = self._task_story(label)
            findings.problems.append(
                f"LOST {label}: no answer reached Telegram; model answers naming it: "
                f"{generated or 'none'}; {story}"
            )
            return
        if len(tags) > 1:
            answers = "; ".join(
                f"{tag} (re {some_of(ledger.answer_of[tag][1])}, "
                + (
                    f"{self.run_name(first[0].run)} at {self.t(first[0].sent.received_at)})"
                    if (first := ledger.parts.get((tag, 1)))
                    else "part 1 never arrived)"
                )
                for tag in tags
            )
            findings.problems.append(f"ANSWERED {len(tags)} TIMES {label}: by {answers}")

    def _judge_task(self, title: str, delivered: float | None, findings: Findings) -> None:
        tasks = self.rows("SELECT * FROM proactive_tasks WHERE title = ?", title)
        if len(tasks) > 1 or (not tasks and delivered is not None):
            executions = self.rows(
                "SELECT id, session_id, answers_message_id, call_id, substr(output, 1, 30) AS "
                "output FROM tool_executions WHERE tool_name = 'proactive_create' AND input LIKE ?",
                f'%"title": "{title}"%',
            )
            made = [
                {key: t.get(key) for key in ("id", "session_id", "created_at", "origin")}
                for t in tasks
            ]
            findings.problems.append(
                f"SCHEDULED {len(tasks)} TIMES {title}: tasks {made}; the tool executions "
                f"recorded for it: {executions or 'none'}"
            )
        if not tasks or delivered is None:
            return
        due = _utc(tasks[0].get("run_at"))
        if due is None:
            return
        kind = "reminder" if title.startswith("rem-") else "briefing"
        if kind == "briefing":
            # A briefing is a turn once fired, judged like any message: its firing is on time.
            runs = self.rows(
                "SELECT created_at FROM task_runs WHERE task_id = ? ORDER BY id", tasks[0].get("id")
            )
            delivered = _utc(runs[0].get("created_at")) if runs else delivered
        late = self._uptime_between(due, delivered)
        if kind == "reminder":  # a chat's messages go one at a time, at Telegram's pace
            chat_id = int(tasks[0].get("chat_id") or 0)
            late -= busy_uptime(self._line_busy(chat_id), due, delivered, self._uptime_between)
        findings.stats.setdefault(f"{kind} lateness", []).append(late)
        problem = lateness_problem(title, late, self.late_limit(title))
        if problem is not None:
            findings.problems.append(
                f"{problem}: due {self.t(due)}, delivered {self.t(delivered)}; "
                + self._task_story(title)
            )

    def _line_busy(self, chat_id: int) -> list[tuple[float, float]]:
        """When a chat's line was busy: each send Telegram was answering, each wait a 429 of
        its sending limits imposed on that chat."""
        sends = [
            (sent.received_at, sent.answered_at or sent.received_at)
            for sent in self.telegram.sent.get(chat_id, [])
        ]
        waits = [
            (at, at + retry_after)
            for (chat, retry_after), at in zip(
                self.telegram.rate_limited, self.telegram.rate_limited_at, strict=True
            )
            if chat == chat_id
        ]
        return sends + waits

    def late_limit(self, title: str) -> float:
        """How late (in seconds of uptime) a reminder may reach Telegram, a briefing fire."""
        return LATE_LIMIT

    def _uptime_between(self, start: float, end: float) -> float:
        return uptime_between(self.runs, start, end, time.time())

    def _judge_copies(
        self,
        what: str,
        copies: Sequence[Copy],
        ledger: Ledger,
        findings: Findings,
        *,
        tag: str | None = None,
        part: int | None = None,
    ) -> None:
        for earlier, later in itertools.pairwise(copies):
            first = earlier.sent
            verdict = self._verdict(earlier, later, ledger, tag, part)
            story = (
                f"DOUBLED {what}: copy at {self.t(first.received_at)} "
                f"({self.run_name(earlier.run)}, answered {self.t(first.answered_at)}), again at "
                f"{self.t(later.sent.received_at)} ({self.run_name(later.run)})"
            )
            (findings.excused if verdict.excused else findings.problems).append(
                f"{story}: {verdict.why}"
            )

    def _verdict(
        self, earlier: Copy, later: Copy, ledger: Ledger, tag: str | None, part: int | None
    ) -> Verdict:
        """crash_judge's verdict on the copy after `earlier`: each copy excuses at most the one
        that follows it, so a kill excuses at most one copy per send in flight at it."""
        if later.run == earlier.run:
            return Verdict(
                False, f"not stopped in between: {self.run_name(later.run)} sent it twice"
            )
        if tag is not None and part is not None:
            mid = self.deliveries.replies.get(tag)
            index = part - 1  # the header's parts are the outbox's, counted from 0
        else:
            reminder = REMINDER_TEXT.match(earlier.sent.plain)
            mid = self.deliveries.reminders.get(reminder.group(1)) if reminder else None
            index = 0
        if mid is None:
            return Verdict(False, "not stored: no message in the database holds this text")
        runs = self.runs
        sender = runs[earlier.run - 1] if 0 < earlier.run <= len(runs) else None
        return judge_in_flight(
            earlier.sent,
            sender,
            self.deliveries.window,
            again_at=later.sent.received_at,
            recorded=self.deliveries.recorded(mid, index),
            moved_on=self._moved_on(earlier, ledger, tag, part),
        )

    def _moved_on(
        self, earlier: Copy, ledger: Ledger, tag: str | None, part: int | None
    ) -> SentMessage | None:
        """The first later send of `earlier`'s process to the same chat: the outbox sends to a
        chat one message at a time, each part recorded before the next send to that chat."""
        chat = earlier.sent.chat_id
        later = [
            copy.sent
            for copies in [*ledger.parts.values(), *ledger.reminders.values(), ledger.others]
            for copy in copies
            if copy.run == earlier.run
            and copy.sent.chat_id == chat
            and copy.sent.received_at > earlier.sent.received_at
        ]
        return min(later, key=lambda sent: sent.received_at) if later else None

    # ---- stories for what went wrong --------------------------------------------------------

    def _message_story(self, label: str, generated: Sequence[str]) -> str:
        rows = self.rows(
            "SELECT id, status FROM messages WHERE role = 'user' AND content LIKE ?", f"%{label}%"
        )
        story = f"DB user message: {rows or 'not stored'}"
        for row in rows[:1]:
            claimed = self.replies_claiming(row.get("id"))
            for reply in claimed:
                header = HEADER.search(str(reply.get("content")))
                seen = self.model.seen.get(header.group(1), ()) if header else ()
                story += f"; DB reply {reply} lists it in extra.answers"
                if header and label not in seen:
                    story += (
                        f", but its model request never showed it ({len(seen)} messages in "
                        f"view, from {seen[0] if seen else '-'})"
                    )
        for tag in generated:
            story += "; " + self._reply_story(tag)
        return story

    def _reply_story(self, tag: str) -> str:
        rows = self.rows(
            "SELECT id, status FROM messages WHERE role = 'assistant' AND content LIKE ?",
            f"%[{tag} part 1/%",
        )
        if not rows or "id" not in rows[0]:
            return f"DB reply {tag}: not stored {rows or ''}".strip()
        deliveries = self.rows(
            "SELECT part, attempt, status FROM deliveries WHERE message_id = ? ORDER BY id",
            rows[0]["id"],
        )
        return f"DB reply {tag}: {rows[0]}, deliveries {deliveries}"

    def _task_story(self, title: str) -> str:
        tasks = self.rows(
            "SELECT id, status, run_at, next_run_at FROM proactive_tasks WHERE title = ?", title
        )
        if title in self.model.refused and not tasks:
            return f"never asked for: {self.model.refused[title]}"
        story = f"DB tasks: {tasks or 'none'}"
        for task in tasks:
            if "id" in task:
                runs = self.rows("SELECT * FROM task_runs WHERE task_id = ?", task["id"])
                story += f"; runs of task {task['id']}: {runs or 'none'}"
        messages = self.rows(
            "SELECT id, kind, status FROM messages WHERE role = 'assistant' AND content LIKE ?",
            f"%{title}%",
        )
        return story + f"; DB messages naming it: {messages or 'none'}"

    # ---- the report ------------------------------------------------------------------------

    def _stats(self, ledger: Ledger, findings: Findings) -> dict[str, Any]:
        runs = self.runs
        reminders_late = findings.stats.get("reminder lateness", [])
        briefings_late = findings.stats.get("briefing lateness", [])
        return {
            "messages": len(self.pushed),
            "chats": len({ask.user_id for ask in self.pushed}),
            "reminders": len(self.expected_reminders),
            "briefings": len(self.expected_briefings),
            "long answers": sum(1 for total, _, _ in ledger.answer_of.values() if total > 1),
            "stops": self.stops,
            "runs": len(runs),
            "killed before ready": sum(1 for run in runs if run.ready_at is None),
            "sendMessage": sum(len(m) for m in self.telegram.sent.values()),
            "model answers": len(self.model.answers),
            "excused duplicates": len(findings.excused),
            "commit window": self.deliveries.window.describe(),
            "worst reminder lateness s": round(max(reminders_late, default=0.0), 2),
            "worst briefing lateness s": round(max(briefings_late, default=0.0), 2),
            "429s": len(self.telegram.rate_limited),
            "seconds": round(time.time() - self.started, 1),
        }

    def headline(self, findings: Findings) -> str:
        return (
            f"{self.title}, BRUCE_CHAOS_SEED={self.seed}: "
            f"{len(findings.problems)} problems; "
            + ", ".join(f"{key}: {value}" for key, value in findings.stats.items())
        )

    def report(self, findings: Findings) -> str:
        lines = [
            f"{self.title}, BRUCE_CHAOS_SEED={self.seed}",
            "  " + ", ".join(f"{key}: {value}" for key, value in findings.stats.items()),
            "  runs: "
            + "; ".join(
                f"{run.name} ready {self.t(run.ready_at)} {run.signal or 'running'} "
                f"{self.t(run.signalled_at)} rc={run.returncode}"
                for run in self.runs
            ),
            *(f"  note: {note}" for note in self.notes),
        ]
        if findings.excused:
            lines.append(f"  excused ({len(findings.excused)}):")
            lines += [f"    {line}" for line in findings.excused]
        if findings.problems:
            lines.append(f"  PROBLEMS ({len(findings.problems)}):")
            lines += [f"    {line}" for line in findings.problems]
            lines.append("  daemon log, errors and warnings over all runs (first 25):")
            lines += [f"    {line}" for line in self._log_trouble()[:25]]
            last = self.runs[-1] if self.runs else None
            if last is not None:
                lines.append(f"  daemon stderr, last 20 lines of {last.name}:")
                lines += [f"    {line}" for line in self.stderr_lines(last)[-20:]]
        return "\n".join(lines)

    def _log_trouble(self) -> list[str]:
        seen: list[str] = []
        for run in self.runs:
            for line in self.stderr_lines(run):
                lowered = line.lower()
                if any(mark in lowered for mark in TROUBLE_MARKS):
                    seen.append(f"{run.name}: {line[:240]}")
        return seen


# ---- the scenario --------------------------------------------------------------------------

USER_IDS = (3001, 3002, 3003, 3004)
PLANNED_MESSAGES = 400  # more than the chaos phase can send: it ends by time
STOPS = 12
CHAOS_SECONDS = 95.0  # the phase of stops and starts ends after STOPS, or after this
QUIET_SECONDS = 30.0  # then at most this long for everything to arrive and settle
START_TIMEOUT = 30.0
SHUTDOWN_TIMEOUT = 10.0  # agent.shutdown_timeout_seconds: a graceful stop lets turns finish
SEND_DELAY = 0.25  # Telegram's answer to sendMessage comes this long after it took the message


def daemon_config(telegram: FakeTelegramServer, llm_url: str) -> dict[str, Any]:
    return {
        "app": {"timezone": "UTC"},
        "llm": {
            "provider": "anthropic",
            "api_key": "test-key",
            "base_url": llm_url,
            "max_retries": 0,
            "timeout_seconds": 30,
        },
        "agent": {"shutdown_timeout_seconds": SHUTDOWN_TIMEOUT},
        "brain": {"enabled": False},  # its background requests are not part of this scenario
        "tools": {
            "web_search": {"enabled": False},
            "web_fetch": {"enabled": False},
            "artifacts": {"enabled": False},
            "proactive": {"enabled": True},
        },
        "channels": {
            "telegram": {
                "enabled": True,
                "token": telegram.token,
                "base_url": telegram.base_url,
                "allowed_user_ids": list(USER_IDS),
            }
        },
    }


async def settle(scenario: Scenario, within: float, idle_for: float = 3.0) -> bool:
    """Poll until everything arrived and Bruce has nothing left to do (True), or until Bruce has
    had nothing left to do for `idle_for` seconds without everything arriving, or `within` ran
    out (False: the judgement says what is missing)."""
    deadline = time.monotonic() + within
    idle_since: float | None = None
    while time.monotonic() < deadline:
        quiet = scenario.quiet()
        if quiet and scenario.everything_arrived():
            return True
        idle_since = (idle_since or time.monotonic()) if quiet else None
        if idle_since is not None and time.monotonic() - idle_since > idle_for:
            return False
        await asyncio.sleep(0.25)
    return False


async def run_scenario(
    workdir: Path, seed: int, stop_signal: signal.Signals
) -> tuple[Scenario, Findings]:
    """Messages from four chats at seeded moments; the daemon stopped with `stop_signal` at
    seeded moments after each start, `STOPS` times (or until `CHAOS_SECONDS`), started again
    over the same database each time; then a quiet period until everything arrived and Bruce
    has nothing left to do (at most `QUIET_SECONDS`); then a graceful stop and the judgement."""
    plan = make_plan(random.Random(f"{seed}:plan"), USER_IDS, PLANNED_MESSAGES)
    moments = random.Random(f"{seed}:stops")
    model = ChaosModel(plan)
    async with (
        FakeTelegramServer(send_delay=SEND_DELAY, limits=SendLimits()) as telegram,
        FakeAnthropicServer(responder=model) as llm,
    ):
        daemon = ChaosDaemon(workdir, daemon_config(telegram, llm.base_url))
        scenario = Scenario(seed, stop_signal, plan, telegram, model, daemon)
        users = {
            user_id: telegram.user(user_id, f"User{n}") for n, user_id in enumerate(USER_IDS, 1)
        }
        driving = asyncio.Event()
        driving.set()

        async def drive() -> None:
            for ask in plan:
                # The seeded gap between two messages: when users write is the scenario's input.
                await asyncio.sleep(ask.gap)
                if not driving.is_set():
                    return
                telegram.private_text(users[ask.user_id], ask.text)
                scenario.pushed.append(ask)

        driver = asyncio.create_task(drive(), name="chaos-driver")
        try:
            ends = time.monotonic() + CHAOS_SECONDS
            while scenario.stops < STOPS:
                if time.monotonic() > ends:
                    scenario.notes.append(f"chaos phase ended by time after {scenario.stops} stops")
                    break
                await daemon.spawn()
                if len(daemon.runs) == 1 and not await daemon.wait_ready(START_TIMEOUT):
                    # The first start creates the schema: the seeded stops begin once it stands
                    # (a kill inside the migrations is a matter of its own, not this scenario's).
                    scenario.failures.append("NEVER READY: the first run never became ready")
                    break
                ready = asyncio.create_task(daemon.wait_ready(START_TIMEOUT))
                # The seeded moment of the stop, counted from the spawn: early ones hit start-up
                # (recovery, redelivery, the scheduler's catch-up), later ones the running daemon.
                await asyncio.sleep(moments.uniform(0.4, 4.5))
                ready.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ready
                await daemon.stop(stop_signal, within=SHUTDOWN_TIMEOUT + 20)
                scenario.stops += 1
            driving.clear()
            if (few := too_few_stops(scenario.stops)) is not None:
                scenario.failures.append(few)
            await daemon.spawn()
            if not await daemon.wait_ready(START_TIMEOUT):
                scenario.failures.append("NEVER READY: the last run never became ready")
            elif not await settle(scenario, QUIET_SECONDS):
                scenario.notes.append(
                    "not everything arrived, and Bruce had nothing left to do (or "
                    f"{QUIET_SECONDS:.0f} s passed)"
                )
            await daemon.stop(signal.SIGTERM, within=SHUTDOWN_TIMEOUT + 20)
        finally:
            driving.clear()
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
            if daemon.process is not None and daemon.process.returncode is None:
                await daemon.stop(signal.SIGKILL)
        return scenario, scenario.judge()
