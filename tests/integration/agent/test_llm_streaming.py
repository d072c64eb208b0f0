"""Both providers asked for a stream: the same answer as without one, its text arriving in pieces.

Through the real `anthropic` and `openai` SDKs against the fakes, which stream in the APIs' wire
format when a request says `"stream": true`, and with streams recorded from the real services
(`tests/fixtures/*/stream_*.sse`, origins in tests/fixtures/README.md) replayed as captured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, LLMResponse, SystemPrompt, ToolResult, ToolSpec
from bruce_bot.llm.anthropic import AnthropicLLM
from bruce_bot.llm.base import LLMRequest, LLMUnavailableError
from bruce_bot.llm.openai import OpenAICompatibleLLM
from bruce_bot.llm.openai_stream import VisibleText
from tests.fakes.anthropic_server import FIXTURES_DIR as ANTHROPIC_FIXTURES
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer

OPENAI_FIXTURES = ANTHROPIC_FIXTURES.parent / "openai"
SYSTEM = SystemPrompt(stable=("You are Bruce.",), volatile=("Now: Monday",))
QUESTION = [ChatMessage("user", "What's the weather in Florence, Italy?")]
WEATHER = ToolSpec(
    "weather",
    "Get weather information for a location",
    {"type": "object", "properties": {"location": {"type": "string"}}},
)
# Given, so that the fake's cache simulation does not tell the two requests apart.
USAGE = {
    "input_tokens": 120,
    "output_tokens": 142,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
}
LONG_TEXT = "Florence is warm today: 40 °C, clear skies, and a light breeze from the hills. " * 3


class Pieces:
    """A text sink that keeps what it was given."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, delta: str) -> None:
        self.pieces.append(delta)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def anthropic_config(base_url: str, **overrides: Any) -> LLMConfig:
    values: dict[str, Any] = {
        "provider": "anthropic",
        "model": "claude-sonnet-4-0",
        "api_key": "sk-ant-test",
        "base_url": base_url,
        "max_retries": 0,
        "timeout_seconds": 10,
    }
    return LLMConfig(**(values | overrides))


def openai_config(base_url: str, **overrides: Any) -> LLMConfig:
    values: dict[str, Any] = {
        "provider": "openai",
        "model": "gpt-4o-mini",
        "base_url": base_url,
        "max_retries": 0,
        "timeout_seconds": 10,
    }
    return LLMConfig(**(values | overrides))


@pytest.fixture
async def anthropic_server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as fake:
        yield fake


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


def same_answer(response: LLMResponse) -> LLMResponse:
    """Without what differs between two requests of the fake: the response id, and the thinking
    signatures it issues anew for each answer."""
    blocks = tuple(
        {k: v for k, v in block.items() if k != "signature"} for block in response.replay_blocks
    )
    return dataclasses.replace(response, response_id="", replay_blocks=blocks)


# ---- Anthropic -------------------------------------------------------------------------------


async def test_anthropic_streamed_answer_equals_the_whole_one_with_thinking_and_tool_calls(
    anthropic_server: FakeAnthropicServer,
) -> None:
    llm = AnthropicLLM(
        anthropic_config(
            anthropic_server.base_url, thinking={"enabled": True, "budget_tokens": 1024}
        )
    )
    for _ in range(2):
        anthropic_server.script(
            LONG_TEXT,
            thinking="The user wants the weather; I should look it up.",
            tool_calls=[
                ("weather", {"location": "Florence, Italy", "units": ["C", "F"]}, "toolu_1")
            ],
            usage=USAGE,
        )
    sink = Pieces()
    try:
        whole = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER]))
        streamed = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=sink))
    finally:
        await llm.aclose()

    assert "stream" not in anthropic_server.requests[0]
    assert anthropic_server.requests[1]["stream"] is True
    assert same_answer(streamed) == same_answer(whole)
    assert streamed.tool_calls[0].arguments == {"location": "Florence, Italy", "units": ["C", "F"]}
    [thinking, *_] = streamed.replay_blocks
    assert thinking["type"] == "thinking" and thinking["signature"].startswith("EfakeSig")
    assert len(sink.pieces) > 3  # it came in pieces, as it was written
    assert sink.text == LONG_TEXT  # the text only: no thinking, no tool input


