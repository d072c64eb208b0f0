"""Benchmark of reminder punctuality: how late do message-mode reminders reach the chat?

200 reminders (one per chat) are created through the task service, all due within the same
minute: spread evenly over 5 s, the first 3 s from now. Bruce runs on a real SQLite file with
APScheduler's SQLAlchemy job store, an instant in-process LLM (message mode makes no LLM call
anyway) and a channel that timestamps every delivery. Lateness = delivery time at the channel
minus the due time. Goal: p99 ≤ 1 s.

    make bench            # or: .venv/bin/python bench/reminders.py [--reminders 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import InstantLLM, percentile  # noqa: E402
from bruce_bot.app import Bruce  # noqa: E402
from bruce_bot.channels.base import InboxPort  # noqa: E402
from bruce_bot.config import validate  # noqa: E402
from bruce_bot.domain import OutboundMessage, SessionKey, utcnow  # noqa: E402
from bruce_bot.logs import configure_logging  # noqa: E402
from bruce_bot.scheduler.new_task import NewTask  # noqa: E402

GOAL_P99_MS = 1000.0


class ReminderChannel:
    """Records when each reminder text reached the chat (wall clock, UTC)."""

    name = "bench"
    max_message_chars = 4096

    def __init__(self, expected: int) -> None:
        self.delivered_at: dict[str, datetime] = {}
        self.expected = expected
        self.done = asyncio.Event()

    async def start(self, inbox: InboxPort) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        self.delivered_at.setdefault(message.text, utcnow())
        if len(self.delivered_at) >= self.expected:
            self.done.set()

    async def typing(self, chat_id: str) -> None:
        return None


async def main(args: argparse.Namespace) -> dict[str, object]:
    configure_logging("warning")
    count = args.reminders
    with tempfile.TemporaryDirectory() as tmp:
        config = validate({"app": {"data_dir": tmp}, "web": {"enabled": False}})
        channel = ReminderChannel(count)
        bruce = Bruce(config, llm=InstantLLM(), channels=[channel])
        await bruce.start()
        assert bruce.stores is not None and bruce.tasks is not None
        try:
            sessions = [
                (await bruce.stores.sessions.get_or_create(SessionKey("bench", f"chat-{i}"))).id
                for i in range(count)
            ]
            first_due = utcnow() + timedelta(seconds=args.lead)
            step = timedelta(seconds=args.spread) / count
            due: dict[str, datetime] = {}
            created = time.perf_counter()
            for i, session_id in enumerate(sessions):
                moment = first_due + step * i
                task = await bruce.tasks.planner.create(
                    NewTask(
                        session_id=session_id,
                        channel="bench",
                        chat_id=f"chat-{i}",
                        title=f"Reminder {i}",
                        mode="message",
                        content=f"reminder {i}",
                        run_at=moment.isoformat(),
                        cron=None,
                        timezone=None,
                    )
                )
                assert task.next_run_at is not None
                due[f"⏰ reminder {i}"] = task.next_run_at
            create_seconds = time.perf_counter() - created
            if utcnow() > first_due:
                print(f"warning: creating took {create_seconds:.2f} s, past the first due time")
            last_due = max(due.values())
            timeout = (last_due - utcnow()).total_seconds() + 60
            try:
                await asyncio.wait_for(channel.done.wait(), timeout)
            except TimeoutError:
                pass
        finally:
            await bruce.stop()
    lateness = [
        (channel.delivered_at[text] - moment).total_seconds() * 1000
        for text, moment in due.items()
        if text in channel.delivered_at
    ]
    early = [ms for ms in lateness if ms < 0]
    return {
        "reminders": count,
        "delivered": len(lateness),
        "early": len(early),
        "create_ms_each": round(create_seconds / count * 1000, 2),
        "p50_ms": round(percentile(lateness, 50), 1) if lateness else None,
        "p99_ms": round(percentile(lateness, 99), 1) if lateness else None,
        "max_ms": round(max(lateness), 1) if lateness else None,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reminders", type=int, default=200)
    parser.add_argument("--lead", type=float, default=3.0, help="seconds until the first is due")
    parser.add_argument("--spread", type=float, default=5.0, help="seconds over which they fall")
    results = asyncio.run(main(parser.parse_args()))
    print(
        f"reminders {results['delivered']}/{results['reminders']} delivered · lateness "
        f"p50 {results['p50_ms']} ms · p99 {results['p99_ms']} ms · max {results['max_ms']} ms"
        f" · create {results['create_ms_each']} ms each"
    )
    p99 = results["p99_ms"]
    verdict = "met" if isinstance(p99, float) and p99 <= GOAL_P99_MS else "MISSED"
    print(f"goal p99 ≤ {GOAL_P99_MS:.0f} ms: {verdict}")
    print(json.dumps(results))
