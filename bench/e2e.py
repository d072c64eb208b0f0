"""End-to-end benchmark: `bruce run` over real HTTP, measured the way a deployment runs.

The daemon is the one bench/soak.py runs (its `Daemon`: a subprocess on the default config,
brain on, SQLite in a fresh data dir, web on a free port, the Telegram channel polling), with
the real python-telegram-bot long-polling the fake Bot API (tests/fakes/telegram_server.py) and
the real anthropic SDK calling the fake Messages API (tests/fakes/anthropic_server.py), which
answers at once, naming the messages it answers (soak's `answer`). Both fakes run here.

Scenarios (`--skip NAME ...` leaves some out):
  startup  — spawn → `/healthz` 200, spawn → the first getUpdates at the fake, on a fresh data
             dir (the first start: the schema is created); then the daemon is stopped and
             started again on the same data dir (a restart, what a user meets after the first
             day) and the rest runs on the restarted daemon;
  idle     — RSS of the daemon's process tree `--idle-seconds` after ready;
  latency  — `--latency-messages` messages one at a time over `--latency-chats` chats (after
             one warm-up message per chat): push → the sendMessage naming it, p50/p99;
  burst    — after a warm-up (one message per chat), `--burst-chats` × `--burst-per-chat`
             messages pushed at once; the time until every chat got the reply naming its last
             message → messages/s; CPU seconds (user+sys of the tree) per message; LLM calls
             the fake saw (agent vs brain vs other) per 1000 messages; peak RSS while bursting;
  reminders — `--reminders` chats each ask for a message-mode reminder due in the same second
             (the fake model calls `proactive_create`, as tests/integration/chaos_support.py's
             ChaosModel does); lateness = arrival of the reminder at the fake − its due time.
The burst also reports SQL statements, commits and driver time per message (the daemon counts
them when BRUCE_SQL_STATS names a file: storage/sql_stats.py), with the costliest statements.
`--profile FILE` records the daemon with py-spy during the burst (summarise it with
bench/profile_summary.py).

    make bench-e2e
    .venv/bin/python bench/e2e.py --json e2e.json

Every wait has a deadline, and the daemon is stopped (SIGTERM, then SIGKILL) whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from run import percentile  # noqa: E402
from soak import (  # noqa: E402
    FIRST_USER_ID,
    LABEL,
    Daemon,
    Ledger,
    SoakTelegram,
    answer,
    run_header,
    start_fakes,
)

from tests.fakes.anthropic_server import AnthropicReply  # noqa: E402
from tests.fakes.telegram_server import FakeUser  # noqa: E402

SCENARIOS = ("startup", "idle", "latency", "burst", "reminders")
REMIND = re.compile(r"\brem-(\d+)@(\S+)")
REMINDER_SENT = re.compile(r"\breminder-(\d+)\b")

# (what, goal, nanobot, hermes) — issue 12's goals and peer anchors
GOALS = {
    "burst_messages_per_s": ("≥ 300", "17", "36"),
    "cpu_ms_per_message": ("≤ 3", "", ""),
    "brain_calls_per_1000": ("≤ 250 (1 per 4 exchanges)", "", ""),
    "spawn_to_healthz_s": ("≤ 0.8", "0.9-1.0", "0.7-0.8"),
    "restart_to_healthz_s": ("≤ 0.8", "", ""),
    "idle_rss_mb": ("≤ 100", "117-120", "107-115"),
    "burst_peak_rss_mb": ("≤ 130", "171", "330"),
    "latency_p50_p99_ms": ("≤ 15 / 50", "256 / 281", "255 / 259"),
    "reminder_lateness_p50_p99_ms": ("p99 ≤ 1000", "", ""),
    "sql_statements_commits_per_message": ("", "", ""),
}


class E2ETelegram(SoakTelegram):
    """Soak's fake Bot API, also noting when the first getUpdates arrived."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.first_get_updates: float | None = None

    async def _api_getUpdates(self, params: dict[str, str]) -> Any:
        if self.first_get_updates is None:
            self.first_get_updates = time.monotonic()
        return await super()._api_getUpdates(params)