async def test_anthropic_recorded_thinking_stream_gives_signed_thinking_and_the_tool_call(
    anthropic_server: FakeAnthropicServer,
) -> None:
    llm = AnthropicLLM(anthropic_config(anthropic_server.base_url))
    anthropic_server.replay(ANTHROPIC_FIXTURES / "stream_thinking_tool_use.sse")
    sink = Pieces()
    try:
        response = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=sink))
    finally:
        await llm.aclose()

    assert response.stop_reason == "tool_use"
    [call] = response.tool_calls
    assert (call.name, call.arguments) == ("weather", {"location": "Florence, Italy"})
    thinking, tool_use = response.replay_blocks
    assert thinking["type"] == "thinking"
    assert thinking["thinking"].startswith("The user is asking for weather information")
    assert thinking["signature"].startswith("Et") and len(thinking["signature"]) > 100
    assert tool_use["input"] == {"location": "Florence, Italy"}
    assert response.usage.input_tokens > 400 and response.usage.output_tokens == 119
    assert response.text == "" and sink.pieces == []  # the thinking never reaches the chat


async def test_anthropic_streamed_thinking_goes_back_signed_with_the_tool_result() -> None:
    # Not checked by the fake: the signatures in the recording are Anthropic's, not the fake's.
    async with FakeAnthropicServer(validate=False) as server:
        llm = AnthropicLLM(anthropic_config(server.base_url))
        server.replay(ANTHROPIC_FIXTURES / "stream_thinking_tool_use.sse")
        server.replay(ANTHROPIC_FIXTURES / "stream_thinking_followup.sse")
        sink = Pieces()
        try:
            first = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=Pieces()))
            [call] = first.tool_calls
            turn = [
                *QUESTION,
                ChatMessage(
                    "assistant", first.text, first.tool_calls, replay_blocks=first.replay_blocks
                ),
                ChatMessage("user", tool_results=(ToolResult(call.id, call.name, "40 C"),)),
            ]
            second = await llm.complete(LLMRequest(SYSTEM, turn, [WEATHER], stream=sink))
        finally:
            await llm.aclose()
        sent_back = server.requests[1]["messages"][1]["content"]

    thinking = {k: v for k, v in sent_back[0].items() if k != "cache_control"}
    assert thinking == first.replay_blocks[0]  # as it was signed, not a character changed
    assert sent_back[1]["type"] == "tool_use" and sent_back[1]["input"] == call.arguments
    assert second.stop_reason == "end_turn" and second.text.startswith("The current weather")
    assert sink.text == second.text


async def test_anthropic_recorded_text_and_tool_use_streams(
    anthropic_server: FakeAnthropicServer,
) -> None:
    llm = AnthropicLLM(anthropic_config(anthropic_server.base_url))
    anthropic_server.replay(ANTHROPIC_FIXTURES / "stream_text.sse")
    anthropic_server.replay(ANTHROPIC_FIXTURES / "stream_tool_use.sse")
    text_sink, tool_sink = Pieces(), Pieces()
    try:
        text = await llm.complete(LLMRequest(SYSTEM, QUESTION, stream=text_sink))
        tool = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=tool_sink))
    finally:
        await llm.aclose()

    assert (text.text, text.stop_reason, text.usage.output_tokens) == (
        "Hello there!",
        "end_turn",
        6,
    )
    assert text_sink.pieces == ["Hello", " there", "!"]
    assert tool.text == "I'll check the current weather in Paris for you."
    assert tool_sink.text == tool.text
    [call] = tool.tool_calls
    assert (call.id, call.arguments) == ("toolu_01NRLabsLyVHZPKxbKvkfSMn", {"location": "Paris"})
    assert (tool.stop_reason, tool.usage.input_tokens, tool.usage.output_tokens) == (
        "tool_use",
        377,
        65,
    )


async def test_anthropic_error_event_mid_stream_is_an_outage(
    anthropic_server: FakeAnthropicServer,
) -> None:
    # The API's documented example of an error inside a stream (an HTTP 529 when not streaming).
    stream = (
        (ANTHROPIC_FIXTURES / "stream_text.sse").read_text().split("event: content_block_stop")[0]
    )
    stream += (
        "event: error\n"
        'data: {"type": "error", "error": {"type": "overloaded_error", '
        '"message": "Overloaded"}}\n\n'
    )
    anthropic_server.replay(stream.encode(), content_type="text/event-stream")
    llm = AnthropicLLM(anthropic_config(anthropic_server.base_url))
    try:
        with pytest.raises(LLMUnavailableError) as raised:
            await llm.complete(LLMRequest(SYSTEM, QUESTION, stream=Pieces()))
    finally:
        await llm.aclose()
    assert raised.value.reason == "overloaded"


async def test_anthropic_does_not_stream_when_the_config_says_the_server_cannot(
    anthropic_server: FakeAnthropicServer,
) -> None:
    llm = AnthropicLLM(anthropic_config(anthropic_server.base_url, stream=False))
    anthropic_server.script("Plain.")
    sink = Pieces()
    try:
        response = await llm.complete(LLMRequest(SYSTEM, QUESTION, stream=sink))
    finally:
        await llm.aclose()
    assert "stream" not in anthropic_server.requests[0]
    assert response.text == "Plain." and sink.pieces == []


