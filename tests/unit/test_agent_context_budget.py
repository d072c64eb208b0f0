"""Fitting a conversation into the model's window: what is kept, what is cut, and the note."""

from __future__ import annotations

from datetime import UTC, datetime

from bruce_bot.agent.context_budget import (
    MIN_HISTORY_CHARS,
    ContextBudget,
    cut_text,
    message_chars,
    newest_within,
    shrink_to,
)
from bruce_bot.domain import ChatMessage, SystemPrompt, ToolCall, ToolResult, ToolSpec
from bruce_bot.llm.text import join_text_parts
from bruce_bot.storage.messages import StoredMessage

AT = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def stored(n: int, size: int) -> StoredMessage:
    return StoredMessage(n, 1, "user", "chat", "x" * size, None, "done", AT)


def test_a_small_window_leaves_room_for_the_conversation_after_prompt_tools_and_reply() -> None:
    budget = ContextBudget(context_window=8192, max_output_tokens=4096)
    system = SystemPrompt(stable=("s" * 3000,))
    tools = [ToolSpec("web_search", "d" * 300, {"type": "object"})]
    # The reply claims a quarter of a small window, not the whole max_tokens.
    assert budget.reply_reserve() == 2048
    room = budget.history_chars(system, tools)
    assert MIN_HISTORY_CHARS < room < (8192 - 2048) * 3
    assert ContextBudget(200_000, 4096).reply_reserve() == 4096


def test_the_room_never_drops_below_the_minimum() -> None:
    budget = ContextBudget(context_window=2048, max_output_tokens=4096)
    assert budget.history_chars(SystemPrompt(stable=("s" * 50_000,)), []) == MIN_HISTORY_CHARS


def test_the_oldest_messages_go_first_and_the_newest_always_stays() -> None:
    history = [stored(1, 500), stored(2, 500), stored(3, 5000)]
    assert [m.id for m in newest_within(history, 1200)] == [3]
    assert [m.id for m in newest_within(history, 5600)] == [2, 3]


def test_a_cut_text_keeps_its_beginning_and_says_how_much_was_cut() -> None:
    text = "start " + "y" * 10_000
    cut = cut_text(text, 2000)
    assert cut.startswith("start ")
    assert len(cut) <= 2000
    assert "more characters were cut here" in cut
    assert cut_text("short", 2000) == "short"


def test_shrinking_cuts_the_largest_contents_and_keeps_tool_pairs() -> None:
    call = ToolCall("t1", "web_fetch", {"url": "https://example.org"}, '{"url": "x"}')
    messages = [
        ChatMessage("user", "Read this page please."),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("user", tool_results=(ToolResult("t1", "web_fetch", "page " * 5000),)),
    ]
    shrunk = shrink_to(messages, 6000)
    assert sum(message_chars(m) for m in shrunk) <= 6000
    assert shrunk[0] == messages[0]  # the small message is untouched
    assert shrunk[1].tool_calls == (call,)
    assert shrunk[2].tool_results[0].call_id == "t1"
    assert "more characters were cut here" in shrunk[2].tool_results[0].content


def test_pieces_of_an_answer_never_run_together() -> None:
    assert join_text_parts(["I'll check.", "It opens at nine."]) == (
        "I'll check.\n\nIt opens at nine."
    )
    assert join_text_parts(["first, mix", "the flour"]) == "first, mix the flour"
    assert join_text_parts(["According to ", "the source", ", yes."]) == (
        "According to the source, yes."
    )
    assert join_text_parts(["", "only"]) == "only"