class Model:
    """Soak's answering model, counting the requests by caller: the brain's runs offer the
    `everything_is_ready` tool (bruce_bot/agent/brain/responsibilities.py), the agent's turns
    offer the channel tools; a request offering neither is counted as "other"."""

    def __init__(self) -> None:
        self.counts = {"agent": 0, "brain": 0, "other": 0}
        self.last_request = time.monotonic()

    def kind(self, body: dict[str, Any]) -> str:
        tools = {tool.get("name") for tool in body.get("tools") or [] if isinstance(tool, dict)}
        if "everything_is_ready" in tools:
            return "brain"
        return "agent" if tools else "other"

    def __call__(self, body: dict[str, Any]) -> str | AnthropicReply:
        kind = self.kind(body)
        self.counts[kind] += 1
        self.last_request = time.monotonic()
        tools = {tool.get("name") for tool in body.get("tools") or [] if isinstance(tool, dict)}
        messages = body.get("messages") or []
        if kind == "agent" and "proactive_create" in tools and messages:
            newest = messages[-1]
            if newest.get("role") == "user":
                blocks = newest.get("content")
                if isinstance(blocks, str):
                    blocks = [{"type": "text", "text": blocks}]
                texts = [b.get("text", "") for b in blocks or [] if b.get("type") == "text"]
                results = [b for b in blocks or [] if b.get("type") == "tool_result"]
                asks = [m for text in texts for m in REMIND.findall(text)]
                if asks and not results:  # the ChaosModel way: ask for the reminder first
                    calls = [
                        (
                            "proactive_create",
                            {
                                "title": f"reminder-{n}",
                                "execution_mode": "message",
                                "content": f"reminder-{n} is due",
                                "run_at": at,
                            },
                        )
                        for n, at in asks
                    ]
                    return AnthropicReply(tool_calls=calls)
                if results:  # then name the message that asked, as soak's model does
                    for message in reversed(messages[:-1]):
                        content = message.get("content")
                        if message.get("role") != "user" or not isinstance(content, list | str):
                            continue
                        text = (
                            content
                            if isinstance(content, str)
                            else " ".join(
                                b.get("text", "") for b in content if b.get("type") == "text"
                            )
                        )
                        if labels := LABEL.findall(text):
                            return "Scheduled: " + " ".join(f"soak-{n}" for n in labels) + "."
        return answer(body)


