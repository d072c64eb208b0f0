"""The tool registry turns every way a tool call can go wrong into a result the model can read."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from bruce_bot.domain import ToolCall
from bruce_bot.tools.registry import Tool, ToolContext, ToolError, ToolRegistry


class AddTool(Tool):
    name = "add"
    description = "Add two integers."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return str(arguments["a"] + arguments["b"])


class FailingTool(Tool):
    name = "boom"
    description = "Always fails."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raise RuntimeError("disk on fire")


class RefusingTool(Tool):
    name = "refuse"
    description = "Refuses on purpose."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raise ToolError("the date 2020-01-01 is in the past; pick a future time")


class HangingTool(Tool):
    name = "hang"
    description = "Never returns."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    timeout_seconds = 0.05

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        await asyncio.Event().wait()
        return "unreachable"


class ChattyTool(Tool):
    name = "chatty"
    description = "Returns a huge output."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    max_output_chars = 100

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return "x" * 5000


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([AddTool(), FailingTool(), RefusingTool(), HangingTool(), ChattyTool()])


async def run(registry: ToolRegistry, name: str, arguments: dict[str, Any] | None, raw: str = ""):
    return await registry.execute(ToolCall("call-1", name, arguments, raw), ToolContext())


async def test_valid_call_returns_the_tool_output(registry: ToolRegistry) -> None:
    result = await run(registry, "add", {"a": 2, "b": 3})
    assert (result.content, result.is_error, result.call_id) == ("5", False, "call-1")


async def test_unknown_tool_names_the_available_ones(registry: ToolRegistry) -> None:
    result = await run(registry, "delete_everything", {})
    assert result.is_error
    assert "unknown tool 'delete_everything'" in result.content
    assert "add" in result.content and "boom" in result.content


async def test_missing_required_argument_is_named(registry: ToolRegistry) -> None:
    result = await run(registry, "add", {"a": 1})
    assert result.is_error and "'b' is a required property" in result.content


async def test_wrong_type_names_the_field(registry: ToolRegistry) -> None:
    result = await run(registry, "add", {"a": "one", "b": 2})
    assert result.is_error and "argument 'a'" in result.content and "integer" in result.content


async def test_malformed_json_arguments_become_an_error_result(registry: ToolRegistry) -> None:
    result = await run(registry, "add", None, raw='{"a": 1, "b":')
    assert result.is_error and "not valid JSON" in result.content


async def test_tool_exception_becomes_an_error_result(registry: ToolRegistry) -> None:
    result = await run(registry, "boom", {})
    assert result.is_error and "RuntimeError: disk on fire" in result.content


async def test_tool_error_message_reaches_the_model_as_is(registry: ToolRegistry) -> None:
    result = await run(registry, "refuse", {})
    assert result.content == "Error: the date 2020-01-01 is in the past; pick a future time"


async def test_a_hanging_tool_times_out(registry: ToolRegistry) -> None:
    result = await run(registry, "hang", {})
    assert result.is_error and "did not finish within 0.05 seconds" in result.content


async def test_huge_output_is_truncated_with_a_note(registry: ToolRegistry) -> None:
    result = await run(registry, "chatty", {})
    assert result.content.startswith("x" * 100)
    assert "truncated: 4900 more characters" in result.content
    assert len(result.content) < 200


def test_without_drops_named_tools_only(registry: ToolRegistry) -> None:
    subset = registry.without({"boom", "hang"})
    assert subset.names() == ["add", "refuse", "chatty"]
    assert [spec.name for spec in subset.specs()] == subset.names()
    assert "boom" in registry  # the original is untouched


class BrokenSchemaTool(Tool):
    name = "broken"
    description = "Its schema is not a JSON Schema."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"a": {"type": 7}}}

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return "unreachable"


async def test_a_tool_with_a_broken_schema_is_refused_and_the_others_still_work() -> None:
    # Schemas are checked when a tool is first called, not when it is registered (start-up).
    registry = ToolRegistry([BrokenSchemaTool(), AddTool()])
    result = await run(registry, "broken", {"a": 1})
    assert result.is_error and "argument schema is broken" in result.content
    assert (await run(registry, "add", {"a": 1, "b": 2})).content == "3"


async def test_a_subset_validates_like_its_registry(registry: ToolRegistry) -> None:
    await run(registry, "add", {"a": 1, "b": 2})
    subset = registry.without({"boom"})
    result = await run(subset, "add", {"a": "one", "b": 2})
    assert result.is_error and "argument 'a'" in result.content


def shipped_tools() -> list[type[Tool]]:
    """Every tool class Bruce ships: the model's tools, sub-agents and the brain's."""
    import importlib
    import pkgutil

    import bruce_bot.tools

    for module in pkgutil.iter_modules(bruce_bot.tools.__path__):
        importlib.import_module(f"bruce_bot.tools.{module.name}")
    importlib.import_module("bruce_bot.agent.subagent")
    importlib.import_module("bruce_bot.agent.brain.tools")
    found: list[type[Tool]] = []
    pending = list(Tool.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls.__module__.startswith("bruce_bot.") and "parameters" in vars(cls):
            found.append(cls)
    return found


def test_every_shipped_tool_has_a_valid_argument_schema() -> None:
    from jsonschema import Draft202012Validator

    tools = shipped_tools()
    names = {tool.name for tool in tools}
    assert {"web_fetch", "proactive_create", "spawn_subagent", "everything_is_ready"} <= names
    for tool in tools:
        Draft202012Validator.check_schema(tool.parameters)
