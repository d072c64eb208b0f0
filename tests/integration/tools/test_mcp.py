"""MCP servers end to end: a real MCP server written with the SDK (tests/fakes/mcp_server.py) run by
Bruce over stdio as its child, or served over streamable HTTP on loopback; Bruce's real Anthropic
provider against the fake Messages API, which is scripted to call `<server>__<tool>`; the
dashboard's `/api/mcp`; the SQLite file's `tool_executions`.

Each Bruce here starts one server (about a second and a half: the child imports the SDK); the
checks that can share a start share it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_until
from tests.fakes.mcp_server import BIG_CHARS, FakeMcpHttpServer
from tests.integration.dashboard_support import Dashboard, create_task, running_dashboard
from tests.integration.support import block_text, db_rows, last_tool_results, untrusted_body

TOKEN = "mcp-dashboard-token-7f3a9c1e5b"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 30.0  # a child's start on a loaded CI machine


def stdio_server(**settings: Any) -> dict[str, Any]:
    """The fake server as a command Bruce runs (from the repository, so `-m` finds it)."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server"],
        "cwd": str(REPO),
        **settings,
    }


async def mcp_status(dashboard: Dashboard) -> dict[str, dict[str, Any]]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=10) as http:
        response = await http.get("/api/mcp")
    assert response.status_code == 200, response.text
    return {server["name"]: server for server in response.json()["servers"]}


