"""The agent loop end to end: a message typed into a real channel, Bruce's real Anthropic provider
(the anthropic SDK) against the fake Messages API, test tools, and the SQLite file on disk. Each
test checks what the user (or the owner reading the audit tables) would notice."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bruce_bot.agent.loop import FORCE_FINAL_NOTE
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import running_bruce
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.support import (
    AddTool,
    BoomTool,
    PriceTool,
    RendezvousTool,
    block_text,
    config_for,
    db_rows,
    last_tool_results,
    messages_of,
    next_reply,
    system_blocks,
    system_text,
    tool_uses,
    user_texts,
)

OVERLOADED_REPLY = "I couldn't reach the language model (overloaded); I'll be here when it's back."


def console_session_id(data_dir: Path) -> int:
    rows = db_rows(data_dir, "SELECT id FROM sessions WHERE channel = 'console'")
    assert len(rows) == 1, rows
    return int(rows[0]["id"])


def tool_rows(data_dir: Path) -> list[Any]:
    return db_rows(data_dir, "SELECT * FROM tool_executions ORDER BY id")


# ---- tools across rounds -------------------------------------------------------------------


def shopping_model(body: dict[str, Any]) -> AnthropicReply | str:
    """A model that looks a price up, adds shipping to what the tool said, then answers."""
    last = body["messages"][-1]
    if not any(block.get("type") == "tool_result" for block in last["content"]):
        return AnthropicReply(tool_calls=[("price_of", {"item": "apple"})])
    result = block_text(last_tool_results(body)[0])
    if tool_uses(body)[-1]["name"] == "price_of":
        return AnthropicReply(
            text="Adding shipping.", tool_calls=[("add", {"a": int(result), "b": 8})]
        )
    return f"With shipping, the apple costs {result} euros."


async def test_tools_chain_across_rounds_and_the_user_gets_the_final_answer(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = shopping_model
    console = ConsoleChannel()
    config = config_for(tmp_path, anthropic_fake.base_url)
    tools = ToolRegistry([PriceTool(), AddTool()])
    async with running_bruce(config, tools=tools, channels=[console]):
        assert await console.say("How much is an apple with shipping?")
        assert await next_reply(console.replies) == "With shipping, the apple costs 50 euros."

    requests = anthropic_fake.requests
    assert len(requests) == 3
    # Each round's results travel back as tool_result blocks answering that round's tool_use.
    for body, expected in ((requests[1], "42"), (requests[2], "50")):
        (result,) = last_tool_results(body)
        assert result["tool_use_id"] == tool_uses(body)[-1]["id"]
        assert block_text(result) == expected
        assert not result.get("is_error")
    assert [tool["name"] for tool in requests[0]["tools"]] == ["price_of", "add"]

    session_id = console_session_id(tmp_path)
    rows = tool_rows(tmp_path)
    assert [(r["session_id"], r["turn"], r["tool_name"]) for r in rows] == [
        (session_id, 1, "price_of"),
        (session_id, 2, "add"),
    ]
    assert json.loads(rows[0]["input"]) == {"item": "apple"}
    assert json.loads(rows[1]["input"]) == {"a": 42, "b": 8}
    assert [r["output"] for r in rows] == ["42", "50"]
    assert all(r["error"] is None and r["duration_ms"] >= 0 for r in rows)
    calls = db_rows(tmp_path, "SELECT purpose, session_id FROM llm_calls")
    assert [(c["purpose"], c["session_id"]) for c in calls] == [("agent", session_id)] * 3


async def test_several_tool_calls_of_one_response_run_concurrently(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    # Each call waits for the other to start: only concurrent execution lets both meet.
    rendezvous = RendezvousTool(patience=3.0)
    anthropic_fake.script(tool_calls=[("rendezvous", {"who": "a"}), ("rendezvous", {"who": "b"})])
    anthropic_fake.script("Both of them met.")
    console = ConsoleChannel()
    async with running_bruce(
        config_for(tmp_path, anthropic_fake.base_url),
        tools=ToolRegistry([rendezvous]),
        channels=[console],
    ):
        assert await console.say("Get a and b to meet.")
        assert await next_reply(console.replies) == "Both of them met."

    results = last_tool_results(anthropic_fake.requests[1])
    assert [block_text(r) for r in results] == ["a: met b", "b: met a"]
    assert [r["output"] for r in tool_rows(tmp_path)] == ["a: met b", "b: met a"]


# ---- the loop's limits and the model's mistakes ----------------------------------------------


async def test_max_turns_forces_a_final_text_answer_without_tools(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    forced = "I ran out of steps: 1 + 1 is 2, the rest I could not finish."

    def tool_hungry_model(body: dict[str, Any]) -> AnthropicReply | str:
        if body.get("tool_choice") == {"type": "none"}:
            return forced
        return AnthropicReply(tool_calls=[("add", {"a": 1, "b": 1})])

    anthropic_fake.responder = tool_hungry_model
    console = ConsoleChannel()
    config = config_for(tmp_path, anthropic_fake.base_url, agent={"max_turns": 2})
    async with running_bruce(config, tools=ToolRegistry([AddTool()]), channels=[console]):
        assert await console.say("Keep adding forever.")
        assert await next_reply(console.replies) == forced

    requests = anthropic_fake.requests
    assert len(requests) == 3
    assert all(body.get("tool_choice", {}).get("type") != "none" for body in requests[:2])
    last = requests[2]
    assert last["tool_choice"] == {"type": "none"}
    assert [tool["name"] for tool in last["tools"]] == ["add"]  # still declared, as required
    assert len(last_tool_results(last)) == 1  # the second round's result is not lost
    assert FORCE_FINAL_NOTE in user_texts(last)[-1]
    assert [r["turn"] for r in tool_rows(tmp_path)] == [1, 2]


async def test_an_unknown_tool_becomes_an_error_result_naming_the_available_tools(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(tool_calls=[("teleport", {"to": "Mars"})])
    anthropic_fake.script("I can't teleport, but I can add numbers.")
    console = ConsoleChannel()
    async with running_bruce(
        config_for(tmp_path, anthropic_fake.base_url),
        tools=ToolRegistry([AddTool(), PriceTool()]),
        channels=[console],
    ):
        assert await console.say("Teleport me to Mars.")
        assert await next_reply(console.replies) == "I can't teleport, but I can add numbers."

    (result,) = last_tool_results(anthropic_fake.requests[1])
    assert result["is_error"] is True
    assert "unknown tool 'teleport'" in block_text(result)
    assert "Available tools: add, price_of" in block_text(result)
    (row,) = tool_rows(tmp_path)
    assert row["tool_name"] == "teleport"
    assert row["output"] is None and "unknown tool" in row["error"]


async def test_arguments_that_break_the_schema_become_error_results_naming_the_field(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    add = AddTool()
    anthropic_fake.script(tool_calls=[("add", {"a": 2}), ("add", {"a": "two", "b": 3})])
    anthropic_fake.script("Let me fix my arguments.")
    console = ConsoleChannel()
    async with running_bruce(
        config_for(tmp_path, anthropic_fake.base_url),
        tools=ToolRegistry([add]),
        channels=[console],
    ):
        assert await console.say("Add two and three.")
        assert await next_reply(console.replies) == "Let me fix my arguments."

    missing, wrong_type = last_tool_results(anthropic_fake.requests[1])
    assert missing["is_error"] is True and wrong_type["is_error"] is True
    assert "'b' is a required property" in block_text(missing)
    assert "argument 'a'" in block_text(wrong_type)
    assert "is not of type 'number'" in block_text(wrong_type)
    assert add.calls == []  # the tool never ran with bad arguments


async def test_a_tool_that_raises_becomes_an_error_result_and_the_loop_goes_on(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(tool_calls=[("boom", {})])
    anthropic_fake.script(tool_calls=[("add", {"a": 1, "b": 2})])
    anthropic_fake.script("The boom tool is broken, but 1 + 2 = 3.")
    console = ConsoleChannel()
    async with running_bruce(
        config_for(tmp_path, anthropic_fake.base_url),
        tools=ToolRegistry([BoomTool(), AddTool()]),
        channels=[console],
    ):
        assert await console.say("Boom, then add 1 and 2.")
        assert await next_reply(console.replies) == "The boom tool is broken, but 1 + 2 = 3."

    (result,) = last_tool_results(anthropic_fake.requests[1])
    assert result["is_error"] is True
    assert "RuntimeError: the flux capacitor is on fire" in block_text(result)
    assert block_text(last_tool_results(anthropic_fake.requests[2])[0]) == "3"
    boom, add = tool_rows(tmp_path)
    assert boom["output"] is None and "flux capacitor" in boom["error"]
    assert (add["turn"], add["output"], add["error"]) == (2, "3", None)


async def test_malformed_json_arguments_from_an_openai_compatible_model_are_told_to_it(
    tmp_path: Path,
) -> None:
    add = AddTool()
    async with FakeOpenAIServer() as fake:
        fake.script(raw_arguments='{"a": 1, "b": ', tool_name="add")
        fake.script("Sorry, my arguments were cut off.")
        config = config_for(
            tmp_path,
            None,
            llm={"provider": "openai", "model": "gpt-test", "base_url": fake.base_url},
        )
        console = ConsoleChannel()
        async with running_bruce(config, tools=ToolRegistry([add]), channels=[console]):
            assert await console.say("Add 1 and 2.")
            assert await next_reply(console.replies) == "Sorry, my arguments were cut off."

        assert len(fake.requests) == 2
        call_id = fake.requests[1]["messages"][-2]["tool_calls"][0]["id"]
        tool_messages = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_messages] == [call_id]
        assert "not valid JSON" in tool_messages[0]["content"]
    assert add.calls == []
    (row,) = tool_rows(tmp_path)
    assert row["input"] == '{"a": 1, "b": ' and "not valid JSON" in row["error"]


# ---- when the model cannot be reached --------------------------------------------------------


async def test_an_overloaded_model_is_retried_and_the_user_gets_the_answer(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(error=529, retry_after=0)
    anthropic_fake.script("Sorry for the wait: hello!")
    console = ConsoleChannel()
    config = config_for(tmp_path, anthropic_fake.base_url, llm={"max_retries": 2})
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]):
        assert await console.say("Hello?")
        assert await next_reply(console.replies) == "Sorry for the wait: hello!"

    assert len(anthropic_fake.requests) == 2
    (user,) = messages_of(tmp_path, "user")
    assert user["status"] == "done"


async def test_when_the_model_is_down_the_user_is_told_and_the_message_is_kept_for_later(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    model_up = False

    def model(body: dict[str, Any]) -> AnthropicReply | str:
        if not model_up:
            return AnthropicReply(error=529)
        return "Back again. You asked about the dentist, then about lunch."

    anthropic_fake.responder = model
    console = ConsoleChannel()
    async with running_bruce(
        config_for(tmp_path, anthropic_fake.base_url), tools=ToolRegistry([]), channels=[console]
    ):
        assert await console.say("When is my dentist appointment?")
        assert await next_reply(console.replies) == OVERLOADED_REPLY
        (first,) = messages_of(tmp_path, "user")
        assert first["status"] == "failed"

        model_up = True
        requests_before = len(anthropic_fake.requests)
        assert await console.say("And what about lunch?")
        assert await next_reply(console.replies) == (
            "Back again. You asked about the dentist, then about lunch."
        )

    next_request = anthropic_fake.requests[requests_before]
    texts = user_texts(next_request)
    assert any("When is my dentist appointment?" in text for text in texts)
    assert texts[-1] == "And what about lunch?"
    assert OVERLOADED_REPLY not in json.dumps(next_request["messages"])


async def test_without_an_api_key_bruce_starts_and_says_it_is_not_connected(
    tmp_path: Path,
) -> None:
    config = config_for(tmp_path, None, llm={"api_key": ""})
    assert not config.llm.is_configured
    console = ConsoleChannel()
    async with running_bruce(config, tools=ToolRegistry([AddTool()]), channels=[console]):
        assert await console.say("Hello?")
        reply = await next_reply(console.replies)
    assert reply.startswith("I'm not connected to a language model yet."), reply
    assert "llm.api_key" in reply
    (user,) = messages_of(tmp_path, "user")
    assert user["status"] == "failed"


# ---- what is recorded and what the model is told ---------------------------------------------


async def test_each_llm_call_is_recorded_with_its_token_usage(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    usage = {
        "input_tokens": 123,
        "output_tokens": 45,
        "cache_read_input_tokens": 67,
        "cache_creation_input_tokens": 89,
    }
    anthropic_fake.script("Hi there!", usage=usage)
    console = ConsoleChannel()
    config = config_for(tmp_path, anthropic_fake.base_url, llm={"model": "claude-opus-4-6"})
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]):
        assert await console.say("Hi")
        assert await next_reply(console.replies) == "Hi there!"

    (call,) = db_rows(tmp_path, "SELECT * FROM llm_calls")
    assert call["session_id"] == console_session_id(tmp_path)
    assert (call["purpose"], call["model"], call["error"]) == ("agent", "claude-opus-4-6", None)
    assert (
        call["input_tokens"],
        call["output_tokens"],
        call["cache_read_tokens"],
        call["cache_write_tokens"],
    ) == (123, 45, 67, 89)
    assert call["duration_ms"] > 0


async def test_the_system_prompt_has_the_layers_in_order_and_the_time_after_the_cached_part(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    base = "You are Bruce-under-test, terse and exact."
    summary = "The user is Ana; she likes green tea and hates mornings."
    anthropic_fake.script("Hello Ana.")
    anthropic_fake.script("Green tea.")
    # Monday 2 March 2026, 15:30 UTC is 12:30 in São Paulo (UTC-3).
    clock = lambda: datetime(2026, 3, 2, 15, 30, tzinfo=UTC)  # noqa: E731
    console = ConsoleChannel()
    config = config_for(tmp_path, anthropic_fake.base_url, agent={"system_prompt": base})
    async with running_bruce(
        config, tools=ToolRegistry([AddTool()]), channels=[console], clock=clock
    ) as bruce:
        assert await console.say("Hi, I'm Ana.")
        assert await next_reply(console.replies) == "Hello Ana."

        first = anthropic_fake.requests[0]
        [shared] = system_blocks(first)
        assert shared["text"].startswith(base)
        assert "<tool_execution_guidelines>" in shared["text"]
        assert "<conversation_context>" not in system_text(first)
        assert shared["cache_control"] == {"type": "ephemeral"}
        # The temporal layer changes every turn: it comes after every cached block, at the end
        # of the user's turn.
        said, temporal = first["messages"][-1]["content"]
        assert said["text"] == "Hi, I'm Ana." and said["cache_control"] == {"type": "ephemeral"}
        assert "cache_control" not in temporal
        assert temporal["text"].startswith("<temporal_context>")
        assert system_text(first).rstrip().endswith("</temporal_context>")
        assert "Monday, 2026-03-02 12:30:00 -0300" in temporal["text"]
        assert "America/Sao_Paulo" in temporal["text"]
        assert "first message of the conversation" in temporal["text"]

        # With a rolling summary, it comes after the shared layer and replaces what it covers.
        assert bruce.stores is not None
        newest = max(row["id"] for row in messages_of(tmp_path))
        await bruce.stores.summaries.save(console_session_id(tmp_path), summary, newest)
        assert await console.say("What do I like to drink?")
        assert await next_reply(console.replies) == "Green tea."

    second = anthropic_fake.requests[1]
    text = system_text(second)
    positions = [
        text.index(base),
        text.index("<tool_execution_guidelines>"),
        text.index("<conversation_context>"),
        text.index(summary),
        text.index("</conversation_context>"),
        text.index("<temporal_context>"),
    ]
    assert positions == sorted(positions)
    shared_again, session = system_blocks(second)
    assert shared_again == shared  # read back from the cache although the summary is new
    assert summary in session["text"] and "cache_control" in session
    assert user_texts(second) == ["What do I like to drink?"]
    assert second["messages"][-1]["content"][-1]["text"].startswith("<temporal_context>")
