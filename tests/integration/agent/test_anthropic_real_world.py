"""The Anthropic provider against answers as real Anthropic servers give them.

Recorded bodies (`tests/fixtures/anthropic/`, origins in its README) are replayed through the real
`anthropic.AsyncAnthropic` SDK by the fake server, which also checks the requests the way the real
API does: thinking blocks must come back unchanged (signatures it issued), a turn in a tool loop
must begin with its thinking, no cache breakpoint on thinking, `max_tokens` above the budget.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from bruce_bot.agent.loop import run_agent_loop
from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, LLMResponse, SystemPrompt, ToolResult, ToolSpec
from bruce_bot.llm.anthropic import AnthropicLLM
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
from bruce_bot.tools.registry import ToolRegistry
from tests.fakes.anthropic_server import FIXTURES_DIR, FakeAnthropicServer, load_fixture
from tests.integration.support import AddTool

API_KEY = "sk-ant-api03-test-0123456789abcdef"
SYSTEM = SystemPrompt(stable=("You are Bruce.",), volatile=("Now: Monday",))
HELLO = (ChatMessage(role="user", text="Hello"),)
BUDGET = 3000
EPHEMERAL = {"type": "ephemeral"}
# The tool of the recorded thinking conversation, as it was declared then.
USER_COUNTRY = ToolSpec(
    name="get_user_country",
    description="",
    parameters={"additionalProperties": False, "properties": {}, "type": "object"},
)
WEB_SEARCH = ToolSpec(
    name="web_search",
    description="Search the web.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)


def llm_config(base_url: str, *, thinking: bool = True, **overrides: Any) -> LLMConfig:
    values: dict[str, Any] = {
        "provider": "anthropic",
        "model": "claude-sonnet-4-0",
        "api_key": API_KEY,
        "base_url": base_url,
        "max_tokens": 4096,
        "timeout_seconds": 10,
        "max_retries": 0,
        "thinking": {"enabled": thinking, "budget_tokens": BUDGET},
    }
    values.update(overrides)
    return LLMConfig(**values)


@pytest.fixture
async def server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as fake:
        yield fake


@pytest.fixture
async def claude(server: FakeAnthropicServer) -> AsyncIterator[AnthropicLLM]:
    llm = AnthropicLLM(llm_config(server.base_url))
    yield llm
    await llm.aclose()


def assistant_turn(response: LLMResponse) -> ChatMessage:
    """The assistant entry the agent loop keeps for the rest of the turn."""
    return ChatMessage(
        "assistant", response.text, response.tool_calls, replay_blocks=response.replay_blocks
    )


def without_cache_control(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in block.items() if k != "cache_control"} for block in blocks]


# ---- thinking, recorded ----------------------------------------------------------------------


async def test_recorded_thinking_and_tool_use_go_back_unchanged_with_the_tool_result(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    recorded = load_fixture("thinking_tool_use.json")
    server.replay(FIXTURES_DIR / "thinking_tool_use.json")
    server.replay(FIXTURES_DIR / "thinking_tool_use_followup.json")
    question = ChatMessage("user", "What is the largest city in the user country?")

    first = await claude.complete(LLMRequest(SYSTEM, [question], [USER_COUNTRY]))

    assert first.stop_reason == "tool_use"
    assert first.response_id == "msg_01WvueFjZVbHcj4H4zUzeGv2"
    assert first.text == (
        "I'll help you find the largest city in your country. "
        "First, let me determine which country you're from."
    )
    [call] = first.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "toolu_01YGzqpRE16Vricda3Aqcejo",
        "get_user_country",
        {},
    )
    assert "get_user_country function first" not in first.text  # the thinking stays out
    assert list(first.replay_blocks) == recorded["content"]

    result = ChatMessage("user", tool_results=(ToolResult(call.id, call.name, "Mexico"),))
    second = await claude.complete(
        LLMRequest(SYSTEM, [question, assistant_turn(first), result], [USER_COUNTRY])
    )

    # The validating fake took it: the thinking block came back as signed.
    assert second.stop_reason == "end_turn"
    assert second.text.startswith("Based on the information that you're from Mexico")
    assert second.replay_blocks == ()
    sent = server.requests[1]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": BUDGET}
    # Exactly what pydantic-ai sent back in the same recording, which the real API accepted.
    assert sent["messages"][1] == {"role": "assistant", "content": recorded["content"]}
    assert sent["messages"][2]["content"][-1]["cache_control"] == EPHEMERAL
    assert list(first.replay_blocks) == recorded["content"]  # sending did not change them


async def test_a_tool_turn_rebuilt_without_its_thinking_is_refused_like_the_real_api(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.replay(FIXTURES_DIR / "thinking_tool_use.json")
    question = ChatMessage("user", "What is the largest city in the user country?")
    first = await claude.complete(LLMRequest(SYSTEM, [question], [USER_COUNTRY]))
    [call] = first.tool_calls
    rebuilt = ChatMessage("assistant", first.text, first.tool_calls)  # replay blocks dropped
    result = ChatMessage("user", tool_results=(ToolResult(call.id, call.name, "Mexico"),))

    with pytest.raises(LLMRequestError) as caught:
        await claude.complete(LLMRequest(SYSTEM, [question, rebuilt, result], [USER_COUNTRY]))

    assert caught.value.reason == "request rejected"
    assert "Expected `thinking` or `redacted_thinking`, but found `text`" in caught.value.detail
    assert not isinstance(caught.value, LLMContextOverflowError | LLMQuotaExceededError)


async def test_a_changed_thinking_block_is_refused_like_the_real_api(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.replay(FIXTURES_DIR / "thinking_tool_use.json")
    question = ChatMessage("user", "What is the largest city in the user country?")
    first = await claude.complete(LLMRequest(SYSTEM, [question], [USER_COUNTRY]))
    [call] = first.tool_calls
    changed = [copy.deepcopy(block) for block in first.replay_blocks]
    changed[0]["thinking"] = changed[0]["thinking"].replace("Mexico", "Brazil") + " (edited)"
    tampered = ChatMessage("assistant", first.text, first.tool_calls, replay_blocks=tuple(changed))
    result = ChatMessage("user", tool_results=(ToolResult(call.id, call.name, "Mexico"),))

    with pytest.raises(LLMRequestError) as caught:
        await claude.complete(LLMRequest(SYSTEM, [question, tampered, result], [USER_COUNTRY]))

    assert "messages.1.content.0: Invalid `signature` in `thinking` block" in caught.value.detail


async def test_recorded_redacted_thinking_keeps_its_data_and_goes_back_in_the_next_call(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    recorded = load_fixture("redacted_thinking.json")
    server.replay(FIXTURES_DIR / "redacted_thinking.json")
    server.replay(FIXTURES_DIR / "redacted_thinking_followup.json")
    trigger = ChatMessage("user", "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_46C9A13E")

    first = await claude.complete(LLMRequest(SYSTEM, [trigger]))

    assert first.stop_reason == "end_turn"
    assert first.text == recorded["content"][1]["text"]
    assert recorded["content"][0]["data"] not in first.text
    assert list(first.replay_blocks) == recorded["content"]
    assert first.replay_blocks[0]["data"] == recorded["content"][0]["data"]

    again = ChatMessage("user", "What was that about?")
    second = await claude.complete(LLMRequest(SYSTEM, [trigger, assistant_turn(first), again]))

    assert second.text.startswith("That message appeared to be an attempt")
    assert server.requests[1]["messages"][1] == {
        "role": "assistant",
        "content": recorded["content"],
    }


async def test_scripted_thinking_round_trip_through_a_tool_loop_is_accepted(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.script(thinking="The user wants news; search first.", tool_calls=[("web_search", {})])
    server.script("Here is the news.")

    first = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))
    [call] = first.tool_calls
    result = ChatMessage("user", tool_results=(ToolResult(call.id, call.name, "news"),))
    second = await claude.complete(
        LLMRequest(SYSTEM, [*HELLO, assistant_turn(first), result], [WEB_SEARCH])
    )

    assert first.text == ""
    assert [block["type"] for block in first.replay_blocks] == ["thinking", "tool_use"]
    assert "search first" not in first.text
    assert second.text == "Here is the news."


async def test_a_thinking_only_answer_sent_back_gets_no_cache_breakpoint_on_the_thinking(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    # The whole budget went on thinking: a max_tokens answer with nothing but a thinking block.
    server.script(thinking="Let me weigh every option", stop_reason="max_tokens")
    server.script("Short answer: yes.")

    cut = await claude.complete(LLMRequest(SYSTEM, HELLO))
    answer = await claude.complete(LLMRequest(SYSTEM, [*HELLO, assistant_turn(cut)]))

    assert (cut.text, cut.stop_reason, cut.truncated) == ("", "max_tokens", True)
    assert answer.text == "Short answer: yes."
    user, assistant = server.requests[1]["messages"]
    assert assistant["content"] == list(cut.replay_blocks)  # no cache_control on the thinking
    assert user["content"] == [
        {"type": "text", "text": "Hello", "cache_control": EPHEMERAL},  # the breakpoint moved here
        {"type": "text", "text": "Now: Monday"},
    ]


async def test_the_agent_loop_runs_a_thinking_tool_round_the_real_api_would_accept(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    add = AddTool()
    server.script(thinking="Two numbers: use the add tool.", tool_calls=[("add", {"a": 2, "b": 3})])
    server.script("2 + 3 = 5.")

    run = await run_agent_loop(claude, ToolRegistry([add]), SYSTEM, [ChatMessage("user", "2+3?")])

    assert run.text == "2 + 3 = 5."
    assert add.calls == [{"a": 2, "b": 3}]
    _, assistant, results = server.requests[1]["messages"]
    assert [block["type"] for block in assistant["content"]] == ["thinking", "tool_use"]
    assert results["content"][0]["type"] == "tool_result"


async def test_the_agent_loop_never_runs_a_cut_call_and_its_next_request_is_accepted(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    add = AddTool()
    server.script(thinking="Add them.", tool_calls=[("add", {"a": 2})], stop_reason="max_tokens")
    server.script("I ran out of room; the sum of 2 and 3 is 5.")

    run = await run_agent_loop(claude, ToolRegistry([add]), SYSTEM, [ChatMessage("user", "2+3?")])

    assert add.calls == []
    assert run.text == "I ran out of room; the sum of 2 and 3 is 5."
    assert len(server.requests) == 2  # the fake took the thinking turn and its error results


async def test_the_agent_loop_continues_a_recorded_paused_turn_into_one_answer(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    paused_body = load_fixture("pause_turn_web_search.json")
    server.replay(FIXTURES_DIR / "pause_turn_web_search.json")
    server.replay(FIXTURES_DIR / "pause_turn_web_search_continued.json")

    run = await run_agent_loop(
        claude, ToolRegistry([AddTool()]), SYSTEM, [ChatMessage("user", "Search, then sum up.")]
    )

    assert run.text.startswith("I'll run these searches for you one at a time. Let me begin:")
    assert "San Francisco is experiencing sunny weather with a high of 68°F." in run.text
    resent = server.requests[1]["messages"][-1]
    assert without_cache_control(resent["content"]) == paused_body["content"]


# ---- pause_turn, refusal, max_tokens -----------------------------------------------------------


async def test_recorded_pause_turn_is_sent_back_whole_and_the_continuation_reads_as_one_text(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    paused_body = load_fixture("pause_turn_web_search.json")
    server.replay(FIXTURES_DIR / "pause_turn_web_search.json")
    server.replay(FIXTURES_DIR / "pause_turn_web_search_continued.json")
    question = ChatMessage("user", "Run a series of web searches, then summarise.")

    paused = await claude.complete(LLMRequest(SYSTEM, [question], [WEB_SEARCH]))

    assert paused.stop_reason == "pause_turn"
    assert paused.tool_calls == ()  # server tools run at Anthropic, not here
    assert paused.text == (
        "I'll run these searches for you one at a time. Let me begin:\n\n"
        "I'll continue with the remaining searches. Since you asked for 15 searches total, let "
        "me complete the rest. I'll skip ahead as some variations would return similar results:"
    )
    assert list(paused.replay_blocks) == paused_body["content"]

    continued = await claude.complete(
        LLMRequest(SYSTEM, [question, assistant_turn(paused)], [WEB_SEARCH])
    )

    sent = server.requests[1]["messages"][-1]
    assert sent["role"] == "assistant"
    assert without_cache_control(sent["content"]) == paused_body["content"]
    assert sent["content"][-1]["type"] == "server_tool_use"
    assert sent["content"][-1]["cache_control"] == EPHEMERAL
    assert continued.stop_reason == "end_turn"
    # Cited pieces carry their own spacing: joined as they are, never run together.
    assert (
        "San Francisco is experiencing sunny weather with a high of 68°F. Clear skies with cold "
        "temperatures in the 30s and 40s this morning"
    ) in continued.text
    assert "is now Good.\n\nAll searches have been successfully completed" in continued.text
    assert continued.replay_blocks == ()


async def test_refusal_is_reported_with_the_text_that_came_before_it(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.replay(FIXTURES_DIR / "refusal.json")

    response = await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert response.stop_reason == "refusal"
    assert response.text == "Hello.."
    assert response.tool_calls == ()
    assert response.response_id == "msg_01RefusalFromDocs00000001"


async def test_a_tool_use_cut_by_max_tokens_is_never_presented_as_complete(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.replay(FIXTURES_DIR / "max_tokens_cut_tool_use.json")

    response = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    assert (response.stop_reason, response.truncated) == ("max_tokens", True)
    assert response.text == "I'll write the whole page to an artifact now."
    [call] = response.tool_calls
    assert (call.name, call.arguments, call.raw_arguments) == ("write_artifact", None, "{}")


async def test_only_the_last_tool_use_of_a_cut_answer_is_marked_cut(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.replay(FIXTURES_DIR / "max_tokens_cut_second_tool_use.json")

    response = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    complete, cut = response.tool_calls
    assert complete.arguments == {"query": "bruce wayne"}
    assert cut.arguments is None
    assert json.loads(cut.raw_arguments) == {"url": "https://en.wikipedia.org/wiki/Bat"}


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("end_turn", "end_turn"),
        ("stop_sequence", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "max_tokens"),
        ("pause_turn", "pause_turn"),
        ("refusal", "refusal"),
        ("a_reason_from_the_future", "other"),
    ],
)
async def test_stop_reasons_are_normalised(
    claude: AnthropicLLM, server: FakeAnthropicServer, sent: str, expected: str
) -> None:
    server.script("Some text.", stop_reason=sent)

    response = await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert response.stop_reason == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ([{"type": "text", "text": "Done."}], "end_turn"),
        ([{"type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {}}], "other"),
    ],
)
async def test_a_missing_stop_reason_is_end_turn_only_for_plain_text(
    claude: AnthropicLLM,
    server: FakeAnthropicServer,
    content: list[dict[str, Any]],
    expected: str,
) -> None:
    body = load_fixture("thinking_tool_use_followup.json")
    server.replay({**body, "content": content, "stop_reason": None})

    response = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    assert response.stop_reason == expected


# ---- the thinking setting ----------------------------------------------------------------------


async def test_thinking_is_sent_for_the_main_model_only(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.script("Main answer.", thinking="Thinking it over.", times=2)

    main = await claude.complete(LLMRequest(SYSTEM, HELLO))
    background = await claude.complete(LLMRequest(SYSTEM, HELLO, model="claude-haiku-4-5"))

    to_main, to_background = server.requests
    assert to_main["thinking"] == {"type": "enabled", "budget_tokens": BUDGET}
    assert to_main["max_tokens"] == 4096
    assert "thinking" not in to_background
    assert to_background["model"] == "claude-haiku-4-5"
    assert [block["type"] for block in main.replay_blocks] == ["thinking", "text"]
    assert background.replay_blocks == ()
    assert main.text == background.text == "Main answer."
    assert "temperature" not in to_main


async def test_thinking_with_forced_text_keeps_tool_choice_none(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.script(tool_calls=[("web_search", {"query": "x"})])

    response = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH], force_text=True))

    sent = server.requests[0]
    assert sent["tool_choice"] == {"type": "none"}
    assert sent["thinking"]["type"] == "enabled"
    assert response.tool_calls == ()
    assert response.text  # the fake accepted the combination and answered in words


async def test_a_call_asking_for_fewer_tokens_than_the_budget_goes_without_thinking(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.script("Brief.")

    response = await claude.complete(LLMRequest(SYSTEM, HELLO, max_tokens=1024))

    assert response.text == "Brief."
    assert server.requests[0]["max_tokens"] == 1024
    assert "thinking" not in server.requests[0]


async def test_thinking_off_sends_no_thinking(server: FakeAnthropicServer) -> None:
    server.script("Plain.", thinking="never sent")
    llm = AnthropicLLM(llm_config(server.base_url, thinking=False))
    try:
        response = await llm.complete(LLMRequest(SYSTEM, HELLO))
    finally:
        await llm.aclose()

    assert "thinking" not in server.requests[0]
    assert response.replay_blocks == ()


# ---- text pieces and blocks nobody knows ------------------------------------------------------


async def test_several_text_blocks_are_joined_readably(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.script(["The results are in.", "Based on them, Bruce is a bat.", "Also,", "he flies."])

    response = await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert response.text == (
        "The results are in.\n\nBased on them, Bruce is a bat.\n\nAlso, he flies."
    )


async def test_an_unknown_block_type_is_skipped_and_logged_with_the_response_id(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.replay(FIXTURES_DIR / "future_block_type.json")

    with capture_logs() as logs:
        response = await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert response.text.startswith(
        "Based on the information that you're from Mexico, the largest city in your country is "
        "**Mexico City** (Ciudad de México).\n\nMexico City is not only the largest city"
    )
    assert response.stop_reason == "end_turn"
    assert response.replay_blocks == ()
    [skipped] = [entry for entry in logs if entry["event"] == "llm_blocks_skipped"]
    assert skipped["response_id"] == "msg_01FutureBlockTypeAdapted01"
    assert skipped["block_types"] == ["bruce_test_future_block"]


async def test_an_unknown_block_of_a_paused_turn_is_kept_for_the_replay(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    body = load_fixture("future_block_type.json")
    server.replay({**body, "stop_reason": "pause_turn"})

    response = await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert response.stop_reason == "pause_turn"
    assert list(response.replay_blocks) == body["content"]
    assert response.replay_blocks[1] == {
        "type": "bruce_test_future_block",
        "payload": {"opaque": "EqQBCkYIBxgCKkB"},
        "note": None,
    }


async def test_malformed_blocks_are_ignored_not_fatal(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    body = load_fixture("thinking_tool_use_followup.json")
    content = [
        1,
        None,
        "loose text",
        {"no_type": True},
        {"type": "text"},
        {"type": "tool_use", "name": "web_search", "input": {}},  # no id: cannot be answered
        {"type": "text", "text": "Still here."},
    ]
    server.replay({**body, "content": content})

    response = await claude.complete(LLMRequest(SYSTEM, HELLO, [WEB_SEARCH]))

    assert response.text == "Still here."
    assert response.tool_calls == ()


@pytest.mark.parametrize(
    ("payload", "content_type"),
    [
        ("<html><body>502 Bad Gateway</body></html>", "text/html"),
        ("{not json", "application/json"),
        ("[1, 2, 3]", "application/json"),
        ('{"id": "msg_01NoContent", "type": "message", "role": "assistant"}', "application/json"),
    ],
    ids=["html", "broken-json", "a-list", "no-content"],
)
async def test_an_answer_the_sdk_cannot_read_is_an_invalid_response(
    claude: AnthropicLLM, server: FakeAnthropicServer, payload: str, content_type: str
) -> None:
    server.replay(payload, content_type=content_type)

    with pytest.raises(LLMUnavailableError) as caught:
        await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert caught.value.reason == "invalid response"
    assert API_KEY not in str(caught.value)


# ---- errors as Anthropic sends them ------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "status", "error_class", "reason"),
    [
        ("error_prompt_too_long.json", 400, LLMContextOverflowError, "context too long"),
        (
            "error_input_and_max_tokens_exceed_context_limit.json",
            400,
            LLMContextOverflowError,
            "context too long",
        ),
        ("error_request_too_large.json", 413, LLMContextOverflowError, "context too long"),
        (
            "error_request_size_exceeds_context_window.json",
            413,
            LLMContextOverflowError,
            "context too long",
        ),
        ("error_credit_balance_too_low.json", 400, LLMQuotaExceededError, "no credit"),
        ("error_billing.json", 402, LLMQuotaExceededError, "no credit"),
        ("error_usage_limits_reached.json", 400, LLMQuotaExceededError, "usage limit reached"),
        ("error_invalid_api_key.json", 401, LLMAuthenticationError, "authentication failed"),
        ("error_overloaded.json", 529, LLMUnavailableError, "overloaded"),
        ("error_thinking_block_expected.json", 400, LLMRequestError, "request rejected"),
        ("error_invalid_thinking_signature.json", 400, LLMRequestError, "request rejected"),
        (
            "error_max_tokens_not_above_thinking_budget.json",
            400,
            LLMRequestError,
            "request rejected",
        ),
        ("error_thinking_cache_control.json", 400, LLMRequestError, "request rejected"),
        ("error_thinking_forced_tool_choice.json", 400, LLMRequestError, "request rejected"),
    ],
)
async def test_recorded_error_bodies_map_to_the_right_errors(
    claude: AnthropicLLM,
    server: FakeAnthropicServer,
    fixture: str,
    status: int,
    error_class: type[LLMError],
    reason: str,
) -> None:
    server.replay(FIXTURES_DIR / fixture, status=status)

    with pytest.raises(LLMError) as caught:
        await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert type(caught.value) is error_class
    assert caught.value.reason == reason
    assert API_KEY not in str(caught.value)
    if error_class is LLMAuthenticationError:
        assert "llm.api_key" in caught.value.detail
    elif error_class is not LLMUnavailableError:
        assert load_fixture(fixture)["error"]["message"] in caught.value.detail


async def test_an_unknown_model_names_the_model_asked_for(
    claude: AnthropicLLM, server: FakeAnthropicServer
) -> None:
    server.replay(FIXTURES_DIR / "error_model_not_found.json", status=404)

    with pytest.raises(LLMModelNotFoundError) as caught:
        await claude.complete(LLMRequest(SYSTEM, HELLO, model="opus-4"))

    assert caught.value.reason == "model not found"
    assert caught.value.model == "opus-4"
    assert "model: opus-4" in caught.value.detail
    assert "thinking" not in server.requests[0]  # an explicit model is a background call


@pytest.mark.parametrize(
    ("status", "message", "error_class"),
    [
        (
            400,
            "prompt is too long: 210000 tokens > 200000 maximum (key {key})",
            LLMContextOverflowError,
        ),
        (
            400,
            "Your credit balance is too low to access the Anthropic API ({key})",
            LLMQuotaExceededError,
        ),
        (402, "billing problem for key {key}", LLMQuotaExceededError),
        (404, "model: claude-nope for {key}", LLMModelNotFoundError),
        (400, "messages: something else is wrong with {key}", LLMRequestError),
        (401, "invalid x-api-key {key}", LLMAuthenticationError),
        (529, "Overloaded ({key})", LLMUnavailableError),
    ],
)
async def test_error_details_never_include_the_api_key(
    claude: AnthropicLLM,
    server: FakeAnthropicServer,
    status: int,
    message: str,
    error_class: type[LLMError],
) -> None:
    server.script(error=status, error_message=message.format(key=API_KEY))

    with pytest.raises(error_class) as caught:
        await claude.complete(LLMRequest(SYSTEM, HELLO))

    assert API_KEY not in str(caught.value)
    assert API_KEY not in caught.value.detail
