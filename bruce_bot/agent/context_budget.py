"""Fitting a conversation into the model's context window.

The history is budgeted against `llm.context_window` (tokens), not only `agent.history_max_chars`:
what is left of the window after the reply's `max_tokens`, the system prompt and the tool
definitions is the room for the conversation. Tokens are estimated from characters, on the safe
side (3 characters a token; English runs at about 4), because each server counts with its own
tokenizer. When the room is short, the oldest messages go first; a message that alone is bigger
than the room (a pasted document, a long tool result) is cut for the model, with a note saying
so — the stored message stays whole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from bruce_bot.domain import ChatMessage, SystemPrompt, ToolResult, ToolSpec
from bruce_bot.storage.messages import StoredMessage

CHARS_PER_TOKEN = 3
# Leave this share of the window unused: token estimates are estimates.
SAFETY_SHARE = 0.1
# However small the window, the newest message gets at least this much room.
MIN_HISTORY_CHARS = 2_000
# A cut message keeps at least this many characters of its beginning.
MIN_KEPT_CHARS = 400
CUT_NOTE = (
    "\n\n[… {cut} more characters were cut here: this message is longer than the model can "
    "read at once. Say so if the missing part matters.]"
)


# What a picture costs in the budget: Anthropic counts about width × height / 750 tokens, some
# 1,600 for a picture fitted to its advised size (bruce_bot/media/images.py).
IMAGE_CHARS = 1_600 * CHARS_PER_TOKEN


def estimated_tokens(chars: int) -> int:
    return chars // CHARS_PER_TOKEN + 1


def message_chars(message: ChatMessage) -> int:
    return (
        len(message.text)
        + sum(len(result.content) for result in message.tool_results)
        + sum(len(call.raw_arguments) or 2 for call in message.tool_calls)
        + IMAGE_CHARS * len(message.images)
    )


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """The model's window and what one call reserves of it for the reply."""

    context_window: int
    max_output_tokens: int

    def reply_reserve(self) -> int:
        # A reply seldom needs the whole `max_tokens`, but servers such as vLLM refuse a request
        # whose prompt plus `max_tokens` exceeds the window; a quarter of a small window is
        # the most a reply may claim, the rest stays for the conversation.
        return min(self.max_output_tokens, self.context_window // 4)

    def history_chars(self, system: SystemPrompt, tools: Sequence[ToolSpec]) -> int:
        """Characters of conversation that fit beside this system prompt and these tools."""
        fixed = len(system.text) + sum(
            len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
            for tool in tools
        )
        room = (
            int(self.context_window * (1 - SAFETY_SHARE))
            - self.reply_reserve()
            - estimated_tokens(fixed)
        )
        return max(room * CHARS_PER_TOKEN, MIN_HISTORY_CHARS)


def newest_within(history: Sequence[StoredMessage], max_chars: int) -> list[StoredMessage]:
    """Drop the oldest messages until the history fits `max_chars` (the newest always stays)."""
    total = sum(len(m.content) for m in history)
    start = 0
    while total > max_chars and start < len(history) - 1:
        total -= len(history[start].content)
        start += 1
    return list(history[start:])


def cut_text(text: str, max_chars: int) -> str:
    """`text`, or its beginning with a note saying how much was cut."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - len(CUT_NOTE) - 10, MIN_KEPT_CHARS)
    return text[:keep] + CUT_NOTE.format(cut=len(text) - keep)


def shrink_to(messages: Sequence[ChatMessage], max_chars: int) -> list[ChatMessage]:
    """Cut the largest contents (texts and tool results) until the whole fits `max_chars`.

    Nothing is dropped, so tool calls keep their results; each cut keeps its beginning and says
    what was cut. Contents already at the minimum are left as they are.
    """
    shrunk = list(messages)
    total = sum(message_chars(m) for m in shrunk)
    while total > max_chars:
        index, part, size = _largest_part(shrunk)
        if size <= MIN_KEPT_CHARS + len(CUT_NOTE):
            break
        target = max(size - (total - max_chars), size // 2, MIN_KEPT_CHARS + len(CUT_NOTE))
        shrunk[index] = _with_part_cut(shrunk[index], part, target)
        total = sum(message_chars(m) for m in shrunk)
    return shrunk


def _largest_part(messages: Sequence[ChatMessage]) -> tuple[int, int, int]:
    """(message index, part, size): part -1 is the message's text, n >= 0 its n-th tool result."""
    best = (0, -1, -1)
    for index, message in enumerate(messages):
        parts = [(-1, len(message.text))]
        parts += [(n, len(r.content)) for n, r in enumerate(message.tool_results)]
        for part, size in parts:
            if size > best[2]:
                best = (index, part, size)
    return best


def _with_part_cut(message: ChatMessage, part: int, max_chars: int) -> ChatMessage:
    if part < 0:
        return replace(message, text=cut_text(message.text, max_chars))
    results = list(message.tool_results)
    result = results[part]
    results[part] = ToolResult(
        result.call_id, result.name, cut_text(result.content, max_chars), result.is_error
    )
    return replace(message, tool_results=tuple(results))
