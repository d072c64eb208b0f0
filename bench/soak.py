"""Soak benchmark: `bruce run` under a long stream of Telegram messages, watched for growth.

The daemon runs as a subprocess on its defaults (SQLite under a fresh data dir, brain on, web
on a free port), with the real python-telegram-bot long-polling the fake Bot API
(tests/fakes/telegram_server.py) and the real anthropic SDK calling the fake Messages API
(tests/fakes/anthropic_server.py), which answers at once. Both fakes run in this process; they
keep nothing per message, so only the daemon can grow.

`--messages` messages are pushed over `--minutes` minutes, in phases that alternate:
  burst  — one message from each of up to `--burst` chats at once, wait for the replies, repeat;
  steady — one message at a time at a fixed rate (the run's average rate).
Both push the same average rate; when Bruce falls behind, pushing pauses while more than
`--max-in-flight` messages wait for a reply, so what is measured is what it sustains. Before the
phases, a warm-up sends one message from every chat (sessions, SDK import, caches): the
"start" figures are taken after it. Per phase and overall: RSS and open descriptors of the
daemon, the SQLite file and its WAL, push → reply latency (p50/p99/max), replies per second.
Goals (issue 10): RSS growth ≤ 20 MB, no descriptor growth, a flat p99 across phases.

    make soak                                   # 100,000 messages over ~30 minutes
    .venv/bin/python bench/soak.py --messages 5000 --minutes 3 --json soak.json

It always ends by itself: each phase has a deadline and a bounded drain, the run stops early
when nothing has been answered for `--stall-seconds` (reported as a failed goal), and the daemon
is stopped (SIGTERM, then SIGKILL) whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from aiohttp import web

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from run import free_port, percentile  # noqa: E402  (bench/run.py; it puts the root on sys.path)

from tests.fakes.anthropic_server import FakeAnthropicServer  # noqa: E402
from tests.fakes.telegram_server import FakeTelegramServer, FakeUser  # noqa: E402

LABEL = re.compile(r"\bsoak-(\d+)\b")
FIRST_USER_ID = 7_000_001
RSS_GOAL_MB = 20.0
P99_FLAT_FACTOR = 1.5  # "flat": the worst phase's p99 at most this times the first phase's


class Tally(list):  # type: ignore[type-arg]
    """Stands in for a fake's record of requests: counts what is appended, keeps nothing."""

    count = 0

    def append(self, item: object) -> None:
        self.count += 1

    def __len__(self) -> int:
        return self.count


@dataclass
class Push:
    at: float
    phase: int


@dataclass
class Ledger:
    """Which message was pushed when, and when its reply came."""

    pending: dict[int, Push] = field(default_factory=dict)
    latencies: dict[int, list[float]] = field(default_factory=dict)  # phase -> ms
    answered_at: list[float] = field(default_factory=list)  # monotonic, every answered message
    answered: int = 0
    replies: int = 0
    unknown: int = 0  # replies naming no pending message
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    last_answer: float = field(default_factory=time.monotonic)
    last_push_idle: float = field(default_factory=time.monotonic)  # a push with none in flight

    def push(self, number: int, phase: int) -> None:
        now = time.monotonic()
        if not self.pending:
            self.last_push_idle = now
        self.pending[number] = Push(now, phase)

    def reply(self, text: str) -> None:
        now = time.monotonic()
        self.replies += 1
        named = [int(n) for n in LABEL.findall(text)]
        found = False
        for number in named:
            push = self.pending.pop(number, None)
            if push is None:
                continue
            found = True
            self.last_answer = now
            self.latencies.setdefault(push.phase, []).append((now - push.at) * 1000)
            self.answered += 1
        if not found:
            self.unknown += 1
        self.changed.set()


