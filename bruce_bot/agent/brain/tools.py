"""The analytical brain's tools: the only way it acts on the session it observes.

Each tool changes one piece of the session's metadata (title, nickname, active skills, active
workflow, goals) or the memories of the people speaking in it, through the stores, and answers
the brain in a sentence. Mistakes (an unknown skill, a taken nickname, a goal of another session)
are `ToolError`s: the brain reads them and may try again within its few rounds. The session is
the one in `ToolContext.session_id`; the people are those in `ToolContext.people`, numbered from
1 as the brain's message lists them, and a memory tool touches only their memories. Tools of one
brain run may be called together in a round, so every change happens under one lock: two
read-modify-write changes (say, two `activate_skill` calls) never lose each other's update.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bruce_bot.agent.brain.library import Library
from bruce_bot.storage.goals import Goal, GoalStore
from bruce_bot.storage.memories import MAX_MEMORY_CHARS, MAX_TAGS, Memory, MemoryStore
from bruce_bot.storage.sessions import SessionRecord, SessionStore
from bruce_bot.tools.memory import secret_kind
from bruce_bot.tools.registry import Tool, ToolContext, ToolError

MAX_TITLE_CHARS = 60
MAX_TITLE_WORDS = 3
NICKNAME_PATTERN = re.compile(r"^[a-z]+(?:-[a-z]+){0,2}$")
MAX_ACTIVE_SKILLS = 5
MAX_ACTIVE_GOALS = 30
MAX_GOAL_CHARS = 300


@dataclass(slots=True)
class BrainDeps:
    """What the brain's tools work with; one value shared by every tool of every brain run."""

    sessions: SessionStore
    goals: GoalStore
    library: Library
    memories: MemoryStore | None = None  # None: memory is off
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class BrainTool(Tool):
    """A brain tool: `apply` runs under the shared lock, on the observed session."""

    # The session's own metadata; the brain runs apart from any chat turn.
    effect = "own_state"

    timeout_seconds: ClassVar[float | None] = 30.0

    def __init__(self, deps: BrainDeps) -> None:
        self.deps = deps

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        if context.session_id is None:
            raise ToolError("no session is being observed")
        async with self.deps.lock:
            session = await self.deps.sessions.get(context.session_id)
            if session is None:
                raise ToolError(f"session {context.session_id} no longer exists")
            return await self.apply_in(session, arguments, context)

    async def apply_in(
        self, session: SessionRecord, arguments: dict[str, Any], context: ToolContext
    ) -> str:
        """`apply`, for a tool that needs more of the run's context than the session."""
        return await self.apply(session, arguments)

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        raise NotImplementedError


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


# ---- naming ------------------------------------------------------------------------------------


def _is_emoji(token: str) -> bool:
    return not any(ch.isalnum() for ch in token) and any(
        unicodedata.category(ch) == "So" for ch in token
    )


class RenameSession(BrainTool):
    name = "rename_session"
    description = (
        "Set the title of the conversation, shown in the session list: exactly one emoji, a "
        "space, then 1-3 descriptive words, e.g. '🧳 Lisbon trip'."
    )
    parameters = _schema(
        {"title": {"type": "string", "minLength": 2, "maxLength": MAX_TITLE_CHARS}}, ["title"]
    )

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        title = " ".join(arguments["title"].split())
        emoji, *words = title.split(" ")
        if not _is_emoji(emoji):
            raise ToolError(
                f"the title {title!r} must start with one emoji followed by a space, "
                "e.g. '🧳 Lisbon trip'"
            )
        if not 1 <= len(words) <= MAX_TITLE_WORDS:
            raise ToolError(
                f"the title {title!r} has {len(words)} words after the emoji; use 1 to "
                f"{MAX_TITLE_WORDS}"
            )
        if title == session.title:
            return f"The title already is '{title}'; nothing changed."
        await self.deps.sessions.set_title(session.id, title)
        return f"The session is now titled '{title}'."


