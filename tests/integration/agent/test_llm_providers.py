"""The two LLM providers, driven through the real anthropic and openai SDKs against local fakes
that speak the vendors' wire formats: what Bruce sends, what it makes of the answers, and how
every kind of failure reaches the core."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, SystemPrompt, ToolCall, ToolResult, ToolSpec
from bruce_bot.llm.anthropic import AnthropicLLM
from bruce_bot.llm.base import (
    LLMNotConfiguredError,
    LLMRequest,
    LLMRequestError,
    LLMService,
    LLMUnavailableError,
)
from bruce_bot.llm.factory import create_llm
from bruce_bot.llm.openai import OpenAICompatibleLLM
from bruce_bot.llm.unconfigured import UnconfiguredLLM
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer

API_KEY = "sk-test-0123456789abcdef"
SYSTEM = SystemPrompt(stable=("You are Bruce.", "Use tools wisely."), volatile=("Now: Monday",))
HELLO = (ChatMessage(role="user", text="Hello"),)
WEB_SEARCH = ToolSpec(
    name="web_search",
    description="Search the web.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
)


def closed_port_url() -> str:
    """A loopback URL nobody listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def llm_config(provider: str, base_url: str, **overrides: Any) -> LLMConfig:
    values: dict[str, Any] = {
        "provider": provider,
        "model": "claude-haiku-4-5",
        "api_key": API_KEY,
        "base_url": base_url,
        "max_tokens": 512,
        "timeout_seconds": 10,
        "max_retries": 0,
    }
    values.update(overrides)
    return LLMConfig(**values)


@pytest.fixture
async def anthropic_server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as server:
        yield server


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def claude(anthropic_server: FakeAnthropicServer) -> AsyncIterator[AnthropicLLM]:
    llm = AnthropicLLM(llm_config("anthropic", anthropic_server.base_url))
    yield llm
    await llm.aclose()


@pytest.fixture
async def gpt(openai_server: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleLLM]:
    llm = OpenAICompatibleLLM(llm_config("openai", openai_server.base_url))
    yield llm
    await llm.aclose()


# ---- Anthropic: requests and answers ---------------------------------------------------------


async def test_anthropic_text_answer_carries_text_usage_and_model(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script(
        "Hello, I am Bruce.",
        model="claude-test-20260101",
        usage={
            "input_tokens": 12,
            "output_tokens": 5,
            "cache_read_input_tokens": 300,
            "cache_creation_input_tokens": 40,
        },
    )

    response = await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert response.text == "Hello, I am Bruce."
    assert response.tool_calls == ()
    assert response.stop_reason == "end_turn"
    assert response.model == "claude-test-20260101"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 5)
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (300, 40)
    sent = anthropic_server.requests[0]
    assert (sent["model"], sent["max_tokens"]) == ("claude-haiku-4-5", 512)
    assert sent["messages"][0]["role"] == "user"
    assert sent["messages"][0]["content"][0]["text"] == "Hello"


async def test_anthropic_model_and_max_tokens_arguments_override_the_config(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("ok")

    await claude.complete(LLMRequest(SYSTEM, HELLO, model="claude-haiku-4-5", max_tokens=64))

    assert anthropic_server.requests[0]["model"] == "claude-haiku-4-5"
    assert anthropic_server.requests[0]["max_tokens"] == 64
    assert claude.model == "claude-haiku-4-5"


async def test_anthropic_tool_use_round_trip_sends_tool_results_with_ids_and_errors(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script(
        "Let me look.",
        tool_calls=[("web_search", {"query": "bruce"}), ("web_fetch", {"url": "http://x.test"})],
    )
    anthropic_server.script("Bruce is a bat.")

    first = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    assert first.stop_reason == "tool_use"
    assert first.text == "Let me look."
    search, fetch = first.tool_calls
    assert (search.name, search.arguments) == ("web_search", {"query": "bruce"})
    assert json.loads(search.raw_arguments) == {"query": "bruce"}
    assert fetch.arguments == {"url": "http://x.test"}
    assert search.id != fetch.id

    history = [
        *HELLO,
        ChatMessage(role="assistant", text=first.text, tool_calls=first.tool_calls),
        ChatMessage(
            role="user",
            tool_results=(
                ToolResult(call_id=search.id, name="web_search", content="a bat"),
                ToolResult(call_id=fetch.id, name="web_fetch", content="403", is_error=True),
            ),
        ),
    ]
    second = await claude.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH]))

    assert second.text == "Bruce is a bat."
    user, assistant, results = anthropic_server.requests[1]["messages"]
    assert user["role"] == "user"
    assert assistant["role"] == "assistant"
    assert [block["type"] for block in assistant["content"]] == ["text", "tool_use", "tool_use"]
    assert assistant["content"][1] == {
        "type": "tool_use",
        "id": search.id,
        "name": "web_search",
        "input": {"query": "bruce"},
    }
    assert results["role"] == "user"
    ok, failed = results["content"]
    assert ok["type"] == failed["type"] == "tool_result"
    assert (ok["tool_use_id"], ok["content"], ok.get("is_error", False)) == (
        search.id,
        "a bat",
        False,
    )
    assert (failed["tool_use_id"], failed["content"], failed["is_error"]) == (fetch.id, "403", True)