class SoakTelegram(FakeTelegramServer):
    """The fake Bot API, reporting each sendMessage to the ledger and keeping nothing of it."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger
        self.calls = Tally()
        self.get_updates_offsets = Tally()
        self.chat_actions = Tally()
        self.dropped: dict[str, int] = {}  # method -> requests the client closed mid-way
        self.open: dict[str, int] = {}  # method -> requests being handled now

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        self.open[method] = self.open.get(method, 0) + 1
        try:
            return await super()._handle(request)
        except ConnectionResetError:  # the client gave up on the request (e.g. a cancelled task)
            self.dropped[method] = self.dropped.get(method, 0) + 1
            raise
        finally:
            self.open[method] -= 1

    @property
    def open_requests(self) -> dict[str, int]:
        """Requests the fake is in the middle of, by method (e.g. waiting for a body)."""
        return {method: count for method, count in self.open.items() if count}

    async def _api_sendMessage(self, params: dict[str, str]) -> Any:
        result = await super()._api_sendMessage(params)
        chat = int(params["chat_id"])
        self.sent.pop(chat, None)
        self.ledger.reply(params.get("text", ""))
        return result


def answer(body: dict[str, Any]) -> str:
    """The model: names every message of the conversation's newest user turn(s)."""
    labels: list[str] = []
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "assistant":
            break
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks or []:
            if isinstance(block, dict) and block.get("type") == "text":
                labels = LABEL.findall(block.get("text", "")) + labels
    if not labels:
        return "Noted."
    return "Noted: " + " ".join(f"soak-{n}" for n in dict.fromkeys(labels)) + "."


# ---- the daemon ------------------------------------------------------------------------------


