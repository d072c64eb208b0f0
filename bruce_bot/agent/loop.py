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
import dataclasses
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from bruce_bot.agent.approvals import CANNOT_ASK, Hold, needs_user
from bruce_bot.agent.context_budget import message_chars, shrink_to
from bruce_bot.agent.progress import status_lines
from bruce_bot.channels.live import LiveReply
from bruce_bot.config import LLMConfig
from bruce_bot.domain import (
    ChatMessage,
    LLMCallRecord,
    LLMResponse,
    SystemPrompt,
    ToolCall,
    ToolExecution,
    ToolResult,
)
from bruce_bot.llm.base import LLMContextOverflowError, LLMError, LLMRequest, LLMService
from bruce_bot.llm.text import join_text_parts
from bruce_bot.tools.registry import Tool, ToolContext, ToolRegistry

log = structlog.get_logger(__name__)

FORCE_FINAL_NOTE = (
    "You have used all the tool rounds available for this request. Do not call any more tools: "
    "answer the user now with what you have, and say plainly what you could not finish."
)
# The result of a tool call whose arguments the token limit cut off: it is never run.
TRUNCATED_CALL_RESULT = (
    "Not run: your reply reached the output token limit while you were writing this call, so "
    "its arguments are incomplete.{room} If its content is long (a big file or report), split "
    "the work into smaller steps or write less."
)
MORE_ROOM = " You now have twice the room: call it again."
CONTINUE_NOTE = (
    "Your previous answer was cut off by the output token limit. Continue exactly where it "
    "stopped, without repeating anything and without starting over."
)
CUT_MARK = "\n\n(… my answer was cut off here: it reached the length limit.)"
REFUSAL_REPLY = "The model declined to answer this."
NO_FINAL_TEXT = (
    "I used all the steps I had for this request without reaching an answer, so I stopped "
    "there. Ask me again, perhaps one part at a time."
)
# Anthropic pauses long server-side turns (`pause_turn`); each continuation is one more call.
MAX_PAUSE_CONTINUATIONS = 3
# After a cut tool call the next calls may write this many times the configured `max_tokens`.
TRUNCATION_ROOM_FACTOR = 2
MAX_RAISED_OUTPUT_TOKENS = 32_000


class LoopObserver(Protocol):
    """Receives what the loop does, as it happens (persistence, audit, metrics)."""

    async def on_llm_call(self, record: LLMCallRecord) -> None: ...

    async def on_tool_executed(self, execution: ToolExecution) -> None: ...


class ApprovalPort(Protocol):
    """Holds a call for the user's yes (agent/approvals.py); its result tells the model so."""

    async def hold(
        self, call: ToolCall, tool: Tool, context: ToolContext, hold: Hold
    ) -> ToolResult: ...


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
    refused: bool = False  # the model declined: `text` is REFUSAL_REPLY
    cut: bool = False  # the answer stayed cut by the token limit: `text` ends with CUT_MARK
    shrunk: bool = False  # the prompt did not fit the window and was cut down to retry
    untrusted: bool = False  # the run read outside content (its actions waited for the user)

    def succeeded(self, tool_name: str) -> bool:
        return any(e.call.name == tool_name and not e.result.is_error for e in self.executions)