async def test_anthropic_replays_a_malformed_tool_call_with_empty_input(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("ok")
    broken = ToolCall(id="toolu_1", name="web_search", arguments=None, raw_arguments="{bad")
    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=(broken,)),
        ChatMessage(
            role="user",
            tool_results=(
                ToolResult("toolu_1", "web_search", "arguments are not JSON", is_error=True),
            ),
        ),
    ]

    await claude.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH]))

    tool_use = anthropic_server.requests[0]["messages"][1]["content"][0]
    assert tool_use == {"type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {}}


async def test_anthropic_system_holds_the_stable_layers_and_the_volatile_ones_come_last(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("ok")

    await claude.complete(LLMRequest(SYSTEM, HELLO))

    sent = anthropic_server.requests[0]
    # The first layer is cached on its own, so a change in the others still reads it back.
    assert sent["system"] == [
        {"type": "text", "text": "You are Bruce.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Use tools wisely.", "cache_control": {"type": "ephemeral"}},
    ]
    # The volatile layer follows every breakpoint: the end of the newest user turn.
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Now: Monday"},
            ],
        }
    ]


async def test_anthropic_skips_empty_system_blocks(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("ok")
    anthropic_server.script("ok")

    await claude.complete(LLMRequest(SystemPrompt(stable=("Base", " "), volatile=("",)), HELLO))
    await claude.complete(LLMRequest(SystemPrompt(stable=(), volatile=()), HELLO))

    assert anthropic_server.requests[0]["system"] == [
        {"type": "text", "text": "Base", "cache_control": {"type": "ephemeral"}}
    ]
    assert anthropic_server.requests[0]["messages"][0]["content"] == [
        {"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}}
    ]
    assert "system" not in anthropic_server.requests[1]


async def test_anthropic_merges_consecutive_turns_and_caches_the_last_block(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("ok")
    history = [
        ChatMessage(role="user", text="first"),
        ChatMessage(role="user", text="  "),
        ChatMessage(role="user", text="second"),
        ChatMessage(role="assistant", text=""),
        ChatMessage(role="assistant", text="answer"),
        ChatMessage(role="user", text="third"),
    ]

    await claude.complete(LLMRequest(SYSTEM, history))

    messages = anthropic_server.requests[0]["messages"]
    assert [message["role"] for message in messages] == ["user", "assistant", "user"]
    assert [block["text"] for block in messages[0]["content"]] == ["first", "second"]
    assert [block["text"] for block in messages[1]["content"]] == ["answer"]
    assert messages[-1]["content"] == [
        {"type": "text", "text": "third", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Now: Monday"},
    ]
    cached = [
        block["text"]
        for message in messages
        for block in message["content"]
        if "cache_control" in block
    ]
    # The newest block, and the newest before the last answer (where the previous request ended).
    assert cached == ["second", "third"]


async def test_anthropic_puts_tool_results_before_text_in_a_merged_user_turn(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("ok")
    call = ToolCall(id="toolu_9", name="web_search", arguments={"query": "q"})
    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="user", text="(while you search: thanks!)"),
        ChatMessage(role="user", tool_results=(ToolResult("toolu_9", "web_search", "found"),)),
    ]

    response = await claude.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH]))

    assert response.text == "ok"  # the fake refuses tool_result blocks that are not first
    last = anthropic_server.requests[0]["messages"][-1]["content"]
    assert [block["type"] for block in last] == ["tool_result", "text", "text"]
    assert last[-1]["text"] == "Now: Monday"  # the volatile layer, after the user's own words


