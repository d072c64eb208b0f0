"""Prompt-cache benchmark: how much of a long conversation's prompt Anthropic reads from cache.

`bruce run` runs as a subprocess (bench/soak.py's `Daemon`: default config, brain on, SQLite in
a fresh data dir, the Telegram channel polling the fake Bot API), and the real anthropic SDK
calls the fake Messages API (tests/fakes/anthropic_server.py) over HTTP. The fake simulates
prompt caching as the API reports it (`cache_minimum_tokens="per-model"`: the documented
minimum cacheable length, lookback, TTL, tools → system → messages order).

One chat holds a scripted conversation of `--exchanges` exchanges, one message at a time, each
waiting for its reply, `--gap-seconds` apart (the temporal layer names the second, so a gap of
over a second changes it between exchanges as real pauses between messages do; 5 minutes would
outlive the cache's TTL). The scripted model answers at some length; on every fifth exchange it
first fetches a page (`web_fetch` of a page this benchmark serves on 127.0.0.1, a long tool
result), and three exchanges after each of those it first lists the chat's tasks
(`proactive_list`); the history outgrows
`agent.history_max_messages` (40), so the rolling summary folds it (at least once). The brain
runs as configured; the summary and brain calls are counted apart from the agent's.

Reported: for the agent's calls, cache_read / (input + cache_read + cache_creation) over the
exchanges after the third (goal ≥ 80 %), the same per exchange, the exchanges that missed, when
the summary folded, and the share for the brain and summary calls.

    make bench-cache
    .venv/bin/python bench/cache.py [--exchanges 50] [--json cache.json]

Every wait has a deadline, and the daemon is stopped (SIGTERM, then SIGKILL) whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from run import free_port  # noqa: E402  (bench/run.py; it puts the root on sys.path)
from soak import FIRST_USER_ID, Daemon  # noqa: E402

from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer  # noqa: E402
from tests.fakes.scripted_server import HTTPAnswer  # noqa: E402
from tests.fakes.telegram_server import FakeTelegramServer, FakeUser  # noqa: E402

LABEL = re.compile(r"\bx-(\d+)\b")
GOAL = 0.80
WARM_UP_EXCHANGES = 3  # the goal counts the exchanges after these
TOPICS = (
    "a trip to Lisbon in May",
    "my sourdough starter",
    "the quarterly budget",
    "learning the cello",
    "a birthday party for Ana",
    "the garden's tomatoes",
    "moving the office to the new building",
)


def user_text(exchange: int) -> str:
    topic = TOPICS[exchange % len(TOPICS)]
    ask = "Fetch the page about it and tell me the gist." if exchange % 5 == 0 else ""
    return (
        f"x-{exchange} Let's talk about {topic}. I have been thinking about it all week and I "
        f"would like a few concrete suggestions, with reasons. {ask}"
    ).strip()


def reply_text(exchange: int, after_tool: bool) -> str:
    topic = TOPICS[exchange % len(TOPICS)]
    opening = "From what I read, " if after_tool else ""
    paragraph = (
        f"{opening}here are some thoughts on {topic}. First, start small and write down what "
        "matters most to you; second, set a date for the first step; third, ask someone who "
        "has done it before. Each of these keeps the plan moving without making it heavy. "
    )
    return f"(x-{exchange}) " + paragraph * 3


def page(number: int) -> str:
    body = "".join(
        f"<p>Section {index} of page {number}: a long and ordinary paragraph about planning, "
        "with advice, examples, caveats and a few numbers (12, 48, 2026) in it.</p>"
        for index in range(40)
    )
    head = f"<head><title>Page {number}</title></head>"
    return f"<html>{head}<body><article>{body}</article></body></html>"


# ---- the scripted model ----------------------------------------------------------------------


def kind_of(body: dict[str, Any]) -> str:
    """agent, brain (its runs offer `everything_is_ready`) or summary (no tools)."""
    tools = {tool.get("name") for tool in body.get("tools") or [] if isinstance(tool, dict)}
    if "everything_is_ready" in tools:
        return "brain"
    return "agent" if tools else "summary"


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def exchange_of(body: dict[str, Any]) -> int | None:
    """The newest exchange the conversation names (its label in a user text)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        for block in reversed(blocks_of(message)):
            if block.get("type") == "text" and (found := LABEL.findall(block.get("text", ""))):
                return int(found[-1])
    return None


