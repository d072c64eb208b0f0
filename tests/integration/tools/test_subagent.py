"""`spawn_subagent` end to end: a conversation through the console channel, tools built from the
config, Bruce's real Anthropic provider against the fake Messages API, and the SQLite file on disk.

The fake tells the parent agent's requests from the child's by the sub-agent note in the system
prompt and answers each from its own plan of rounds; the parent waits on the tool, so the order
of requests is fixed and no test needs a fixed sleep.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from bruce_bot.agent.subagent import SUBAGENT_NOTE
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.config import Config
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer, ScriptedToolCall
from tests.fakes.web_server import FakeWebServer
from tests.integration.support import (
    block_text,
    config_for,
    db_rows,
    last_tool_results,
    next_reply,
    system_text,
    untrusted_body,
    user_texts,
)

MAIN_MODEL = "claude-opus-4-6"
BRAIN_MODEL = "claude-haiku-4-5"
SCHEDULING = {"proactive_create", "proactive_list", "proactive_cancel"}
TASK = "Research heat pumps for cold climates and list the three key facts."
CHILD_ANSWER = "1. They work down to -25 °C. 2. COP drops in the cold. 3. Size for the worst week."


class FakeModels:
    """Planned rounds for the parent agent and for the sub-agent; the brain is always ready."""

    def __init__(self) -> None:
        self.parent: deque[AnthropicReply] = deque()
        self.child: deque[AnthropicReply] = deque()
        self.nickname = "heat-scout"

    async def __call__(self, body: dict[str, Any]) -> AnthropicReply | str:
        if body["model"] == BRAIN_MODEL:
            if "Session kind: sub-agent" in user_texts(body)[0] and len(body["messages"]) == 1:
                return AnthropicReply(
                    tool_calls=[
                        ("assign_nickname", {"nickname": self.nickname}),
                        ("everything_is_ready", {}),
                    ]
                )
            return AnthropicReply(tool_calls=[("everything_is_ready", {})])
        plan = self.child if is_child(body) else self.parent
        return plan.popleft()


def is_child(body: dict[str, Any]) -> bool:
    return SUBAGENT_NOTE in system_text(body)


def reply(text: str = "", *tool_calls: ScriptedToolCall) -> AnthropicReply:
    return AnthropicReply(text=text, tool_calls=tool_calls)


def tool_names(body: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in body.get("tools", [])}


def subagent_config(tmp_path: Path, fake: FakeAnthropicServer, **overrides: Any) -> Config:
    return config_for(
        tmp_path,
        fake.base_url,
        llm={"model": MAIN_MODEL, "background_model": BRAIN_MODEL},
        **overrides,
    )


def child_session(data_dir: Path) -> Any:
    (row,) = db_rows(data_dir, "SELECT * FROM sessions WHERE kind = 'child'")
    return row


def parent_session(data_dir: Path) -> Any:
    (row,) = db_rows(data_dir, "SELECT * FROM sessions WHERE chat_id = 'local'")
    return row


def delegate_then_answer(models: FakeModels, final: str = "Here is what I found.") -> None:
    models.parent.append(reply("", ("spawn_subagent", {"task": TASK})))
    models.parent.append(reply(final))


async def test_the_parent_delegates_a_task_and_answers_the_user_with_the_childs_result(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    delegate_then_answer(models, "Three facts about heat pumps: they work in the cold.")
    models.child.append(reply(CHILD_ANSWER))
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(subagent_config(tmp_path, anthropic_fake), channels=[console]):
        assert await console.say("Tell me about heat pumps in cold climates")
        assert await next_reply(console.replies) == (
            "Three facts about heat pumps: they work in the cold."
        )

    first, child_request, last = anthropic_fake.requests
    assert "spawn_subagent" in tool_names(first) and SCHEDULING <= tool_names(first)
    assert "'spawn_subagent'" in system_text(first)  # the delegation rule of the guidelines
    assert not is_child(first) and is_child(child_request)
    # The child sees only its task, not the user's conversation, and cannot recurse or schedule.
    assert user_texts(child_request) == [TASK]
    assert "spawn_subagent" not in tool_names(child_request)
    assert not SCHEDULING & tool_names(child_request)
    assert not {"memory_save", "memory_search", "memory_forget"} & tool_names(child_request)
    assert "memory_save" in tool_names(first)  # the parent has them: it talks to a person
    assert {"web_search", "web_fetch", "artifact_save"} <= tool_names(child_request)
    assert "<temporal_context>" in system_text(child_request)
    (result,) = last_tool_results(last)
    assert untrusted_body(block_text(result), "spawn_subagent") == CHILD_ANSWER
    assert not result.get("is_error")

    parent, child = parent_session(tmp_path), child_session(tmp_path)
    assert (child["parent_id"], child["channel"]) == (parent["id"], "subagent")
    rows = db_rows(
        tmp_path, "SELECT role, content, status FROM messages WHERE session_id = ?", child["id"]
    )
    assert [tuple(row) for row in rows] == [
        ("user", TASK, "done"),
        ("assistant", CHILD_ANSWER, "sent"),
    ]
    calls = db_rows(tmp_path, "SELECT session_id, purpose FROM llm_calls ORDER BY id")
    assert [tuple(row) for row in calls] == [
        (child["id"], "subagent"),
        (parent["id"], "agent"),
        (parent["id"], "agent"),
    ]


async def test_a_tool_the_child_calls_is_recorded_under_the_child_session(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    delegate_then_answer(models)
    models.child.append(
        reply("", ("artifact_save", {"filename": "notes.md", "title": "Notes", "content": "# Hi"}))
    )
    models.child.append(reply("Saved the notes."))
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(subagent_config(tmp_path, anthropic_fake), channels=[console]):
        assert await console.say("Write down notes on heat pumps")
        assert await next_reply(console.replies) == "Here is what I found."

    parent, child = parent_session(tmp_path), child_session(tmp_path)
    executions = db_rows(
        tmp_path, "SELECT session_id, tool_name, output, error FROM tool_executions ORDER BY id"
    )
    (saved, spawned) = executions
    assert (saved["session_id"], saved["tool_name"]) == (child["id"], "artifact_save")
    assert saved["error"] is None and "Artifact saved at" in saved["output"]
    assert (spawned["session_id"], spawned["tool_name"]) == (parent["id"], "spawn_subagent")
    assert untrusted_body(spawned["output"], "spawn_subagent") == "Saved the notes."
    (artifact,) = db_rows(tmp_path, "SELECT session_id FROM artifacts")
    assert artifact["session_id"] == child["id"]


async def test_when_the_childs_model_fails_the_parent_reads_an_error_and_still_answers(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    delegate_then_answer(models, "I could not research that right now.")
    models.child.append(AnthropicReply(error=529))
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(subagent_config(tmp_path, anthropic_fake), channels=[console]):
        assert await console.say("Tell me about heat pumps")
        assert await next_reply(console.replies) == "I could not research that right now."

    (result,) = last_tool_results(anthropic_fake.requests[-1])
    assert result["is_error"] is True
    assert "the sub-agent could not finish" in block_text(result)
    assert "overloaded" in block_text(result)
    child = child_session(tmp_path)
    rows = db_rows(tmp_path, "SELECT role, status FROM messages WHERE session_id = ?", child["id"])
    assert [tuple(row) for row in rows] == [("user", "failed")]
    (call,) = db_rows(
        tmp_path, "SELECT purpose, error FROM llm_calls WHERE session_id = ?", child["id"]
    )
    assert call["purpose"] == "subagent" and call["error"]


async def test_the_brain_gives_the_child_a_nickname_after_it_answers(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    delegate_then_answer(models)
    models.child.append(reply(CHILD_ANSWER))
    anthropic_fake.responder = models
    console = ConsoleChannel()
    config = subagent_config(tmp_path, anthropic_fake, brain={"enabled": True})
    async with running_bruce(config, channels=[console]) as bruce:
        assert await console.say("Tell me about heat pumps")
        assert await next_reply(console.replies) == "Here is what I found."
        await wait_until(lambda: child_session(tmp_path)["nickname"] == "heat-scout")
        assert bruce.brain is not None
        await wait_until(lambda: bruce.inbox is not None and bruce.inbox.busy_sessions == 0)
        await bruce.brain.idle()


async def test_with_subagents_disabled_the_tool_is_not_offered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.parent.append(reply("Sure."))
    anthropic_fake.responder = models
    console = ConsoleChannel()
    config = subagent_config(tmp_path, anthropic_fake, tools={"subagents": {"enabled": False}})
    async with running_bruce(config, channels=[console]):
        assert await console.say("Hello")
        assert await next_reply(console.replies) == "Sure."

    (request,) = anthropic_fake.requests
    assert "spawn_subagent" not in tool_names(request)
    assert "artifact_save" in tool_names(request)
    assert "spawn_subagent" not in system_text(request)


async def test_a_sub_agent_started_after_outside_content_cannot_act_and_says_why(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    async with FakeWebServer() as page:
        # The parent reads a page, then delegates: the task it writes may carry the page's words.
        models.parent.append(reply("", ("web_fetch", {"url": f"{page.url}/article"})))
        delegate_then_answer(models)
        file = {"filename": "notes.html", "content": "<p>hi</p>", "title": "Notes"}
        models.child.append(reply("", ("artifact_save", file)))
        models.child.append(reply("I could not save the notes."))
        anthropic_fake.responder = models
        tools = {"web_fetch": {"allow_private_addresses": True}}
        console = ConsoleChannel()
        config = subagent_config(tmp_path, anthropic_fake, tools=tools)
        async with running_bruce(config, channels=[console]):
            assert await console.say("Read this and have someone take notes.")
            assert await next_reply(console.replies) == "Here is what I found."

    child_requests = [body for body in anthropic_fake.requests if is_child(body)]
    (refused,) = last_tool_results(child_requests[-1])
    assert block_text(refused).startswith("Not run: this run read content from outside")
    assert "nobody can be asked" in block_text(refused)
    assert db_rows(tmp_path, "SELECT * FROM artifacts") == []
