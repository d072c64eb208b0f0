"""The cluster tests' machinery (tests/integration/postgres/test_cluster.py): several `bruce run`
processes on one PostgreSQL database, behind the fake Bot API's load balancer, judged by what the
users received.

Each process (`ClusterProcess`, a `ChaosDaemon` of chaos_support.py) has its own data dir, web
port and webhook port, the same database, short leases (`database.lease_seconds`) and a quick
leader election (`scheduler.leader_retry_seconds`), and its own API key (`key-a`, `key-b`...) so
that the fake model knows which process asks, and its own address at the fake Bot API so that
every message Telegram takes names its sender. They all register the same public webhook URL;
the fake's balancer posts each update to one of them (seeded), another when that one fails, a
chat's next update once its previous one was answered, as Telegram does.

The model (`ClusterModel`) is chaos_support's `ChaosModel`: every answer names the messages it
answers (`[r7 part 1/1] re msg-c2-014.`), reminders arrive as `⏰ rem-c2-014`. So two answers
naming one message mean it was answered twice; the same answer twice is one reply sent twice,
excused only by cluster_sends.py's rule: its first copy was in flight when a SIGKILL hit the
run that sent it (within the commit time measured in the same test), `deliveries` does not
record that copy as sent, and that run sent nothing later on the same path to the chat. Per
chat, the answers must come in the order of the messages; each reminder within
`REMINDER_LATE_LIMIT` of its due time, counting only the time some process could deliver it.
What is left in the database when the judgement comes (a message waiting or in a turn, a stored
reply not sent, a task still to fire) fails the run too. `Cluster.judge` writes each finding
the way the user would tell it.

`run_cluster_chaos` (test_chaos.py's PostgreSQL variant) is chaos_support's scenario on a
cluster of two: its plan driven at both processes, a `ChaosMonkey` SIGKILLing a seeded choice of
the scheduler's leader or follower (now and then both) at seeded moments and starting each again
after a seeded downtime, then judged by chaos_support's `Scenario.judge` through
`ClusterScenario`, which reads the processes' runs and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import random
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from sqlalchemy.engine import make_url

from tests.conftest import deep_merge
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer, SendLimits, SentMessage
from tests.integration.chaos_support import (
    HEADER,
    LABEL,
    PLANNED_MESSAGES,
    Ask,
    ChaosDaemon,
    ChaosModel,
    Findings,
    Ledger,
    Run,
    Scenario,
    daemon_config,
    free_port,
    make_plan,
    some_of,
)
from tests.integration.chaos_support import USER_IDS as CHAOS_USER_IDS
from tests.integration.postgres.cluster_sends import RepeatJudge, SendBook

LEASE_SECONDS = 2.0  # database.lease_seconds: a dead process's sessions are taken over after it
LEADER_RETRY_SECONDS = 0.5  # scheduler.leader_retry_seconds
SEND_DELAY = 0.25  # Telegram answers sendMessage this long after it took the message
START_TIMEOUT = 40.0  # two or three processes starting at once on two cores
STOP_TIMEOUT = 15.0
SHUTDOWN_GRACE = 5.0  # agent.shutdown_timeout_seconds
PUBLIC_HOOK = "https://bruce.example.test/telegram-hook"  # what every process registers
HOOK_SECRET = "cluster-hook-secret"
# After everything arrived and Bruce has nothing left to do, this long without anything new
# (a second answer from a process that took over a lease would come within it).
TAIL_SECONDS = LEASE_SECONDS + 1.5
# Nothing new at all for this long: what is missing will not come.
IDLE_SECONDS = 3 * LEASE_SECONDS + 3.0
# A reminder asked for late is due at least this long after the model asks for it.
DUE_LEAD_SECONDS = 3.0
# Events that end a process's leadership, in its log.
LEADERSHIP_ENDS = (
    "scheduler_leadership_lost",
    "scheduler_leadership_released",
    "scheduler_leader_start_failed",
)
# After a SIGKILL the other process may wait this long before it can take over the dead one's
# work: its sessions' leases and its replies' claims run out, and the scheduler's leadership is
# tried again.
TAKEOVER_SECONDS = LEASE_SECONDS + LEADER_RETRY_SECONDS
# A reminder reaches its user this soon after it is due, counting only the time when some
# process could deliver it (up, and not within `TAKEOVER_SECONDS` of a SIGKILL).
REMINDER_LATE_LIMIT = 5.0
# What the database must not hold when the judgement comes: work nobody finished.
LEFT_OVER = (
    "SELECT id, role, kind, status, substr(content, 1, 40) AS content FROM messages WHERE "
    "(role = 'user' AND status IN ('pending', 'processing', 'failed')) OR (role = 'assistant' "
    "AND status IN ('pending', 'undelivered', 'failed')) ORDER BY id"
)


def pg_rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """Rows of a query, read with psycopg outside Bruce (errors become a row that says so)."""
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with psycopg.connect(conninfo, row_factory=dict_row, connect_timeout=5) as connection:
            return connection.execute(sql, params).fetchall()  # type: ignore[arg-type]
    except psycopg.Error as exc:
        return [{"error": f"{type(exc).__name__}: {exc}"}]


async def until(predicate: Callable[[], Any], within: float, interval: float = 0.05) -> Any:
    """`predicate()` once it is truthy, polled until `within` seconds passed (then its last,
    falsy value: the caller says what did not happen)."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval)


# ---- the plan ------------------------------------------------------------------------------


def chat_plan(
    rng: random.Random,
    user_ids: Sequence[int],
    count: int,
    *,
    gap: tuple[float, float] = (0.15, 0.5),
    think: tuple[float, float] = (0.6, 1.5),
    slow: float = 0.0,  # this share of the messages takes the model `slow_think` seconds
    slow_think: float = 3.0,
    every_chat: bool = False,  # each chat has at least one message (count >= the chats)
) -> list[Ask]:
    """`count` messages over the chats (one line each), in a seeded order, the model slow."""
    numbers = dict.fromkeys(user_ids, 0)
    plan = []
    picks = [rng.choice(list(user_ids)) for _ in range(count)]
    if every_chat:
        picks = list(user_ids) + picks[len(user_ids) :]
        rng.shuffle(picks)
    for user_id in picks:
        numbers[user_id] += 1
        is_slow = rng.random() < slow
        plan.append(
            Ask(
                label=f"msg-c{list(user_ids).index(user_id) + 1}-{numbers[user_id]:03d}",
                user_id=user_id,
                gap=rng.uniform(*gap),
                think=slow_think if is_slow else rng.uniform(*think),
                parts=1,
            )
        )
    return plan