class Daemon:
    def __init__(self, workdir: Path, telegram_url: str, anthropic_url: str, users: int) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.port = free_port()
        config = {
            "app": {"data_dir": str(self.data_dir)},
            "web": {"host": "127.0.0.1", "port": self.port},
            "llm": {"api_key": "soak-test-key", "base_url": anthropic_url},
            "channels": {
                "telegram": {
                    "enabled": True,
                    "token": "123:ABC",
                    "base_url": telegram_url,
                    "allowed_user_ids": [FIRST_USER_ID + i for i in range(users)],
                }
            },
        }
        self.config_path = workdir / "config.yml"
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.process: asyncio.subprocess.Process | None = None
        self.ps: psutil.Process | None = None
        self.env: dict[str, str] = {}  # more environment for the daemon

    async def start(self, within: float = 60.0) -> float:
        env = {key: value for key, value in os.environ.items() if key != "BRUCE_CONFIG"}
        env["ANTHROPIC_API_KEY"] = ""
        env.update(self.env)
        started = time.monotonic()
        with (self.workdir / "daemon.out").open("wb") as out:
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
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        self.ps = psutil.Process(self.process.pid)
        async with httpx.AsyncClient(timeout=1) as client:
            while time.monotonic() - started < within:
                if self.process.returncode is not None:
                    break
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"http://127.0.0.1:{self.port}/healthz")).is_success:
                        return time.monotonic() - started
                await asyncio.sleep(0.05)
        raise RuntimeError(f"bruce run did not become ready; see {self.workdir / 'daemon.out'}")

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def sample(self) -> dict[str, float]:
        assert self.ps is not None
        db = self.data_dir / "bruce.db"

        def size(path: Path) -> float:
            return round(path.stat().st_size / 2**20, 2) if path.exists() else 0.0

        with self.ps.oneshot():
            rss = self.ps.memory_info().rss / 2**20
            fds = self.ps.num_fds()
            threads = self.ps.num_threads()
        children = self.ps.children(recursive=True)
        return {
            "rss_mb": round(rss, 1),
            "fds": fds,
            "threads": threads,
            "children": len(children),
            "db_mb": size(db),
            "wal_mb": size(db.with_name("bruce.db-wal")),
        }

    def descriptors(self, peers: dict[int, str]) -> dict[str, int]:
        """The daemon's open descriptors by kind, its TCP connections by peer (`peers`: port ->
        name) and state: where descriptor growth comes from."""
        assert self.ps is not None
        kinds: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{self.ps.pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{self.ps.pid}/fd/{fd}")
                    kind = target.split(":")[0] if ":" in target else "file"
                    kinds[kind] = kinds.get(kind, 0) + 1
        with contextlib.suppress(psutil.Error):
            for conn in self.ps.net_connections(kind="tcp"):
                if conn.raddr:
                    peer = peers.get(conn.raddr.port, "other")
                    key = f"tcp {peer} {conn.status}"
                else:
                    key = f"tcp listen:{conn.laddr.port}"
                kinds[key] = kinds.get(key, 0) + 1
        return dict(sorted(kinds.items()))

    async def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                await self.process.wait()
        return self.process.returncode


# ---- the run ---------------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, daemon: Daemon, telegram: SoakTelegram) -> None:
        self.args = args
        self.daemon = daemon
        self.telegram = telegram
        self.ledger = telegram.ledger
        self.users = [FakeUser(FIRST_USER_ID + i, f"User{i}") for i in range(args.chats)]
        self.next_number = 1
        self.next_user = 0
        self.started = time.monotonic()
        self.phase_name = "warm-up"
        self.phase_target = 0
        self.phase_pushed = 0
        self.samples: list[dict[str, float]] = []
        self.peers: dict[int, str] = {}  # port -> name, for the descriptor breakdown

    @property
    def in_flight(self) -> int:
        return len(self.ledger.pending)

    def push(self, phase: int, user: FakeUser | None = None) -> None:
        if user is None:
            user = self.users[self.next_user % len(self.users)]
            self.next_user += 1
        number = self.next_number
        self.next_number += 1
        self.ledger.push(number, phase)
        self.telegram.private_text(user, f"soak-{number} hello Bruce, just checking in.")
        self.phase_pushed += 1

    @property
    def stalled(self) -> bool:
        """Nothing answered for `--stall-seconds` while messages wait: Bruce stopped replying."""
        quiet = time.monotonic() - max(self.ledger.last_answer, self.ledger.last_push_idle)
        return bool(self.ledger.pending) and quiet > self.args.stall_seconds

    async def until(self, predicate: Any, deadline: float) -> bool:
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.daemon.alive() or self.stalled:
                return False
            self.ledger.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ledger.changed.wait(), min(remaining, 1.0))
        return True

    async def monitor(self) -> None:
        last_answered, last_at = 0, time.monotonic()
        while True:
            await asyncio.sleep(self.args.sample_seconds)
            if not self.daemon.alive():
                print("!! the daemon exited", flush=True)
                return
            now = time.monotonic()
            sample = {"t_s": round(now - self.started, 1), **self.daemon.sample()}
            sample["answered"] = self.ledger.answered
            self.samples.append(sample)
            rate = (self.ledger.answered - last_answered) / (now - last_at)
            last_answered, last_at = self.ledger.answered, now
            print(
                f"[{sample['t_s']:7.0f} s] {self.phase_name:<9} pushed "
                f"{self.phase_pushed:>6}/{self.phase_target:<6} answered {self.ledger.answered:>7}"
                f" in flight {self.in_flight:>5}  {rate:6.1f}/s  RSS {sample['rss_mb']:6.1f} MB"
                f"  fds {sample['fds']:>3}  db {sample['db_mb']:6.1f} MB"
                f" wal {sample['wal_mb']:5.1f}",
                flush=True,
            )

    async def warm_up(self) -> dict[str, Any]:
        self.phase_name, self.phase_target, self.phase_pushed = "warm-up", len(self.users), 0
        started = time.monotonic()
        for user in self.users:
            while self.in_flight >= self.args.max_in_flight:
                await self.until(lambda: self.in_flight < self.args.max_in_flight, started + 300)
                if time.monotonic() - started > 300:
                    raise RuntimeError("warm-up: Bruce stopped answering")
            self.push(0, user)
        if not await self.until(lambda: not self.in_flight, started + 300):
            raise RuntimeError(f"warm-up: {self.in_flight} messages unanswered after 300 s")
        self.ledger.latencies.pop(0, None)
        return {"seconds": round(time.monotonic() - started, 1)}

    async def phase(self, index: int, kind: str, count: int, seconds: float) -> dict[str, Any]:
        self.phase_name, self.phase_target, self.phase_pushed = f"{index}:{kind}", count, 0
        before = self.daemon.sample()
        before["descriptors"] = self.daemon.descriptors(self.peers)
        answered_before = self.ledger.answered
        started = time.monotonic()
        deadline = started + seconds
        rate = count / seconds
        cap = self.args.max_in_flight
        throttled = 0.0
        if kind == "steady":
            for i in range(count):
                due = started + i / rate
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                if self.in_flight >= cap:
                    blocked = time.monotonic()
                    await self.until(lambda: self.in_flight < cap, deadline)
                    throttled += time.monotonic() - blocked
                if time.monotonic() >= deadline or self.stalled:
                    break
                self.push(index)
        else:
            size = min(self.args.burst, len(self.users), count)
            sent = 0
            while sent < count and time.monotonic() < deadline and not self.stalled:
                burst_started = time.monotonic()
                batch = min(size, count - sent)
                for _ in range(batch):
                    self.push(index)
                sent += batch
                await self.until(lambda: self.in_flight <= cap // 4, deadline)
                # Keep the phase's average rate: rest until this burst's share of time is up.
                if (rest := burst_started + batch / rate - time.monotonic()) > 0:
                    await asyncio.sleep(min(rest, max(0.0, deadline - time.monotonic())))
        pushed_until = time.monotonic()
        # Let this phase's messages be answered before the next begins (bounded).
        drain_by = max(deadline, pushed_until) + self.args.drain_seconds
        await self.until(
            lambda: not any(p.phase == index for p in self.ledger.pending.values()), drain_by
        )
        ended = time.monotonic()
        after = self.daemon.sample()
        after["descriptors"] = self.daemon.descriptors(self.peers)
        after["telegram_open_requests"] = self.telegram.open_requests
        latencies = self.ledger.latencies.get(index, [])
        answered = self.ledger.answered - answered_before
        result: dict[str, Any] = {
            "phase": index,
            "kind": kind,
            "pushed": self.phase_pushed,
            "answered": len(latencies),
            "unanswered": sum(1 for p in self.ledger.pending.values() if p.phase == index),
            "seconds": round(ended - started, 1),
            "messages_per_s": round(answered / (ended - started), 1),
            "target_per_s": round(rate, 1),
            "throttled_s": round(throttled, 1),
            "start": before,
            "end": after,
        }
        if latencies:
            result |= {
                "p50_ms": round(percentile(latencies, 50), 1),
                "p99_ms": round(percentile(latencies, 99), 1),
                "max_ms": round(max(latencies), 1),
            }
        print(f"== phase {index} ({kind}) done: {json.dumps(summary_line(result))}", flush=True)
        return result


def summary_line(phase: dict[str, Any]) -> dict[str, Any]:
    keys = ("pushed", "answered", "unanswered", "seconds", "messages_per_s", "p50_ms", "p99_ms")
    line = {key: phase.get(key) for key in keys}
    line["rss_mb"] = f"{phase['start']['rss_mb']} -> {phase['end']['rss_mb']}"
    line["fds"] = f"{phase['start']['fds']} -> {phase['end']['fds']}"
    return line


def run_header(args: argparse.Namespace, left_out: tuple[str, ...] = ("json",)) -> dict[str, Any]:
    """What a bench result starts with: the command, the date, the machine, the settings."""
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "python": sys.version.split()[0],
        },
        "settings": {k: v for k, v in vars(args).items() if k not in left_out},
    }


