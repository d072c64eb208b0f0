"""What prompt caching saves a long conversation: most of each request is read from cache.

The conversation runs as a chat turn runs it — the context builder's layers with the time moving
on between exchanges, the agent loop with tool rounds, a history of plain messages — through
`AnthropicLLM` and the real SDK against the fake Messages API with the API's minimum cacheable
length per model (tests/fakes/anthropic_server.py: its accounting is tested on its own).
Cached tokens cost a tenth of uncached ones, so the share read from cache is the user's bill.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bruce_bot.agent.context import build_system_prompt
from bruce_bot.agent.loop import run_agent_loop
from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, SystemPrompt
from bruce_bot.llm.anthropic import AnthropicLLM
from bruce_bot.tools.registry import ToolRegistry
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer, last_user_text
from tests.fakes.scripted_server import HTTPAnswer
from tests.integration.support import AddTool, PriceTool

MODEL = "claude-sonnet-4-6"
ZONE = ZoneInfo("America/Sao_Paulo")
START = datetime(2026, 3, 2, 15, 30, tzinfo=UTC)
# A deployment's own instructions: with the tools and guidelines, past Sonnet's 1024 tokens.
BASE_PROMPT = "You are Bruce, a careful personal assistant. " + (
    "Answer in the user's language, plainly, and say what you are unsure of. " * 50
)


def answer(body: dict[str, Any]) -> str | AnthropicReply:
    """A model that adds numbers with the tool when asked to, and otherwise just answers."""
    last = body["messages"][-1]["content"]
    if any(block.get("type") == "tool_result" for block in last):
        return "The sum is 5. " * 20
    if "add" in last_user_text(body):
        return AnthropicReply(tool_calls=[("add", {"a": 2, "b": 3})])
    return "Here is a considered answer, with reasons and an example. " * 12


class NotingServer(FakeAnthropicServer):
    """The fake with the API's cache minimums, keeping the usage it reported for each request."""

    def __init__(self) -> None:
        super().__init__(responder=answer, cache_minimum_tokens="per-model")
        self.usages: list[dict[str, int]] = []

    def _render(self, reply: AnthropicReply | str, body: dict[str, Any]) -> HTTPAnswer:
        rendered = super()._render(reply, body)
        self.usages.append(rendered.body["usage"])
        return rendered


@pytest.fixture
async def server() -> AsyncIterator[NotingServer]:
    async with NotingServer() as fake:
        yield fake


@pytest.fixture
async def claude(server: NotingServer) -> AsyncIterator[AnthropicLLM]:
    llm = AnthropicLLM(LLMConfig(model=MODEL, api_key="test", base_url=server.base_url))
    yield llm
    await llm.aclose()


def prompt(now: datetime, summary: str | None = None, *, tools: ToolRegistry) -> SystemPrompt:
    return build_system_prompt(
        base_prompt=BASE_PROMPT,
        summary=summary,
        tool_names=tools.names(),
        now=now,
        zone=ZONE,
        last_message_at=now - timedelta(minutes=3),
    )


def read_share(usages: Sequence[dict[str, int]]) -> float:
    read = sum(usage["cache_read_input_tokens"] for usage in usages)
    prompt_tokens = sum(
        usage["input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"]
        for usage in usages
    )
    return read / prompt_tokens


class Conversation:
    """Exchanges as a chat turn makes them; the usage of each exchange's calls, in order."""

    def __init__(self, claude: AnthropicLLM, server: NotingServer) -> None:
        self.claude, self.server = claude, server
        self.tools = ToolRegistry([AddTool(), PriceTool()])
        self.history: list[ChatMessage] = []
        self.now = START
        self.summary: str | None = None

    async def exchange(self, text: str) -> list[dict[str, int]]:
        self.now += timedelta(minutes=1)  # the temporal layer changes between exchanges
        seen = len(self.server.usages)
        asked = ChatMessage("user", text)
        run = await run_agent_loop(
            self.claude,
            self.tools,
            prompt(self.now, self.summary, tools=self.tools),
            [*self.history, asked],
        )
        # Stored as a turn stores it: the question and the final answer, not the tool rounds.
        self.history += [asked, ChatMessage("assistant", run.text)]
        return self.server.usages[seen:]


@pytest.fixture
def conversation(claude: AnthropicLLM, server: NotingServer) -> Conversation:
    return Conversation(claude, server)


async def test_after_the_third_exchange_four_fifths_of_every_prompt_is_read_from_cache(
    conversation: Conversation,
) -> None:
    per_exchange = []
    for number in range(12):
        ask = f"Please add 2 and 3 for me ({number})." if number % 4 == 2 else f"Question {number}?"
        per_exchange.append(await conversation.exchange(ask))

    assert per_exchange[0][0]["cache_read_input_tokens"] == 0  # nothing cached yet
    for usages in per_exchange[3:]:
        assert read_share(usages) >= 0.8, usages
    assert read_share([u for usages in per_exchange[3:] for u in usages]) >= 0.85


async def test_a_new_summary_costs_one_request_and_still_reads_the_shared_layer(
    conversation: Conversation,
) -> None:
    for number in range(5):
        await conversation.exchange(f"Question {number}?")
    before = (await conversation.exchange("One more question?"))[0]

    conversation.summary = "The user asked five questions about planning and got answers."
    folded = (await conversation.exchange("And now?"))[0]
    after = (await conversation.exchange("And after that?"))[0]

    # The tools and the shared layer (base prompt, guidelines) are read; the rest is written once.
    shared_tokens = len(BASE_PROMPT) // 4
    assert folded["cache_read_input_tokens"] > shared_tokens
    assert folded["cache_creation_input_tokens"] > 0
    assert read_share([after]) >= 0.8
    assert read_share([before]) >= 0.8


async def test_a_new_chat_of_the_same_deployment_reads_the_shared_layer_at_once(
    claude: AnthropicLLM, server: NotingServer, conversation: Conversation
) -> None:
    await conversation.exchange("Hello from the first chat.")
    other = Conversation(claude, server)
    other.summary = None

    [first_of_other] = await other.exchange("Hello from another chat.")

    assert first_of_other["cache_read_input_tokens"] > len(BASE_PROMPT) // 4