def reminder_plan(user_ids: Sequence[int], gap: float = 0.05) -> list[Ask]:
    """One message per chat, each asking for a message-mode reminder (its due time is set by
    `ClusterModel.due`)."""
    return [
        Ask(f"msg-c{n}-001", user_id, gap=gap, think=0.05, parts=1, reminder_in=60)
        for n, user_id in enumerate(user_ids, 1)
    ]


# ---- the model -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Serving:
    """A final answer the model is working on."""

    process: str
    tag: str  # r7
    labels: tuple[str, ...]
    started: float  # time.time()
    until: float


class ClusterModel(ChaosModel):
    """`ChaosModel` that knows which process asks (by its API key) and records which process
    each answer went to and which answers are being worked on; a reminder in `due` is asked
    for at that moment rather than some seconds after the request (or `DUE_LEAD_SECONDS` after
    it, when the moment is nearer)."""

    def __init__(self, plan: Iterable[Ask]) -> None:
        super().__init__(plan)
        self.server: FakeAnthropicServer | None = None
        self.process_of_answer: dict[str, str] = {}  # r7 -> "a"
        self.serving: list[Serving] = []
        self.requests_by: dict[str, int] = {}
        self.due: dict[str, datetime] = {}  # reminder title -> when it is due
        self.asked: set[str] = set()  # the titles whose due time the model gave already
        self._gates: list[tuple[tuple[str, ...], asyncio.Event]] = []

    async def respond(self, body: dict[str, Any]) -> AnthropicReply:
        process = self._process_of(body)
        self.requests_by[process] = self.requests_by.get(process, 0) + 1
        reply = self(body)
        if reply.tool_calls:
            # At its seeded moment, or (a turn that came late on a busy machine) a little
            # after the first call: never a time already past, which the tool refuses. Fixed
            # then, so that a turn run again asks for the same time (the same call, which
            # Bruce recognises), as the seeded moment is.
            soonest = (datetime.now(UTC) + timedelta(seconds=DUE_LEAD_SECONDS)).replace(
                microsecond=0
            ) + timedelta(seconds=1)
            lead = timedelta(seconds=DUE_LEAD_SECONDS)
            calls = []
            for name, arguments, *_ in reply.tool_calls:
                title = arguments.get("title")
                if title in self.due:
                    # (unless that time is now past: a turn cut before its call ran, asked
                    # again, would be refused)
                    if title not in self.asked or self.due[title] < soonest - lead:
                        self.due[title] = max(self.due[title], soonest)
                        self.asked.add(title)
                    arguments = {**arguments, "run_at": self.due[title].isoformat()}
                calls.append((name, arguments))
            return dataclasses.replace(reply, tool_calls=calls)
        header = HEADER.search(reply.text if isinstance(reply.text, str) else "")
        if header:
            tag = header.group(1)
            self.process_of_answer[tag] = process
            now = time.time()
            think = reply.delay_seconds or 0.0
            labels = self.answers[tag]
            gate = next((g for names, g in self._gates if set(names) & set(labels)), None)
            if gate is not None and not gate.is_set():
                serving = Serving(process, tag, labels, now, float("inf"))
                self.serving.append(serving)
                await gate.wait()
                index = self.serving.index(serving)
                self.serving[index] = dataclasses.replace(serving, until=time.time() + think)
            else:
                self.serving.append(Serving(process, tag, labels, now, now + think))
        return reply

    def hold(self, labels: Iterable[str]) -> asyncio.Event:
        """Answers naming one of `labels` are worked on until the returned event is set (then
        for their think time): a test keeps a process in its turn as long as it needs."""
        gate = asyncio.Event()
        self._gates.append((tuple(labels), gate))
        return gate

    def expect(self, ask: Ask) -> None:
        """A message the test adds to the plan as it goes."""
        self._asks[ask.label] = ask

    def serving_now(self, at_least: float = 0.0) -> list[Serving]:
        """The answers being worked on now that take at least `at_least` seconds."""
        now = time.time()
        return [s for s in self.serving if s.until > now and s.until - s.started >= at_least]

    def _process_of(self, body: dict[str, Any]) -> str:
        assert self.server is not None
        for request, headers in zip(
            reversed(self.server.requests), reversed(self.server.request_headers), strict=False
        ):
            if request is body:  # the SDK sends the key as x-api-key or as a bearer token
                sent = {k.lower(): v for k, v in headers.items()}
                key = sent.get("x-api-key") or sent.get("authorization", "?")
                return key.removeprefix("Bearer ").removeprefix("key-")
        return "?"


# ---- the processes -------------------------------------------------------------------------


def process_config(
    name: str,
    telegram: FakeTelegramServer,
    llm_url: str,
    database_url: str,
    hook_port: int,
    user_ids: Sequence[int],
    leader_retry_seconds: float,
) -> dict[str, Any]:
    """The chaos test's daemon config, as process `name` of a cluster: the shared database, its
    own key (so the fake model knows the caller) and address at the fake Bot API, and Telegram
    in webhook mode behind the balancer."""
    telegram_section = {
        "base_url": telegram.base_url_for(name),
        "allowed_user_ids": list(user_ids),
        "mode": "webhook",
        "webhook": {
            "url": PUBLIC_HOOK,
            "listen": "127.0.0.1",
            "port": hook_port,
            "secret_token": HOOK_SECRET,
        },
    }
    return deep_merge(
        daemon_config(telegram, llm_url),
        {
            "database": {"url": database_url, "lease_seconds": LEASE_SECONDS},
            "llm": {"api_key": f"key-{name}"},
            "agent": {"shutdown_timeout_seconds": SHUTDOWN_GRACE},
            "scheduler": {"leader_retry_seconds": leader_retry_seconds},
            "channels": {"telegram": telegram_section},
            "logging": {"json": True},
        },
    )