async def start_fakes(telegram: SoakTelegram, responder: Any) -> FakeAnthropicServer:
    """Start `telegram` and a fake Messages API answering with `responder`; both keep only
    counts of the requests (Tally), so a long run does not grow the harness."""
    anthropic = FakeAnthropicServer(responder=responder)
    anthropic.requests = Tally()
    anthropic.request_headers = Tally()
    await telegram.start()
    await anthropic.start()
    return anthropic


async def main(args: argparse.Namespace) -> dict[str, Any]:
    # A request the daemon closes mid-way is counted (see SoakTelegram), not logged at length.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    hard_deadline = time.monotonic() + args.minutes * 60 + 600  # the bound of the whole run
    ledger = Ledger()
    results = run_header(args)
    with tempfile.TemporaryDirectory(prefix="bruce-soak-") as tmp:
        workdir = Path(tmp)
        telegram = SoakTelegram(ledger)
        anthropic = await start_fakes(telegram, answer)
        daemon = Daemon(workdir, telegram.base_url, anthropic.base_url, args.chats)
        soak = Soak(args, daemon, telegram)
        soak.peers = {
            int(telegram.root_url.rsplit(":", 1)[1]): "telegram",
            int(anthropic.base_url.rsplit(":", 1)[1].split("/")[0]): "anthropic",
            daemon.port: "web",
        }
        monitor: asyncio.Task[None] | None = None
        try:
            print(f"starting bruce run in {workdir} ...", flush=True)
            results["startup_s"] = round(await daemon.start(), 2)
            results["ready"] = daemon.sample()
            print(f"ready in {results['startup_s']} s: {results['ready']}", flush=True)
            monitor = asyncio.create_task(soak.monitor())
            results["warm_up"] = await soak.warm_up()
            results["warm_up"]["end"] = results["start"] = daemon.sample()
            results["start"]["descriptors"] = daemon.descriptors(soak.peers)
            print(f"warm-up done: {results['warm_up']}", flush=True)
            phase_seconds = args.minutes * 60 / args.phases
            per_phase = args.messages // args.phases
            results["phases"] = []
            run_started = time.monotonic()
            answered_before = ledger.answered
            for index in range(1, args.phases + 1):
                if time.monotonic() > hard_deadline or not daemon.alive() or soak.stalled:
                    break
                kind = "burst" if index % 2 else "steady"
                count = per_phase + (args.messages % args.phases if index == args.phases else 0)
                results["phases"].append(await soak.phase(index, kind, count, phase_seconds))
            if soak.stalled:
                results["stalled"] = (
                    f"no reply for {args.stall_seconds:.0f} s with {soak.in_flight} messages "
                    f"waiting, after {ledger.answered} answered: the run was ended early"
                )
                print(f"!! STALLED: {results['stalled']}", flush=True)
            results["end"] = daemon.sample()
            results["end"]["descriptors"] = daemon.descriptors(soak.peers)
            results["end"]["telegram_open_requests"] = telegram.open_requests
            results["seconds"] = round(time.monotonic() - run_started, 1)
            results["replies_to_unknown"] = ledger.unknown
            results["telegram_requests_dropped_by_client"] = telegram.dropped
            results["anthropic_requests"] = anthropic.requests.count
            results["samples"] = soak.samples
            results["overall"] = overall(results, ledger.answered - answered_before)
        finally:
            if monitor is not None:
                monitor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await monitor
            results["samples"] = soak.samples
            results["exit_code"] = await daemon.stop()
            results["db_rows"] = table_rows(daemon.data_dir / "bruce.db")
            log = workdir / "daemon.out"
            results["daemon_log_mb"] = round(log.stat().st_size / 2**20, 1) if log.exists() else 0
            errors = [
                line
                for line in log.read_text(errors="replace").splitlines()
                if " error " in line.lower() or "traceback" in line.lower()
            ]
            results["daemon_error_lines"] = len(errors)
            results["daemon_error_examples"] = errors[:5]
            await anthropic.stop()
            await telegram.stop()
    return results


