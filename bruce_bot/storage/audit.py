"""The audit store: every tool execution (DESIGN §1.4) and every LLM call's token usage."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from bruce_bot.domain import LLMCallRecord, utcnow
from bruce_bot.storage.messages import usage_row
from bruce_bot.storage.models import LLMCallRow, ToolExecutionRow


class AuditStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record_tool_execution(
        self,
        *,
        session_id: int | None,
        turn: int,
        tool_name: str,
        tool_input: str,
        output: str | None,
        error: str | None,
        duration_ms: float,
    ) -> None:
        row = {
            "session_id": session_id,
            "turn": turn,
            "tool_name": tool_name,
            "input": tool_input,
            "output": output,
            "error": error,
            "duration_ms": duration_ms,
            "created_at": utcnow(),
        }
        async with self._engine.begin() as connection:
            await connection.execute(ToolExecutionRow.__table__.insert(), row)

    async def record_usage(self, session_id: int | None, usage: Sequence[LLMCallRecord]) -> None:
        if not usage:
            return
        now = utcnow()
        async with self._engine.begin() as connection:
            await connection.execute(
                LLMCallRow.__table__.insert(),
                [usage_row(session_id, record, now) for record in usage],
            )
