"""Streamed OpenAI-compatible answers put back together (llm/openai_stream.py) in the shapes
servers really stream that the recorded fixtures do not show: calls streamed whole (Ollama) or
without an index, arguments as an object (llama.cpp), no usage and no finish_reason."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import openai

from bruce_bot.domain import ToolSpec
from bruce_bot.llm.openai import from_openai_completion
from bruce_bot.llm.openai_stream import CompletionAssembler

WEATHER = ToolSpec("weather", "", {"type": "object"})


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> Any:
    """A chunk as the SDK hands it over (attributes, not keys)."""

    def namespace(value: Any) -> Any:
        if isinstance(value, dict):  # arguments stay as sent: a string, or an object
            items = {k: v if k == "arguments" else namespace(v) for k, v in value.items()}
            return SimpleNamespace(**items)
        if isinstance(value, list):
            return [namespace(v) for v in value]
        return value

    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return namespace({"id": "c1", "model": "m", "created": 1, "choices": choices, **extra})


def completion(*chunks: Any) -> Any:
    assembler = CompletionAssembler()
    for item in chunks:
        assembler.add(item)
    return from_openai_completion(
        openai.types.chat.ChatCompletion.construct(**assembler.completion()), [WEATHER]
    )


def test_ollama_streams_each_call_whole_with_finish_stop_and_no_usage() -> None:
    call = {"function": {"name": "weather", "arguments": {"location": "Lisbon"}}}
    response = completion(
        chunk({"role": "assistant", "content": "", "tool_calls": [call]}),
        chunk({"content": ""}, "stop"),
    )
    [tool_call] = response.tool_calls
    assert tool_call.arguments == {"location": "Lisbon"} and tool_call.id.startswith("call_")
    assert response.stop_reason == "tool_use" and response.usage.input_tokens == 0


def test_fragments_without_an_index_are_told_apart_by_id_and_order() -> None:
    response = completion(
        chunk({"tool_calls": [{"id": "a", "function": {"name": "weather", "arguments": '{"lo'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": 'cation": "Lisbon"}'}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "weather", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        chunk(usage={"prompt_tokens": 7, "completion_tokens": 3}),
    )
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("a", {"location": "Lisbon"}),
        ("b", {}),
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 3)


def test_a_text_answer_without_finish_reason_is_a_finished_answer() -> None:
    response = completion(chunk({"content": "Rain "}), chunk({"content": "all week."}))
    assert (response.text, response.stop_reason) == ("Rain all week.", "end_turn")