class AssignNickname(BrainTool):
    name = "assign_nickname"
    description = (
        "Give this sub-agent its nickname: 1-3 lowercase words joined by hyphens, no digits, "
        "e.g. 'api-scout'. It must be unique; if it is taken, choose a different one."
    )
    parameters = _schema(
        {"nickname": {"type": "string", "minLength": 1, "maxLength": 40}}, ["nickname"]
    )

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        nickname = arguments["nickname"].strip()
        if not NICKNAME_PATTERN.match(nickname):
            raise ToolError(
                f"{nickname!r} is not a valid nickname: use 1-3 lowercase words (letters only) "
                "joined by hyphens, like 'loop-sleuth'"
            )
        if session.nickname == nickname:
            return f"This sub-agent is already called '{nickname}'."
        if session.nickname:
            raise ToolError(
                f"this sub-agent is already called '{session.nickname}'; a nickname does not "
                "change once given"
            )
        taken = await self.deps.sessions.nickname_taken(nickname, session.id)
        if taken or not await self.deps.sessions.set_nickname(session.id, nickname):
            raise ToolError(
                f"the nickname '{nickname}' is already taken by another session. Choose a "
                "different nickname (other words, not a number added to this one)"
            )
        return f"This sub-agent is now called '{nickname}'."


# ---- skills ------------------------------------------------------------------------------------


def _names(names: Any) -> str:
    listed = ", ".join(sorted(names))
    return listed or "none"


class ActivateSkill(BrainTool):
    name = "activate_skill"
    description = (
        "Switch on a skill for this conversation by its exact name (from the available skills): "
        "its instructions are then given to the assistant on every turn."
    )
    parameters = _schema({"name": {"type": "string", "minLength": 1}}, ["name"])

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        name = arguments["name"].strip()
        skills = self.deps.library.skills
        if name not in skills:
            raise ToolError(f"there is no skill '{name}'. Available skills: {_names(skills)}")
        active = list(session.active_skills)
        if name in active:
            return f"The skill '{name}' is already active."
        if len(active) >= MAX_ACTIVE_SKILLS:
            raise ToolError(
                f"{MAX_ACTIVE_SKILLS} skills are already active ({_names(active)}); deactivate "
                "one that no longer helps first"
            )
        await self.deps.sessions.set_active_skills(session.id, [*active, name])
        return f"The skill '{name}' is now active."


class DeactivateSkill(BrainTool):
    name = "deactivate_skill"
    description = "Switch off an active skill of this conversation, by name."
    parameters = _schema({"name": {"type": "string", "minLength": 1}}, ["name"])

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        name = arguments["name"].strip()
        active = list(session.active_skills)
        if name not in active:
            raise ToolError(f"the skill '{name}' is not active. Active skills: {_names(active)}")
        await self.deps.sessions.set_active_skills(session.id, [s for s in active if s != name])
        return f"The skill '{name}' is no longer active."


# ---- workflows ---------------------------------------------------------------------------------


class ReadWorkflow(BrainTool):
    name = "read_workflow"
    description = (
        "Read a workflow by its exact name (from the available workflows). It returns the "
        "workflow's steps and makes it the conversation's one active workflow, replacing any "
        "other."
    )
    parameters = _schema({"name": {"type": "string", "minLength": 1}}, ["name"])

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        name = arguments["name"].strip()
        workflows = self.deps.library.workflows
        workflow = workflows.get(name)
        if workflow is None:
            raise ToolError(
                f"there is no workflow '{name}'. Available workflows: {_names(workflows)}"
            )
        previous = session.active_workflow
        if previous != name:
            await self.deps.sessions.set_active_workflow(session.id, name)
        if previous == name:
            status = f"'{name}' was already the active workflow."
        elif previous:
            status = f"'{name}' is now the active workflow (it replaced '{previous}')."
        else:
            status = f"'{name}' is now the active workflow."
        return (
            f"{status} Its steps follow; turn them into goals with judgment.\n\n"
            f'<workflow name="{name}">\n{workflow.content}\n</workflow>'
        )


class DeactivateWorkflow(BrainTool):
    name = "deactivate_workflow"
    description = "Switch off the conversation's active workflow (finished, or the user moved on)."
    parameters = _schema({}, [])

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        previous = session.active_workflow
        if not previous:
            return "No workflow was active; nothing changed."
        await self.deps.sessions.set_active_workflow(session.id, None)
        return f"The workflow '{previous}' is no longer active."


