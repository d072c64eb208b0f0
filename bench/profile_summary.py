"""Summarise a py-spy profile of the daemon (`bench/e2e.py --profile FILE`, raw/collapsed stacks).

Three views of where the CPU went, as a share of the non-idle samples:
  self      — all threads, by the package of the innermost frame (sqlalchemy, anthropic, ...);
  library   — the event loop's thread, by the innermost frame that belongs to a library or to a
              Bruce package (so asyncio's and the standard library's work counts for its caller);
  inclusive — the event loop's thread, by Bruce's part a stack passes through (brain, turn...).
Idle samples (a thread waiting in select/poll/a lock) are counted apart.

    .venv/bin/python bench/profile_summary.py /tmp/burst.prof [--top 25]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^:()]*)(?::\d+)?\)$")
IDLE_FUNCS = {"select", "poll", "epoll.poll", "wait", "_wait_for_tstate_lock", "acquire"}
# inclusive areas: first match from the outermost frame inward wins
AREAS = (
    ("brain", ("agent/brain/",)),
    ("summaries", ("agent/summarizer.py",)),
    ("turn: model call", ("llm/anthropic.py", "llm/openai.py")),
    ("turn: other", ("agent/turn.py", "agent/loop.py")),
    ("intake (telegram → inbox)", ("channels/telegram/channel.py", "messaging/inbox.py")),
    ("delivery (outbox → send)", ("messaging/outbox.py", "channels/telegram/sending.py")),
    ("scheduler", ("scheduler/",)),
    ("telegram polling", ("telegram/ext/_updater.py",)),
)
PACKAGES = (
    "sqlalchemy",
    "aiosqlite",
    "sqlite3",
    "anthropic",
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "telegram",
    "structlog",
    "logging",
    "pydantic",
    "pydantic_core",
    "json",
    "asyncio",
    "uvicorn",
    "starlette",
    "apscheduler",
    "bruce_bot",
)


def package_of(file: str) -> str:
    parts = file.replace("\\", "/").split("/")
    for part in parts:
        name = part.removesuffix(".py")
        if name in PACKAGES:
            if name == "bruce_bot":
                rest = "/".join(parts[parts.index(part) + 1 :])
                return "bruce_bot/" + rest.split("/")[0].removesuffix(".py")
            return name
    return parts[0].removesuffix(".py") if parts else "?"


LIBRARIES = tuple(p for p in PACKAGES if p not in ("json", "asyncio", "logging"))


def library_of(frames: list[tuple[str, str]]) -> str:
    for _, file in reversed(frames):
        package = package_of(file)
        if package in ("bruce_bot/cli", "bruce_bot/__main__"):
            break  # only the entry point: the event loop's own work (callbacks, selecting)
        if package.startswith("bruce_bot") or package in LIBRARIES:
            return package
    return "asyncio and the standard library"


def parse(line: str) -> tuple[str, list[tuple[str, str]], int] | None:
    stack, _, count = line.rstrip("\n").rpartition(" ")
    if not count.isdigit():
        return None
    pieces = stack.split(";")
    thread = pieces[0].split(": ", 1)[-1]
    frames: list[tuple[str, str]] = []
    for piece in pieces[1:]:
        match = FRAME.match(piece)
        frames.append((match["func"], match["file"]) if match else (piece, ""))
    return thread, frames, int(count)


def summarise(path: Path, top: int) -> str:
    own: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    main: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    idle = busy = 0
    for line in path.read_text(errors="replace").splitlines():
        parsed = parse(line)
        if parsed is None:
            continue
        thread, frames, count = parsed
        leaf = frames[-1] if frames else ("?", "")
        if not frames or leaf[0].split(".")[-1] in IDLE_FUNCS or leaf[0] in IDLE_FUNCS:
            idle += count
            continue
        busy += count
        threads[thread] += count
        own[package_of(leaf[1])] += count
        if thread == "MainThread":
            main[library_of(frames)] += count
        if thread != "MainThread":
            continue
        files = [file for _, file in frames]
        for area, needles in AREAS:
            if any(needle in file for file in files for needle in needles):
                areas[area] += count
                break
        else:
            areas["other"] += count

    def table(title: str, counter: Counter[str]) -> list[str]:
        total = sum(counter.values()) or 1
        rows = [f"{title}:"]
        for name, count in counter.most_common(top):
            rows.append(f"  {100 * count / total:5.1f} %  {name}")
        return rows

    out = [f"{busy} busy samples, {idle} idle ({path})"]
    out += table("threads", threads)
    out += table("self, by package", own)
    out += table("event loop thread, by innermost library", main)
    out += table("inclusive, by Bruce's part", areas)
    return "\n".join(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    print(summarise(args.profile, args.top))
