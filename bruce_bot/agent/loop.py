"""The autonomous agent loop: call the model, run the tools it asks for, repeat.

`run_agent_loop` follows the original Bruce's RunAgentLoop: offer the registry's tools, execute
every requested call (concurrently when the model asks for several at once), feed the results
back as the provider's native tool-result messages, and stop when the model answers without
tools. After `max_turns` rounds one last call, with tool use switched off, forces a text answer.
The loop only reasons: it reports each LLM call and tool execution to an observer and returns
what happened; storing and delivering is done by the parts whose job that is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from bruce_bot.domain import (
    ChatMessage,
    LLMCallRecord,
    LLMResponse,
    SystemPrompt,
    ToolCall,
    ToolExecution,
    ToolResult,
)
from bruce_bot.llm.base import LLMError, LLMService
from bruce_bot.tools.registry import ToolContext, ToolRegistry

log = structlog.get_logger(__name__)

FORCE_FINAL_NOTE = (
    "You have used all the tool rounds available for this request. Do not call any more tools: "
    "answer the user now with what you have, and say plainly what you could not finish."
)


class LoopObserver(Protocol):
    """Receives what the loop does, as it happens (persistence, audit, metrics)."""

    async def on_llm_call(self, record: LLMCallRecord) -> None: ...

    async def on_tool_executed(self, execution: ToolExecution) -> None: ...


class NullObserver:
    async def on_llm_call(self, record: LLMCallRecord) -> None:
        return None

    async def on_tool_executed(self, execution: ToolExecution) -> None:
        return None


@dataclass(slots=True)
class AgentRun:
    """The outcome of one loop: the final text and everything that led to it."""

    text: str
    turns: int
    forced_final: bool = False
    executions: list[ToolExecution] = field(default_factory=list)
    transcript: list[ChatMessage] = field(default_factory=list)

    def succeeded(self, tool_name: str) -> bool:
        return any(e.call.name == tool_name and not e.result.is_error for e in self.executions)


async def _call(
    llm: LLMService,
    system_prompt: SystemPrompt,
    messages: Sequence[ChatMessage],
    tools: ToolRegistry,
    observer: LoopObserver,
    *,
    purpose: str,
    force_text: bool,
) -> LLMResponse:
    started = time.perf_counter()
    try:
        response = await llm.complete(system_prompt, messages, tools.specs(), force_text=force_text)
    except LLMError as exc:
        duration = (time.perf_counter() - started) * 1000
        await observer.on_llm_call(
            LLMCallRecord(purpose, llm.model, duration_ms=duration, error=str(exc))
        )
        raise
    duration = (time.perf_counter() - started) * 1000
    await observer.on_llm_call(
        LLMCallRecord(purpose, response.model or llm.model, response.usage, duration)
    )
    return response


async def _execute(
    call: ToolCall, turn: int, tools: ToolRegistry, context: ToolContext, observer: LoopObserver
) -> ToolExecution:
    started = time.perf_counter()
    result: ToolResult = await tools.execute(call, context)
    execution = ToolExecution(turn, call, result, (time.perf_counter() - started) * 1000)
    log.info(
        "tool_executed",
        tool=call.name,
        turn=turn,
        is_error=result.is_error,
        duration_ms=round(execution.duration_ms, 1),
        session_id=context.session_id,
    )
    await observer.on_tool_executed(execution)
    return execution


async def run_agent_loop(
    llm: LLMService,
    tools: ToolRegistry,
    system_prompt: SystemPrompt,
    history: Sequence[ChatMessage],
    max_turns: int = 5,
    *,
    context: ToolContext | None = None,
    observer: LoopObserver | None = None,
    purpose: str = "agent",
    finish_tools: Collection[str] = (),
) -> AgentRun:
    """Run the model with tools until it answers in text (or `max_turns` forces it to).

    A round in which one of `finish_tools` succeeds also ends the loop, without another call
    (the analytical brain's `everything_is_ready`).
    """
    context = context or ToolContext()
    observer = observer or NullObserver()
    messages = list(history)
    run = AgentRun(text="", turns=0, transcript=messages)
    for turn in range(1, max_turns + 1):
        run.turns = turn
        response = await _call(
            llm, system_prompt, messages, tools, observer, purpose=purpose, force_text=False
        )
        if not response.tool_calls:
            run.text = response.text
            messages.append(ChatMessage("assistant", response.text))
            return run
        messages.append(ChatMessage("assistant", response.text, tool_calls=response.tool_calls))
        executions = await asyncio.gather(
            *(_execute(call, turn, tools, context, observer) for call in response.tool_calls)
        )
        run.executions.extend(executions)
        messages.append(ChatMessage("user", tool_results=tuple(e.result for e in executions)))
        if any(e.call.name in finish_tools and not e.result.is_error for e in executions):
            run.text = response.text
            return run

    # Out of rounds: one last call with tool use switched off forces a final answer.
    log.info("agent_max_turns_reached", max_turns=max_turns, session_id=context.session_id)
    last = messages.pop()
    messages.append(ChatMessage("user", FORCE_FINAL_NOTE, tool_results=last.tool_results))
    response = await _call(
        llm, system_prompt, messages, tools, observer, purpose=purpose, force_text=True
    )
    run.forced_final = True
    run.text = response.text
    messages.append(ChatMessage("assistant", response.text))
    return run
