"""Benchmark of Bruce's per-message path: inbox → agent loop → outbox, with an instant LLM.

The LLM is an in-process fake that answers at once, so what is measured is Bruce's own overhead:
storing the message, the worker hand-off, history and prompt assembly, the loop, storing the reply
and delivering it to a channel. Scenarios: one session talking sequentially, then bursts of one
message from each of 100 and 1000 sessions. Also measured: idle and peak RSS, and the time from
launching `bruce run` to a ready `/healthz`. Results are printed as a table and as JSON.

    make bench            # or: .venv/bin/python bench/run.py [--sequential 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bruce_bot.app import Bruce  # noqa: E402
from bruce_bot.channels.base import InboxPort  # noqa: E402
from bruce_bot.config import validate  # noqa: E402
from bruce_bot.domain import (  # noqa: E402
    InboundMessage,
    LLMResponse,
    OutboundMessage,
    Usage,
)
from bruce_bot.llm.base import LLMRequest  # noqa: E402
from bruce_bot.logs import configure_logging  # noqa: E402


class InstantLLM:
    """Answers every request at once: the benchmark measures Bruce, not a model."""

    model = "instant"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return LLMResponse("ok", usage=Usage(10, 2), model=self.model)

    async def aclose(self) -> None:
        return None


class BenchChannel:
    """A channel that timestamps each delivery and wakes whoever waits for it."""

    name = "bench"
    max_message_chars = 4096

    def __init__(self) -> None:
        self.inbox: InboxPort | None = None
        self.sent_at: dict[str, float] = {}
        self.expected = 0
        self.done = asyncio.Event()

    async def start(self, inbox: InboxPort) -> None:
        self.inbox = inbox

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        self.sent_at[message.chat_id] = time.perf_counter()
        if len(self.sent_at) >= self.expected:
            self.done.set()

    async def typing(self, chat_id: str) -> None:
        return None


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


async def sequential(bruce: Bruce, channel: BenchChannel, count: int) -> list[float]:
    """One session, one message at a time: the latency a single user sees Bruce add."""
    assert bruce.inbox is not None
    latencies = []
    for i in range(count):
        chat = "solo"
        channel.sent_at.pop(chat, None)
        channel.expected = 1
        channel.done.clear()
        started = time.perf_counter()
        await bruce.inbox.submit(InboundMessage("bench", chat, f"message {i}", user_id="1"))
        await channel.done.wait()
        latencies.append((channel.sent_at[chat] - started) * 1000)
    return latencies


async def burst(
    bruce: Bruce, channel: BenchChannel, sessions: int, round_: int
) -> tuple[list[float], float]:
    """One message from each of `sessions` chats at once: throughput and per-message latency."""
    assert bruce.inbox is not None
    channel.sent_at.clear()
    channel.expected = sessions
    channel.done.clear()
    submitted: dict[str, float] = {}
    started = time.perf_counter()
    for i in range(sessions):
        chat = f"chat-{i}"
        submitted[chat] = time.perf_counter()
        await bruce.inbox.submit(InboundMessage("bench", chat, f"hello {round_}", user_id="1"))
    await channel.done.wait()
    elapsed = time.perf_counter() - started
    latencies = [(channel.sent_at[c] - submitted[c]) * 1000 for c in submitted]
    return latencies, sessions / elapsed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def startup_seconds(runs: int = 3) -> float:
    """Launch `bruce run` on defaults (fresh dir, schema already created) until /healthz."""
    timings = []
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config = Path(tmp) / "config.yml"
        config.write_text(
            f"app: {{data_dir: {tmp}}}\nweb: {{port: {port}}}\nlogging: {{level: warning}}\n"
        )
        env = {**os.environ, "ANTHROPIC_API_KEY": ""}
        for run in range(runs + 1):  # the first run creates the database; not counted
            started = time.perf_counter()
            process = subprocess.Popen(
                [sys.executable, "-m", "bruce_bot", "run", "--config", str(config)],
                cwd=tmp,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                            break
                    except OSError:
                        if process.poll() is not None or time.perf_counter() - started > 30:
                            raise RuntimeError("bruce did not become ready") from None
                        time.sleep(0.005)
                if run:
                    timings.append(time.perf_counter() - started)
            finally:
                process.terminate()
                process.wait(10)
    return statistics.median(timings)


async def main(args: argparse.Namespace) -> dict[str, object]:
    configure_logging("warning")
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        config = validate(
            {
                "app": {"data_dir": tmp},
                "web": {"enabled": False},
                "agent": {"max_concurrent_sessions": 8},
                # The brain adds one background LLM call per exchange: measured separately.
                "brain": {"enabled": args.brain},
            }
        )
        channel = BenchChannel()
        bruce = Bruce(config, llm=InstantLLM(), channels=[channel])
        await bruce.start()
        results["idle_rss_mb"] = round(rss_mb(), 1)
        try:
            await sequential(bruce, channel, 20)  # warm-up: caches, pool, code paths
            lat = await sequential(bruce, channel, args.sequential)
            results["1 session"] = summary(lat, 1000 / statistics.mean(lat))
            for sessions in (100, 1000):
                await burst(bruce, channel, sessions, 0)  # warm-up: creates the sessions
                lat, rate = await burst(bruce, channel, sessions, 1)
                results[f"{sessions} sessions"] = summary(lat, rate)
        finally:
            await bruce.stop()
        results["peak_rss_mb"] = round(peak_rss_mb(), 1)
    results["startup_to_ready_s"] = round(startup_seconds(), 3)
    return results


def summary(latencies: list[float], rate: float) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "messages_per_s": round(rate, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=300, help="messages in the 1-session run")
    parser.add_argument(
        "--brain", action="store_true", help="also run the analytical brain after each exchange"
    )
    results = asyncio.run(main(parser.parse_args()))
    print(f"{'scenario':<14} {'p50 ms':>8} {'p99 ms':>8} {'msg/s':>8}")
    for name in ("1 session", "100 sessions", "1000 sessions"):
        row = results[name]
        assert isinstance(row, dict)
        print(f"{name:<14} {row['p50_ms']:>8} {row['p99_ms']:>8} {row['messages_per_s']:>8}")
    print(
        f"idle RSS {results['idle_rss_mb']} MB · peak RSS {results['peak_rss_mb']} MB · "
        f"start-up to ready {results['startup_to_ready_s']} s"
    )
    print(json.dumps(results))