@dataclass(slots=True)
class _Caller:
    """Makes the loop's LLM calls: reports each one, and retries once with a shrunk prompt when
    the server says the prompt does not fit its context window."""

    llm: LLMService
    system_prompt: SystemPrompt
    tools: ToolRegistry
    observer: LoopObserver
    run: AgentRun
    purpose: str
    session_id: int | None
    live: LiveReply | None = None

    async def __call__(
        self, messages: list[ChatMessage], *, force_text: bool, max_tokens: int | None
    ) -> LLMResponse:
        try:
            return await self._once(messages, force_text=force_text, max_tokens=max_tokens)
        except LLMContextOverflowError:
            if self.run.shrunk:
                raise
            before = sum(message_chars(m) for m in messages)
            messages[:] = shrink_to(messages, before // 2)
            self.run.shrunk = True
            log.warning(
                "context_overflow_shrunk",
                session_id=self.session_id,
                chars_before=before,
                chars_after=sum(message_chars(m) for m in messages),
            )
            return await self._once(messages, force_text=force_text, max_tokens=max_tokens)

    async def _once(
        self, messages: Sequence[ChatMessage], *, force_text: bool, max_tokens: int | None
    ) -> LLMResponse:
        started = time.perf_counter()
        if self.live is not None:
            await self.live.restart()  # what this call writes replaces what the last one wrote
        try:
            response = await self.llm.complete(
                LLMRequest(
                    self.system_prompt,
                    messages,
                    self.tools.specs(),
                    max_tokens=max_tokens,
                    force_text=force_text,
                    stream=self.live.text if self.live is not None else None,
                )
            )
        except LLMError as exc:
            duration = (time.perf_counter() - started) * 1000
            await self.observer.on_llm_call(
                LLMCallRecord(self.purpose, self.llm.model, duration_ms=duration, error=str(exc))
            )
            raise
        duration = (time.perf_counter() - started) * 1000
        await self.observer.on_llm_call(
            LLMCallRecord(self.purpose, response.model or self.llm.model, response.usage, duration)
        )
        return response


@dataclass(frozen=True, slots=True)
class _Gate:
    """What decides whether a call runs now: after outside content, every call that is not a
    plain read waits for the user (agent/approvals.py)."""

    system_prompt: SystemPrompt
    messages: Sequence[ChatMessage]
    approvals: ApprovalPort | None

    async def held(
        self, call: ToolCall, tools: ToolRegistry, context: ToolContext
    ) -> ToolResult | None:
        if not context.untrusted_input:
            return None
        tool, problem = tools.check_arguments(call)
        if tool is None or problem is not None:
            return None  # the registry tells the model what is wrong with the call
        hold = needs_user(tool, call, context, self.system_prompt, self.messages)
        if hold is None:
            return None
        log.info("tool_held", tool=call.name, reason=hold.reason, session_id=context.session_id)
        if self.approvals is None:
            note = CANNOT_ASK.format(reason=hold.reason, tool=call.name)
            return ToolResult(call.id, call.name, note, is_error=True)
        return await self.approvals.hold(call, tool, context, hold)


async def _execute(
    call: ToolCall,
    turn: int,
    tools: ToolRegistry,
    context: ToolContext,
    observer: LoopObserver,
    gate: _Gate,
) -> ToolExecution:
    started = time.perf_counter()
    held = await gate.held(call, tools, context)
    result: ToolResult = held or await tools.execute(call, context)
    execution = ToolExecution(turn, call, result, (time.perf_counter() - started) * 1000)
    log.info(
        "tool_executed",
        tool=call.name,
        turn=turn,
        is_error=result.is_error,
        held=held is not None,
        duration_ms=round(execution.duration_ms, 1),
        session_id=context.session_id,
    )
    await observer.on_tool_executed(execution)
    return execution


def _raised(max_tokens: int | None) -> int:
    base = max_tokens or LLMConfig.model_fields["max_tokens"].default
    return max(base, min(base * TRUNCATION_ROOM_FACTOR, MAX_RAISED_OUTPUT_TOKENS))


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
    max_tokens: int | None = None,
    live: LiveReply | None = None,
    approvals: ApprovalPort | None = None,
) -> AgentRun:
    """Run the model with tools until it answers in text (or `max_turns` forces it to).

    A round in which one of `finish_tools` succeeds also ends the loop, without another call
    (the analytical brain's `everything_is_ready`). How each response ended decides what comes
    next: a refusal ends the turn with an honest line; a paused turn is sent back to go on; tool
    calls cut by the token limit are never run (the model is told, and gets twice the room
    once); a text answer cut by the limit is continued once, else marked as cut.

    With a `live` reply, the model's text streams to it as it is written, and a status line
    takes its place while tools run; the final text is still only what this returns.

    Once the run has read outside content (`ToolContext.untrusted_input`), a call that is not
    a plain read goes to `approvals` to wait for the user instead of running (without
    `approvals`, nobody can be asked: it is refused); `AgentRun.untrusted` says so afterwards.
    """
    context = _starting_context(context, live, history)
    observer = observer or NullObserver()
    messages = list(history)
    run = AgentRun(text="", turns=0, transcript=messages, untrusted=context.untrusted_input)
    loop = _Loop(
        _Caller(llm, system_prompt, tools, observer, run, purpose, context.session_id, live),
        _Gate(system_prompt, messages, approvals),
        context,
        messages,
        finish_tools,
        max_tokens,
    )
    while run.turns < max_turns:
        if (ended := await loop.round()) is not None:
            return ended
    return await loop.forced_final(max_turns)


