"""Bruce's prompt prefix is the same bytes from one turn to the next, so the API's prompt cache
is read: a real multi-turn conversation through a running Bruce (its own tools, a tool round
per turn, the console channel) and the real anthropic SDK against the fake Messages API, which
caches the exact prompt as sent, key order included (tests/fakes/anthropic_server.py; the
fake's own test of that: test_fake_anthropic_cache.py, "keys in another order"). A tool schema
rebuilt in another order, a system block that changes every turn, or a dict merged the other
way would show here as a request that reads nothing from cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.tools.memory import SEARCH_TOOL
from tests.conftest import running_bruce
from tests.fakes.anthropic_server import (
    AnthropicReply,
    FakeAnthropicServer,
    last_user_text,
    prompt_tokens,
)
from tests.fakes.scripted_server import HTTPAnswer
from tests.integration.support import config_for, next_reply

TURNS = 4


def model(body: dict[str, Any]) -> str | AnthropicReply:
    """Looks the user's question up in memory first, then answers."""
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and any(block.get("type") == "tool_result" for block in last):
        return "Nothing remembered about that yet, so here is my own answer. " * 4
    return AnthropicReply(tool_calls=[(SEARCH_TOOL, {"query": last_user_text(body)[-40:]})])


class NotingServer(FakeAnthropicServer):
    """The fake, keeping each agent request with the usage it reported for it."""

    def __init__(self) -> None:
        super().__init__(responder=model)
        self.seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def _render(self, reply: AnthropicReply | str, body: dict[str, Any]) -> HTTPAnswer:
        rendered = super()._render(reply, body)
        self.seen.append((body, rendered.body["usage"]))
        return rendered


def shared_layer_tokens(body: dict[str, Any]) -> int:
    """The fake's token count of the tools and the system prompt of a request."""
    return prompt_tokens({"tools": body.get("tools"), "system": body.get("system")})


async def test_every_request_after_the_first_reads_the_same_prefix_from_cache(
    tmp_path: Path,
) -> None:
    async with NotingServer() as server:
        console = ConsoleChannel()
        async with running_bruce(config_for(tmp_path, server.base_url), channels=[console]):
            for n in range(TURNS):
                assert await console.say(f"What do you know about topic {n}?")
                assert "own answer" in await next_reply(console.replies)
    agent = [(body, usage) for body, usage in server.seen if body.get("tools")]
    assert len(agent) == 2 * TURNS  # a tool round and an answer per turn
    assert [tool["name"] for tool in agent[0][0]["tools"]].count(SEARCH_TOOL) == 1
    for index, (body, usage) in enumerate(agent[1:], 1):
        # The tools and the system prompt, byte for byte as the first request sent them.
        assert usage["cache_read_input_tokens"] >= shared_layer_tokens(body), index
    # And the conversation itself: each turn's first request reads past the shared layer, into
    # the earlier turns (the history is as stable as the rest).
    for turn in range(1, TURNS):
        body, usage = agent[2 * turn]
        assert usage["cache_read_input_tokens"] > shared_layer_tokens(body), turn