async def test_anthropic_sends_tools_only_when_there_are_some(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("with tools")
    anthropic_server.script("without tools")

    await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))
    await claude.complete(LLMRequest(SYSTEM, HELLO, []))

    assert anthropic_server.requests[0]["tools"] == [
        {
            "name": "web_search",
            "description": "Search the web.",
            "input_schema": WEB_SEARCH.parameters,
        }
    ]
    assert "tools" not in anthropic_server.requests[1]


async def test_anthropic_forced_text_keeps_the_tools_but_switches_tool_use_off(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script("Here is what I found.")
    anthropic_server.script("Plain answer.")
    call = ToolCall(id="toolu_7", name="web_search", arguments={"query": "q"})
    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="user", tool_results=(ToolResult("toolu_7", "web_search", "found"),)),
    ]

    # The fake, like the API, refuses tool_use/tool_result history without declared tools.
    response = await claude.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH], force_text=True))
    await claude.complete(LLMRequest(SYSTEM, HELLO, [], force_text=True))

    assert response.text == "Here is what I found."
    forced, no_tools = anthropic_server.requests
    assert forced["tool_choice"] == {"type": "none"}
    assert [tool["name"] for tool in forced["tools"]] == ["web_search"]
    assert "tool_choice" not in no_tools
    assert "tools" not in no_tools


async def test_anthropic_cache_breakpoints_let_the_next_loop_call_reuse_the_prefix(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script(tool_calls=[("web_search", {"query": "bruce"})])
    anthropic_server.script("done")

    first = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))
    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=first.tool_calls),
        ChatMessage(
            role="user",
            tool_results=(ToolResult(first.tool_calls[0].id, "web_search", "a bat " * 50),),
        ),
    ]
    second = await claude.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH]))

    assert first.usage.cache_read_tokens == 0
    assert first.usage.cache_write_tokens > 0
    # The whole first request (tools, system, "Hello") is read back from the cache.
    assert second.usage.cache_read_tokens >= first.usage.cache_write_tokens


# ---- Anthropic: failures ---------------------------------------------------------------------


