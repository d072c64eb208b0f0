"""The OpenAI-compatible provider against answers as Ollama, vLLM, llama.cpp, LM Studio, OpenAI
and gateways really send them: bodies recorded from those servers (tests/fixtures/openai/, origins
in its README) replayed through the fake server and read by the real `openai` SDK."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, LLMResponse, SystemPrompt, ToolResult, ToolSpec
from bruce_bot.llm.base import (
    LLMAuthenticationError,
    LLMContextOverflowError,
    LLMError,
    LLMModelNotFoundError,
    LLMQuotaExceededError,
    LLMRequest,
    LLMRequestError,
    LLMUnavailableError,
)
from bruce_bot.llm.openai import OpenAICompatibleLLM
from tests.fakes.openai_server import FakeOpenAIServer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "openai"
API_KEY = "sk-local-0123456789abcdef"
MODEL = "qwen3:8b"
SYSTEM = SystemPrompt(stable=("You are Bruce.",))
HELLO = (ChatMessage(role="user", text="Hello"),)


def tool(name: str, **properties: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"The {name} tool.",
        parameters={
            "type": "object",
            "properties": {key: {"type": kind} for key, kind in properties.items()},
        },
    )


TOOLS = {
    spec.name: spec
    for spec in (
        tool("web_search", query="string", max_results="integer"),
        tool("get_weather", city="string", location="string", unit="string"),
        tool("get_current_weather", city="string", state="string", unit="string"),
        tool("glob", pattern="string"),
        tool("query_web_search", query="string"),
        tool("final_result", city="string", country="string"),
        tool("get_current_time"),
        tool("search_gutenberg_books", search_terms="array"),
        tool("LLM_Tool_RAG", term="string", vector="string"),
        tool("sales_data", shop_name="string", start_date="string", end_date="string"),
        tool("edit", file_path="string", old_string="string", new_string="string"),
    )
}

# Reasoning never reaches what a person reads; markup does only when it was not taken as calls.
REASONING = re.compile(r"<think|</think|<thinking")
MARKUP = re.compile(r"<tool_call|</tool_call|<function=|\[TOOL_CALLS\]")


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
async def llm(server: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleLLM]:
    provider = OpenAICompatibleLLM(
        LLMConfig(
            provider="openai",
            model=MODEL,
            api_key=API_KEY,
            base_url=server.base_url,
            max_tokens=512,
            timeout_seconds=10,
            max_retries=0,
        )
    )
    yield provider
    await provider.aclose()


def recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


async def replayed(
    server: FakeOpenAIServer,
    llm: OpenAICompatibleLLM,
    name: str,
    offered: tuple[str, ...] = (),
    **options: Any,
) -> LLMResponse:
    server.replay(FIXTURES / f"{name}.json")
    response = await llm.complete(LLMRequest(SYSTEM, HELLO, [TOOLS[n] for n in offered], **options))
    assert not REASONING.search(response.text), response.text
    if response.tool_calls:
        assert not MARKUP.search(response.text), response.text
    ids = [call.id for call in response.tool_calls]
    assert all(ids) and len(set(ids)) == len(ids)
    return response


def as_written(name: str) -> str:
    """The recorded answer's text as the server sent it (what is shown when it is no call)."""
    content = recorded(name)["choices"][0]["message"]["content"]
    assert isinstance(content, str)
    return content.strip()


def calls_of(response: LLMResponse) -> list[tuple[str, Any]]:
    return [(call.name, call.arguments) for call in response.tool_calls]


# ---- answers ---------------------------------------------------------------------------------