class Model:
    """Answers like a chatty assistant that sometimes uses a tool first."""

    def __init__(self, page_url: str) -> None:
        self.page_url = page_url

    def __call__(self, body: dict[str, Any]) -> str | AnthropicReply:
        kind = kind_of(body)
        if kind == "summary":
            return "Summary so far: the user talks through plans; Bruce gives suggestions. " * 6
        if kind == "brain":
            return "Nothing to change."
        exchange = exchange_of(body)
        if exchange is None:
            return "Noted."
        last = (body.get("messages") or [{}])[-1]
        after_tool = any(block.get("type") == "tool_result" for block in blocks_of(last))
        if after_tool:
            return reply_text(exchange, after_tool=True)
        if exchange % 5 == 0:
            url = f"{self.page_url}/page-{exchange}.html"
            return AnthropicReply(text="Let me read it.", tool_calls=[("web_fetch", {"url": url})])
        if exchange % 5 == 3:
            return AnthropicReply(tool_calls=[("proactive_list", {})])
        return reply_text(exchange, after_tool=False)


@dataclass
class Call:
    kind: str
    exchange: int | None
    usage: dict[str, int]

    @property
    def prompt(self) -> int:
        usage = self.usage
        return (
            usage["input_tokens"]
            + usage["cache_read_input_tokens"]
            + usage["cache_creation_input_tokens"]
        )


class CachingFake(FakeAnthropicServer):
    """The fake Messages API with the API's cache minimums, noting each call's usage."""

    def __init__(self, model: Model) -> None:
        super().__init__(responder=model, cache_minimum_tokens="per-model")
        self.calls: list[Call] = []
        self.last_call = time.monotonic()
        self.called = asyncio.Event()

    def _render(self, reply: AnthropicReply | str, body: dict[str, Any]) -> HTTPAnswer:
        answer = super()._render(reply, body)
        usage = answer.body.get("usage")
        if answer.status == 200 and isinstance(usage, dict):
            self.calls.append(Call(kind_of(body), exchange_of(body), usage))
        self.last_call = time.monotonic()
        self.called.set()
        return answer


