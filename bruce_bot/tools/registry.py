"""Tools and the registry that offers them to the model and runs them safely.

A tool is a small class: a name, a description, a JSON Schema for its arguments, per-tool limits
(timeout, output size) and one `execute` method. The registry turns tools into provider-neutral
`ToolSpec`s and executes calls so that nothing a tool or the model does can break the agent loop:
an unknown name, malformed or schema-violating arguments, an exception or a timeout all become
error results the model can read and act on. Besides the tools added once, a registry may hold
sources whose tools come and go while Bruce runs (the MCP servers' tools, `mcp_client/`): they
are read at each look-up, so a turn sees the tools there when it asks. A tool's JSON Schema is
checked, and its validator built, the first time the model calls it: jsonschema and the schema
checks cost start-up about 50 ms for tools most processes call seldom
(tests/unit/test_tools_registry.py checks every shipped schema instead).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import structlog

from bruce_bot.domain import OutboundFile, ToolCall, ToolResult, ToolSpec
from bruce_bot.untrusted import fence

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

log = structlog.get_logger(__name__)

DEFAULT_MAX_OUTPUT_CHARS = 20_000

# What a tool does, which decides whether it may run in a turn that read outside content:
# "reads" only looks (a page, the user's memories, the task list); "own_state" changes Bruce's
# own state (a memory, a task, an artifact); "outward" sends data out or changes the world (an
# MCP server's action). Once a turn has read untrusted content, every call that is not "reads"
# waits for the user's confirmation (agent/approvals.py).
Effect = Literal["reads", "own_state", "outward"]


class ToolError(Exception):
    """A failure a tool reports on purpose: its message is shown to the model as is, followed by
    `untrusted`, outside text that explains it (an MCP server's error), fenced as data."""

    def __init__(self, message: str, *, untrusted: str | None = None) -> None:
        super().__init__(message)
        self.untrusted = untrusted


@dataclass(slots=True)
class ToolContext:
    """What a tool may know about the turn it runs in."""

    session_id: int | None = None
    channel: str = ""
    chat_id: str = ""
    # Content from the outside world entered this turn before the call: whatever the call sets
    # up might have been asked for by that content, not by the user.
    untrusted_input: bool = False
    # What that content was, in Bruce's words ("web_fetch", "a forwarded message"), for the
    # question the user is asked before an action the turn wants runs.
    untrusted_source: str = ""
    # Names the turn (the newest message it answers): a tool with lasting effects keys them on
    # it and its arguments, so the same call in a turn resumed after a crash does not repeat.
    turn_key: str = ""
    # The person speaking in the turn, "<channel>:<user id>" (a briefing: the person who set it
    # up); "" when there is none. Memories are this person's only (tools/memory.py).
    person: str = ""
    # The analytical brain's run: the people speaking in the conversation it reads, in the
    # order its message numbers them (person 1 first).
    people: tuple[str, ...] = ()
    # A scheduled (agent-mode) task's run: tools not meant for unattended runs stay out.
    task_run: bool = False
    # Shows a short line in place of the turn's live reply while a tool works ("⏳ waiting
    # for your approval"); None when the turn shows none.
    status: Callable[[str], Awaitable[None]] | None = None
    # A sub-agent's run (agent/subagent.py): nobody watches it as it goes.
    subagent: bool = False


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returns when plain text is not enough: an error result it shapes itself,
    files that go with the reply, details for the audit log (JSON text)."""

    text: str
    is_error: bool = False
    untrusted: bool = False
    files: tuple[OutboundFile, ...] = ()
    details: str | None = None


class Tool:
    """Base class of every tool. Subclasses set the class attributes and implement `execute`."""

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]
    timeout_seconds: ClassVar[float | None] = None  # None: the registry's default
    max_output_chars: ClassVar[int] = DEFAULT_MAX_OUTPUT_CHARS
    # The tool reads the outside world (pages, search results): its output is untrusted data.
    reads_outside_world: ClassVar[bool] = False
    # Offered in scheduled (agent-mode) task runs too.
    allowed_in_tasks: ClassVar[bool] = True
    # What the tool does (see `Effect`); a tool that says nothing is taken to act outwards.
    effect: ClassVar[Effect] = "outward"
    # The tool asks the user itself before anything it sets up after untrusted content takes
    # effect (a task stored unconfirmed, with Bruce's own question): the gate lets it through.
    confirms_itself: ClassVar[bool] = False
    # The argument holding a URL the tool reads: after untrusted content, reading a URL that
    # carries text from the conversation sends that text out (agent/outward.py).
    url_argument: ClassVar[str | None] = None

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str | ToolOutput:
        raise NotImplementedError

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


def as_untrusted(text: str, source: str) -> str:
    """`text` from the outside world, fenced so the model reads it as data."""
    return fence(text, source)


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... truncated: {len(text) - limit} more characters not shown]"


def _describe_schema_error(error: Any) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    return f"argument '{where}': {error.message}" if where else error.message


class ToolSource(Protocol):
    """Tools that change while Bruce runs; `tools()` is asked at each look-up, so it is cheap."""

    def tools(self) -> Sequence[Tool]: ...


class ToolRegistry:
    """The enabled tools, looked up by name."""

    def __init__(self, tools: Iterable[Tool] = (), default_timeout: float = 60.0) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []
        # What `without` takes out, applied to the sources' tools at each look-up as well.
        self._excluded: frozenset[str] = frozenset()
        self._task_run = False
        # id(schema) -> (schema, its validator), built on a tool's first call; shared with the
        # registries `without` derives, so a briefing's subset does not build them again.
        self._validators: dict[int, tuple[dict[str, Any], Validator]] = {}
        self.default_timeout = default_timeout
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def add_source(self, source: ToolSource) -> None:
        self._sources.append(source)

    def _offered(self, tool: Tool) -> bool:
        return tool.name not in self._excluded and (tool.allowed_in_tasks or not self._task_run)

    def _current(self) -> dict[str, Tool]:
        if not self._sources:
            return self._tools
        current = dict(self._tools)
        for source in self._sources:
            for tool in source.tools():
                # A fixed tool keeps its name: a source's tool never shadows it.
                if tool.name not in current and self._offered(tool):
                    current[tool.name] = tool
        return current

    def names(self) -> list[str]:
        return list(self._current())

    def reserved_names(self) -> frozenset[str]:
        """The fixed tools' names, which a source's tools must not take."""
        return frozenset(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._current()

    def __len__(self) -> int:
        return len(self._current())

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._current().values()]

    def without(self, names: Iterable[str], *, task_run: bool = False) -> ToolRegistry:
        """A registry with the same tools minus `names` (e.g. scheduling tools in agent mode);
        `task_run`: minus the tools not allowed in scheduled runs too."""
        excluded = self._excluded | frozenset(names)
        subset = ToolRegistry(default_timeout=self.default_timeout)
        subset._validators = self._validators
        subset._sources = self._sources
        subset._excluded = excluded
        subset._task_run = self._task_run or task_run
        for name, tool in self._tools.items():
            if subset._offered(tool):
                subset._tools[name] = tool
        return subset

    def _validator(self, tool: Tool) -> Validator | None:
        """The validator of the tool's arguments (None: the tool's own schema is broken)."""
        cached = self._validators.get(id(tool.parameters))
        if cached is not None and cached[0] is tool.parameters:
            return cached[1]
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(tool.parameters)
        except SchemaError as exc:  # a bug of the tool's, not of the model's
            log.error("tool_schema_invalid", tool=tool.name, error=exc.message)
            return None
        validator = Draft202012Validator(tool.parameters)
        self._validators[id(tool.parameters)] = (tool.parameters, validator)
        return validator

    def get(self, name: str) -> Tool | None:
        return self._current().get(name)

    def check_arguments(self, call: ToolCall) -> tuple[Tool | None, str | None]:
        """The tool to run, or why the call cannot run (told to the model as an error)."""
        current = self._current()
        tool = current.get(call.name)
        if tool is None:
            available = ", ".join(sorted(current)) or "none"
            return None, f"unknown tool '{call.name}'. Available tools: {available}."
        if call.arguments is None:
            return None, (
                f"the arguments for '{call.name}' are not valid JSON "
                f"({call.raw_arguments[:200]!r}); send a JSON object matching the tool's schema."
            )
        validator = self._validator(tool)
        if validator is None:
            return None, f"'{call.name}' cannot be used now: its argument schema is broken."
        errors = sorted(validator.iter_errors(call.arguments), key=str)
        if errors:
            described = "; ".join(_describe_schema_error(error) for error in errors[:5])
            return None, f"invalid arguments for '{call.name}': {described}."
        return tool, None

    async def execute(self, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run one call; never raises (except cancellation)."""
        tool, problem = self.check_arguments(call)
        if tool is None:
            return ToolResult(call.id, call.name, f"Error: {problem}", is_error=True)
        assert call.arguments is not None
        timeout = tool.timeout_seconds or self.default_timeout
        try:
            output = await asyncio.wait_for(tool.execute(call.arguments, context), timeout)
        except TimeoutError:
            message = f"Error: '{call.name}' did not finish within {timeout:g} seconds."
            return ToolResult(call.id, call.name, message, is_error=True)
        except ToolError as exc:
            if exc.untrusted is None:
                return ToolResult(call.id, call.name, f"Error: {exc}", is_error=True)
            fenced = as_untrusted(truncate(exc.untrusted, tool.max_output_chars), call.name)
            message = f"Error: {exc}\n{fenced}"
            return ToolResult(call.id, call.name, message, is_error=True, untrusted=True)
        except Exception as exc:  # a tool bug must not end the turn: the model is told instead
            log.warning(
                "tool_raised", tool=call.name, error=repr(exc), session_id=context.session_id
            )
            message = f"Error: '{call.name}' failed: {type(exc).__name__}: {exc}"
            return ToolResult(call.id, call.name, message, is_error=True)
        if isinstance(output, ToolOutput):
            content = truncate(output.text, tool.max_output_chars)
            if output.untrusted:
                content = as_untrusted(content, call.name)
            return ToolResult(
                call.id,
                call.name,
                f"Error: {content}" if output.is_error else content,
                is_error=output.is_error,
                untrusted=output.untrusted,
                files=output.files,
                details=output.details,
            )
        content = truncate(str(output), tool.max_output_chars)
        if tool.reads_outside_world:
            return ToolResult(call.id, call.name, as_untrusted(content, call.name), untrusted=True)
        return ToolResult(call.id, call.name, content)


def arguments_json(arguments: Mapping[str, Any] | None, raw: str) -> str:
    """The call's arguments as stored in the audit log."""
    if arguments is None:
        return raw
    return json.dumps(arguments, ensure_ascii=False, default=str)
