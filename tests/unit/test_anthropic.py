"""How Bruce's conversation becomes Anthropic turns: replayed blocks and the cache breakpoints."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest

from bruce_bot.domain import ChatMessage, SystemPrompt, ToolCall, ToolResult, ToolSpec
from bruce_bot.llm.anthropic import build_request, normalise_stop_reason, to_anthropic_messages

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


def test_the_newest_block_and_the_one_before_the_last_answer_are_marked() -> None:
    turns = to_anthropic_messages(
        [
            ChatMessage("user", "hi"),
            replayed(THINKING, {"type": "text", "text": "Answer."}),
            ChatMessage("user", "thanks"),
        ]
    )

    marked = [block for turn in turns for block in turn["content"] if "cache_control" in block]
    assert marked == [
        {"type": "text", "text": "hi", "cache_control": EPHEMERAL},
        {"type": "text", "text": "thanks", "cache_control": EPHEMERAL},
    ]


def test_a_first_message_carries_one_breakpoint() -> None:
    turns = to_anthropic_messages([ChatMessage("user", "hi")])

    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
    ]


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


# ---- the request as laid out for prompt caching -------------------------------------------

SYSTEM = SystemPrompt(
    stable=("Base prompt and guidelines.", "<conversation_context>Summary.</conversation_context>"),
    volatile=("<temporal_context>Monday 12:30</temporal_context>",),
)
SPECS = [
    ToolSpec("web_search", "Search.", {"type": "object"}),
    ToolSpec("add", "Add.", {"type": "object"}),
]


def request(messages: list[ChatMessage], system: SystemPrompt = SYSTEM) -> dict[str, Any]:
    return build_request(system, messages, SPECS, model="claude-sonnet-4-6", max_tokens=100)


def cache_order(params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every block of a request in the order the API caches them: tools, system, messages."""
    return [
        *params.get("tools", []),
        *params.get("system", []),
        *(block for turn in params["messages"] for block in turn["content"]),
    ]


def prefix_to_last_breakpoint(params: dict[str, Any]) -> str:
    blocks = cache_order(params)
    last = max(index for index, block in enumerate(blocks) if "cache_control" in block)
    return json.dumps([without_breakpoint(block) for block in blocks[: last + 1]])


def prefix_to_nth_breakpoint(params: dict[str, Any], nth: int) -> str:
    blocks = cache_order(params)
    marked = [index for index, block in enumerate(blocks) if "cache_control" in block]
    return json.dumps([without_breakpoint(block) for block in blocks[: marked[nth] + 1]])


def without_breakpoint(block: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "cache_control"}


def exchanges(count: int) -> list[ChatMessage]:
    history: list[ChatMessage] = []
    for number in range(count):
        history += [ChatMessage("user", f"question {number}"), ChatMessage("assistant", "answer")]
    return history


def test_the_temporal_layer_comes_after_every_breakpoint_and_not_in_the_system() -> None:
    params = request([*exchanges(3), ChatMessage("user", "what time is it?")])

    blocks = cache_order(params)
    temporal = next(i for i, b in enumerate(blocks) if b.get("text") == SYSTEM.volatile[0])
    assert all("cache_control" not in block for block in blocks[temporal:])
    assert SYSTEM.volatile[0] not in json.dumps(params["system"])
    assert params["messages"][-1]["content"][-1] == {"type": "text", "text": SYSTEM.volatile[0]}


def test_the_shared_layer_and_the_sessions_layers_are_cached_apart() -> None:
    params = request([ChatMessage("user", "hi")])

    assert params["system"] == [
        {"type": "text", "text": SYSTEM.stable[0], "cache_control": EPHEMERAL},
        {"type": "text", "text": SYSTEM.stable[1], "cache_control": EPHEMERAL},
    ]
    assert [tool["name"] for tool in params["tools"]] == ["web_search", "add"]  # as registered


def test_the_next_exchange_finds_the_previous_requests_prefix_at_a_breakpoint() -> None:
    asked = [*exchanges(4), ChatMessage("user", "next question")]
    before = request(asked)
    later = SystemPrompt(SYSTEM.stable, ("<temporal_context>Monday 12:41</temporal_context>",))
    after = request([*asked, ChatMessage("assistant", "ok"), ChatMessage("user", "then?")], later)

    # The time moved on, yet what the earlier request cached is marked in the later one as it was
    # (breakpoints 0 and 1 are the system's).
    assert prefix_to_nth_breakpoint(after, 2) == prefix_to_last_breakpoint(before)


def test_each_call_of_a_tool_loop_finds_what_the_call_before_it_cached() -> None:
    question = [*exchanges(2), ChatMessage("user", "add 2 and 3, then 5")]
    calls: list[dict[str, Any]] = [request(question)]
    history = list(question)
    for round_number in range(3):
        call = ToolCall(f"toolu_{round_number}", "add", {"a": 2, "b": 3})
        history += [
            ChatMessage("assistant", tool_calls=(call,)),
            ChatMessage("user", tool_results=(ToolResult(call.id, "add", "5"),)),
        ]
        calls.append(request(history))

    for earlier, later in itertools.pairwise(calls):
        assert prefix_to_nth_breakpoint(later, 2) == prefix_to_last_breakpoint(earlier)
    # The time stays with the turn's question, before the tool rounds, in every call.
    for params in calls:
        temporal = [
            t for t in params["messages"] if t["content"][-1].get("text") == SYSTEM.volatile[0]
        ]
        assert temporal and temporal[0]["content"][0]["text"] == "add 2 and 3, then 5"


@pytest.mark.parametrize(
    "messages",
    [
        [ChatMessage("user", "hi")],
        [*exchanges(30), ChatMessage("user", "hi")],
        [ChatMessage("user", "think"), replayed(THINKING, REDACTED)],
        [ChatMessage("user", "search"), replayed(THINKING, SERVER_TOOL_USE)],
        [
            ChatMessage("user", "go"),
            ChatMessage("assistant", tool_calls=(ToolCall("toolu_1", "add", {}),)),
            ChatMessage("user", tool_results=(ToolResult("toolu_1", "add", "1"),)),
        ],
    ],
    ids=["first", "long", "thinking-only", "paused", "tool-round"],
)
def test_a_request_never_has_more_than_four_breakpoints(messages: list[ChatMessage]) -> None:
    marked = [block for block in cache_order(request(messages)) if "cache_control" in block]

    assert 1 <= len(marked) <= 4
    assert all(block["type"] not in ("thinking", "redacted_thinking") for block in marked)


def test_without_a_user_turn_that_says_something_the_time_stays_in_the_system() -> None:
    call = ToolCall("toolu_1", "add", {})
    params = request(
        [
            ChatMessage("assistant", tool_calls=(call,)),
            ChatMessage("user", tool_results=(ToolResult("toolu_1", "add", "1"),)),
        ]
    )

    assert params["system"][-1] == {"type": "text", "text": SYSTEM.volatile[0]}
    assert SYSTEM.volatile[0] not in json.dumps(params["messages"])