def tree(ps: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [ps, *ps.children(recursive=True)]
    return [ps]


def tree_rss_mb(ps: psutil.Process) -> float:
    total = 0
    for proc in tree(ps):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return round(total / 2**20, 1)


def tree_cpu_s(ps: psutil.Process) -> float:
    total = 0.0
    for proc in tree(ps):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


class E2EDaemon(Daemon):
    """Soak's daemon, counting its SQL statements and commits (storage/sql_stats.py)."""

    def __init__(self, workdir: Path, *args: Any) -> None:
        super().__init__(workdir, *args)
        self.sql_file = workdir / "sql-stats.json"
        self.env["BRUCE_SQL_STATS"] = str(self.sql_file)

    def sql_stats(self) -> dict[str, Any]:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(self.sql_file.read_text(encoding="utf-8"))
        return {}


class E2E:
    def __init__(self, args: argparse.Namespace, daemon: Daemon, telegram: E2ETelegram) -> None:
        self.args = args
        self.daemon = daemon
        self.telegram = telegram
        self.ledger = telegram.ledger
        chats = max(args.burst_chats, args.latency_chats, args.reminders)
        self.users = [FakeUser(FIRST_USER_ID + i, f"User{i}") for i in range(chats)]
        self.next_number = 1

    def push(self, user: FakeUser, phase: int) -> int:
        number = self.next_number
        self.next_number += 1
        self.ledger.push(number, phase)
        self.telegram.private_text(user, f"soak-{number} hello Bruce, just checking in.")
        return number

    async def until(self, predicate: Any, within: float) -> bool:
        deadline = time.monotonic() + within
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.daemon.alive():
                return False
            self.ledger.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ledger.changed.wait(), min(remaining, 0.5))
        return True

    async def warm_up(self, users: list[FakeUser]) -> float:
        started = time.monotonic()
        for user in users:
            self.push(user, 0)
        if not await self.until(lambda: not self.ledger.pending, self.args.deadline):
            raise RuntimeError(f"warm-up: {len(self.ledger.pending)} unanswered")
        self.ledger.latencies.pop(0, None)
        return round(time.monotonic() - started, 2)

    async def latency(self) -> dict[str, Any]:
        users = self.users[: self.args.latency_chats]
        warm = await self.warm_up(users)
        await self.settle()
        for i in range(self.args.latency_messages):
            number = self.push(users[i % len(users)], 1)
            if not await self.until(lambda n=number: n not in self.ledger.pending, 30):
                raise RuntimeError(f"latency: message {number} unanswered after 30 s")
        values = self.ledger.latencies.get(1, [])
        return {
            "warm_up_s": warm,
            "messages": len(values),
            "p50_ms": round(percentile(values, 50), 1),
            "p99_ms": round(percentile(values, 99), 1),
            "max_ms": round(max(values), 1),
        }

    async def settle(self, quiet: float = 2.0, within: float = 30.0) -> float:
        """Wait until the fake model has seen no request for `quiet` s (the brain's runs after
        the exchanges), at most `within` s; returns the wait."""
        started = time.monotonic()
        model: Model = self.args.model
        while time.monotonic() - started < within:
            if time.monotonic() - model.last_request >= quiet:
                break
            await asyncio.sleep(0.1)
        return round(time.monotonic() - started, 2)

    async def burst(self) -> dict[str, Any]:
        model: Model = self.args.model
        users = self.users[: self.args.burst_chats]
        warm = await self.warm_up(users)
        settled = await self.settle()
        assert self.daemon.ps is not None
        ps = self.daemon.ps
        rss_before = tree_rss_mb(ps)
        peak = rss_before
        calls_before = dict(model.counts)
        cpu_before = tree_cpu_s(ps)
        harness = psutil.Process()
        harness_before = sum(harness.cpu_times()[:2])
        sent_before = self.telegram.calls_sent
        sql_before = self.daemon.sql_stats()
        started = time.monotonic()
        last: set[int] = set()
        for k in range(self.args.burst_per_chat):
            for user in users:
                number = self.push(user, 2)
                if k == self.args.burst_per_chat - 1:
                    last.add(number)
        total = len(users) * self.args.burst_per_chat

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, tree_rss_mb(ps))
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        profiler = await start_profiler(self.args.profile, ps.pid)
        try:
            done = await self.until(
                lambda: not (last & self.ledger.pending.keys()), self.args.deadline
            )
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            await stop_profiler(profiler)
        elapsed = time.monotonic() - started
        cpu = tree_cpu_s(ps) - cpu_before
        harness_cpu = sum(harness.cpu_times()[:2]) - harness_before
        peak = max(peak, tree_rss_mb(ps))
        calls_at_done = {k: model.counts[k] - calls_before[k] for k in model.counts}
        tail = await self.settle(within=60)
        calls = {k: model.counts[k] - calls_before[k] for k in model.counts}
        chats_left = len(last & self.ledger.pending.keys())
        sql = sql_per_message(sql_before, self.daemon.sql_stats(), total)
        return {
            "sql": sql,
            "warm_up_s": warm,
            "settle_before_s": settled,
            "chats": len(users),
            "messages": total,
            "complete": done,
            "chats_unanswered": chats_left,
            "seconds": round(elapsed, 2),
            "messages_per_s": round(total / elapsed, 1),
            "cpu_s": round(cpu, 2),
            "cpu_ms_per_message": round(cpu * 1000 / total, 2),
            "harness_cpu_s": round(harness_cpu, 2),  # this process alone (the fakes)
            "llm_calls_until_answered": calls_at_done,
            "llm_calls_with_tail": calls,
            "tail_s": tail,
            "calls_per_1000_messages": {k: round(v * 1000 / total, 1) for k, v in calls.items()},
            "exchanges_per_brain_call": round(total / calls["brain"], 1)
            if calls["brain"]
            else None,
            "rss_before_mb": rss_before,
            "peak_rss_mb": peak,
            "replies_sent": self.telegram.calls_sent - sent_before,
        }

    async def reminders(self) -> dict[str, Any]:
        """`--reminders` chats each ask for a message-mode reminder, all due in one second."""
        users = self.users[: self.args.reminders]
        telegram: CountingTelegram = self.telegram  # type: ignore[assignment]
        due = float(int(time.time()) + self.args.reminder_lead)
        at = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(due))
        asked = time.monotonic()
        numbers = []
        for i, user in enumerate(users):
            numbers.append(i)
            number = self.next_number
            self.next_number += 1
            self.ledger.push(number, 3)
            self.telegram.private_text(user, f"soak-{number} please remind me: rem-{i}@{at}")
        scheduled = await self.until(
            lambda: not any(p.phase == 3 for p in self.ledger.pending.values()), 60
        )
        scheduled_s = round(time.monotonic() - asked, 2)
        wait = due - time.time() + 30
        await self.until(lambda: len(telegram.reminders) >= len(numbers), max(wait, 5))
        late = [(telegram.reminders[n] - due) * 1000 for n in numbers if n in telegram.reminders]
        result: dict[str, Any] = {
            "reminders": len(numbers),
            "due_at": at,
            "asked_and_acknowledged": scheduled,
            "ack_s": scheduled_s,
            "delivered": len(late),
        }
        if late:
            result |= {
                "lateness_p50_ms": round(percentile(late, 50), 1),
                "lateness_p99_ms": round(percentile(late, 99), 1),
                "lateness_max_ms": round(max(late), 1),
                "lateness_min_ms": round(min(late), 1),
            }
        return result


