"""An MCP server's tool as one of Bruce's tools: `<server>__<tool>`, the server's JSON Schema.

The registry validates the model's arguments against the schema and records the call like any
other; `execute` hands it to the server's supervisor. What the server answers is outside content:
the result is fenced as untrusted data (`reads_outside_world`), an error result too, and capped at
the server's `max_output_chars` with a note saying how much was cut. A tool the server
annotates `readOnlyHint: true` only reads; any other (a `destructiveHint`, or no annotations at
all) is taken to act on the world, so after outside content it waits for the user's yes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from bruce_bot.tools.registry import Tool, ToolContext, ToolError, truncate

# What Anthropic and OpenAI accept as a tool name.
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")
SEPARATOR = "__"
MAX_DESCRIPTION_CHARS = 1_000


def tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>` with what the LLM APIs refuse replaced by `_`, at most 64 characters."""
    return _NOT_ALLOWED.sub("_", f"{server}{SEPARATOR}{tool}")[:64]


@dataclass(frozen=True, slots=True)
class Outcome:
    """A call's result as the supervisor hands it back (SDK-free)."""

    text: str
    is_error: bool = False
    from_server: bool = True  # False: Bruce's own words (restarting, invalid answer)


Caller = Callable[[str, dict[str, Any]], Awaitable[Outcome]]


class McpTool(Tool):
    """One tool of one MCP server. Tools are classes whose attributes say what they are, so each
    listed tool gets a small subclass of its own (`mcp_tool`)."""

    reads_outside_world = True
    server: ClassVar[str]
    remote_name: ClassVar[str]
    call_timeout_seconds: ClassVar[float]

    def __init__(self, call: Caller) -> None:
        self._call = call

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        if context.task_run and not self.allowed_in_tasks:
            raise ToolError(
                f"{self.name} is not available in scheduled runs "
                f"(mcp.servers.{self.server}.allow_in_tasks is false)."
            )
        outcome = await self._call(self.remote_name, arguments)
        if not outcome.is_error:
            return outcome.text
        if outcome.from_server:
            text = truncate(outcome.text, self.max_output_chars)
            raise ToolError(f"MCP server {self.server} reported an error.", untrusted=text)
        raise ToolError(outcome.text)


def mcp_tool(
    server: str,
    remote_name: str,
    description: str,
    schema: dict[str, Any],
    call: Caller,
    *,
    timeout_seconds: float,
    max_output_chars: int,
    allowed_in_tasks: bool,
    read_only: bool = False,
) -> McpTool:
    """The tool `remote_name` of `server` as Bruce offers it."""
    text = description.strip() or f"The {remote_name} tool."
    attributes: dict[str, Any] = {
        "server": server,
        "remote_name": remote_name,
        "name": tool_name(server, remote_name),
        "description": f"[MCP server {server}] {text}"[:MAX_DESCRIPTION_CHARS],
        # The LLM APIs want an object schema at the root; MCP requires one too.
        "parameters": schema if schema.get("type") == "object" else {"type": "object"},
        "call_timeout_seconds": timeout_seconds,
        # The registry's own timeout is the backstop of the call's: a little later.
        "timeout_seconds": timeout_seconds + 5,
        "max_output_chars": max_output_chars,
        "allowed_in_tasks": allowed_in_tasks,
        # Annotations are hints from the server, trusted only in the safe direction: a tool
        # without `readOnlyHint: true` may send data out.
        "effect": "reads" if read_only else "outward",
    }
    kind = type(f"McpTool[{attributes['name']}]", (McpTool,), attributes)
    tool: McpTool = kind(call)
    return tool