async def test_anthropic_overloaded_once_is_retried_by_the_sdk(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.script(error=529, retry_after=0.01)
    anthropic_server.script("made it")
    llm = AnthropicLLM(llm_config("anthropic", anthropic_server.base_url, max_retries=2))

    try:
        response = await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert response.text == "made it"
    assert len(anthropic_server.requests) == 2
    assert anthropic_server.request_headers[1]["x-stainless-retry-count"] == "1"


async def test_anthropic_overloaded_forever_is_unavailable(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.script(error=529, retry_after=0.01, times=3)
    llm = AnthropicLLM(llm_config("anthropic", anthropic_server.base_url, max_retries=2))

    try:
        with pytest.raises(LLMUnavailableError) as caught:
            await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert caught.value.reason == "overloaded"
    assert len(anthropic_server.requests) == 3
    assert anthropic_server.pending == 0


@pytest.mark.parametrize(
    ("status", "reason"),
    [(429, "rate limited"), (500, "server error"), (503, "server error"), (529, "overloaded")],
)
async def test_anthropic_transient_statuses_are_unavailable(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer, status: int, reason: str
) -> None:
    anthropic_server.script(error=status)

    with pytest.raises(LLMUnavailableError) as caught:
        await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert caught.value.reason == reason


@pytest.mark.parametrize("status", [401, 403])
async def test_anthropic_bad_key_is_refused_without_echoing_the_key(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer, status: int
) -> None:
    anthropic_server.script(error=status, error_message=f"invalid x-api-key {API_KEY}")

    with pytest.raises(LLMRequestError) as caught:
        await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert caught.value.reason == "authentication failed"
    assert API_KEY not in str(caught.value)
    assert "llm.api_key" in caught.value.detail


async def test_anthropic_unknown_model_is_refused(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    # Nothing scripted: the fake serves only the models it knows, and answers the API's 404.
    with pytest.raises(LLMRequestError) as caught:
        await claude.complete(LLMRequest(SYSTEM, HELLO, model="claude-nope"))

    assert caught.value.reason == "model not found"
    assert "claude-nope" in caught.value.detail


async def test_anthropic_invalid_request_is_rejected_with_the_apis_words(
    claude: AnthropicLLM, anthropic_server: FakeAnthropicServer
) -> None:
    # No usable message at all: the (fake) API answers 400 invalid_request_error.
    with pytest.raises(LLMRequestError) as caught:
        await claude.complete(LLMRequest(SYSTEM, [ChatMessage(role="user", text="")]))

    assert caught.value.reason == "request rejected"
    assert "at least one message" in caught.value.detail
    assert len(anthropic_server.requests) == 1


async def test_anthropic_connection_refused_is_unreachable() -> None:
    llm = AnthropicLLM(llm_config("anthropic", closed_port_url()))

    try:
        with pytest.raises(LLMUnavailableError) as caught:
            await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert caught.value.reason == "unreachable"
    assert API_KEY not in str(caught.value)


async def test_anthropic_slow_model_times_out() -> None:
    async with FakeAnthropicServer(delay_seconds=30) as server:
        server.script("too late")
        llm = AnthropicLLM(llm_config("anthropic", server.base_url, timeout_seconds=0.3))
        try:
            with pytest.raises(LLMUnavailableError) as caught:
                await llm.complete(LLMRequest(SYSTEM, HELLO))
        finally:
            await llm.aclose()

    assert caught.value.reason == "timed out"


# ---- OpenAI-compatible: requests and answers -------------------------------------------------


async def test_openai_text_answer_carries_text_usage_and_model(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(
        "Hello, I am Bruce.",
        model="gpt-test-2026",
        usage={
            "prompt_tokens": 30,
            "completion_tokens": 6,
            "total_tokens": 36,
            "prompt_tokens_details": {"cached_tokens": 20},
        },
    )

    response = await gpt.complete(LLMRequest(SYSTEM, HELLO))

    assert response.text == "Hello, I am Bruce."
    assert response.tool_calls == ()
    assert response.stop_reason == "end_turn"
    assert response.model == "gpt-test-2026"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (30, 6)
    assert response.usage.cache_read_tokens == 20
    sent = openai_server.requests[0]
    assert sent["model"] == "claude-haiku-4-5"
    assert sent["max_tokens"] == 512  # a local server: the classic parameter
    # The time changes every turn: it goes after the stable prefix, at the end of the user's
    # message, so the server's prefix cache keeps the system message.
    assert sent["messages"] == [
        {"role": "system", "content": "You are Bruce.\n\nUse tools wisely."},
        {"role": "user", "content": "Hello\n\nNow: Monday"},
    ]
    assert "tools" not in sent


async def test_openai_tool_calls_round_trip_sends_tool_messages_with_ids(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(
        tool_calls=[("web_search", {"query": "bruce"}), ("web_fetch", {"url": "http://x.test"})]
    )
    openai_server.script("Bruce is a bat.")

    first = await gpt.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    assert first.stop_reason == "tool_use"
    assert first.text == ""
    search, fetch = first.tool_calls
    assert (search.name, search.arguments) == ("web_search", {"query": "bruce"})
    assert (fetch.name, fetch.arguments) == ("web_fetch", {"url": "http://x.test"})
    assert openai_server.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "web_search",
                "description": "Search the web.",
                "parameters": WEB_SEARCH.parameters,
            },
        }
    ]

    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=first.tool_calls),
        ChatMessage(
            role="user",
            tool_results=(
                ToolResult(call_id=search.id, name="web_search", content="a bat"),
                ToolResult(call_id=fetch.id, name="web_fetch", content="403", is_error=True),
            ),
            text="and be brief",
        ),
    ]
    second = await gpt.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH]))

    assert second.text == "Bruce is a bat."
    _, _, assistant, ok, failed, user = openai_server.requests[1]["messages"]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": search.id,
                "type": "function",
                "function": {"name": "web_search", "arguments": search.raw_arguments},
            },
            {
                "id": fetch.id,
                "type": "function",
                "function": {"name": "web_fetch", "arguments": fetch.raw_arguments},
            },
        ],
    }
    assert ok == {"role": "tool", "tool_call_id": search.id, "content": "a bat"}
    assert failed == {"role": "tool", "tool_call_id": fetch.id, "content": "Error: 403"}
    assert user == {"role": "user", "content": "and be brief\n\nNow: Monday"}


