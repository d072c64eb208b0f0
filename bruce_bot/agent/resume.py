"""Resuming a turn that a crash cut short, instead of repeating what its tools already did.

Every tool execution is recorded as it happens, with the model's call id and the newest message
of the turn it answers. When the daemon is killed mid-turn, the turn's messages are picked up
again at start-up; before asking the model anew, the turn finds the executions already recorded
for those messages and hands them back to the model as the rounds they were (its calls and
their results, as they came out), so it goes on from there: a reminder is not created twice, a
file is not saved twice, a sub-agent is not spawned twice. A call whose execution was cut
before it was recorded is not known here and may run again (see docs/architecture.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

from bruce_bot.domain import ChatMessage, ToolCall, ToolExecution, ToolResult
from bruce_bot.storage.audit import ToolExecutionRecord
from bruce_bot.untrusted import OPEN as UNTRUSTED_OPEN

_UNTRUSTED_PREFIX = UNTRUSTED_OPEN.split("{", 1)[0]


@dataclass(slots=True)
class ResumedRounds:
    """The rounds a cut turn had already run: messages for the model, executions for the guard."""

    messages: list[ChatMessage] = field(default_factory=list)
    executions: list[ToolExecution] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.messages)


def resumed_rounds(records: Sequence[ToolExecutionRecord]) -> ResumedRounds:
    resumed = ResumedRounds()
    for turn, rows in groupby(records, key=lambda record: record.turn):
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        for row in rows:
            call = ToolCall(
                row.call_id or f"resumed_{row.id}", row.tool_name, _arguments(row.input), row.input
            )
            content = row.error if row.error is not None else (row.output or "")
            result = ToolResult(
                call.id,
                row.tool_name,
                content,
                is_error=row.error is not None,
                untrusted=content.startswith(_UNTRUSTED_PREFIX),
            )
            calls.append(call)
            results.append(result)
            resumed.executions.append(ToolExecution(turn, call, result, row.duration_ms))
        resumed.messages.append(ChatMessage("assistant", tool_calls=tuple(calls)))
        resumed.messages.append(ChatMessage("user", tool_results=tuple(results)))
    return resumed


def _arguments(raw: str) -> dict[str, object] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