def table_rows(path: Path) -> dict[str, int]:
    """Rows per table of the SQLite file once the daemon is gone: what the run left behind."""
    if not path.exists():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        count = 'SELECT count(*) FROM "{}"'
        return {table: db.execute(count.format(table)).fetchone()[0] for table in tables}


def overall(results: dict[str, Any], answered: int) -> dict[str, Any]:
    phases = results["phases"]
    start, end = results["start"], results["end"]
    p99s = [p["p99_ms"] for p in phases if "p99_ms" in p]
    growth = round(end["rss_mb"] - start["rss_mb"], 1)
    fd_growth = end["fds"] - start["fds"]
    # Bursts and steady phases differ by design: p99 is compared among phases of one kind.
    by_kind: dict[str, dict[str, float]] = {}
    flat = bool(p99s)
    for kind in ("burst", "steady"):
        kind_p99 = [p["p99_ms"] for p in phases if p["kind"] == kind and "p99_ms" in p]
        if kind_p99:
            by_kind[kind] = {
                "first_p99_ms": kind_p99[0],
                "last_p99_ms": kind_p99[-1],
                "max_p99_ms": max(kind_p99),
            }
            flat = flat and max(kind_p99) <= P99_FLAT_FACTOR * kind_p99[0]
    samples = results.get("samples") or []
    return {
        "pushed": sum(p["pushed"] for p in phases),
        "answered": answered,
        "unanswered": sum(p["unanswered"] for p in phases),
        "messages_per_s": round(answered / results["seconds"], 1) if results["seconds"] else 0,
        "rss_start_mb": start["rss_mb"],
        "rss_end_mb": end["rss_mb"],
        "rss_growth_mb": growth,
        "fds_start": start["fds"],
        "fds_end": end["fds"],
        "fds_max_sampled": max((x["fds"] for x in samples), default=None),
        "rss_max_sampled_mb": max((x["rss_mb"] for x in samples), default=None),
        "db_mb": f"{start['db_mb']} -> {end['db_mb']}",
        "wal_mb": f"{start['wal_mb']} -> {end['wal_mb']}",
        "p99_by_phase_ms": p99s,
        "p99_by_kind": by_kind,
        "stalled": results.get("stalled"),
        "goals": {
            "kept replying (no stall)": "stalled" not in results,
            f"rss_growth <= {RSS_GOAL_MB} MB": growth <= RSS_GOAL_MB,
            "no fd growth": fd_growth <= 0,
            f"flat p99 (per kind, max <= {P99_FLAT_FACTOR} x first phase)": flat,
        },
    }