def sql_per_message(before: dict[str, Any], after: dict[str, Any], messages: int) -> dict:
    """Statements and commits per message between two snapshots of the daemon's SQL counters
    (storage/sql_stats.py), with the statements that took the most driver time."""
    if not after:
        return {}
    was = before.get("by_statement", {})
    grown = {
        sql: {
            "count": v["count"] - was.get(sql, {}).get("count", 0),
            "seconds": round(v["seconds"] - was.get(sql, {}).get("seconds", 0.0), 4),
        }
        for sql, v in after["by_statement"].items()
    }
    top = sorted(grown.items(), key=lambda kv: kv[1]["seconds"], reverse=True)[:12]
    return {
        "statements_per_message": round(
            (after["statements"] - before.get("statements", 0)) / messages, 2
        ),
        "commits_per_message": round((after["commits"] - before.get("commits", 0)) / messages, 2),
        "driver_ms_per_message": round(
            (after["seconds"] - before.get("seconds", 0.0)) * 1000 / messages, 3
        ),
        "top_statements": [
            {"sql": sql, **v, "per_message": round(v["count"] / messages, 2)} for sql, v in top
        ],
    }


async def start_profiler(path: Path | None, pid: int) -> asyncio.subprocess.Process | None:
    """py-spy sampling the daemon (collapsed stacks into `path`) while the burst runs."""
    if path is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    extra = os.environ.get("BENCH_PYSPY_ARGS", "--nonblocking").split()  # --native: blocking
    return await asyncio.create_subprocess_exec(
        str(spy), "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
        "--output", str(path), "--threads", *extra,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def stop_profiler(profiler: asyncio.subprocess.Process | None) -> None:
    if profiler is None:
        return
    with contextlib.suppress(ProcessLookupError):
        profiler.send_signal(2)  # SIGINT: py-spy writes its output and exits
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(profiler.wait(), 30)


class CountingTelegram(E2ETelegram):
    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.calls_sent = 0
        self.reminders: dict[int, float] = {}  # reminder number -> wall-clock time it arrived

    async def _api_sendMessage(self, params: dict[str, str]) -> Any:
        self.calls_sent += 1
        for number in REMINDER_SENT.findall(params.get("text", "")):
            self.reminders.setdefault(int(number), time.time())
        return await super()._api_sendMessage(params)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    skip = set(args.skip or ())
    results = run_header(args, left_out=("json", "model", "profile", "keep"))
    ledger = Ledger()
    model = Model()
    args.model = model
    with tempfile.TemporaryDirectory(prefix="bruce-e2e-") as tmp:
        workdir = Path(tmp)
        telegram = CountingTelegram(ledger)
        anthropic = await start_fakes(telegram, model)
        chats = max(args.burst_chats, args.latency_chats, args.reminders)
        daemon = E2EDaemon(workdir, telegram.base_url, anthropic.base_url, chats)
        bench = E2E(args, daemon, telegram)
        try:
            spawned = time.monotonic()
            healthz = await daemon.start(within=args.deadline)
            assert daemon.ps is not None
            if not await bench.until(lambda: telegram.first_get_updates is not None, 30):
                raise RuntimeError("no getUpdates within 30 s of ready")
            assert telegram.first_get_updates is not None
            startup = {
                "spawn_to_healthz_s": round(healthz, 3),
                "spawn_to_first_get_updates_s": round(telegram.first_get_updates - spawned, 3),
                "rss_at_ready_mb": tree_rss_mb(daemon.ps),
            }
            if "startup" not in skip:
                await daemon.stop()
                spawned = time.monotonic()
                healthz = await daemon.start(within=args.deadline)
                startup["restart_to_healthz_s"] = round(healthz, 3)
            if "startup" not in skip:
                results["startup"] = startup
                print(f"startup: {json.dumps(startup)}", flush=True)
            if "idle" not in skip:
                await asyncio.sleep(
                    max(0.0, spawned + healthz + args.idle_seconds - time.monotonic())
                )
                results["idle"] = {
                    "seconds_after_ready": args.idle_seconds,
                    "rss_mb": tree_rss_mb(daemon.ps),
                    "processes": len(tree(daemon.ps)),
                }
                print(f"idle: {json.dumps(results['idle'])}", flush=True)
            if "latency" not in skip:
                results["latency"] = await bench.latency()
                print(f"latency: {json.dumps(results['latency'])}", flush=True)
            if "burst" not in skip:
                results["burst"] = await bench.burst()
                print(f"burst: {json.dumps(results['burst'])}", flush=True)
            if "reminders" not in skip:
                results["reminders"] = await bench.reminders()
                print(f"reminders: {json.dumps(results['reminders'])}", flush=True)
            results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
            results["llm_calls_total"] = dict(model.counts)
            results["replies_to_unknown"] = ledger.unknown
        finally:
            results["exit_code"] = await daemon.stop()
            log = workdir / "daemon.out"
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            errors = [x for x in lines if " error " in x.lower() or "traceback" in x.lower()]
            results["daemon_error_lines"] = len(errors)
            results["daemon_error_examples"] = errors[:5]
            await anthropic.stop()
            await telegram.stop()
            if args.keep is not None:
                shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
    return results


def report(results: dict[str, Any]) -> None:
    start, idle = results.get("startup", {}), results.get("idle", {})
    lat, burst = results.get("latency", {}), results.get("burst", {})
    rem = results.get("reminders", {})
    per_1000 = burst.get("calls_per_1000_messages", {})
    measured = {
        "burst_messages_per_s": burst.get("messages_per_s"),
        "cpu_ms_per_message": burst.get("cpu_ms_per_message"),
        "brain_calls_per_1000": per_1000.get("brain"),
        "spawn_to_healthz_s": start.get("spawn_to_healthz_s"),
        "restart_to_healthz_s": start.get("restart_to_healthz_s"),
        "idle_rss_mb": idle.get("rss_mb"),
        "burst_peak_rss_mb": burst.get("peak_rss_mb"),
        "latency_p50_p99_ms": f"{lat['p50_ms']} / {lat['p99_ms']}" if lat else None,
        "reminder_lateness_p50_p99_ms": (
            f"{rem['lateness_p50_ms']} / {rem['lateness_p99_ms']}"
            if "lateness_p50_ms" in rem
            else None
        ),
        "sql_statements_commits_per_message": (
            f"{sql['statements_per_message']} / {sql['commits_per_message']}"
            if (sql := burst.get("sql"))
            else None
        ),
    }
    print()
    print(f"{'figure':<28} {'bruce':>14} {'goal':>26} {'nanobot':>10} {'hermes':>10}")
    for key, value in measured.items():
        goal, nanobot, hermes = GOALS[key]
        shown = "-" if value is None else str(value)
        print(f"{key:<28} {shown:>14} {goal:>26} {nanobot:>10} {hermes:>10}")
    if per_1000:
        print(f"LLM calls per 1000 messages: {per_1000}")
    print(
        f"load average {results['machine'].get('load_average_at_start')} -> "
        f"{results['machine'].get('load_average_at_end')}; daemon exit code "
        f"{results.get('exit_code')}, {results.get('daemon_error_lines')} error lines"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", nargs="*", choices=SCENARIOS, help="scenarios to leave out")
    parser.add_argument("--idle-seconds", type=float, default=3.0, help="idle RSS this after ready")
    parser.add_argument("--latency-messages", type=int, default=60)
    parser.add_argument("--latency-chats", type=int, default=10)
    parser.add_argument("--burst-chats", type=int, default=200)
    parser.add_argument("--burst-per-chat", type=int, default=5)
    parser.add_argument("--reminders", type=int, default=50, help="reminders due in one second")
    parser.add_argument("--reminder-lead", type=float, default=10.0, help="seconds until due")
    parser.add_argument("--deadline", type=float, default=300.0, help="bound of each long wait")
    parser.add_argument("--json", type=Path, help="write the results there")
    parser.add_argument("--keep", type=Path, help="copy the daemon's data dir and log there")
    parser.add_argument(
        "--profile", type=Path, help="py-spy the daemon during the burst (collapsed stacks)"
    )
    arguments = parser.parse_args()
    outcome = asyncio.run(main(arguments))
    report(outcome)
    if arguments.json:
        arguments.json.write_text(json.dumps(outcome, indent=2), encoding="utf-8")
        print(f"results written to {arguments.json}")
