"""Microbenchmark: the CPU one `AnthropicLLM.complete()` costs Bruce, against the fake Messages API.

The fake (tests/fakes/anthropic_server.py) runs in a thread of its own with its own event loop,
so what is measured — the CPU time of the calling thread (`time.thread_time`) — is the client
side only: Bruce's translation of the conversation, the anthropic SDK's request building, httpx
sending and receiving over real HTTP, and reading the answer into Bruce's `LLMResponse`. The
request is shaped like an agent turn of a long conversation (the default system prompt and
guidelines, seven tools, `--history` messages); the answer is a text, or with `--tool-use` a
text and a tool call.

Two clients are measured on the same requests, taking turns (`--rounds` rounds of `--calls` calls
each; the median round is reported):
  bruce — `AnthropicLLM.complete()` as shipped;
  typed — the SDK's typed path for comparison: `client.messages.create(**params)` (the SDK
          copies and re-serialises the body, then builds pydantic models of the answer), with
          the same translation of the request and no reading of the answer beyond the models.

    .venv/bin/python bench/anthropic_call.py [--calls 200] [--rounds 7] [--history 30] [--tool-use]
                                             [--profile] [--json out.json]

`--profile` prints the top functions (cProfile, cumulative) of the bruce client's calls.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bruce_bot.agent.context import build_system_prompt  # noqa: E402
from bruce_bot.config import AgentConfig, LLMConfig  # noqa: E402
from bruce_bot.domain import ChatMessage, SystemPrompt, ToolSpec  # noqa: E402
from bruce_bot.llm.anthropic import AnthropicLLM, build_request  # noqa: E402
from bruce_bot.llm.base import LLMRequest  # noqa: E402
from bruce_bot.logs import configure_logging  # noqa: E402
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer  # noqa: E402

TOOL_NAMES = (
    "web_search",
    "web_fetch",
    "artifact_save",
    "proactive_create",
    "proactive_list",
    "proactive_cancel",
    "spawn_subagent",
)


def tool_specs() -> list[ToolSpec]:
    """Seven tools with descriptions and schemas about the size of Bruce's own."""
    specs = []
    for name in TOOL_NAMES:
        properties = {
            f"{name}_arg{index}": {
                "type": "string",
                "description": f"Argument {index} of {name}: what it means and how to write it. "
                * 2,
            }
            for index in range(4)
        }
        specs.append(
            ToolSpec(
                name,
                f"{name.replace('_', ' ').capitalize()}: what the tool does, when to use it and "
                "what it returns. " * 5,
                {"type": "object", "properties": properties, "required": [f"{name}_arg0"]},
            )
        )
    return specs


def conversation(history: int) -> list[ChatMessage]:
    messages = []
    for index in range(history):
        role = "user" if index % 2 == 0 else "assistant"
        text = f"Message {index} of the conversation, with some ordinary words in it. " * 5
        messages.append(ChatMessage(role, text))  # type: ignore[arg-type]
    if messages and messages[-1].role == "user":
        messages.append(ChatMessage("assistant", "An answer."))
    messages.append(ChatMessage("user", "What should I do this afternoon?"))
    return messages


def system_prompt() -> SystemPrompt:
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    return build_system_prompt(
        base_prompt=AgentConfig().system_prompt,
        summary="The user is Ana; she likes green tea and long walks. " * 10,
        tool_names=TOOL_NAMES,
        now=datetime(2026, 3, 2, 15, 30, tzinfo=UTC),
        zone=ZoneInfo("America/Sao_Paulo"),
        last_message_at=datetime(2026, 3, 2, 15, 0, tzinfo=UTC),
    )


class FakeInThread:
    """The fake Messages API on its own event loop in a daemon thread."""

    def __init__(self, reply: AnthropicReply) -> None:
        self.server = FakeAnthropicServer(responder=lambda body: reply)
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.start())
        self.started.set()
        self.loop.run_forever()

    def __enter__(self) -> str:
        self.thread.start()
        self.started.wait(10)
        return self.server.base_url

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def measure(
    calls: dict[str, Callable[[], Awaitable[Any]]], count: int, rounds: int
) -> dict[str, float]:
    """CPU milliseconds of this thread per call of each client: the median of `rounds` rounds
    of `count` calls, the clients taking turns (after a warm-up), so that a busy machine
    weighs on them alike."""
    for call in calls.values():
        for _ in range(20):
            await call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.thread_time()
            for _ in range(count):
                await call()
            samples[name].append((time.thread_time() - started) * 1000 / count)
    return {name: round(statistics.median(values), 3) for name, values in samples.items()}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    reply = AnthropicReply(
        text="Here is a plan for the afternoon, with a walk and some tea. " * 8,
        tool_calls=[("web_search", {"query": "tea houses open now"})] if args.tool_use else (),
    )
    system, messages, tools = system_prompt(), conversation(args.history), tool_specs()
    with FakeInThread(reply) as base_url:
        config = LLMConfig(api_key="bench-key", base_url=base_url, max_retries=0)
        llm = AnthropicLLM(config)

        async def bruce() -> Any:
            return await llm.complete(LLMRequest(system, messages, tools))

        params = build_request(system, messages, tools, model=config.model, max_tokens=1024)
        body_chars = len(json.dumps(params))
        client = llm._client  # the same client: only the path through the SDK differs

        async def typed() -> Any:
            return await client.messages.create(
                **build_request(system, messages, tools, model=config.model, max_tokens=1024)
            )

        cpu = await measure({"bruce": bruce, "typed": typed}, args.calls, args.rounds)
        results = {
            "request_chars": body_chars,
            "history_messages": len(messages),
            "tool_use": args.tool_use,
            "calls_per_round": args.calls,
            "rounds": args.rounds,
            "bruce_cpu_ms_per_call": cpu["bruce"],
            "typed_cpu_ms_per_call": cpu["typed"],
        }
        if args.profile:
            profile = cProfile.Profile(time.thread_time)  # CPU time, not time spent waiting
            profile.enable()
            for _ in range(args.calls):
                await bruce()
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
        await llm.aclose()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per client and round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--history", type=int, default=30, help="messages before the newest")
    parser.add_argument("--tool-use", action="store_true", help="answers carry a tool call")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", type=Path, help="write the results there")
    arguments = parser.parse_args()
    configure_logging("info")  # as the daemon runs: llm_call_finished is a debug event
    outcome = asyncio.run(main(arguments))
    print(json.dumps(outcome, indent=2))
    if arguments.json:
        arguments.json.write_text(json.dumps(outcome, indent=2), encoding="utf-8")
