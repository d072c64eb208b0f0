"""The MCP client's parts that need no running Bruce: the `mcp.servers` config and its errors, the
secrets it adds to the log scrubber, tool names, the restart backoff, the registry's changing
sources (and what task runs leave out), and a server whose answer is not valid MCP (a real
process speaking hand-written JSON-RPC, through the real SDK)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bruce_bot.config import ConfigError, validate
from bruce_bot.domain import ToolCall
from bruce_bot.mcp_client.manager import Backoff, McpManager
from bruce_bot.mcp_client.tools import NAME_PATTERN, Outcome, mcp_tool, tool_name
from bruce_bot.tools.registry import ToolContext, ToolRegistry
from tests.conftest import wait_until

REPO = Path(__file__).resolve().parents[2]


def problems(servers: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        validate({"mcp": {"servers": servers}})
    return str(raised.value)


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ({}, "mcp.servers.gh.command: missing; set command"),
        ({"command": "x", "url": "http://h/mcp"}, "mcp.servers.gh.command: set together with"),
        ({"url": "ftp://h/mcp"}, "mcp.servers.gh.url: 'ftp://h/mcp' is not a valid URL"),
        ({"url": "not a url"}, "mcp.servers.gh.url:"),
        ({"command": "x", "bogus": 1}, "mcp.servers.gh.bogus: unknown key"),
        ({"command": "x", "tools": {"alow": []}}, "did you mean 'allow'?"),
        ({"command": "x", "headers": {"A": "b"}}, "mcp.servers.gh.headers: headers and transport"),
        ({"url": "https://h/mcp", "args": ["-v"]}, "mcp.servers.gh.args: args, env and cwd"),
        ({"command": "x", "call_timeout_seconds": 0}, "mcp.servers.gh.call_timeout_seconds"),
    ],
)
def test_a_bad_server_is_a_config_error_naming_the_key(
    server: dict[str, Any], expected: str
) -> None:
    assert expected in problems({"gh": server})


def test_a_server_name_that_cannot_start_tool_names_is_refused() -> None:
    assert "mcp.servers.my server: the name 'my server'" in problems(
        {"my server": {"command": "x"}}
    )
    assert "mcp.servers.a__b" in problems({"a__b": {"command": "x"}})


def test_env_values_and_headers_are_secrets_for_the_log_scrubber(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = validate(
        {
            "mcp": {
                "servers": {
                    "gh": {"command": "npx", "env": {"GITHUB_TOKEN": "ghp_123456789"}},
                    "ha": {"url": "https://ha/mcp", "headers": {"Authorization": "Bearer tok-987"}},
                }
            }
        }
    )
    assert {"ghp_123456789", "Bearer tok-987", "tok-987"} <= set(config.secrets())
    assert config.mcp.servers["gh"].kind == "stdio"
    assert config.mcp.servers["ha"].kind == "streamable_http"
    assert config.mcp.servers["gh"].allow_in_tasks is False


def test_tool_names_are_what_the_llm_apis_accept() -> None:
    assert tool_name("github", "create_issue") == "github__create_issue"
    odd = tool_name("home-lab", "lights.turn on/off")
    assert odd == "home-lab__lights_turn_on_off" and NAME_PATTERN.match(odd)
    assert len(tool_name("s", "x" * 100)) == 64


def test_the_backoff_grows_to_its_cap_with_jitter() -> None:
    backoff = Backoff(first=1.0, factor=2.0, cap=10.0, jitter=0.2)
    assert [backoff.delay(n, rand=lambda: 0.5) for n in range(5)] == [1, 2, 4, 8, 10]
    assert backoff.delay(0, rand=lambda: 0.0) == pytest.approx(0.8)
    assert backoff.delay(0, rand=lambda: 1.0) == pytest.approx(1.2)


class _Source:
    def __init__(self, *allowed_in_tasks: bool) -> None:
        async def call(tool: str, arguments: dict[str, Any]) -> Outcome:
            return Outcome(f"{tool} ran")

        self.listed = [
            mcp_tool(
                "srv",
                f"t{n}",
                "",
                {"type": "object"},
                call,
                timeout_seconds=5,
                max_output_chars=100,
                allowed_in_tasks=allowed,
            )
            for n, allowed in enumerate(allowed_in_tasks)
        ]

    def tools(self) -> list[Any]:
        return self.listed


async def test_a_sources_tools_come_and_go_and_task_runs_leave_out_the_unallowed() -> None:
    registry = ToolRegistry()
    source = _Source(True, False)
    registry.add_source(source)
    assert registry.names() == ["srv__t0", "srv__t1"]
    briefing = registry.without((), task_run=True)
    assert briefing.names() == ["srv__t0"]
    result = await registry.execute(ToolCall("1", "srv__t1", {}), ToolContext())
    assert result.untrusted
    assert result.content == '<untrusted_content source="srv__t1">\nt1 ran\n</untrusted_content>'
    refused = await briefing.execute(ToolCall("2", "srv__t1", {}), ToolContext(task_run=True))
    assert refused.is_error and "unknown tool" in refused.content
    source.listed = []
    assert registry.names() == [] and briefing.names() == []


async def test_a_result_that_is_not_valid_mcp_is_an_error_result() -> None:
    config = validate(
        {
            "mcp": {
                "servers": {
                    "odd": {
                        "command": sys.executable,
                        "args": ["-m", "tests.fakes.mcp_server", "--invalid"],
                        "cwd": str(REPO),
                    }
                }
            }
        }
    )
    manager = McpManager(config.mcp)
    manager.start()
    try:
        [tool] = await wait_until(manager.tools, 20)
        assert tool.name == "odd__broken"
        registry = ToolRegistry()
        registry.add_source(manager)
        result = await registry.execute(ToolCall("1", "odd__broken", {}), ToolContext())
    finally:
        await manager.stop()
    assert result.is_error
    assert "MCP server odd answered with content that is not valid MCP" in result.content
    [status] = manager.statuses()
    assert status.state == "ready"  # one bad answer is no reason to restart the server


SPEC_EXAMPLES = REPO / "tests" / "fixtures" / "mcp" / "spec_2025_06_18_tools.json"


async def test_the_specifications_own_examples_are_listed_and_read_as_the_model_sees_them() -> None:
    # The MCP specification's tools examples (tests/fixtures/mcp/), answered by a hand-written
    # server: a listing over two pages, text, an isError result, a protocol error, every
    # content type and structured content.
    server = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server", "--script", str(SPEC_EXAMPLES)],
        "cwd": str(REPO),
    }
    manager = McpManager(validate({"mcp": {"servers": {"weather": server}}}).mcp)
    manager.start()
    registry = ToolRegistry()
    registry.add_source(manager)

    async def call(tool: str, location: str) -> Any:
        arguments = {"location": location}
        return await registry.execute(ToolCall("1", f"weather__{tool}", arguments), ToolContext())

    try:
        tools = await wait_until(lambda: len(manager.tools()) == 2 and manager.tools(), 20)
        new_york = await call("get_weather", "New York")
        atlantis = await call("get_weather", "Atlantis")
        nowhere = await call("get_weather", "Nowhere")
        lisbon = await call("get_weather", "Lisbon")
        data = await call("get_weather_data", "New York")
        missing = await registry.execute(ToolCall("2", "weather__get_weather", {}), ToolContext())
    finally:
        await manager.stop()

    assert {tool.name for tool in tools} == {"weather__get_weather", "weather__get_weather_data"}
    assert not new_york.is_error and new_york.untrusted
    assert "Current weather in New York:\nTemperature: 72°F" in new_york.content
    assert atlantis.is_error and "API rate limit exceeded" in atlantis.content
    assert (
        nowhere.is_error and "refused the call: Unknown tool: invalid_tool_name" in nowhere.content
    )
    assert "[an image was returned: image/png" in lisbon.content
    assert "[an audio clip was returned: audio/wav" in lisbon.content
    assert "[a resource: main.rs <file:///project/src/main.rs>]" in lisbon.content
    assert 'println!("Hello world!");' in lisbon.content  # an embedded text resource is read
    assert not data.is_error and '"temperature": 22.5' in data.content
    assert missing.is_error and "location" in missing.content  # the schema's required field