async def wait_for_state(dashboard: Dashboard, server: str, state: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        found = (await mcp_status(dashboard))[server]
        return found if found["state"] == state else None

    result: dict[str, Any] = await wait_until(reached, START_TIMEOUT, interval=0.05)
    return result


def failing_server(message: str, **settings: Any) -> dict[str, Any]:
    """The fake server writing `message` to its stderr and exiting before the handshake."""
    return stdio_server(args=["-m", "tests.fakes.mcp_server", "--fail", message], **settings)


def tool_names(body: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in body.get("tools") or []}


async def one_turn(dashboard: Dashboard, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The model calls `calls` in one step, then answers "Done."; returns the tool results it
    got back and the request that offered the tools."""
    fake = dashboard.fake
    before = len(fake.requests)
    fake.script(tool_calls=calls)
    fake.script("Done.")
    await dashboard.say("alice", "use the tools")
    await wait_until(lambda: "Done." in dashboard.channel.texts("alice"), 20)
    offered, answered = fake.requests[before], fake.requests[before + 1]
    return [offered, last_tool_results(answered)]


def executions(data_dir: Path) -> list[Any]:
    return db_rows(data_dir, "SELECT tool_name, input, output, error FROM tool_executions")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: gone from the process table once reaped.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


async def test_a_stdio_servers_tools_are_listed_and_called_end_to_end(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    server = stdio_server(
        env={"FAKE_MCP_GREETING": "from env", "FAKE_MCP_PID_FILE": str(pids)},
        tools={"deny": ["secret_note"]},
        max_output_chars=1_000,
    )
    async with running_dashboard(tmp_path, TOKEN, mcp={"servers": {"files": server}}) as dash:
        status = await wait_for_state(dash, "files", "ready")
        offered, results = await one_turn(
            dash,
            [
                ("files__echo", {"text": "hello"}),
                ("files__add", {"a": "two", "b": 3}),
                ("files__picture", {}),
                ("files__fail", {}),
                ("files__big", {}),
                ("files__secret_note", {}),
            ],
        )
        [pid] = [int(line) for line in pids.read_text().split()]
        assert alive(pid)

    tools = {tool["name"]: tool for tool in status["tools"]}
    assert tools["files__secret_note"]["offered"] is False
    assert "mcp.servers.files.tools.deny" in tools["files__secret_note"]["reason"]
    assert status["transport"] == "stdio" and status["last_error"] == ""
    # The model is offered the server's tools with their schemas, the denied one not at all.
    names = tool_names(offered)
    assert {"files__echo", "files__add", "files__picture", "files__big"} <= names
    assert "files__secret_note" not in names
    [add] = [tool for tool in offered["tools"] if tool["name"] == "files__add"]
    assert add["input_schema"]["required"] == ["a", "b"]

    echo, add_result, picture, fail, big, secret = results
    assert untrusted_body(block_text(echo), "files__echo") == "echo: hello (from env)"
    assert add_result["is_error"] and "invalid arguments for 'files__add'" in block_text(add_result)
    assert "A red dot:" in block_text(picture)
    assert "[an image was returned: image/png" in block_text(picture)
    assert fail["is_error"] is True
    assert "MCP server files reported an error" in block_text(fail)
    assert '<untrusted_content source="files__fail">' in block_text(fail)
    body = untrusted_body(block_text(big), "files__big")
    assert body.startswith("x" * 1_000)
    assert f"[... truncated: {BIG_CHARS - 1_000} more characters not shown]" in body
    assert secret["is_error"] and "unknown tool 'files__secret_note'" in block_text(secret)
    # Recorded like any tool call.
    rows = {row["tool_name"]: row for row in executions(tmp_path)}
    assert "echo: hello (from env)" in rows["files__echo"]["output"]
    assert rows["files__fail"]["error"]
    # Stopping Bruce ended its child: no orphan is left behind.
    assert not alive(pid)


async def test_a_server_that_crashes_mid_call_is_restarted_and_usable_again(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "crashed-once"
    server = stdio_server(env={"FAKE_MCP_CRASH_ONCE": str(marker)})
    async with running_dashboard(tmp_path, TOKEN, mcp={"servers": {"flaky": server}}) as dash:
        await wait_for_state(dash, "flaky", "ready")
        _, [crashed] = await one_turn(dash, [("flaky__crash", {})])
        assert crashed["is_error"] is True
        assert "MCP server flaky stopped during the call" in block_text(crashed)
        dash.channel.sent.clear()

        # Seen going down (for at least the ~1 s backoff), then restarted.
        await wait_for_state(dash, "flaky", "restarting")
        status = await wait_for_state(dash, "flaky", "ready")
        assert marker.exists()
        _, [echo] = await one_turn(dash, [("flaky__echo", {"text": "again"})])
        assert untrusted_body(block_text(echo), "flaky__echo") == "echo: again"
    assert status["last_error"] == ""


async def test_a_server_that_never_starts_is_skipped_and_bruce_stays_healthy(
    tmp_path: Path,
) -> None:
    servers = {
        "broken": failing_server("GITHUB_TOKEN is not set"),
        "missing": {"command": str(tmp_path / "no-such-server")},
        "off": {**stdio_server(), "enabled": False},
    }
    async with running_dashboard(tmp_path, TOKEN, mcp={"servers": servers}) as dash:
        broken = await wait_for_state(dash, "broken", "failed")
        missing = await wait_for_state(dash, "missing", "failed")
        off = (await mcp_status(dash))["off"]
        async with httpx.AsyncClient(base_url=dash.url, timeout=10) as http:
            assert (await http.get("/healthz")).status_code == 200
        assert await dash.chat("alice", "still there?") == "You said: still there?"

    assert "GITHUB_TOKEN is not set" in broken["last_error"]  # the tail of its stderr
    assert broken["tools"] == []
    assert "No such file" in missing["last_error"]
    assert off["state"] == "disabled"


async def test_a_streamable_http_server_with_headers_and_a_changing_tool_list(
    tmp_path: Path,
) -> None:
    async with FakeMcpHttpServer(require_header="Bearer http-secret-42") as remote:
        server = {"url": remote.url, "headers": {"Authorization": "Bearer http-secret-42"}}
        async with running_dashboard(tmp_path, TOKEN, mcp={"servers": {"web": server}}) as dash:
            status = await wait_for_state(dash, "web", "ready")
            offered, [grown] = await one_turn(dash, [("web__grow", {})])
            assert "web__late_tool" not in tool_names(offered)
            assert untrusted_body(block_text(grown), "web__grow") == "grown"

            async def late_tool_listed() -> bool:
                tools = (await mcp_status(dash))["web"]["tools"]
                return any(tool["name"] == "web__late_tool" for tool in tools)

            await wait_until(late_tool_listed, 10)
            dash.channel.sent.clear()
            offered, [late] = await one_turn(dash, [("web__late_tool", {"word": "hi"})])
    assert status["transport"] == "streamable_http"
    assert "web__late_tool" in tool_names(offered)
    assert untrusted_body(block_text(late), "web__late_tool") == "late: hi"
    assert set(remote.seen_authorization) == {"Bearer http-secret-42"}


async def test_a_streamable_http_server_that_goes_away_is_noticed_and_reconnected(
    tmp_path: Path,
) -> None:
    # Over HTTP nothing tells the client that the server went away: the quiet connection is
    # probed (every call_timeout_seconds), found mute, and connected again once it is back.
    remote = FakeMcpHttpServer()
    await remote.__aenter__()
    server = {"url": remote.url, "call_timeout_seconds": 1}
    async with running_dashboard(tmp_path, TOKEN, mcp={"servers": {"web": server}}) as dash:
        await wait_for_state(dash, "web", "ready")
        await remote.__aexit__(None, None, None)
        gone = await wait_for_state(dash, "web", "restarting")
        _, [refused] = await one_turn(dash, [("web__echo", {"text": "anyone?"})])
        assert refused["is_error"] is True and "restarting" in block_text(refused)

        async with FakeMcpHttpServer(port=remote.port):
            await wait_for_state(dash, "web", "ready")
            dash.channel.sent.clear()
            _, [echo] = await one_turn(dash, [("web__echo", {"text": "back"})])
    assert gone["last_error"]  # why: its URL did not answer, or no connection
    assert untrusted_body(block_text(echo), "web__echo") == "echo: back"


async def test_a_server_with_only_the_older_sse_transport_is_listed_and_called(
    tmp_path: Path,
) -> None:
    async with FakeMcpHttpServer(sse=True) as remote:
        server = {"url": remote.url, "transport": "sse"}
        async with running_dashboard(tmp_path, TOKEN, mcp={"servers": {"old": server}}) as dash:
            status = await wait_for_state(dash, "old", "ready")
            offered, [echo] = await one_turn(dash, [("old__echo", {"text": "over sse"})])
    assert status["transport"] == "sse"
    assert "old__echo" in tool_names(offered)
    assert untrusted_body(block_text(echo), "old__echo") == "echo: over sse"


@pytest.mark.parametrize("allow_in_tasks", [False, True])
async def test_a_scheduled_run_gets_a_servers_tools_only_when_allowed(
    tmp_path: Path, allow_in_tasks: bool
) -> None:
    server = stdio_server(allow_in_tasks=allow_in_tasks)
    async with running_dashboard(tmp_path, TOKEN, mcp={"servers": {"files": server}}) as dash:
        await wait_for_state(dash, "files", "ready")
        assert "files__echo" in tool_names(await chat_request(dash))
        dash.fake.script("Morning summary.")
        await create_task(
            dash, "alice", title="Digest", mode="agent", content="Sum up", run_at="+1s"
        )
        await wait_until(lambda: any("Digest" in t for t in dash.channel.texts("alice")), 20)
        briefing = dash.fake.requests[-1]
    assert ("files__echo" in tool_names(briefing)) is allow_in_tasks
    assert "proactive_create" not in tool_names(briefing)


async def chat_request(dash: Dashboard) -> dict[str, Any]:
    before = len(dash.fake.requests)
    await dash.chat("alice", "hello")
    request: dict[str, Any] = dash.fake.requests[before]
    return request


async def test_what_a_server_wrote_is_shown_with_its_secrets_scrubbed(tmp_path: Path) -> None:
    configured = "my-configured-mcp-secret-42"
    unknown = "ghp_" + "Zx9Lq2Wv7Rt4Kb8Nm3Pd6Hs1Fg5Jc0Ya"  # a GitHub token config.yml never named
    message = f"login refused for {configured} and {unknown}: check GITHUB_TOKEN"
    servers = {"leaky": failing_server(message, env={"GITHUB_TOKEN": configured})}
    async with running_dashboard(tmp_path, TOKEN, mcp={"servers": servers}) as dash:
        leaky = await wait_for_state(dash, "leaky", "failed")
        async with httpx.AsyncClient(base_url=dash.url, headers=AUTH, timeout=10) as http:
            raw = (await http.get("/api/mcp")).text
    assert (
        "fake mcp server: login refused for *** and ***: check GITHUB_TOKEN"
        in (leaky["last_error"])
    )
    assert configured not in raw and unknown not in raw
