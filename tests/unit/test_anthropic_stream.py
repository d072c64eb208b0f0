"""Streamed Anthropic answers put back together (llm/anthropic_stream.py) in the shapes the API
really streams that the recorded fixtures do not show: a tool input cut by the token limit,
citations, unknown events and stray deltas."""

from __future__ import annotations

from typing import Any

from bruce_bot.domain import ToolSpec
from bruce_bot.llm.anthropic import from_anthropic_message
from bruce_bot.llm.anthropic_stream import MessageAssembler

WEATHER = ToolSpec("weather", "", {"type": "object"})


def anthropic(*events: dict[str, Any]) -> MessageAssembler:
    assembler = MessageAssembler()
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
    }
    assembler.add({"type": "message_start", "message": {**start, "usage": {"input_tokens": 9}}})
    for event in events:
        assembler.add(event)
    return assembler


def block(index: int, content_block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content_block}


def delta(index: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": body}


def test_a_tool_input_cut_by_the_token_limit_is_never_a_runnable_call() -> None:
    assembler = anthropic(
        block(0, {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}),
        delta(0, {"type": "input_json_delta", "partial_json": '{"location": "Lis'}),
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 5},
        },
    )
    response = from_anthropic_message(assembler.finished())
    [call] = response.tool_calls
    assert response.stop_reason == "max_tokens" and call.arguments is None
    assert response.usage.input_tokens == 9 and response.usage.output_tokens == 5


def test_citations_unknown_events_and_stray_deltas_are_taken_as_the_api_means_them() -> None:
    citation = {
        "type": "web_search_result_location",
        "url": "https://example.com",
        "cited_text": "x",
    }
    assembler = anthropic(
        block(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Rain "}),
        delta(0, {"type": "citations_delta", "citation": citation}),
        delta(0, {"type": "text_delta", "text": "all week."}),
        delta(7, {"type": "text_delta", "text": "never started"}),
        {"type": "a_future_event", "data": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
    )
    message = assembler.finished()
    assert message["content"] == [
        {"type": "text", "text": "Rain all week.", "citations": [citation]}
    ]
    assert from_anthropic_message(message).text == "Rain all week."
