"""A turn cut by SIGKILL after its tools ran resumes from what they did, instead of running
them again: the real daemon (`python -m bruce_bot run`) against the fake Messages API, killed
while the model thinks about a tool's result, then started again over the same database."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import yaml

from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.domain import SessionKey, ToolCall
from bruce_bot.tools.proactive import proactive_tools
from bruce_bot.tools.registry import ToolContext, ToolRegistry
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer
from tests.integration.crash.test_restart import Daemon, chat_messages, post
from tests.integration.support import config_for, db_rows, last_tool_results, tool_uses

REMINDER = {"title": "Stretch", "execution_mode": "message", "content": "Stretch!", "run_at": "+1h"}


def with_scheduling(daemon: Daemon) -> None:
    config = yaml.safe_load(daemon.config_path.read_text(encoding="utf-8"))
    config["tools"]["proactive"] = {"enabled": True}
    daemon.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")


async def test_a_turn_killed_after_its_tool_ran_resumes_without_running_it_again(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    first_process = asyncio.Event()
    first_process.set()
    release = asyncio.Event()

    async def model(body: dict[str, Any]) -> AnthropicReply | str:
        results = last_tool_results(body)
        if not results:
            # Asked afresh, this model would schedule again: only resuming prevents a second task.
            return AnthropicReply(tool_calls=[("proactive_create", REMINDER)])
        if first_process.is_set():
            await release.wait()  # the first process never hears back
        return "Done: I'll remind you to stretch in an hour."

    anthropic_fake.responder = model
    daemon = Daemon(tmp_path, anthropic_fake.base_url)
    with_scheduling(daemon)
    try:
        await daemon.start()
        await post(daemon, "Remind me to stretch in an hour")
        await anthropic_fake.wait_for_requests(2, 20)  # the tool ran; the model is "thinking"
        assert len(db_rows(daemon.data_dir, "SELECT id FROM proactive_tasks")) == 1
        await daemon.kill()
        assert daemon.process is not None and daemon.process.returncode == -signal.SIGKILL

        first_process.clear()
        await daemon.start()

        async def replied() -> list[dict[str, Any]]:
            listed = await chat_messages(daemon, wait=2)
            return [m for m in listed if m["role"] == "assistant" and m["kind"] == "chat"]

        (reply,) = await wait_until(replied, timeout=20)
        assert reply["content"] == "Done: I'll remind you to stretch in an hour."
    finally:
        release.set()
        await daemon.kill()

    assert len(db_rows(daemon.data_dir, "SELECT id FROM proactive_tasks")) == 1
    executions = db_rows(daemon.data_dir, "SELECT tool_name FROM tool_executions")
    assert [row["tool_name"] for row in executions] == ["proactive_create"]
    # The restarted turn went on from the recorded call and its result.
    resumed = anthropic_fake.requests[2]
    assert [use["name"] for use in tool_uses(resumed)] == ["proactive_create"]
    assert "Task 1 scheduled" in str(last_tool_results(resumed)[0]["content"])


async def test_the_same_scheduling_call_in_the_same_turn_creates_one_task(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    """The window resuming cannot close: the task was committed, then the kill hit before the
    tool's execution was recorded, so the resumed turn makes the very same call again."""
    config = config_for(tmp_path, anthropic_fake.base_url)
    async with running_bruce(config, channels=[ConsoleChannel()]) as bruce:
        assert bruce.stores is not None and bruce.confirmations is not None
        session = await bruce.stores.sessions.get_or_create(SessionKey("console", "local"))
        registry = ToolRegistry(proactive_tools(bruce.confirmations))

        async def create(turn_key: str) -> str:
            context = ToolContext(session.id, "console", "local", turn_key=turn_key)
            result = await registry.execute(ToolCall("c1", "proactive_create", REMINDER), context)
            assert not result.is_error, result.content
            return result.content

        first = await create("m7")
        again = await create("m7")  # the resumed turn, after the crash
        other = await create("m8")  # a later message asking the same thing: a new task
    assert first == again
    assert other != first
    rows = db_rows(tmp_path, "SELECT id FROM proactive_tasks ORDER BY id")
    assert len(rows) == 2