def _starting_context(
    context: ToolContext | None, live: LiveReply | None, history: Sequence[ChatMessage]
) -> ToolContext:
    """The context the run starts in: its status line on the `live` reply, and tainted when
    the `history` already holds outside content (e.g. the guard's retry)."""
    context = context or ToolContext()
    if live is not None and context.status is None:
        context = dataclasses.replace(context, status=live.status)
    earlier = sorted({r.name for m in history for r in m.tool_results if r.untrusted})
    if not context.untrusted_input and earlier:
        context = _tainted(context, ", ".join(earlier))
    return context


@dataclass(slots=True)
class _Loop:
    """One run of the loop between its rounds: what each kind of response does to the
    conversation and the run, and the forced final answer when the rounds run out."""

    call: _Caller
    gate: _Gate
    context: ToolContext  # tainted once the run reads outside content
    messages: list[ChatMessage]  # the run's transcript, as the model reads it
    finish_tools: Collection[str]
    max_tokens: int | None  # the configured output limit (None: the provider's default)
    output_limit: int | None = field(init=False)  # raised once after cut tool calls
    parts: list[str] = field(default_factory=list)  # the answer being written (paused or cut)
    pauses: int = 0
    continued: bool = False  # a cut answer was sent back to be continued

    def __post_init__(self) -> None:
        self.output_limit = self.max_tokens

    @property
    def run(self) -> AgentRun:
        return self.call.run

    async def round(self) -> AgentRun | None:
        """One call of the model and what its response asks for; the run when that ends the
        loop, else None."""
        run = self.run
        run.turns += 1
        response = await self.call(self.messages, force_text=False, max_tokens=self.output_limit)
        if response.stop_reason == "refusal":
            return _refused(run, response, self.context)
        if response.stop_reason == "pause_turn" and self.pauses < MAX_PAUSE_CONTINUATIONS:
            # Sent back as it is, the paused turn goes on where it stopped: not a tool round.
            self.pauses += 1
            run.turns -= 1
            self.parts.append(response.text)
            self.messages.append(
                ChatMessage("assistant", response.text, replay_blocks=response.replay_blocks)
            )
            return None
        if not response.tool_calls:
            return self._answered(response)
        self.parts.clear()
        self.messages.append(
            ChatMessage(
                "assistant",
                response.text,
                tool_calls=response.tool_calls,
                replay_blocks=response.replay_blocks,
            )
        )
        if response.truncated:
            self._calls_cut(response)
            return None
        return await self._tool_round(response)

    def _answered(self, response: LLMResponse) -> AgentRun | None:
        """A text answer ends the run, unless the token limit cut it the first time: then it
        is sent back to be continued (not a tool round)."""
        self.parts.append(response.text)
        if response.truncated and not self.continued:
            self.continued = True
            self.run.turns -= 1
            self.messages.append(ChatMessage("assistant", response.text))
            self.messages.append(ChatMessage("user", CONTINUE_NOTE))
            log.info("answer_cut_continued", session_id=self.context.session_id)
            return None
        return _finished(self.run, self.parts, cut=response.truncated)

    def _calls_cut(self, response: LLMResponse) -> None:
        """Tool calls cut by the token limit: none is run, the model is told (and gets twice
        the room, once)."""
        # The last call's input was still being written when the limit hit: running any of
        # them would act on a guess (a half-written file saved as if it were complete).
        log.warning(
            "tool_calls_truncated",
            session_id=self.context.session_id,
            response_id=response.response_id,
            tools=[c.name for c in response.tool_calls],
        )
        room = ""
        if self.output_limit == self.max_tokens:
            self.output_limit, room = _raised(self.max_tokens), MORE_ROOM
        note = TRUNCATED_CALL_RESULT.format(room=room)
        results = tuple(ToolResult(c.id, c.name, note, True) for c in response.tool_calls)
        self.messages.append(ChatMessage("user", tool_results=results))

    async def _tool_round(self, response: LLMResponse) -> AgentRun | None:
        """Run the calls (at once), feed their results back; the run when one of the
        `finish_tools` succeeded, else None."""
        call, run = self.call, self.run
        if call.live is not None:
            await call.live.status(status_lines(response.tool_calls))
        executions = await asyncio.gather(
            *(
                _execute(c, run.turns, call.tools, self.context, call.observer, self.gate)
                for c in response.tool_calls
            )
        )
        run.executions.extend(executions)
        read = sorted({e.call.name for e in executions if e.result.untrusted})
        if not self.context.untrusted_input and read:
            self.context = _tainted(self.context, ", ".join(read))
        run.untrusted = self.context.untrusted_input
        self.messages.append(ChatMessage("user", tool_results=tuple(e.result for e in executions)))
        if any(e.call.name in self.finish_tools and not e.result.is_error for e in executions):
            run.text = response.text
            return run
        return None

    async def forced_final(self, max_turns: int) -> AgentRun:
        """Out of rounds: one last call with tool use switched off forces a final answer."""
        context, messages = self.context, self.messages
        log.info("agent_max_turns_reached", max_turns=max_turns, session_id=context.session_id)
        last = messages.pop()
        messages.append(ChatMessage("user", FORCE_FINAL_NOTE, tool_results=last.tool_results))
        response = await self.call(messages, force_text=True, max_tokens=self.output_limit)
        self.run.forced_final = True
        if response.stop_reason == "refusal":
            return _refused(self.run, response, context)
        if response.tool_calls:
            # Some servers ignore `tool_choice: none`; what the model still wanted is not run.
            log.warning(
                "forced_final_tool_calls_ignored",
                session_id=context.session_id,
                tools=[c.name for c in response.tool_calls],
            )
        if not response.text.strip():
            return _finished(self.run, [NO_FINAL_TEXT], cut=False)
        return _finished(self.run, [response.text], cut=response.truncated)


def _tainted(context: ToolContext, source: str) -> ToolContext:
    """The context once the run has read outside content (`source`: the tools that read it)."""
    return dataclasses.replace(context, untrusted_input=True, untrusted_source=source)


def _finished(run: AgentRun, parts: Sequence[str], *, cut: bool) -> AgentRun:
    run.text = join_text_parts(parts).strip()
    if cut:
        run.cut = True
        run.text += CUT_MARK
    run.transcript.append(ChatMessage("assistant", run.text))
    return run


def _refused(run: AgentRun, response: LLMResponse, context: ToolContext) -> AgentRun:
    log.warning(
        "model_refused",
        session_id=context.session_id,
        response_id=response.response_id,
        model=response.model,
    )
    run.refused = True
    run.text = REFUSAL_REPLY
    run.transcript.append(ChatMessage("assistant", REFUSAL_REPLY))
    return run