# ---- OpenAI-compatible -----------------------------------------------------------------------


async def test_openai_streamed_answer_equals_the_whole_one_with_tool_calls(
    openai_server: FakeOpenAIServer,
) -> None:
    llm = OpenAICompatibleLLM(openai_config(openai_server.base_url))
    for _ in range(2):
        openai_server.script(
            LONG_TEXT,
            tool_calls=[
                ("weather", {"location": "Florence, Italy"}, "call_a"),
                ("weather", {"location": "Siena, Italy"}, "call_b"),
            ],
        )
    for _ in range(2):
        openai_server.script(LONG_TEXT)
    sinks = [Pieces(), Pieces()]
    try:
        whole_calls = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER]))
        streamed_calls = await llm.complete(
            LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=sinks[0])
        )
        whole_text = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER]))
        streamed_text = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=sinks[1]))
    finally:
        await llm.aclose()

    streamed_request = openai_server.requests[1]
    assert streamed_request["stream"] is True
    assert streamed_request["stream_options"] == {"include_usage": True}
    assert same_answer(streamed_calls) == same_answer(whole_calls)
    assert [c.arguments["location"] for c in streamed_calls.tool_calls] == [
        "Florence, Italy",
        "Siena, Italy",
    ]
    assert same_answer(streamed_text) == same_answer(whole_text)
    assert streamed_text.usage.output_tokens > 0  # from the last chunk (include_usage)
    assert len(sinks[1].pieces) > 3 and sinks[1].text == LONG_TEXT


async def test_openai_recorded_streams_tool_call_then_text(openai_server: FakeOpenAIServer) -> None:
    llm = OpenAICompatibleLLM(openai_config(openai_server.base_url))
    openai_server.replay(OPENAI_FIXTURES / "stream_openai_tool_call.sse")
    openai_server.replay(OPENAI_FIXTURES / "stream_openai_text.sse")
    sinks = [Pieces(), Pieces()]
    try:
        call = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=sinks[0]))
        answer = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=sinks[1]))
    finally:
        await llm.aclose()

    [tool_call] = call.tool_calls
    assert tool_call.name == "weather" and tool_call.id.startswith("call_")
    assert tool_call.arguments is not None and "Florence" in tool_call.arguments["location"]
    assert (call.stop_reason, call.usage.input_tokens, call.usage.output_tokens) == (
        "tool_use",
        61,
        16,
    )
    assert sinks[0].pieces == []
    assert answer.stop_reason == "end_turn" and "40°C" in answer.text
    assert sinks[1].text == answer.text and len(sinks[1].pieces) > 5


async def test_openai_recorded_llamacpp_stream_hides_reasoning(
    openai_server: FakeOpenAIServer,
) -> None:
    llm = OpenAICompatibleLLM(openai_config(openai_server.base_url))
    openai_server.replay(OPENAI_FIXTURES / "stream_llamacpp_tool_call.sse")
    sink = Pieces()
    try:
        response = await llm.complete(LLMRequest(SYSTEM, QUESTION, [WEATHER], stream=sink))
    finally:
        await llm.aclose()
    [call] = response.tool_calls
    assert (call.name, call.arguments) == ("weather", {"location": "Florence, Italy"})
    assert response.stop_reason == "tool_use"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (139, 41)
    assert sink.pieces == [] and response.text == ""  # reasoning_content is never shown


async def test_openai_server_that_refuses_to_stream_is_asked_whole_from_then_on(
    openai_server: FakeOpenAIServer,
) -> None:
    llm = OpenAICompatibleLLM(openai_config(openai_server.base_url))
    openai_server.script(error=400, error_message="Unrecognized request argument: stream_options")
    openai_server.script("Whole.", times=2)
    try:
        first = await llm.complete(LLMRequest(SYSTEM, QUESTION, stream=Pieces()))
        second = await llm.complete(LLMRequest(SYSTEM, QUESTION, stream=Pieces()))
    finally:
        await llm.aclose()
    assert (first.text, second.text) == ("Whole.", "Whole.")
    assert [request.get("stream") for request in openai_server.requests] == [True, None, None]


def test_visible_text_holds_back_think_blocks_and_tool_markup() -> None:
    visible = VisibleText()
    shown = [
        visible.add(piece)
        for piece in ["<th", "ink>planning", " things</think>", "Sure", " — <", "b>done</b>"]
    ]
    assert "".join(shown) == "Sure — <b>done</b>"
    assert "planning" not in "".join(shown)
    markup = VisibleText()
    said = [markup.add(p) for p in ["Let me check.", " <tool_", 'call>{"name": "x"}']]
    assert "".join(said) == "Let me check. "
