"""How Bruce's conversation becomes Anthropic turns: replayed blocks and the cache breakpoint."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bruce_bot.domain import ChatMessage, ToolCall, ToolResult
from bruce_bot.llm.anthropic import normalise_stop_reason, to_anthropic_messages

EPHEMERAL = {"type": "ephemeral"}
THINKING = {"type": "thinking", "thinking": "Look it up first.", "signature": "EqQBCkYIBxgCKkB"}
REDACTED = {"type": "redacted_thinking", "data": "EvgFCkYIBxgCKkBmxKtCnM3x"}
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {"query": "x"}}
SERVER_TOOL_USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {"query": "x"},
}


def replayed(*blocks: dict[str, Any], text: str = "") -> ChatMessage:
    return ChatMessage("assistant", text, replay_blocks=tuple(copy.deepcopy(b) for b in blocks))


def test_replay_blocks_are_sent_verbatim_in_order_instead_of_text_and_calls() -> None:
    text = {"type": "text", "text": "Let me check.", "citations": None}
    assistant = ChatMessage(
        "assistant",
        "Let me check.",
        (ToolCall("toolu_1", "web_search", {"query": "x"}),),
        replay_blocks=(THINKING, text, TOOL_USE),
    )
    result = ChatMessage("user", tool_results=(ToolResult("toolu_1", "web_search", "found"),))

    turns = to_anthropic_messages([ChatMessage("user", "hi"), assistant, result])

    assert turns[1] == {"role": "assistant", "content": [THINKING, text, TOOL_USE]}


def test_sending_never_changes_the_replay_blocks() -> None:
    assistant = replayed(THINKING, {"type": "text", "text": "Paused here."})
    before = copy.deepcopy(assistant.replay_blocks)

    turns = to_anthropic_messages([ChatMessage("user", "go on"), assistant])
    turns[1]["content"][0]["thinking"] = "changed by someone downstream"

    assert assistant.replay_blocks == before
    assert turns[1]["content"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in assistant.replay_blocks[-1]


def test_the_breakpoint_skips_thinking_blocks_at_the_end() -> None:
    turns = to_anthropic_messages([ChatMessage("user", "think hard"), replayed(THINKING, REDACTED)])

    user, assistant = turns
    assert all("cache_control" not in block for block in assistant["content"])
    assert user["content"][-1]["cache_control"] == EPHEMERAL


def test_the_breakpoint_lands_on_a_server_tool_block_of_a_paused_turn() -> None:
    turns = to_anthropic_messages(
        [ChatMessage("user", "search"), replayed(THINKING, SERVER_TOOL_USE)]
    )

    content = turns[1]["content"]
    assert content[-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in content[0]


def test_the_breakpoint_is_not_risked_on_a_block_type_nobody_knows() -> None:
    future = {"type": "bruce_test_future_block", "payload": {}}
    turns = to_anthropic_messages(
        [ChatMessage("user", "hi"), replayed({"type": "text", "text": "Before."}, future)]
    )

    text, unknown = turns[1]["content"]
    assert text["cache_control"] == EPHEMERAL
    assert "cache_control" not in unknown


def test_exactly_one_breakpoint_is_placed() -> None:
    turns = to_anthropic_messages(
        [
            ChatMessage("user", "hi"),
            replayed(THINKING, {"type": "text", "text": "Answer."}),
            ChatMessage("user", "thanks"),
        ]
    )

    marked = [block for turn in turns for block in turn["content"] if "cache_control" in block]
    assert marked == [{"type": "text", "text": "thanks", "cache_control": EPHEMERAL}]


def test_a_user_message_never_uses_replay_blocks() -> None:
    user = ChatMessage("user", "plain question", replay_blocks=(THINKING,))

    turns = to_anthropic_messages([user])

    assert turns == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "plain question", "cache_control": EPHEMERAL}],
        }
    ]


@pytest.mark.parametrize(
    ("reason", "has_text", "has_tool_calls", "expected"),
    [
        ("end_turn", True, False, "end_turn"),
        ("stop_sequence", True, False, "end_turn"),
        ("tool_use", False, True, "tool_use"),
        ("max_tokens", True, False, "max_tokens"),
        ("model_context_window_exceeded", True, False, "max_tokens"),
        ("pause_turn", True, False, "pause_turn"),
        ("refusal", False, False, "refusal"),
        ("compaction", True, False, "other"),
        (None, True, False, "end_turn"),
        (None, False, False, "other"),
        (None, True, True, "other"),
    ],
)
def test_stop_reasons_in_the_core_words(
    reason: str | None, has_text: bool, has_tool_calls: bool, expected: str
) -> None:
    assert (
        normalise_stop_reason(reason, has_text=has_text, has_tool_calls=has_tool_calls) == expected
    )