async def quiet(fake: CachingFake, seconds: float, within: float) -> None:
    """Until the fake has seen no call for `seconds` (the brain's last run), at most `within`."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        fake.called.clear()
        try:
            await asyncio.wait_for(fake.called.wait(), seconds)
        except TimeoutError:
            return


def share(calls: list[Call]) -> float | None:
    prompt = sum(call.prompt for call in calls)
    read = sum(call.usage["cache_read_input_tokens"] for call in calls)
    return round(read / prompt, 4) if prompt else None


# ---- the run ---------------------------------------------------------------------------------


async def serve_pages() -> tuple[web.AppRunner, str]:
    async def handle(request: web.Request) -> web.Response:
        number = int(re.sub(r"\D", "", request.match_info["name"]) or 0)
        return web.Response(text=page(number), content_type="text/html")

    app = web.Application()
    app.router.add_get("/{name}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def converse(args: argparse.Namespace, telegram: FakeTelegramServer) -> list[float]:
    user = FakeUser(FIRST_USER_ID, "Ana")
    seconds = []
    for exchange in range(1, args.exchanges + 1):
        if exchange > 1:
            await asyncio.sleep(args.gap_seconds)  # the user reads, then writes again
        started = time.monotonic()
        telegram.private_text(user, user_text(exchange))
        needle = f"x-{exchange})"
        await telegram.wait_for(
            lambda needle=needle: any(needle in text for text in telegram.texts_to(user.id)),
            args.deadline,
        )
        seconds.append(time.monotonic() - started)
    return seconds


async def main(args: argparse.Namespace) -> dict[str, Any]:
    pages, page_url = await serve_pages()
    fake = CachingFake(Model(page_url))
    telegram = FakeTelegramServer()
    await fake.start()
    await telegram.start()
    workdir = Path(tempfile.mkdtemp(prefix="bruce-cache-"))
    daemon = Daemon(workdir, telegram.base_url, fake.base_url, 1)
    config = yaml.safe_load(daemon.config_path.read_text(encoding="utf-8"))
    config["tools"] = {"web_fetch": {"allow_private_addresses": True}}
    config["llm"]["model"] = args.model
    daemon.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    try:
        await daemon.start()
        took = await converse(args, telegram)
        await quiet(fake, 1.0, within=30.0)  # the brain runs after the last exchange
    finally:
        code = await daemon.stop()
        await telegram.stop()
        await fake.stop()
        await pages.cleanup()
    kept = code != 0  # the daemon's output (daemon.out) stays for a look when it failed
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)
    return report(args, fake.calls, took, code, workdir if kept else None)


def report(
    args: argparse.Namespace,
    calls: list[Call],
    took: list[float],
    code: int | None,
    workdir: Path | None,
) -> dict[str, Any]:
    agent = [call for call in calls if call.kind == "agent"]
    by_exchange: dict[int, list[Call]] = defaultdict(list)
    for call in agent:
        if call.exchange is not None:
            by_exchange[call.exchange].append(call)
    per_exchange = {number: share(by_exchange[number]) for number in sorted(by_exchange)}
    counted = [call for call in agent if (call.exchange or 0) > WARM_UP_EXCHANGES]
    # A summary call follows the exchange whose turn folded the history.
    folds: list[int] = []
    last_exchange = 0
    for call in calls:
        if call.kind == "agent" and call.exchange is not None:
            last_exchange = call.exchange
        elif call.kind == "summary":
            folds.append(last_exchange)
    goal_share = share(counted)
    return {
        "model": args.model,
        "exchanges": args.exchanges,
        "gap_seconds": args.gap_seconds,
        "agent_calls": len(agent),
        "agent_cache_read_share_after_exchange_3": goal_share,
        "goal": GOAL,
        "goal_met": goal_share is not None and goal_share >= GOAL,
        "agent_cache_read_share_all": share(agent),
        "agent_tokens": {
            key: sum(call.usage[key] for call in agent)
            for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        },
        "summary_folds_after_exchanges": folds,
        "misses_after_exchange_3": {
            number: value
            for number, value in per_exchange.items()
            if number > WARM_UP_EXCHANGES and value is not None and value < 0.5
        },
        "per_exchange": per_exchange,
        "brain_calls": sum(call.kind == "brain" for call in calls),
        "brain_cache_read_share": share([call for call in calls if call.kind == "brain"]),
        "summary_cache_read_share": share([call for call in calls if call.kind == "summary"]),
        "exchange_seconds_p50": round(sorted(took)[len(took) // 2], 3) if took else None,
        "daemon_exit_code": code,
        "workdir": str(workdir) if workdir else None,
    }


def print_report(result: dict[str, Any]) -> None:
    print(
        f"model {result['model']}, {result['exchanges']} exchanges, "
        f"{result['agent_calls']} agent calls"
    )
    print(
        "agent cache_read / prompt after exchange 3: "
        f"{result['agent_cache_read_share_after_exchange_3']} (goal ≥ {GOAL}: "
        f"{'met' if result['goal_met'] else 'NOT met'}); all exchanges: "
        f"{result['agent_cache_read_share_all']}"
    )
    print(f"agent tokens: {result['agent_tokens']}")
    print(f"summary folded after exchanges: {result['summary_folds_after_exchanges']}")
    print(f"exchanges under 50 % after the third: {result['misses_after_exchange_3']}")
    row = " ".join(
        f"{number}:{'-' if value is None else round(value * 100)}"
        for number, value in result["per_exchange"].items()
    )
    print(f"per exchange (% read): {row}")
    print(
        f"brain: {result['brain_calls']} calls, read share {result['brain_cache_read_share']}; "
        f"summary read share {result['summary_cache_read_share']}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=50)
    parser.add_argument("--model", default="claude-sonnet-4-6", help="llm.model for the daemon")
    parser.add_argument("--gap-seconds", type=float, default=1.1, help="pause between exchanges")
    parser.add_argument("--deadline", type=float, default=60.0, help="bound of each reply's wait")
    parser.add_argument("--json", type=Path, help="write the results there")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    outcome = asyncio.run(main(arguments))
    print_report(outcome)
    if arguments.json:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(json.dumps(outcome, indent=2), encoding="utf-8")