async def test_openai_malformed_arguments_keep_the_raw_text(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(raw_arguments='{"query": "unterminated')
    openai_server.script("sorry")

    response = await gpt.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    (call,) = response.tool_calls
    assert call.name == "web_search"
    assert call.arguments is None
    assert call.raw_arguments == '{"query": "unterminated'

    # The loop replays the call with an error result; the raw text goes back verbatim.
    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=response.tool_calls),
        ChatMessage(
            role="user",
            tool_results=(ToolResult(call.id, call.name, "arguments are not JSON", True),),
        ),
    ]
    await gpt.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH]))

    replayed = openai_server.requests[1]["messages"][2]["tool_calls"][0]["function"]
    assert replayed["arguments"] == '{"query": "unterminated'


async def test_openai_empty_and_non_object_arguments(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(tool_calls=[("proactive_list", ""), ("web_search", "[1, 2]")])

    response = await gpt.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    no_arguments, a_list = response.tool_calls
    assert no_arguments.arguments == {}
    assert a_list.arguments is None
    assert a_list.raw_arguments == "[1, 2]"


async def test_openai_forced_text_keeps_the_tools_but_switches_tool_use_off(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script("Plain answer.")
    openai_server.script("No tools at all.")

    response = await gpt.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH], force_text=True))
    await gpt.complete(LLMRequest(SYSTEM, HELLO, [], force_text=True))

    assert response.text == "Plain answer."
    forced, no_tools = openai_server.requests
    assert forced["tool_choice"] == "none"
    assert forced["tools"][0]["function"]["name"] == "web_search"
    assert "tool_choice" not in no_tools
    assert "tools" not in no_tools


async def test_openai_platform_gets_max_completion_tokens() -> None:
    llm = OpenAICompatibleLLM(LLMConfig(provider="openai", api_key=API_KEY))
    try:
        assert llm._max_tokens_param == "max_completion_tokens"
    finally:
        await llm.aclose()


# ---- OpenAI-compatible: failures -------------------------------------------------------------