# fixture, tools offered, text, calls (name, arguments), stop reason
ANSWERS = [
    ("ollama_finish_reason_length", (), "Hello", [], "max_tokens"),
    (
        "cerebras_qwen3_think_with_tool_call",
        ("final_result",),
        "",
        [("final_result", {"city": "Paris", "country": "France"})],
        "tool_use",
    ),
    (
        "gemini_tool_call_without_content",
        ("get_current_time",),
        "",
        [("get_current_time", {})],
        "tool_use",
    ),
    (
        "openrouter_qwen25_tool_calls_finish_stop",
        ("search_gutenberg_books",),
        "",
        [("search_gutenberg_books", {"search_terms": ["James", "Joyce"]})],
        "tool_use",
    ),
    (
        "ollama_qwen3coder_function_markup_in_content",
        ("glob",),
        "I'll scan the source code structure to identify potential improvement areas. Let me "
        "examine the project layout and key files to understand the current implementation.",
        [("glob", {"pattern": "src/semantic_harvest/src/common/cli/commands/*.py"})],
        "tool_use",
    ),
    # Markup for a tool not offered is no call: shown as the model wrote it.
    (
        "ollama_qwen3coder_function_markup_in_content",
        (),
        as_written("ollama_qwen3coder_function_markup_in_content"),
        [],
        "end_turn",
    ),
    # A call in a code fence is how a model quotes, even as the whole answer: shown, not run.
    (
        "ollama_llama32_json_in_content",
        ("query_web_search",),
        as_written("ollama_llama32_json_in_content"),
        [],
        "end_turn",
    ),
    # Calls followed by prose (here the model's made-up continuation) are not the answer.
    (
        "vllm_mistral_tool_calls_in_content",
        ("get_current_weather",),
        as_written("vllm_mistral_tool_calls_in_content"),
        [],
        "end_turn",
    ),
    (
        "vllm_qwen25_hermes_tool_calls_in_content",
        ("get_weather",),
        "I'll look up both cities.",
        [("get_weather", {"city": "Beijing"}), ("get_weather", {"city": "Shanghai"})],
        "tool_use",
    ),
    (
        "vllm_reasoning_content_with_tool_call",
        ("get_weather",),
        "",
        [("get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"})],
        "tool_use",
    ),
    # A call written inside the reasoning is thinking, not a request: nothing runs.
    ("vllm_tool_call_inside_reasoning", ("edit",), "", [], "end_turn"),
    (
        "llamacpp_arguments_as_object",
        ("web_search",),
        "",
        [("web_search", {"query": "llama.cpp tool calling", "max_results": 3})],
        "tool_use",
    ),
    (
        "ollama_tool_call_without_id_and_type",
        ("LLM_Tool_RAG",),
        "",
        [
            (
                "LLM_Tool_RAG",
                {"term": "accidents, jugements", "vector": "accidents at Versailles court"},
            )
        ],
        "tool_use",
    ),
    (
        "openrouter_empty_and_duplicate_ids",
        ("get_weather",),
        "",
        [
            ("get_weather", {"city": "Denver"}),
            ("get_weather", {"city": "Moab"}),
            ("get_weather", {"city": "Boulder"}),
        ],
        "tool_use",
    ),
    (
        "qwen25_double_encoded_arguments",
        ("sales_data",),
        "",
        [
            (
                "sales_data",
                {"shop_name": "A店", "start_date": "2025-03-23", "end_date": "2025-03-23"},
            )
        ],
        "tool_use",
    ),
    (
        "vllm_finish_tool_calls_without_calls",
        ("get_weather",),
        "I'm doing well, thank you for asking! How can I help you today?",
        [],
        "end_turn",
    ),
    (
        "omlx_unclosed_tool_call_finish_stop",
        ("web_search",),
        "I'll use web-browsing to look that up.",
        [("web_search", None)],  # cut JSON: the loop tells the model
        "tool_use",
    ),
    (
        "omlx_unclosed_tool_call_finish_stop",
        (),
        as_written("omlx_unclosed_tool_call_finish_stop"),
        [],
        "end_turn",
    ),
    ("ollama_reasoning_field", (), "The capital of France is **Paris**.", [], "end_turn"),
    ("openai_refusal", (), "I'm sorry, I cannot assist with that request.", [], "refusal"),
    ("azure_finish_content_filter", (), "", [], "refusal"),
]


