"""`spawn_subagent` (docs/design.md): delegate a self-contained task to a child agent, get its
answer.

The child is a session of its own (kind `child`, under the calling session, channel `subagent`)
so the dashboard shows what it did: its task and final answer are stored as its messages, its tool
executions and LLM usage (purpose `subagent`) under its id. It runs the same agent loop with the
same prompt layers, plus a note that it works for another agent, and with the parent's tools minus
this one (no recursion) and the scheduling tools (a sub-agent does not schedule things in the
user's chat). When it is done the analytical brain is told, so the child gets a nickname. An LLM
failure becomes an error result the parent model reads; the parent still answers the user.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

import structlog

from bruce_bot.agent.context import build_system_prompt
from bruce_bot.agent.loop import run_agent_loop
from bruce_bot.agent.recorder import AuditRecorder
from bruce_bot.config import Config
from bruce_bot.domain import ChatMessage, SessionKey, SystemPrompt, utcnow
from bruce_bot.llm.base import LLMError, LLMService
from bruce_bot.settings.editable import max_turns, system_prompt, timezone
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.memory import MEMORY_TOOLS
from bruce_bot.tools.proactive import SCHEDULING_TOOLS
from bruce_bot.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

log = structlog.get_logger(__name__)

NAME = "spawn_subagent"
CHANNEL = "subagent"
PURPOSE = "subagent"
SUBAGENT_NOTE = (
    "You are a sub-agent: another agent, which is talking with the user, gave you one task. You "
    "cannot see its conversation and nobody will answer questions from you. Carry the task out "
    "with your tools, then answer with a self-contained result the other agent can use as is: "
    "the findings, with sources where you have them, and plainly what you could not find out."
)
# Told the child session's id when it has answered (the analytical brain: it gets a nickname).
FinishedHook = Callable[[int], None]


class SpawnSubagentTool(Tool):
    name = NAME
    # The child runs its own loop, whose gate holds its own actions: delegating reads only.
    effect = "reads"
    # The child may have read pages and search results: its answer carries what they said.
    reads_outside_world = True
    description = (
        "Delegate a self-contained task (e.g. research a topic across several pages and "
        "summarise it) to a sub-agent with the same tools, and get its final answer back. The "
        "sub-agent cannot see this conversation: put everything it needs in `task`."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"task": {"type": "string", "minLength": 1, "maxLength": 8000}},
        "required": ["task"],
        "additionalProperties": False,
    }
    timeout_seconds = 300.0
    max_output_chars = 20_000

    def __init__(
        self,
        config: Config,
        stores: Stores,
        llm: LLMService,
        tools: ToolRegistry,
        *,
        clock: Callable[[], datetime] = utcnow,
        finished: FinishedHook | None = None,
    ) -> None:
        self._config = config
        self._stores = stores
        self._llm = llm
        self._tools = tools  # the parent's registry, read at each call (tools join it later)
        self._clock = clock
        self._finished = finished

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        if context.session_id is None:
            raise ToolError("a sub-agent needs a conversation to belong to; this call has none")
        task = arguments["task"].strip()
        if not task:
            raise ToolError("'task' is empty: describe what the sub-agent should do")
        stores = self._stores
        child = await stores.sessions.create_child(
            context.session_id, SessionKey(CHANNEL, uuid.uuid4().hex)
        )
        task_id, _ = await stores.messages.add_settled(child.id, "user", task, "done")
        # No memory tools either: a sub-agent talks to nobody whose memories they could be.
        tools = self._tools.without(
            {NAME, *SCHEDULING_TOOLS, *MEMORY_TOOLS}, task_run=context.task_run
        )
        system_prompt = await self._system_prompt(tools)
        log.info("subagent_started", session_id=child.id, parent_id=context.session_id)
        try:
            run = await run_agent_loop(
                self._llm,
                tools,
                system_prompt,
                [ChatMessage("user", task)],
                await max_turns(self._config.agent.max_turns).value(stores.settings),
                context=_child_context(child, context),
                observer=AuditRecorder(stores.audit, child.id),
                purpose=PURPOSE,
            )
        except LLMError as exc:
            await stores.messages.set_status([task_id], "failed")
            log.warning("subagent_failed", session_id=child.id, reason=exc.reason)
            raise ToolError(
                f"the sub-agent could not finish: the language model failed ({exc.reason}). "
                "Do the work yourself or tell the user it could not be done now."
            ) from None
        except (Exception, asyncio.CancelledError):  # a timeout cancels it: mark the task failed
            await asyncio.shield(stores.messages.set_status([task_id], "failed"))
            raise
        answer = run.text.strip() or "(The sub-agent finished without an answer.)"
        await stores.messages.add_settled(child.id, "assistant", answer, "sent")
        log.info(
            "subagent_finished",
            session_id=child.id,
            parent_id=context.session_id,
            rounds=run.turns,
            tools=[e.call.name for e in run.executions],
        )
        if self._finished is not None:
            self._finished(child.id)
        return answer

    async def _system_prompt(self, tools: ToolRegistry) -> SystemPrompt:
        """The parent's prompt layers with the sub-agent note, for the child's `tools`."""
        stores = self._stores
        base_prompt = await system_prompt(self._config.agent.system_prompt).value(stores.settings)
        return build_system_prompt(
            base_prompt=f"{base_prompt.strip()}\n\n{SUBAGENT_NOTE}",
            summary=None,
            tool_names=tools.names(),
            now=self._clock(),
            zone=await timezone(self._config.app.zone).value(stores.settings),
            last_message_at=None,
        )


def _child_context(child: SessionRecord, parent: ToolContext) -> ToolContext:
    """What the child's tools act in: its own session, the parent's task run and trust."""
    return ToolContext(
        session_id=child.id,
        channel=CHANNEL,
        chat_id=child.chat_id,
        task_run=parent.task_run,
        subagent=True,
        # A task written after outside content may carry its instructions: the child's actions
        # are gated as the parent's would be (it cannot ask).
        untrusted_input=parent.untrusted_input,
        untrusted_source=parent.untrusted_source,
        # What it asks the user shows in the parent's turn (agent/asking.py).
        status=parent.status,
    )