def report(results: dict[str, Any]) -> None:
    print()
    print(
        f"{'phase':<10} {'pushed':>7} {'answered':>8} {'s':>6} {'msg/s':>6} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'max ms':>8} {'RSS MB':>13} {'fds':>9} {'db MB':>13}"
    )
    for p in results.get("phases", []):
        s, e = p["start"], p["end"]
        print(
            f"{str(p['phase']) + ' ' + p['kind']:<10} {p['pushed']:>7} {p['answered']:>8} "
            f"{p['seconds']:>6} {p['messages_per_s']:>6} {p.get('p50_ms', '-'):>8} "
            f"{p.get('p99_ms', '-'):>8} {p.get('max_ms', '-'):>8} "
            f"{s['rss_mb']:>6}->{e['rss_mb']:<6} {s['fds']:>4}->{e['fds']:<4} "
            f"{s['db_mb']:>6}->{e['db_mb']:<6}"
        )
    if "overall" in results:
        print(json.dumps(results["overall"], indent=2))
        print(f"descriptors after warm-up: {results['start'].get('descriptors')}")
        print(f"descriptors at the end:    {results['end'].get('descriptors')}")
        print(f"rows left: {results.get('db_rows')}")
    print(
        f"daemon exit code {results.get('exit_code')}, log {results.get('daemon_log_mb')} MB, "
        f"{results.get('daemon_error_lines')} error lines"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages in all phases")
    parser.add_argument("--minutes", type=float, default=30.0, help="target duration of phases")
    parser.add_argument("--phases", type=int, default=6, help="phases (burst, steady, ...)")
    parser.add_argument("--chats", type=int, default=1000, help="private chats (users)")
    parser.add_argument("--burst", type=int, default=500, help="chats in one burst")
    parser.add_argument("--max-in-flight", type=int, default=1000, help="unanswered at most")
    parser.add_argument("--drain-seconds", type=float, default=60.0, help="after each phase")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="progress interval")
    parser.add_argument(
        "--stall-seconds", type=float, default=120.0, help="end early after this long unanswered"
    )
    parser.add_argument("--json", type=Path, help="write the results there")
    arguments = parser.parse_args()
    outcome = asyncio.run(main(arguments))
    report(outcome)
    if arguments.json:
        arguments.json.write_text(json.dumps(outcome, indent=2), encoding="utf-8")
        print(f"results written to {arguments.json}")