@pytest.mark.parametrize(
    ("name", "offered", "text", "calls", "stop_reason"),
    ANSWERS,
    ids=[f"{case[0]}-{'offered' if case[1] else 'no tools'}" for case in ANSWERS],
)
async def test_recorded_answers_read_as_a_person_and_the_loop_need(
    server: FakeOpenAIServer,
    llm: OpenAICompatibleLLM,
    name: str,
    offered: tuple[str, ...],
    text: str,
    calls: list[tuple[str, Any]],
    stop_reason: str,
) -> None:
    response = await replayed(server, llm, name, offered)

    assert response.text == text
    assert calls_of(response) == calls
    assert response.stop_reason == stop_reason
    assert response.response_id == recorded(name)["id"]


async def test_thinking_before_a_lone_closing_tag_is_not_shown(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    response = await replayed(server, llm, "llamacpp_qwen35_lone_think_close")

    assert response.text.startswith("Hello! How can I assist you today?")
    assert "the user just sent" not in response.text
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 131)


async def test_reasoning_fields_are_never_shown(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    with_field = await replayed(server, llm, "ollama_reasoning_field")
    with_tools = await replayed(
        server, llm, "vllm_reasoning_content_with_tool_call", ("get_weather",)
    )

    assert "factual question" not in with_field.text
    assert with_tools.text == ""


async def test_ids_servers_send_are_kept_unless_missing_or_repeated(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    gemini = await replayed(server, llm, "gemini_tool_call_without_content", ("get_current_time",))
    repeated = await replayed(server, llm, "openrouter_empty_and_duplicate_ids", ("get_weather",))
    missing = await replayed(server, llm, "ollama_tool_call_without_id_and_type", ("LLM_Tool_RAG",))

    assert gemini.tool_calls[0].id == "function-call-2900024254458648715"
    empty, first, duplicate = (call.id for call in repeated.tool_calls)
    assert first == "tool_0_get_weather"
    assert empty not in ("", first) and duplicate not in ("", first)
    assert missing.tool_calls[0].id.startswith("call_")


async def test_object_and_double_encoded_arguments_go_back_as_json_strings(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    as_object = await replayed(server, llm, "llamacpp_arguments_as_object", ("web_search",))
    double = await replayed(server, llm, "qwen25_double_encoded_arguments", ("sales_data",))

    for call in (*as_object.tool_calls, *double.tool_calls):
        assert isinstance(call.raw_arguments, str)
        assert json.loads(call.raw_arguments) == call.arguments


async def test_a_response_without_usage_counts_nothing(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    response = await replayed(server, llm, "azure_finish_content_filter")

    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)


@pytest.mark.parametrize("name", ["azure_empty_choices", "vllm_message_null"])
async def test_an_answer_without_a_message_is_an_invalid_response(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM, name: str
) -> None:
    server.replay(FIXTURES / f"{name}.json")

    with pytest.raises(LLMUnavailableError) as caught:
        await llm.complete(LLMRequest(SYSTEM, HELLO))

    assert caught.value.reason == "invalid response"
    assert repr(recorded(name)["id"]) in caught.value.detail


# ---- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "offered"),
    [
        ("vllm_qwen25_hermes_tool_calls_in_content", ("get_weather",)),
        ("ollama_qwen3coder_function_markup_in_content", ("glob",)),
        ("openrouter_empty_and_duplicate_ids", ("get_weather",)),
        ("ollama_tool_call_without_id_and_type", ("LLM_Tool_RAG",)),
        ("llamacpp_arguments_as_object", ("web_search",)),
    ],
)
async def test_calls_as_servers_send_them_round_trip_into_a_valid_request(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM, name: str, offered: tuple[str, ...]
) -> None:
    tools = [TOOLS[n] for n in offered]
    first = await replayed(server, llm, name, offered)
    server.script("Done.")

    history = [
        *HELLO,
        ChatMessage(role="assistant", text=first.text, tool_calls=first.tool_calls),
        ChatMessage(
            role="user",
            tool_results=tuple(
                ToolResult(call.id, call.name, f"result {index}")
                for index, call in enumerate(first.tool_calls)
            ),
        ),
    ]
    second = await llm.complete(LLMRequest(SYSTEM, history, tools))

    # The fake refuses (400) tool messages that answer no call and calls left unanswered.
    assert second.text == "Done."
    sent = server.requests[1]["messages"]
    assistant = sent[2]
    assert assistant["content"] == (first.text or None)
    assert not MARKUP.search(assistant["content"] or "")
    assert [call["id"] for call in assistant["tool_calls"]] == [c.id for c in first.tool_calls]
    assert [m["tool_call_id"] for m in sent[3:]] == [c.id for c in first.tool_calls]
    for call, replay in zip(first.tool_calls, assistant["tool_calls"], strict=True):
        assert json.loads(replay["function"]["arguments"]) == call.arguments


# ---- tool_choice "none" ignored, output cut --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "offered", "text"),
    [
        ("openrouter_qwen25_tool_calls_finish_stop", ("search_gutenberg_books",), ""),
        ("vllm_qwen25_hermes_tool_calls_in_content", ("get_weather",), "I'll look up both cities."),
    ],
)
async def test_calls_made_despite_tool_choice_none_are_dropped(
    server: FakeOpenAIServer,
    llm: OpenAICompatibleLLM,
    name: str,
    offered: tuple[str, ...],
    text: str,
) -> None:
    response = await replayed(server, llm, name, offered, force_text=True)

    assert server.requests[0]["tool_choice"] == "none"
    assert response.tool_calls == ()
    assert response.text == text
    assert response.stop_reason == "end_turn"


async def test_calls_cut_by_the_token_limit_lose_their_arguments(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    body = recorded("omlx_unclosed_tool_call_finish_stop")
    body["choices"][0]["finish_reason"] = "length"
    server.replay(body)
    server.script(
        tool_calls=[("web_search", {"query": "a"}), ("web_search", '{"query": "b"}')],
        finish_reason="length",
    )

    # Written first: once the model has called natively, its text is not read for calls (auto).
    written = await llm.complete(LLMRequest(SYSTEM, HELLO, [TOOLS["web_search"]]))
    native = await llm.complete(LLMRequest(SYSTEM, HELLO, [TOOLS["web_search"]]))

    assert native.stop_reason == "max_tokens"
    # The last call may be cut even where its JSON parses; earlier ones are whole.
    assert calls_of(native) == [("web_search", {"query": "a"}), ("web_search", None)]
    assert native.tool_calls[1].raw_arguments == '{"query": "b"}'
    assert written.stop_reason == "max_tokens"
    assert calls_of(written) == [("web_search", None)]


async def test_unknown_finish_reasons_are_other_and_tool_calls_win_over_stop(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    server.script("partial", finish_reason="abort")
    server.script(tool_calls=[("web_search", {"query": "x"})], finish_reason="stop")

    odd = await llm.complete(LLMRequest(SYSTEM, HELLO))
    stopped = await llm.complete(LLMRequest(SYSTEM, HELLO, [TOOLS["web_search"]]))

    assert (odd.text, odd.stop_reason) == ("partial", "other")
    assert stopped.stop_reason == "tool_use"


# ---- errors ----------------------------------------------------------------------------------

# fixture, HTTP status, error class, reason
ERRORS: list[tuple[str, int, type[LLMError], str]] = [
    ("error_llamacpp_exceed_context_size", 400, LLMContextOverflowError, "context too long"),
    ("error_llamacpp_context_size_exceeded_500", 500, LLMContextOverflowError, "context too long"),
    ("error_vllm_max_context_length", 400, LLMContextOverflowError, "context too long"),
    ("error_openai_context_length_exceeded", 400, LLMContextOverflowError, "context too long"),
    ("error_deepseek_context_length", 400, LLMContextOverflowError, "context too long"),
    ("error_openai_insufficient_quota", 429, LLMQuotaExceededError, "no credit"),
    ("error_openrouter_insufficient_credits", 402, LLMQuotaExceededError, "no credit"),
    ("error_ollama_model_not_found", 404, LLMModelNotFoundError, "model not found"),
    ("error_vllm_model_does_not_exist", 404, LLMModelNotFoundError, "model not found"),
    ("error_lmstudio_no_models_loaded", 400, LLMModelNotFoundError, "model not found"),
    ("error_openai_invalid_api_key", 401, LLMAuthenticationError, "authentication failed"),
    ("error_openai_tokens_per_min_429", 429, LLMUnavailableError, "rate limited"),
]


@pytest.mark.parametrize(("name", "status", "error", "reason"), ERRORS, ids=[e[0] for e in ERRORS])
async def test_recorded_errors_reach_the_core_as_what_they_mean(
    server: FakeOpenAIServer,
    llm: OpenAICompatibleLLM,
    name: str,
    status: int,
    error: type[LLMError],
    reason: str,
) -> None:
    server.replay(FIXTURES / f"{name}.json", status=status)

    with pytest.raises(LLMError) as caught:
        await llm.complete(LLMRequest(SYSTEM, HELLO))

    assert type(caught.value) is error
    assert caught.value.reason == reason
    if isinstance(caught.value, LLMModelNotFoundError):
        assert caught.value.model == MODEL
        assert MODEL in caught.value.detail


@pytest.mark.parametrize(
    ("shape", "status", "message", "error"),
    [
        (
            "llamacpp",
            400,
            "request (4390 tokens) exceeds the available context size (4096 tokens), try "
            "increasing it",
            LLMContextOverflowError,
        ),
        ("vllm", 404, f"The model `{MODEL}` does not exist.", LLMModelNotFoundError),
        ("ollama", 404, f'model "{MODEL}" not found, try pulling it first', LLMModelNotFoundError),
        ("lmstudio", 400, "No models loaded. Please load a model.", LLMModelNotFoundError),
        ("vllm", 400, "max_tokens must be at least 1, got -186.", LLMRequestError),
        ("ollama", 500, "llama runner process has terminated: exit status 2", LLMUnavailableError),
    ],
)
async def test_error_bodies_in_each_servers_shape(
    server: FakeOpenAIServer,
    llm: OpenAICompatibleLLM,
    shape: Any,
    status: int,
    message: str,
    error: type[LLMError],
) -> None:
    server.script(error=status, error_message=message, error_shape=shape)

    with pytest.raises(LLMError) as caught:
        await llm.complete(LLMRequest(SYSTEM, HELLO))

    assert type(caught.value) is error


async def test_errors_never_echo_the_api_key(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    echoing = {"error": {"message": f"key {API_KEY} is not allowed here", "code": None}}
    for status in (400, 403, 404, 429, 500):
        server.replay(echoing, status=status)
        with pytest.raises(LLMError) as caught:
            await llm.complete(LLMRequest(SYSTEM, HELLO))
        assert API_KEY not in str(caught.value)
        assert API_KEY not in caught.value.detail


async def test_scripted_calls_from_a_server_that_ignores_tool_choice_none_are_dropped(
    server: FakeOpenAIServer, llm: OpenAICompatibleLLM
) -> None:
    server.script(
        "Let me add.", tool_calls=[("web_search", {"query": "x"})], ignores_tool_choice=True
    )

    response = await llm.complete(LLMRequest(SYSTEM, HELLO, [TOOLS["web_search"]], force_text=True))

    assert (response.text, response.tool_calls, response.stop_reason) == (
        "Let me add.",
        (),
        "end_turn",
    )