class ClusterProcess(ChaosDaemon):
    """One `bruce run` of the cluster, named `a`, `b`...; its log read as JSON lines."""

    def __init__(self, workdir: Path, name: str, number: int, config: dict[str, Any]) -> None:
        self.name = name
        self.number = number  # its number in the ledger
        self.hook_port = int(config["channels"]["telegram"]["webhook"]["port"])
        self._spawning = False  # between a new run's record and its process
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(workdir, config)

    @property
    def hook_url(self) -> str:
        """Where this process's webhook server listens (what the balancer posts to)."""
        return f"http://127.0.0.1:{self.hook_port}/telegram-hook"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def exited_by_itself(self) -> bool:
        """Its current run ended without a signal (its exit is then recorded in the run)."""
        if self._spawning or self.process is None or self.process.returncode is None:
            return False
        run = self.runs[-1]
        if run.signal is None and run.returncode is None:
            run.returncode, run.exited_at = self.process.returncode, time.time()
        return run.signal is None

    async def spawn(self) -> Run:
        self._spawning = True
        try:
            run = await super().spawn()
        finally:
            self._spawning = False
        run.label = f"process {self.name}" + (f" (run {run.number})" if run.number > 1 else "")
        return run

    def events(self, *names: str, runs: Iterable[Run] | None = None) -> list[dict[str, Any]]:
        """Its log entries (all runs, or these) with one of these event names, oldest first."""
        found = []
        for run in self.runs if runs is None else runs:
            for line in self.stderr_lines(run):
                if not line.startswith("{"):
                    continue
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if not names or entry.get("event") in names:
                        found.append(entry)
        return found

    @property
    def leads(self) -> bool:
        """Its log (of its current run) says it was elected and has not lost or given up the
        leadership since."""
        if not self.runs:
            return False
        changes = self.events("scheduler_leader_elected", *LEADERSHIP_ENDS, runs=self.runs[-1:])
        return self.alive and bool(changes) and changes[-1]["event"] == "scheduler_leader_elected"

    def trouble(self) -> list[str]:
        """Errors and warnings in its log."""
        return [
            f"{self.name}: {json.dumps(entry)[:300]}"
            for entry in self.events()
            if entry.get("level") in ("error", "warning", "critical")
        ]


def takeover_uptime(runs: Iterable[Run], start: float, end: float) -> float:
    """Seconds of `start`..`end` when some process could take the work: one was up (ready,
    not yet signalled), and none had been SIGKILLed within `TAKEOVER_SECONDS`."""
    if end <= start:
        return 0.0
    runs, now = list(runs), time.time()
    up = [
        (run.ready_at, run.signalled_at or run.exited_at or now)
        for run in runs
        if run.ready_at is not None
    ]
    takeovers = [
        (run.signalled_at, run.signalled_at + TAKEOVER_SECONDS)
        for run in runs
        if run.signal == "SIGKILL" and run.signalled_at is not None
    ]
    edges = {t for span in up + takeovers for t in span if start < t < end}
    total = 0.0
    for left, right in itertools.pairwise(sorted({start, end, *edges})):
        middle = (left + right) / 2
        if any(a <= middle < b for a, b in up) and not any(a <= middle < b for a, b in takeovers):
            total += right - left
    return total