async def test_openai_rate_limited_once_is_retried_by_the_sdk(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.script(error=429, retry_after=0.01)
    openai_server.script("made it")
    llm = OpenAICompatibleLLM(llm_config("openai", openai_server.base_url, max_retries=1))

    try:
        response = await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert response.text == "made it"
    assert len(openai_server.requests) == 2


@pytest.mark.parametrize(
    ("status", "reason"), [(429, "rate limited"), (500, "server error"), (503, "server error")]
)
async def test_openai_transient_statuses_are_unavailable(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer, status: int, reason: str
) -> None:
    openai_server.script(error=status)

    with pytest.raises(LLMUnavailableError) as caught:
        await gpt.complete(LLMRequest(SYSTEM, HELLO))

    assert caught.value.reason == reason


async def test_openai_bad_key_is_refused_without_echoing_the_key(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(error=401, error_message=f"Incorrect API key provided: {API_KEY}.")

    with pytest.raises(LLMRequestError) as caught:
        await gpt.complete(LLMRequest(SYSTEM, HELLO))

    assert caught.value.reason == "authentication failed"
    assert API_KEY not in str(caught.value)


async def test_openai_unknown_model_and_bad_request_are_refused(
    gpt: OpenAICompatibleLLM, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(error=404)
    openai_server.script(error=400, error_message="Invalid 'messages[1].content'.")

    with pytest.raises(LLMRequestError) as not_found:
        await gpt.complete(LLMRequest(SYSTEM, HELLO, model="gpt-nope"))
    with pytest.raises(LLMRequestError) as rejected:
        await gpt.complete(LLMRequest(SYSTEM, HELLO))

    assert not_found.value.reason == "model not found"
    assert "gpt-nope" in not_found.value.detail
    assert rejected.value.reason == "request rejected"
    assert "messages[1].content" in rejected.value.detail


async def test_openai_connection_refused_is_unreachable() -> None:
    llm = OpenAICompatibleLLM(llm_config("openai", closed_port_url() + "/v1"))

    try:
        with pytest.raises(LLMUnavailableError) as caught:
            await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert caught.value.reason == "unreachable"


# ---- Choosing a provider ---------------------------------------------------------------------


async def test_without_a_key_bruce_gets_an_llm_that_explains_the_fix() -> None:
    llm = create_llm(LLMConfig(provider="anthropic", api_key=""))

    assert isinstance(llm, UnconfiguredLLM)
    assert isinstance(llm, LLMService)
    with pytest.raises(LLMNotConfiguredError) as caught:
        await llm.complete(LLMRequest(SYSTEM, HELLO))
    assert caught.value.reason == "not configured"
    assert "llm.api_key" in caught.value.detail
    await llm.aclose()


async def test_openai_without_key_or_base_url_is_not_configured() -> None:
    llm = create_llm(LLMConfig(provider="openai", api_key=""))

    assert isinstance(llm, UnconfiguredLLM)
    with pytest.raises(LLMNotConfiguredError) as caught:
        await llm.complete(LLMRequest(SYSTEM, HELLO))
    assert "llm.base_url" in caught.value.detail


async def test_a_local_openai_compatible_server_needs_no_key(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.script("local answer")
    llm = create_llm(LLMConfig(provider="openai", base_url=openai_server.base_url, model="llama3"))

    try:
        response = await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert isinstance(llm, OpenAICompatibleLLM)
    assert response.text == "local answer"
    assert openai_server.requests[0]["model"] == "llama3"
    assert openai_server.request_headers[0]["Authorization"] == "Bearer not-needed"


async def test_create_llm_builds_the_anthropic_provider_with_a_key(
    anthropic_server: FakeAnthropicServer,
) -> None:
    anthropic_server.script("from claude")
    llm = create_llm(llm_config("anthropic", anthropic_server.base_url))

    try:
        response = await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert isinstance(llm, AnthropicLLM)
    assert response.text == "from claude"


def test_choosing_the_openai_provider_never_imports_the_anthropic_sdk() -> None:
    script = (
        "import sys\n"
        "from bruce_bot.config import LLMConfig\n"
        "from bruce_bot.llm.factory import create_llm\n"
        "create_llm(LLMConfig(provider='openai', base_url='http://127.0.0.1:1/v1'))\n"
        "print(sorted(name for name in ('anthropic', 'openai') if name in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=30
    )

    assert result.stdout.strip() == "['openai']"


def test_the_anthropic_provider_leaves_the_sdks_aiohttp_transport_unloaded() -> None:
    # ~8 MB of the daemon's memory for a transport Bruce never uses (discord.py installs aiohttp).
    script = (
        "import sys\n"
        "from bruce_bot.config import LLMConfig\n"
        "from bruce_bot.llm.factory import create_llm\n"
        "llm = create_llm(LLMConfig(provider='anthropic', api_key='k'))\n"
        "print(type(llm).__name__, 'aiohttp' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=30
    )

    assert result.stdout.strip() == "AnthropicLLM False"


async def test_openai_prompt_prefix_stays_the_same_when_only_the_time_changes(
    openai_server: FakeOpenAIServer, gpt: OpenAICompatibleLLM
) -> None:
    """Servers reuse an unchanged prompt prefix (OpenAI's prompt caching, llama.cpp's and
    vLLM's prefix caches): a new time must not change the system message or the history."""
    openai_server.script("first")
    openai_server.script("second")
    later = SystemPrompt(stable=SYSTEM.stable, volatile=("Now: Tuesday",))
    call = ToolCall(id="call_1", name="web_search", arguments={"query": "bruce"})
    history = [
        *HELLO,
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(
            role="user",
            tool_results=(ToolResult(call_id="call_1", name="web_search", content="a bat"),),
        ),
    ]
    await gpt.complete(LLMRequest(SYSTEM, history, [WEB_SEARCH]))
    await gpt.complete(LLMRequest(later, history, [WEB_SEARCH]))
    first, second = (request["messages"] for request in openai_server.requests)
    assert (
        first[0]
        == second[0]
        == {"role": "system", "content": "You are Bruce.\n\nUse tools wisely."}
    )
    # The time rides on the user's message the turn began with, after the tool round too.
    assert first[1] == {"role": "user", "content": "Hello\n\nNow: Monday"}
    assert second[1] == {"role": "user", "content": "Hello\n\nNow: Tuesday"}
    assert first[2:] == second[2:]