# ---- goals -------------------------------------------------------------------------------------


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


class _GoalTool(BrainTool):
    async def _goal_of(self, session: SessionRecord, goal_id: int) -> Goal:
        goal = await self.deps.goals.get(goal_id)
        if goal is None or goal.session_id != session.id:
            raise ToolError(
                f"there is no goal #{goal_id} in this session; use an id from the goals listed "
                "in the session state"
            )
        return goal


_DESCRIPTION = {"type": "string", "minLength": 1, "maxLength": MAX_GOAL_CHARS}


class SetGoal(_GoalTool):
    name = "set_goal"
    description = (
        "Create a goal: a root goal for a multi-step task, or, with parent_goal_id, a sub-goal "
        "(one step) under an active root goal. Returns the new goal's id."
    )
    parameters = _schema(
        {"description": _DESCRIPTION, "parent_goal_id": {"type": "integer", "minimum": 1}},
        ["description"],
    )

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        description = " ".join(arguments["description"].split())
        if not description:
            raise ToolError("the description is empty")
        parent_id = arguments.get("parent_goal_id")
        if parent_id is not None:
            parent = await self._goal_of(session, parent_id)
            if parent.parent_goal_id is not None:
                raise ToolError(
                    f"goal #{parent_id} is itself a sub-goal; add sub-goals under its root goal "
                    f"#{parent.parent_goal_id}"
                )
            if not parent.is_active:
                raise ToolError(f"goal #{parent_id} is already completed")
        for goal in await self.deps.goals.open_tree(session.id):
            if goal.is_active and goal.parent_goal_id == parent_id:
                if _same(goal.description, description):
                    raise ToolError(
                        f"this goal already exists as #{goal.id}; do not duplicate goals"
                    )
        if await self.deps.goals.count_active(session.id) >= MAX_ACTIVE_GOALS:
            raise ToolError(
                f"this session already has {MAX_ACTIVE_GOALS} active goals; finish some first"
            )
        goal = await self.deps.goals.add(session.id, description, parent_id)
        if parent_id is None:
            return f"Root goal #{goal.id} created: {description}"
        return f"Sub-goal #{goal.id} created under #{parent_id}: {description}"


class UpdateGoal(_GoalTool):
    name = "update_goal"
    description = "Reword an active goal as the understanding of the task improves."
    parameters = _schema(
        {"goal_id": {"type": "integer", "minimum": 1}, "description": _DESCRIPTION},
        ["goal_id", "description"],
    )

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        goal = await self._goal_of(session, arguments["goal_id"])
        description = " ".join(arguments["description"].split())
        if not description:
            raise ToolError("the description is empty")
        if not goal.is_active:
            raise ToolError(f"goal #{goal.id} is completed; only active goals can be reworded")
        await self.deps.goals.describe(goal, description)
        return f"Goal #{goal.id} now reads: {description}"


class FinishGoal(_GoalTool):
    name = "finish_goal"
    description = (
        "Mark a goal as completed once the assistant has done what it describes. Finishing a "
        "root goal also completes its remaining sub-goals."
    )
    parameters = _schema({"goal_id": {"type": "integer", "minimum": 1}}, ["goal_id"])

    async def apply(self, session: SessionRecord, arguments: dict[str, Any]) -> str:
        goal = await self._goal_of(session, arguments["goal_id"])
        if not goal.is_active:
            return f"Goal #{goal.id} was already completed."
        done = await self.deps.goals.complete(goal)
        also = [f"#{goal_id}" for goal_id in done if goal_id != goal.id]
        if also:
            return f"Goal #{goal.id} completed, together with its sub-goals {', '.join(also)}."
        return f"Goal #{goal.id} completed."


# ---- memories ----------------------------------------------------------------------------------