def logged_at(entry: dict[str, Any]) -> float:
    moment = datetime.fromisoformat(str(entry.get("timestamp")).replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


# ---- the cluster ---------------------------------------------------------------------------


class Cluster:
    """The processes, the fakes they talk to, what the test drove, and the judgement."""

    def __init__(
        self,
        workdir: Path,
        database_url: str,
        seed: int,
        user_ids: Sequence[int],
        telegram: FakeTelegramServer,
        llm: FakeAnthropicServer,
        model: ClusterModel,
    ) -> None:
        self.workdir = workdir
        self.database_url = database_url
        self.seed = seed
        self.user_ids = list(user_ids)
        self.telegram = telegram
        self.llm = llm
        self.model = model
        self.processes: dict[str, ClusterProcess] = {}
        self.users = {uid: telegram.user(uid, f"User{n}") for n, uid in enumerate(user_ids, 1)}
        self.pushed: list[Ask] = []
        self.pushed_at: dict[str, float] = {}
        self.started = time.time()
        self.notes: list[str] = []
        self.expected_reminders: list[str] = []

    # ---- processes --------------------------------------------------------------------------

    def add(
        self, name: str, *, leader_retry_seconds: float = LEADER_RETRY_SECONDS
    ) -> ClusterProcess:
        config = process_config(
            name,
            self.telegram,
            self.llm.base_url,
            self.database_url,
            free_port(),
            self.user_ids,
            leader_retry_seconds,
        )
        process = ClusterProcess(self.workdir / name, name, len(self.processes) + 1, config)
        self.processes[name] = process
        return process

    async def start(self, *names: str, **options: Any) -> list[ClusterProcess]:
        """Add and start these processes at once; fails unless each answers /healthz. On a new
        database the first starts alone: two first starts at once race to create APScheduler's
        table, and the loser exits (UniqueViolation on pg_type "apscheduler_jobs")."""
        first = not self.processes
        processes = [self.add(name, **options) for name in names]
        if first and len(processes) > 1:
            await self._start(processes[:1])
            processes = processes[1:]
        await self._start(processes)
        return [self.processes[name] for name in names]

    async def _start(self, processes: Sequence[ClusterProcess]) -> None:
        for process in processes:
            await process.spawn()
        ready = await asyncio.gather(*(p.wait_ready(START_TIMEOUT) for p in processes))
        for process, ok in zip(processes, ready, strict=True):
            assert ok, (
                f"process {process.name} did not become ready within {START_TIMEOUT:.0f} s; its "
                "stderr ends: " + " | ".join(process.stderr_lines(process.runs[-1])[-8:])
            )

    def balance(self, *names: str) -> None:
        """The balancer posts to these processes from now on."""
        self.telegram.balance_webhook(
            [self.processes[name].hook_url for name in names], seed=f"{self.seed}:balancer"
        )

    async def kill(self, name: str) -> Run:
        return await self.processes[name].stop(signal.SIGKILL)

    async def stop_all(self) -> None:
        alive = [p for p in self.processes.values() if p.alive]
        await asyncio.gather(*(p.stop(signal.SIGTERM, within=STOP_TIMEOUT) for p in alive))

    def leaders(self) -> list[str]:
        return [name for name, process in self.processes.items() if process.leads]

    async def wait_for_leader(self, within: float, among: Iterable[str] | None = None) -> str:
        names = list(among or self.processes)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            leading = [name for name in self.leaders() if name in names]
            if leading:
                return leading[0]
            await asyncio.sleep(0.05)
        raise AssertionError(
            f"none of processes {names} became the scheduler's leader within {within:.1f} s; "
            f"leaders now: {self.leaders() or 'none'}"
        )

    # ---- driving ---------------------------------------------------------------------------

    def say(self, ask: Ask) -> None:
        self.telegram.private_text(self.users[ask.user_id], ask.text)
        self.pushed.append(ask)
        self.pushed_at[ask.label] = time.time()

    async def drive(self, plan: Sequence[Ask]) -> None:
        """The users write: each message after its seeded gap (the scenario's input)."""
        for ask in plan:
            await asyncio.sleep(ask.gap)
            self.say(ask)

    # ---- what arrived ------------------------------------------------------------------------

    def sender(self, sent: SentMessage) -> int:
        process = self.processes.get(sent.client or "")
        return process.number if process is not None else 0

    def run_of(self, sent: SentMessage) -> Run | None:
        """The run of a process that sent this message (the last one started before it)."""
        process = self.processes.get(sent.client or "")
        started = [r for r in process.runs if r.spawned_at <= sent.received_at] if process else []
        return started[-1] if started else None

    def producer_of(self, tag: str) -> Run | None:
        """The run whose turn the model gave answer `tag` to."""
        for serving in self.model.serving:
            process = self.processes.get(serving.process)
            if serving.tag == tag and process is not None:
                runs = [r for r in process.runs if r.spawned_at <= serving.started]
                return runs[-1] if runs else None
        return None

    def repeat_judge(self) -> RepeatJudge:
        """The rule for copies sent twice, over what PostgreSQL recorded (cluster_sends.py)."""
        book = SendBook(
            lambda sql, *params: pg_rows(self.database_url, sql, *params),
            [sent for messages in self.telegram.sent.values() for sent in messages],
        )
        return RepeatJudge(book, self.run_of, self.producer_of, self.telegram.sent, self.t)

    def all_runs(self) -> list[Run]:
        every = [run for process in self.processes.values() for run in process.runs]
        return sorted(every, key=lambda run: run.spawned_at)

    def left_over(self) -> list[str]:
        """Problems for the work the database still holds: messages waiting, in a turn or
        failed, stored replies not sent, tasks still to fire."""
        found = []
        for row in pg_rows(self.database_url, LEFT_OVER):
            if "error" in row:
                found.append(f"LEFT OVER: the database could not be read: {row['error']}")
                continue
            what = "message" if row["role"] == "user" else f"stored {row['kind']} reply"
            found.append(
                f"LEFT OVER {what} {row['id']} {row['status']!r} "
                f"({LABEL.findall(str(row['content'])) or row['content']!r}): "
                + ("never answered" if row["role"] == "user" else "stored and never delivered")
            )
        for task in pg_rows(
            self.database_url, "SELECT id, title FROM proactive_tasks WHERE status = 'active'"
        ):
            found.append(f"LEFT OVER task {task.get('id')} {task.get('title')}: still to fire")
        return found

    def reminder_lateness(self, title: str, delivered: float) -> tuple[float | None, str | None]:
        """How late (in `takeover_uptime`) reminder `title` reached its user, and the problem
        when over `REMINDER_LATE_LIMIT`."""
        tasks = pg_rows(
            self.database_url, "SELECT run_at FROM proactive_tasks WHERE title = %s", title
        )
        due = tasks[0].get("run_at") if tasks else None
        if not isinstance(due, datetime):
            return None, None
        due_at = (due if due.tzinfo else due.replace(tzinfo=UTC)).timestamp()
        late = takeover_uptime(self.all_runs(), due_at, delivered)
        if late <= REMINDER_LATE_LIMIT:
            return late, None
        return late, (
            f"LATE reminder {title}: due {self.t(due_at)}, delivered {self.t(delivered)}: "
            f"{late:.1f} s late while some process could deliver it (limit "
            f"{REMINDER_LATE_LIMIT:.0f} s)"
        )

    def name_of(self, number: int) -> str:
        return next((p.name for p in self.processes.values() if p.number == number), "?")

    def ledger(self) -> Ledger:
        runs = [run for process in self.processes.values() for run in process.runs]
        return Ledger(self.telegram, runs, self.sender)

    def everything_arrived(self) -> bool:
        ledger = self.ledger()
        return all(ledger.complete(ask.label) for ask in self.pushed) and all(
            ledger.reminders.get(title) for title in self.expected_reminders
        )

    async def quiet(self) -> bool:
        """No message waiting or in a turn, no reply unsent, no reminder still to fire, the
        model working on nothing, no update still to be posted."""
        if self.model.serving_now() or self.telegram.pending_updates:
            return False
        [busy] = await asyncio.to_thread(
            pg_rows,
            self.database_url,
            "SELECT (SELECT count(*) FROM messages WHERE (role = 'user' AND status IN "
            "('pending', 'processing')) OR (role = 'assistant' AND status IN ('pending', "
            "'undelivered'))) AS messages, (SELECT count(*) FROM proactive_tasks WHERE status "
            "= 'active') AS tasks",
        )
        return busy.get("messages") == 0 and busy.get("tasks") == 0

    async def settle(self, within: float = 40.0, arrived: Callable[[], bool] | None = None) -> bool:
        """Poll until everything arrived (`arrived`, by default `everything_arrived`), Bruce has
        nothing left to do and nothing new came for `TAIL_SECONDS` (True); or until nothing at
        all happened for `IDLE_SECONDS`, or `within` ran out (False: the judgement says what is
        missing)."""
        arrived = arrived or self.everything_arrived
        deadline = time.monotonic() + within
        state: tuple[int, ...] = ()
        changed = time.monotonic()
        while time.monotonic() < deadline:
            now_state = (
                sum(len(m) for m in self.telegram.sent.values()),
                len(self.llm.requests),
                self.telegram.pending_updates,
            )
            if now_state != state:
                state, changed = now_state, time.monotonic()
            still = time.monotonic() - changed
            if still >= TAIL_SECONDS and arrived() and await self.quiet():
                return True
            if still >= IDLE_SECONDS:
                what = "everything arrived" if arrived() else "not everything"
                self.notes.append(
                    f"nothing new for {IDLE_SECONDS:.0f} s, {what}; judged as it stood; left "
                    f"in the database: {await asyncio.to_thread(self.unfinished)}"
                )
                return False
            await asyncio.sleep(0.2)
        self.notes.append(
            f"not settled within {within:.0f} s; judged as it stood; left in the database: "
            f"{await asyncio.to_thread(self.unfinished)}"
        )
        return False

    def unfinished(self) -> str:
        """What the database still holds as work to do (for the report)."""
        rows = pg_rows(
            self.database_url,
            "SELECT id, role, kind, status, substr(content, 1, 40) AS content FROM messages "
            "WHERE (role = 'user' AND status IN ('pending', 'processing')) OR (role = "
            "'assistant' AND status IN ('pending', 'undelivered')) ORDER BY id",
        )
        tasks = pg_rows(
            self.database_url, "SELECT id, title FROM proactive_tasks WHERE status = 'active'"
        )
        found = [
            f"{row.get('role')} message {row.get('id')} {row.get('status')!r} "
            f"{LABEL.findall(str(row.get('content'))) or row.get('content')}"
            for row in rows
        ] + [f"task {task.get('id')} {task.get('title')} still active" for task in tasks]
        return "; ".join(found) or "nothing"

    # ---- judgement -------------------------------------------------------------------------

    def t(self, moment: float | None) -> str:
        return "never" if moment is None else f"+{moment - self.started:.2f}s"

    def judge(self) -> Findings:
        ledger = self.ledger()
        findings = Findings()
        self._repeats = self.repeat_judge()
        for ask in self.pushed:
            self._judge_answered(ask, ledger, findings)
        self._judge_order(ledger, findings)
        for (tag, part), copies in sorted(ledger.parts.items()):
            total, names, _ = ledger.answer_of[tag]
            self._judge_copies(
                f"answer {tag} part {part}/{total} (re {some_of(names)})",
                copies,
                ledger,
                findings,
                tag=tag,
                part=part,
            )
        for title in self.expected_reminders:
            self._judge_reminder(title, ledger, findings)
        for tag, (_, names, chat_id) in sorted(ledger.answer_of.items()):
            if not names:
                findings.problems.append(
                    f"EXTRA answer {tag} to chat {chat_id} named nothing new (by process "
                    f"{self.model.process_of_answer.get(tag, '?')}): every message its turn "
                    "could see was answered already"
                )
        for copy in ledger.others:
            findings.problems.append(
                f"UNEXPECTED message to chat {copy.sent.chat_id} at {self.t(copy.sent.received_at)}"
                f" (process {self.name_of(copy.run)}): {copy.sent.plain[:160]!r}"
            )
        for process in self.processes.values():
            for run in process.runs:
                if run.signal is None and run.returncode is not None:
                    findings.problems.append(
                        f"EXIT process {process.name} ended by itself with rc={run.returncode};"
                        " its stderr ends: " + " | ".join(process.stderr_lines(run)[-5:])
                    )
                elif run.signal is not None and "then SIGKILL" in run.signal:
                    findings.problems.append(f"HUNG process {process.name}: {run.signal}")
            for entry in process.events("task_fired_without_service", "turn_crashed"):
                findings.problems.append(f"LOGGED by process {process.name}: {entry}")
        for error in self.model.tool_errors:
            findings.problems.append(f"TOOL ERROR seen by the model: {error}")
        findings.problems += self.left_over()
        lateness = findings.stats.pop("lateness", [])
        findings.stats = {
            "messages": len(self.pushed),
            "chats": len({ask.user_id for ask in self.pushed}),
            "reminders": len(self.expected_reminders),
            "processes": ", ".join(
                f"{p.name} ({p.runs[-1].signal or 'running'})" for p in self.processes.values()
            ),
            "handed over": self._posts_by_process(),
            "crossings": len(self.crossings()),
            "model requests": self.model.requests_by,
            "sendMessage": sum(len(m) for m in self.telegram.sent.values()),
            "excused duplicates": len(findings.excused),
            "worst reminder lateness s": round(max(lateness, default=0.0), 2),
            "429s": len(self.telegram.rate_limited),
            "commit slack s": round(self._repeats.book.slack, 3),
            "seconds": round(time.time() - self.started, 1),
        }
        return findings

    def _posts_by_process(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name, _ in self.handed_to().values():
            counts[name] = counts.get(name, 0) + 1
        return counts

    def handed_to(self) -> dict[str, tuple[str, float]]:
        """Each message's label -> the process the balancer handed it to, and when (its 200)."""
        by_url = {p.hook_url: p.name for p in self.processes.values()}
        found: dict[str, tuple[str, float]] = {}
        for post in self.telegram.balanced_deliveries:
            message = self.telegram.queued.get(post.update_id, {}).get("message") or {}
            labels = LABEL.findall(str(message.get("text", "")))
            if post.status == 200 and labels and labels[0] not in found:
                found[labels[0]] = (by_url.get(post.url, post.url), post.at)
        return found

    def crossings(self) -> list[str]:
        """Messages handed to another process than their chat's previous message while that
        one was still unanswered: the situation the cluster must get right."""
        ledger, handed = self.ledger(), self.handed_to()
        found = []
        for user_id in self.user_ids:
            asks = [ask for ask in self.pushed if ask.user_id == user_id]
            for before, after in itertools.pairwise(asks):
                if before.label not in handed or after.label not in handed:
                    continue
                (first, _), (second, at) = handed[before.label], handed[after.label]
                answered = ledger.first_delivery(before.label)
                if first != second and (answered is None or at < answered):
                    found.append(f"{after.label} to {second} while {first} had {before.label}")
        return found

    def _answer_line(self, tag: str, ledger: Ledger) -> str:
        copies = ledger.parts.get((tag, 1), [])
        names = ledger.answer_of[tag][1]
        at = self.t(copies[0].sent.received_at) if copies else "never"
        sender = self.name_of(copies[0].run) if copies else "?"
        return f"{tag} (re {some_of(names)}, from process {sender} at {at})"

    def _judge_answered(self, ask: Ask, ledger: Ledger, findings: Findings) -> None:
        label = ask.label
        tags = sorted(ledger.answered_by.get(label, ()), key=lambda tag: int(tag[1:]))
        if not tags:
            generated = [
                f"{tag} (for process {self.model.process_of_answer.get(tag, '?')})"
                for tag, names in self.model.answers.items()
                if label in names
            ]
            rows = pg_rows(
                self.database_url,
                "SELECT id, status FROM messages WHERE role = 'user' AND content LIKE %s",
                f"%{label}%",
            )
            findings.problems.append(
                f"LOST {label} (chat {ask.user_id}, sent {self.t(self.pushed_at[label])}): no "
                f"answer reached the user; model answers naming it: {generated or 'none'}; "
                f"in the database: {rows or 'not stored'}"
            )
        elif len(tags) > 1:
            findings.problems.append(
                f"ANSWERED {len(tags)} TIMES {label} (chat {ask.user_id}): "
                + "; ".join(self._answer_line(tag, ledger) for tag in tags)
            )

    def _judge_order(self, ledger: Ledger, findings: Findings) -> None:
        """Per chat, each message's first answer comes no earlier than its predecessor's."""
        for user_id in self.user_ids:
            asks = [ask for ask in self.pushed if ask.user_id == user_id]
            answered = [(ask, ledger.first_delivery(ask.label)) for ask in asks]
            answered = [(ask, moment) for ask, moment in answered if moment is not None]
            for (before, first), (after, second) in itertools.pairwise(answered):
                if second < first:
                    findings.problems.append(
                        f"OUT OF ORDER in chat {user_id}: the answer to {before.label} "
                        f"{self._story_of(before.label, first, ledger)} came after the answer to "
                        f"the next message, {after.label} "
                        f"{self._story_of(after.label, second, ledger)}"
                    )

    def _story_of(self, label: str, answered: float, ledger: Ledger) -> str:
        """(sent +3.10s, handed to b, answered +6.27s by r9 from b)"""
        tags = [t for t in ledger.answered_by.get(label, ()) if ledger.parts.get((t, 1))]
        tag = min(tags, key=lambda t: ledger.parts[(t, 1)][0].sent.received_at)
        handed = self.handed_to().get(label, ("?", 0.0))[0]
        return (
            f"(sent {self.t(self.pushed_at.get(label))}, handed to {handed}, answered "
            f"{self.t(answered)} by {tag} from {self.name_of(ledger.parts[(tag, 1)][0].run)})"
        )

    def _judge_reminder(self, title: str, ledger: Ledger, findings: Findings) -> None:
        copies = ledger.reminders.get(title, [])
        if not copies:
            findings.problems.append(
                f"LOST reminder {title}: never delivered; {self._reminder_story(title)}"
            )
            return
        fired = pg_rows(
            self.database_url,
            "SELECT id, status FROM messages WHERE role = 'assistant' AND kind = 'reminder' "
            "AND content LIKE %s",
            f"⏰ {title}%",
        )
        if len(fired) > 1:  # separate firings, not one reminder sent again
            findings.problems.append(
                f"FIRED {len(fired)} TIMES reminder {title}: stored as {fired}; the user got it "
                + ", ".join(
                    f"at {self.t(c.sent.received_at)} from process {self.name_of(c.run)}"
                    for c in copies
                )
            )
            return
        self._judge_copies(f"reminder {title}", copies, ledger, findings)
        late, problem = self.reminder_lateness(title, copies[0].sent.received_at)
        if late is not None:
            findings.stats.setdefault("lateness", []).append(late)
        if problem:
            findings.problems.append(problem)

    def _reminder_story(self, title: str) -> str:
        """What the database and the logs say of a reminder: its task, firings, their messages,
        the process that fired each."""
        tasks = pg_rows(self.database_url, "SELECT * FROM proactive_tasks WHERE title = %s", title)
        if not tasks and title in self.model.refused:
            return f"never asked for: {self.model.refused[title]}"
        if not tasks or "id" not in tasks[0]:
            return f"no task was stored for it {tasks or ''}".strip()
        story = []
        for task in tasks:
            due = task.get("run_at")
            story.append(f"task {task['id']} ({task['status']}, due {due and due.isoformat()})")
            firers = [
                f"{p.name} at {self.t(logged_at(entry))}"
                for p in self.processes.values()
                for entry in p.events("task_fired")
                if entry.get("task_id") == task["id"]
            ]
            story.append(f"task_fired logged by {', '.join(firers) or 'no process'}")
            runs = pg_rows(
                self.database_url,
                "SELECT r.id, r.status, r.message_id, m.status AS message_status FROM task_runs "
                "r LEFT JOIN messages m ON m.id = r.message_id WHERE r.task_id = %s",
                task["id"],
            )
            story += [
                f"run {run.get('id')} {run.get('status')!r} with message {run.get('message_id')} "
                f"{run.get('message_status')!r}"
                for run in runs
            ] or ["no run"]
        return "; ".join(story)

    def _judge_copies(
        self,
        what: str,
        copies: Sequence[Any],
        ledger: Ledger,
        findings: Findings,
        *,
        tag: str | None = None,
        part: int | None = None,
    ) -> None:
        problems, excused = self._repeats.judge(what, [copy.sent for copy in copies])
        unrecorded = self._repeats.unrecorded(what, [copy.sent for copy in copies])
        findings.problems += problems + ([unrecorded] if unrecorded else [])
        findings.excused += excused

    # ---- the report ------------------------------------------------------------------------

    def report(self, what: str, findings: Findings) -> str:
        lines = [
            f"{what}, seed {self.seed}: {len(findings.problems)} problems",
            "  " + ", ".join(f"{key}: {value}" for key, value in findings.stats.items()),
            "  processes: "
            + "; ".join(
                f"{p.name} ready {self.t(run.ready_at)} {run.signal or 'running'} "
                f"{self.t(run.signalled_at)} rc={run.returncode}"
                for p in self.processes.values()
                for run in p.runs
            ),
            *(f"  note: {note}" for note in self.notes),
        ]
        if findings.excused:
            lines.append(f"  excused ({len(findings.excused)}):")
            lines += [f"    {line}" for line in findings.excused]
        if findings.problems:
            lines.append(f"  PROBLEMS ({len(findings.problems)}):")
            lines += [f"    {line}" for line in findings.problems]
            trouble = [line for p in self.processes.values() for line in p.trouble()]
            lines.append(
                f"  errors and warnings in the processes' logs ({len(trouble)}, first 20):"
            )
            lines += [f"    {line}" for line in trouble[:20]]
        return "\n".join(lines)


@contextlib.asynccontextmanager
async def cluster_of(
    workdir: Path,
    database_url: str,
    seed: int,
    user_ids: Sequence[int],
    plan: Sequence[Ask],
) -> AsyncIterator[Cluster]:
    """The fakes and an empty cluster over them; every process still running at the end is
    stopped (SIGTERM, SIGKILL when it hangs)."""
    model = ClusterModel(plan)
    async with (
        FakeTelegramServer(send_delay=SEND_DELAY, limits=SendLimits()) as telegram,
        FakeAnthropicServer(responder=model.respond) as llm,
    ):
        model.server = llm
        cluster = Cluster(workdir, database_url, seed, user_ids, telegram, llm, model)
        try:
            yield cluster
        finally:
            await cluster.stop_all()


def due_in_window(
    rng: random.Random, titles: Sequence[str], start: float, length: float
) -> dict[str, datetime]:
    """A seeded due time for each reminder, `start` to `start + length` seconds from now."""
    now = datetime.now(UTC)
    return {
        title: (now + timedelta(seconds=start + rng.uniform(0, length))).replace(microsecond=0)
        for title in titles
    }


# ---- chaos on the cluster ------------------------------------------------------------------

CHAOS_KILLS = 14  # SIGKILLs in the chaos phase (both processes at once count two)
# The chaos phase ends after CHAOS_KILLS, or after this. Under heavy load a start takes 6-10 s
# and 75 s once ended a run at 13 of its 14 kills (seed 667689, beside other jobs), which fails
# as too few kills. A longer phase (150 s) found real duplicates after about 60 s of chaos
# (seed 405086: replies waiting behind a chat's rate limit outlived their claim and a redelivery
# sweep sent them again), fixed in messaging/outbox.py (`_claim_kept`). At 150 s seeds 405086
# and 957930 pass (session 13; on a quiet machine the 14 kills come within about 90 s, so the
# longer bound costs nothing there).
CHAOS_PHASE_SECONDS = 150.0
CHAOS_QUIET_SECONDS = 40.0  # then at most this long for everything to arrive and settle
RESTART_TIMEOUT = 20.0  # a process started again (over a database that stands) is ready by then


@dataclass(slots=True)
class Kill:
    """One SIGKILL of the chaos phase."""

    process: str
    role: str  # what it was when picked: "leader" or "follower" (of the scheduler), or "?"
    at: float  # time.time()
    ready: bool  # it had answered /healthz since its start
    down: float  # seconds until it was started again
    second: bool = False  # the second of both processes killed within a second

    def story(self, t: Callable[[float | None], str]) -> str:
        """`b too (follower, starting) at +12.30s, down 0.8 s` (`t` writes a moment)."""
        who = f"{self.process} too" if self.second else self.process
        starting = "" if self.ready else ", starting"
        return f"{who} ({self.role}{starting}) at {t(self.at)}, down {self.down:.1f} s"


class ClusterScenario(Scenario):
    """chaos_support's `Scenario` over a cluster: the same plan and the same judgement (every
    message answered once, every part, reminder and briefing delivered, none late by more than
    a minute beyond the downtime, a second copy only where the first was in flight at a SIGKILL
    of the process that sent it), read from the processes' runs and from PostgreSQL.

    A `Copy.run` is the number of a run among all runs of all processes (in the order they were
    started), found from the address the message came from (`base_url_for`) and when it came.
    The downtime that counts for lateness is when no process could take the work: none was up,
    or one had been SIGKILLed less than `TAKEOVER_SECONDS` ago."""

    def __init__(self, cluster: Cluster, seed: int, plan: Sequence[Ask]) -> None:
        super().__init__(seed, signal.SIGKILL, plan, cluster.telegram, cluster.model, None)
        self.cluster = cluster
        self.pushed = cluster.pushed
        self.notes = cluster.notes
        self.started = cluster.started
        self.kills: list[Kill] = []
        self._repeats: RepeatJudge | None = None

    @property
    def title(self) -> str:
        return (
            f"cluster chaos ({', '.join(self.cluster.processes)} on PostgreSQL) with "
            f"{self.stop_signal.name}"
        )

    @property
    def runs(self) -> list[Run]:
        every = [run for process in self.cluster.processes.values() for run in process.runs]
        return sorted(every, key=lambda run: run.spawned_at)

    def run_name(self, number: int) -> str:
        runs = self.runs
        return runs[number - 1].name if 0 < number <= len(runs) else "no known process"

    def ledger(self) -> Ledger:
        runs = self.runs
        numbers = {id(run): number for number, run in enumerate(runs, 1)}

        def sender(sent: SentMessage) -> int:
            run = self._sending_run(sent)
            return numbers.get(id(run), 0) if run is not None else 0

        return Ledger(self.telegram, runs, sender)

    def _sending_run(self, sent: SentMessage) -> Run | None:
        process = self.cluster.processes.get(sent.client or "")
        if process is None:
            return None
        started = [run for run in process.runs if run.spawned_at <= sent.received_at]
        return started[-1] if started else None

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        return pg_rows(self.cluster.database_url, sql.replace("?", "%s"), *params)

    def replies_claiming(self, message_id: Any) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT id, status, substr(content, 1, 90) AS content FROM messages WHERE role = "
            "'assistant' AND (extra::jsonb -> 'answers') @> to_jsonb(?::bigint)",
            message_id,
        )

    def stderr_lines(self, run: Run) -> list[str]:
        for process in self.cluster.processes.values():
            if any(run is mine for mine in process.runs):
                return process.stderr_lines(run)
        return []

    def _judge_copies(
        self,
        what: str,
        copies: Sequence[Any],
        ledger: Ledger,
        findings: Findings,
        *,
        tag: str | None = None,
        part: int | None = None,
    ) -> None:
        """By cluster_sends.py's rule, not chaos_support's (it reads PostgreSQL's records)."""
        repeats = self._repeats or self.cluster.repeat_judge()
        self._repeats = repeats
        problems, excused = repeats.judge(what, [copy.sent for copy in copies])
        unrecorded = repeats.unrecorded(what, [copy.sent for copy in copies])
        findings.problems += problems + ([unrecorded] if unrecorded else [])
        findings.excused += excused

    def _uptime_between(self, start: float, end: float) -> float:
        return takeover_uptime(self.runs, start, end)

    def judge(self) -> Findings:
        for process in self.cluster.processes.values():
            process.exited_by_itself()  # recorded for the judgement
        self._repeats = None  # read PostgreSQL afresh for this judgement
        findings = super().judge()
        for process in self.cluster.processes.values():
            for entry in process.events("task_fired_without_service", "turn_crashed"):
                findings.problems.append(f"LOGGED by process {process.name}: {entry}")
        ledger = self.ledger()
        for ask in self.expected_reminders:
            copies = ledger.reminders.get(ask.reminder, [])
            if copies:
                _, problem = self.cluster.reminder_lateness(
                    ask.reminder, copies[0].sent.received_at
                )
                findings.problems += [problem] if problem else []
        findings.problems += self.cluster.left_over()
        if len(self.kills) < CHAOS_KILLS:
            findings.problems.append(
                f"TOO FEW KILLS: the chaos phase made {len(self.kills)} of its {CHAOS_KILLS} "
                "SIGKILLs (the notes say why), so the run proves less than it claims"
            )
        if self._repeats is not None:
            findings.stats["commit slack s"] = round(self._repeats.book.slack, 3)
        findings.stats["429s"] = len(self.telegram.rate_limited)
        return findings

    def _stats(self, ledger: Ledger, findings: Findings) -> dict[str, Any]:
        stats = super()._stats(ledger, findings)
        roles = [kill.role for kill in self.kills]
        seconds = stats.pop("seconds")
        stats.update(
            {
                "SIGKILLs of the leader": roles.count("leader"),
                "of the follower": roles.count("follower"),
                "of a starting process": sum(1 for kill in self.kills if not kill.ready),
                "both within a second": sum(1 for kill in self.kills if kill.second),
                "handed over": self.cluster._posts_by_process(),
                "crossings": len(self.cluster.crossings()),
                "model requests": self.cluster.model.requests_by,
                "seconds": seconds,
            }
        )
        return stats


class ChaosMonkey:
    """The chaos phase's SIGKILLs: at seeded moments, a seeded choice of the scheduler's leader
    or follower (now and then both within a second), each killed process started again after a
    seeded downtime while the other keeps running. Every seeded value of a kill is drawn before
    the kill, so the sequence of draws does not depend on how the run goes."""

    def __init__(self, scenario: ClusterScenario, rng: random.Random) -> None:
        self.scenario = scenario
        self.cluster = scenario.cluster
        self.rng = rng
        self.restarts: list[asyncio.Task[None]] = []

    async def run(self, kills: int = CHAOS_KILLS, within: float = CHAOS_PHASE_SECONDS) -> None:
        names = list(self.cluster.processes)
        ends = time.monotonic() + within
        try:
            while len(self.scenario.kills) < kills:
                # Most kills wait until both answer /healthz again; the others may hit a
                # process still starting (recovery, redelivery, the election at start-up).
                wait_ready = self.rng.random() < 0.75
                gap = self.rng.uniform(0.3, 3.0)
                roll = self.rng.random()
                fallback = self.rng.choice(names)  # when no process leads at that moment
                both_within = self.rng.uniform(0.05, 0.95)
                downs = {name: self.rng.uniform(0.2, 2.0) for name in names}
                running = await until(
                    lambda wait_ready=wait_ready: (
                        self._exited()
                        or all(
                            p.alive and (not wait_ready or p.runs[-1].ready_at is not None)
                            for p in self.cluster.processes.values()
                        )
                    ),
                    max(0.0, ends - time.monotonic()),
                )
                if exited := self._exited():
                    self.scenario.notes.append(
                        f"chaos phase ended after {len(self.scenario.kills)} SIGKILLs: process "
                        f"{' and '.join(exited)} exited by itself"
                    )
                    break
                if not running or time.monotonic() + gap > ends:
                    self.scenario.notes.append(
                        f"chaos phase ended by time after {len(self.scenario.kills)} SIGKILLs"
                        + ("" if running else " (a process was not running again in time)")
                    )
                    break
                await asyncio.sleep(gap)
                leaders = self.cluster.leaders()
                leader = leaders[0] if leaders else None

                def role(name: str, leader: str | None = leader) -> str:
                    return "leader" if name == leader else "follower" if leader else "?"

                first = leader or fallback
                [other] = [name for name in names if name != first]
                if roll < 0.15:  # both: the leader first, the follower within a second
                    await self._kill(first, role(first), downs[first])
                    await asyncio.sleep(both_within)
                    await self._kill(other, role(other), downs[other], second=True)
                elif roll < 0.575:
                    await self._kill(first, role(first), downs[first])
                else:
                    await self._kill(other, role(other), downs[other])
        finally:
            await asyncio.gather(*self.restarts)

    def _exited(self) -> list[str]:
        return [name for name, p in self.cluster.processes.items() if p.exited_by_itself()]

    async def _kill(self, name: str, role: str, down: float, second: bool = False) -> None:
        process = self.cluster.processes[name]
        if not process.alive:
            return
        ready = process.runs[-1].ready_at is not None
        run = await process.stop(signal.SIGKILL)
        assert run.signalled_at is not None
        kill = Kill(name, role, run.signalled_at, ready, down, second)
        self.scenario.kills.append(kill)
        self.scenario.stops += 1
        self.restarts.append(asyncio.create_task(self._restart(process, down)))

    async def _restart(self, process: ClusterProcess, after: float) -> None:
        await asyncio.sleep(after)
        await process.spawn()
        await process.wait_ready(RESTART_TIMEOUT)


async def run_cluster_chaos(
    workdir: Path, database_url: str, seed: int
) -> tuple[ClusterScenario, Findings]:
    """chaos_support's scenario on two processes (a and b) on one PostgreSQL database behind
    the balanced webhook: messages from four chats at seeded moments, a `ChaosMonkey` killing
    the processes; then a quiet period until everything arrived and Bruce has nothing left to
    do (at most `CHAOS_QUIET_SECONDS`); then SIGTERM for both and the judgement."""
    plan = make_plan(random.Random(f"{seed}:plan"), CHAOS_USER_IDS, PLANNED_MESSAGES)
    async with cluster_of(workdir, database_url, seed, CHAOS_USER_IDS, plan) as cluster:
        scenario = ClusterScenario(cluster, seed, plan)
        await cluster.start("a", "b")
        cluster.balance("a", "b")
        await cluster.wait_for_leader(START_TIMEOUT)
        driving = asyncio.Event()
        driving.set()

        async def drive() -> None:
            for ask in plan:
                await asyncio.sleep(ask.gap)  # when users write is the scenario's input
                if not driving.is_set():
                    return
                cluster.say(ask)

        driver = asyncio.create_task(drive(), name="cluster-chaos-driver")
        try:
            await ChaosMonkey(scenario, random.Random(f"{seed}:kills")).run()
            driving.clear()
            cluster.notes.append(
                "SIGKILLs: " + "; ".join(kill.story(cluster.t) for kill in scenario.kills)
            )
            if not all(p.alive for p in cluster.processes.values()):
                cluster.notes.append("a process did not start again after its last SIGKILL")
            await cluster.settle(CHAOS_QUIET_SECONDS, arrived=scenario.everything_arrived)
            await cluster.stop_all()
        finally:
            driving.clear()
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
        return scenario, scenario.judge()
