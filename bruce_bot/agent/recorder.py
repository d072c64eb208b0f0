"""The audit recorder: the agent loop's observer that writes what a run did, as it happens.

One recorder serves every kind of run. A chat or briefing turn holds its LLM usage back for the
commit that stores its reply, and marks each tool execution with the message it answers (so a
turn cut by a crash resumes from them, agent/resume.py); a sub-agent writes usage at once; the
analytical brain writes usage at once and only logs its actions (they change the session's own
state, which the dashboard shows, and are not tool calls a user asked for).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from bruce_bot.domain import LLMCallRecord, ToolExecution
from bruce_bot.storage.audit import AuditStore
from bruce_bot.tools.registry import arguments_json

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class AuditRecorder:
    audit: AuditStore
    session_id: int
    # The message a turn answers: its tool executions can be replayed after a crash.
    answers_message_id: int | None = None
    hold_usage: bool = False  # kept in `llm_calls` for the caller's own commit
    log_actions_only: bool = False  # the brain: actions to the log, not to tool_executions
    llm_calls: list[LLMCallRecord] = field(default_factory=list)

    async def on_llm_call(self, record: LLMCallRecord) -> None:
        if self.hold_usage:
            self.llm_calls.append(record)
        else:
            await self.audit.record_usage(self.session_id, [record])

    async def on_tool_executed(self, execution: ToolExecution) -> None:
        call, result = execution.call, execution.result
        arguments = arguments_json(call.arguments, call.raw_arguments)
        if self.log_actions_only:
            log.info(
                "brain_action",
                session_id=self.session_id,
                tool=call.name,
                arguments=arguments[:500],
                error=result.content[:300] if result.is_error else None,
            )
            return
        await self.audit.record_tool_execution(
            session_id=self.session_id,
            turn=execution.turn,
            tool_name=call.name,
            tool_input=arguments,
            output=None if result.is_error else result.content,
            error=result.content if result.is_error else None,
            duration_ms=execution.duration_ms,
            call_id=call.id,
            answers_message_id=self.answers_message_id,
            details=result.details,
        )