_PERSON = {
    "type": "integer",
    "minimum": 1,
    "description": "The person's number in the session state; may be left out when one "
    "person speaks.",
}
_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_MEMORY_CHARS}
_TAGS = {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": MAX_TAGS}


class _MemoryTool(BrainTool):
    """A memory tool: `curate` acts for the people of the run (`ToolContext.people`)."""

    @property
    def store(self) -> MemoryStore:
        if self.deps.memories is None:
            raise ToolError("memory is switched off")
        return self.deps.memories

    async def apply_in(
        self, session: SessionRecord, arguments: dict[str, Any], context: ToolContext
    ) -> str:
        return await self.curate(session, context.people, arguments)

    async def curate(
        self, session: SessionRecord, people: tuple[str, ...], arguments: dict[str, Any]
    ) -> str:
        raise NotImplementedError

    @staticmethod
    def _owner(people: tuple[str, ...], arguments: dict[str, Any]) -> str:
        number = arguments.get("person")
        if number is None:
            if len(people) == 1:
                return people[0]
            if not people:
                raise ToolError("nobody speaks in this conversation: there is no one to remember")
            raise ToolError(
                f"{len(people)} people speak in this conversation: say which one with `person` "
                "(their number in the session state)"
            )
        if not 1 <= number <= len(people):
            raise ToolError(f"there is no person {number}; the session state lists {len(people)}")
        return str(people[number - 1])

    async def _memory(self, people: tuple[str, ...], memory_id: int) -> Memory:
        for owner in people:
            memory = await self.store.of(owner, memory_id)
            if memory is not None:
                return memory
        raise ToolError(
            f"there is no memory #{memory_id} of the people in this conversation; use an id "
            "from the session state"
        )

    @staticmethod
    def _text(arguments: dict[str, Any]) -> str:
        text = " ".join(arguments["text"].split())
        if not text:
            raise ToolError("the text is empty")
        kind = secret_kind(text)
        if kind is not None:
            raise ToolError(f"nothing was stored: this looks like {kind}; never keep secrets")
        return text


class Remember(_MemoryTool):
    name = "remember"
    description = (
        "Save a lasting fact a person stated about themselves (preference, diet, family, work, "
        "home, project), as one short third-person sentence, e.g. 'Is vegetarian'. Returns the "
        "memory's id; a text they already have is not saved twice."
    )
    parameters = _schema({"text": _TEXT, "tags": _TAGS, "person": _PERSON}, ["text"])

    async def curate(
        self, session: SessionRecord, people: tuple[str, ...], arguments: dict[str, Any]
    ) -> str:
        owner = self._owner(people, arguments)
        memory, new = await self.store.save(
            owner, self._text(arguments), arguments.get("tags") or [], session.id
        )
        if not new:
            return f"Already remembered as #{memory.id}."
        return f"Remembered as #{memory.id}: {memory.content}"


class UpdateMemory(_MemoryTool):
    name = "update_memory"
    description = (
        "Rewrite a memory (by id) that changed or is incomplete, or that absorbs a duplicate "
        "(then forget_memory the other one)."
    )
    parameters = _schema(
        {"memory_id": {"type": "integer", "minimum": 1}, "text": _TEXT, "tags": _TAGS},
        ["memory_id", "text"],
    )

    async def curate(
        self, session: SessionRecord, people: tuple[str, ...], arguments: dict[str, Any]
    ) -> str:
        memory = await self._memory(people, arguments["memory_id"])
        text = self._text(arguments)
        updated = await self.store.update(memory.id, text, arguments.get("tags", memory.tags))
        if updated is None:
            raise ToolError(f"memory #{memory.id} was forgotten meanwhile")
        return f"Memory #{updated.id} now reads: {updated.content}"


class ForgetMemory(_MemoryTool):
    name = "forget_memory"
    description = "Forget a memory (by id) that duplicates another, or is no longer true."
    parameters = _schema({"memory_id": {"type": "integer", "minimum": 1}}, ["memory_id"])

    async def curate(
        self, session: SessionRecord, people: tuple[str, ...], arguments: dict[str, Any]
    ) -> str:
        memory = await self._memory(people, arguments["memory_id"])
        await self.store.delete(memory.id)
        return f"Memory #{memory.id} forgotten."


# ---- completion --------------------------------------------------------------------------------


class EverythingIsReady(BrainTool):
    name = "everything_is_ready"
    description = "Call this last, always: the session's metadata is up to date."
    parameters = _schema({}, [])

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return "Done."
