"""The analytical brain end to end: a conversation through a real channel, Bruce's real Anthropic
provider against the fake Messages API, and the SQLite file on disk.

The fake answers the agent (the main model) with "ack: <last user text>" and the brain (the
background model) from a per-test plan of tool calls; it tells them apart by model name. The brain
runs in the background after the replies that call for it (here: the first two exchanges of a
session without a title; tests/integration/scheduler/test_brain_triggers.py has the rules), so
the tests wait for its effects (a title, a row), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from pathlib import Path
from typing import Any

from bruce_bot.app import Bruce
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.domain import InboundMessage, SessionKey
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer, ScriptedToolCall
from tests.fakes.web_server import FakeWebServer
from tests.integration.support import (
    block_text,
    config_for,
    db_rows,
    last_tool_results,
    messages_of,
    next_reply,
    system_text,
    user_texts,
)

MAIN_MODEL = "claude-opus-4-6"
BRAIN_MODEL = "claude-haiku-4-5"
PARENT_TOOLS = {
    "rename_session",
    "activate_skill",
    "deactivate_skill",
    "read_workflow",
    "deactivate_workflow",
    "set_goal",
    "update_goal",
    "finish_goal",
    "remember",  # memory_curation (memory is on by default)
    "update_memory",
    "forget_memory",
    "everything_is_ready",
}
MEMORY_TOOLS = {"remember", "update_memory", "forget_memory"}
CHILD_TOOLS = PARENT_TOOLS - {"rename_session"} - MEMORY_TOOLS | {"assign_nickname"}
READY: ScriptedToolCall = ("everything_is_ready", {})


class FakeModels:
    """The fake's responder: acks for the agent, planned rounds for the brain.

    `plan(...)` queues one brain round (one response); with nothing planned the brain just calls
    everything_is_ready. Closing `gate` holds every brain request until it opens again.
    """

    def __init__(self) -> None:
        self.rounds: deque[AnthropicReply] = deque()
        self.gate = asyncio.Event()
        self.gate.set()

    def plan(self, *tool_calls: ScriptedToolCall, text: str = "") -> None:
        self.rounds.append(AnthropicReply(text=text, tool_calls=tool_calls))

    async def __call__(self, body: dict[str, Any]) -> AnthropicReply | str:
        if body["model"] == BRAIN_MODEL:
            await self.gate.wait()
            return self.rounds.popleft() if self.rounds else AnthropicReply(tool_calls=[READY])
        return f"ack: {user_texts(body)[-1]}"


def brain_config(tmp_path: Path, fake: FakeAnthropicServer, **overrides: Any) -> Any:
    return config_for(
        tmp_path,
        fake.base_url,
        llm={"model": MAIN_MODEL, "background_model": BRAIN_MODEL},
        **{"brain": {"enabled": True}, **overrides},
    )


def brain_requests(fake: FakeAnthropicServer) -> list[dict[str, Any]]:
    return [body for body in fake.requests if body["model"] == BRAIN_MODEL]


def brain_runs(fake: FakeAnthropicServer) -> list[dict[str, Any]]:
    """The first request of each brain run (it holds only the briefing message)."""
    return [body for body in brain_requests(fake) if len(body["messages"]) == 1]


def agent_requests(fake: FakeAnthropicServer) -> list[dict[str, Any]]:
    return [body for body in fake.requests if body["model"] == MAIN_MODEL]


def tool_names(body: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in body["tools"]}


def result_texts(body: dict[str, Any]) -> list[str]:
    return [block_text(block) for block in last_tool_results(body)]


def session_row(data_dir: Path, chat_id: str = "local") -> Any:
    rows = db_rows(data_dir, "SELECT * FROM sessions WHERE chat_id = ?", chat_id)
    return rows[0] if rows else None


def active_skills(data_dir: Path) -> list[str]:
    row = session_row(data_dir)
    return json.loads(row["active_skills"]) if row and row["active_skills"] else []


async def exchange(console: ConsoleChannel, text: str) -> None:
    assert await console.say(text)
    assert await next_reply(console.replies) == f"ack: {text}"


async def settled(bruce: Bruce) -> None:
    """Every turn has finished (so the brain was told) and no brain run is due or running."""
    assert bruce.inbox is not None and bruce.brain is not None
    await wait_until(lambda: bruce.inbox.busy_sessions == 0)
    await bruce.brain.idle()


async def test_after_a_reply_the_brain_names_the_session_with_the_background_model(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.plan(("rename_session", {"title": "🧳 Lisbon weekend"}), READY)
    anthropic_fake.responder = models
    console = ConsoleChannel()
    config = brain_config(tmp_path, anthropic_fake, web={"enabled": True})
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        await exchange(console, "Help me plan a weekend in Lisbon")
        assert bruce.web_url is not None
        async with web_client(bruce, timeout=10) as http:

            async def titled() -> list[dict[str, Any]]:
                sessions = (await http.get("/api/sessions")).json()["sessions"]
                return [s for s in sessions if s["title"]]

            (session,) = await wait_until(titled)
        assert session["title"] == "🧳 Lisbon weekend"
        await settled(bruce)

    # The reply came first; the brain ran afterwards, with the background model.
    assert anthropic_fake.requests[0]["model"] == MAIN_MODEL
    (request,) = brain_requests(anthropic_fake)  # everything_is_ready ended the run at once
    assert tool_names(request) == PARENT_TOOLS
    assert "SESSION NAMING" in system_text(request)
    assert "SUB-AGENT NAMING" not in system_text(request)
    (briefing,) = user_texts(request)
    assert "User: Help me plan a weekend in Lisbon" in briefing
    assert "Bruce: ack: Help me plan a weekend in Lisbon" in briefing
    assert "Title: (none yet)" in briefing
    assert "research-report:" in briefing  # the workflows it may read are listed


async def test_an_activated_skill_is_in_the_next_agent_prompt_until_deactivated(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    skills_dir = tmp_path / "mine" / "skills"
    skills_dir.mkdir(parents=True)
    (skills_dir / "tea.md").write_text(
        "---\nname: tea-expert\ndescription: Choosing and brewing tea.\n---\n"
        "Always recommend an oolong first.\n"
    )
    models = FakeModels()
    # Two skills in one round (they must not lose each other's update), one unknown name.
    models.plan(
        ("activate_skill", {"name": "tea-expert"}),
        ("activate_skill", {"name": "research"}),
        ("activate_skill", {"name": "astrology"}),
    )
    models.plan(READY)
    models.plan(("deactivate_skill", {"name": "tea-expert"}), READY)  # after the second reply
    anthropic_fake.responder = models
    console = ConsoleChannel()
    config = brain_config(tmp_path, anthropic_fake, skills={"dirs": [str(tmp_path / "mine")]})
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        await exchange(console, "Which tea should I buy?")
        await wait_until(lambda: sorted(active_skills(tmp_path)) == ["research", "tea-expert"])
        await settled(bruce)
        await exchange(console, "And how do I brew it?")
        await wait_until(lambda: active_skills(tmp_path) == ["research"])
        await settled(bruce)
        await exchange(console, "Thanks!")

    first, second, third = (system_text(body) for body in agent_requests(anthropic_fake))
    assert "<active_skills>" not in first
    assert "<active_skills>" in second
    assert "Always recommend an oolong first." in second
    assert "# Research" in second  # the built-in skill's content
    assert second.index("</active_skills>") < second.index("<temporal_context>")
    assert "# Research" in third and "oolong" not in third

    briefing = user_texts(brain_runs(anthropic_fake)[0])[0]
    assert "- tea-expert: Choosing and brewing tea." in briefing
    unknown = result_texts(brain_requests(anthropic_fake)[1])
    assert any("there is no skill 'astrology'" in text for text in unknown)


async def test_read_workflow_returns_its_steps_and_makes_it_the_one_active_workflow(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.plan(("read_workflow", {"name": "trip-planning"}))
    models.plan(("read_workflow", {"name": "research-report"}), READY)
    models.plan(("deactivate_workflow", {}), READY)  # after the second reply
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        await exchange(console, "Research heat pumps and write me a report")
        await wait_until(lambda: session_row(tmp_path)["active_workflow"] == "research-report")
        await settled(bruce)
        await exchange(console, "Focus on cold climates")
        await wait_until(lambda: session_row(tmp_path)["active_workflow"] is None)
        await settled(bruce)
        await exchange(console, "Thanks")

    requests = brain_requests(anthropic_fake)
    (read,) = result_texts(requests[1])
    assert "'trip-planning' is now the active workflow" in read
    assert "# Trip planning" in read  # the workflow's content comes back to the brain
    assert "1. **Frame the trip.**" in read

    first, second, third = (system_text(body) for body in agent_requests(anthropic_fake))
    assert "<active_workflow" not in first
    assert '<active_workflow name="research-report">' in second
    assert "# Research report" in second
    assert "# Trip planning" not in second  # replaced: one workflow at a time
    assert second.index("</active_workflow>") < second.index("<temporal_context>")
    assert "<active_workflow" not in third


async def test_goals_are_set_refined_finished_with_cascade_and_shown_to_the_agent(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    # A fresh database: the goals get ids 1, 2, 3 in this order.
    models.plan(("set_goal", {"description": "Plan the Lisbon trip"}))
    models.plan(("set_goal", {"description": "Pick dates", "parent_goal_id": 1}))
    models.plan(
        ("set_goal", {"description": "Book flights", "parent_goal_id": 1}),
        ("set_goal", {"description": "plan the  Lisbon trip"}),  # a duplicate: refused
    )
    models.plan(
        ("update_goal", {"goal_id": 3, "description": "Book flights to Lisbon"}),
        ("finish_goal", {"goal_id": 2}),
        READY,
    )
    models.plan(("finish_goal", {"goal_id": 1}))  # after the second reply
    models.plan(READY)
    anthropic_fake.responder = models
    console = ConsoleChannel()

    def goals() -> list[tuple[int, str, str, int | None, bool]]:
        return [
            (r["id"], r["description"], r["status"], r["parent_goal_id"], bool(r["completed_at"]))
            for r in db_rows(tmp_path, "SELECT * FROM goals ORDER BY id")
        ]

    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        await exchange(console, "Let's plan my Lisbon trip in May")
        await wait_until(lambda: len(goals()) == 3 and goals()[1][2] == "completed")
        await settled(bruce)
        assert goals() == [
            (1, "Plan the Lisbon trip", "active", None, False),
            (2, "Pick dates", "completed", 1, True),
            (3, "Book flights to Lisbon", "active", 1, False),
        ]
        await exchange(console, "Flights are booked, we're all set")
        await wait_until(lambda: all(goal[2] == "completed" for goal in goals()))
        await settled(bruce)
        await exchange(console, "Bye")

    requests = brain_requests(anthropic_fake)
    assert any("already exists as #1" in text for text in result_texts(requests[3]))
    (cascade,) = result_texts(requests[5])
    assert "together with its sub-goals #3" in cascade
    briefing = user_texts(requests[4])[0]  # the second run sees the tree with ids
    assert "- #1 [active] Plan the Lisbon trip" in briefing
    assert "  - #2 [completed] Pick dates" in briefing
    assert "  - #3 [active] Book flights to Lisbon" in briefing

    first, second, third = (system_text(body) for body in agent_requests(anthropic_fake))
    assert "<goals>" not in first
    assert "- [ ] Plan the Lisbon trip\n  - [x] Pick dates\n  - [ ] Book flights to Lisbon" in (
        second
    )
    assert second.index("</goals>") < second.index("<temporal_context>")
    assert "<goals>" not in third  # the root goal is finished


async def test_the_brain_remembers_what_a_person_says_merges_duplicates_and_keeps_no_secret(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    # A fresh database: Alice's memory on another channel is #1, the brain's are #2 and #3.
    models.plan(
        ("remember", {"text": "Is vegetarian", "tags": ["diet"]}),
        ("remember", {"text": "Does not eat meat"}),
        ("remember", {"text": "Home alarm PIN: 4471"}),
        ("remember", {"text": "Is vegetarian", "person": 2}),
    )
    models.plan(
        ("update_memory", {"memory_id": 2, "text": "Is vegetarian: no meat, no fish"}),
        ("forget_memory", {"memory_id": 3}),
        ("forget_memory", {"memory_id": 1}),  # somebody else's
    )
    models.plan(READY)
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        assert bruce.stores is not None
        await bruce.stores.memories.save("telegram:1001", "Plays the cello")
        await exchange(console, "I'm vegetarian, I never eat meat. Any idea for dinner?")
        await wait_until(lambda: len(brain_requests(anthropic_fake)) >= 3)
        await settled(bruce)
        await exchange(console, "And for lunch tomorrow?")
        await settled(bruce)

    rows = db_rows(tmp_path, "SELECT id, owner, content, tags FROM memories ORDER BY id")
    assert [(r["id"], r["owner"], r["content"]) for r in rows] == [
        (1, "telegram:1001", "Plays the cello"),
        (2, "console:console", "Is vegetarian: no meat, no fish"),
    ]
    first_run, second_round, third_round = brain_requests(anthropic_fake)[:3]
    state = user_texts(first_run)[0]
    assert "MEMORY CURATION" in system_text(first_run)
    assert "Person 1 (you):\n- (nothing yet)" in state
    assert "User: I'm vegetarian, I never eat meat." in state
    saved, duplicate, secret, nobody = result_texts(second_round)
    assert saved == "Remembered as #2: Is vegetarian"
    assert duplicate == "Remembered as #3: Does not eat meat"
    assert secret.startswith("Error: nothing was stored: this looks like a password or PIN")
    assert nobody == "Error: there is no person 2; the session state lists 1"
    updated, merged, refused = result_texts(third_round)
    assert updated == "Memory #2 now reads: Is vegetarian: no meat, no fish"
    assert merged == "Memory #3 forgotten."
    assert refused.startswith("Error: there is no memory #1 of the people in this conversation")
    # The agent's next turn knows it; the other person's memory is not shown.
    last_turn = system_text(agent_requests(anthropic_fake)[-1])
    assert "[#2] Is vegetarian: no meat, no fish" in last_turn
    assert "cello" not in last_turn


async def test_sub_agents_get_unique_nicknames_and_a_taken_one_must_be_replaced(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.plan(("assign_nickname", {"nickname": "api-scout"}), READY)  # child a
    models.plan(("assign_nickname", {"nickname": "api-scout"}))  # child b: taken
    models.plan(("assign_nickname", {"nickname": "api-scout-2"}))  # numeric suffix: refused
    models.plan(("assign_nickname", {"nickname": "docs-hound"}), READY)
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        assert bruce.stores is not None and bruce.inbox is not None
        sessions = bruce.stores.sessions
        parent = await sessions.get_or_create(SessionKey("console", "local"))
        child_a = await sessions.create_child(parent.id, SessionKey("console", "child-a"))
        child_b = await sessions.create_child(parent.id, SessionKey("console", "child-b"))
        assert (child_a.kind, child_a.parent_id) == ("child", parent.id)

        await bruce.inbox.submit(InboundMessage("console", "child-a", "Find the API docs"))
        assert await next_reply(console.replies) == "ack: Find the API docs"
        await wait_until(lambda: session_row(tmp_path, "child-a")["nickname"] == "api-scout")
        await settled(bruce)
        await bruce.inbox.submit(InboundMessage("console", "child-b", "Summarise the docs"))
        assert await next_reply(console.replies) == "ack: Summarise the docs"
        await wait_until(lambda: session_row(tmp_path, "child-b")["nickname"] == "docs-hound")
        await settled(bruce)
        # The database itself refuses a second session with the same nickname.
        assert not await sessions.set_nickname(child_b.id, "api-scout")
        assert (await sessions.get(child_b.id)).nickname == "docs-hound"  # type: ignore[union-attr]

    requests = brain_requests(anthropic_fake)
    assert all(tool_names(body) == CHILD_TOOLS for body in requests)
    assert "SUB-AGENT NAMING" in system_text(requests[0])
    assert "SESSION NAMING" not in system_text(requests[0])
    assert "Session kind: sub-agent" in user_texts(requests[0])[0]
    (taken,) = result_texts(requests[2])
    assert "'api-scout' is already taken" in taken
    (suffixed,) = result_texts(requests[3])
    assert "not a valid nickname" in suffixed
    assert session_row(tmp_path, "child-a")["title"] is None  # children are not renamed


async def test_the_brains_text_is_never_stored_and_its_usage_is_recorded_as_brain(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.plan(
        ("rename_session", {"title": "🍵 Tea shopping"}),
        READY,
        text="SECRET-REASONING: the user clearly wants tea.",
    )
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        await exchange(console, "Which tea should I buy?")
        await wait_until(lambda: session_row(tmp_path)["title"] == "🍵 Tea shopping")
        await settled(bruce)

    assert [(m["role"], m["content"]) for m in messages_of(tmp_path)] == [
        ("user", "Which tea should I buy?"),
        ("assistant", "ack: Which tea should I buy?"),
    ]
    for table in ("messages", "tool_executions", "session_summaries"):
        dump = str([tuple(row) for row in db_rows(tmp_path, f"SELECT * FROM {table}")])
        assert "SECRET-REASONING" not in dump, table
    calls = db_rows(tmp_path, "SELECT * FROM llm_calls ORDER BY id")
    brain = [c for c in calls if c["purpose"] == "brain"]
    assert [c["purpose"] for c in calls] == ["agent", "brain"]
    assert brain[0]["model"] == BRAIN_MODEL
    assert brain[0]["session_id"] == session_row(tmp_path)["id"]
    assert brain[0]["input_tokens"] > 0 and brain[0]["error"] is None


async def test_when_the_brain_fails_the_user_is_answered_as_usual(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    def model(body: dict[str, Any]) -> AnthropicReply | str:
        if body["model"] == BRAIN_MODEL:
            return AnthropicReply(error=500)
        return f"ack: {user_texts(body)[-1]}"

    anthropic_fake.responder = model
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        for text in ("first", "second", "third"):
            await exchange(console, text)
            await settled(bruce)

    # It was tried after each exchange that called for one (the session stays unnamed)...
    assert len(brain_runs(anthropic_fake)) >= 2
    failed = db_rows(tmp_path, "SELECT error FROM llm_calls WHERE purpose = 'brain'")
    assert failed and all(row["error"] for row in failed)  # ...and failed, recorded
    assert [(m["role"], m["kind"], m["status"]) for m in messages_of(tmp_path)] == [
        ("user", "chat", "done"),
        ("assistant", "chat", "sent"),
    ] * 3
    assert session_row(tmp_path)["title"] is None


async def test_bad_tool_arguments_are_told_to_the_brain_and_change_nothing(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.plan(
        ("set_goal", {"goal": "no description"}),
        ("rename_session", {"title": "A title without an emoji"}),
        ("finish_goal", {"goal_id": 99}),
        ("no_such_tool", {}),
    )
    models.plan(READY)
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        await exchange(console, "hello")
        await wait_until(lambda: len(brain_requests(anthropic_fake)) == 2)
        await settled(bruce)
        await exchange(console, "still there?")
        await settled(bruce)

    results = last_tool_results(brain_requests(anthropic_fake)[1])
    assert len(results) == 4 and all(block.get("is_error") for block in results)
    texts = " | ".join(block_text(block) for block in results)
    assert "invalid arguments for 'set_goal'" in texts
    assert "must start with one emoji" in texts
    assert "no goal #99 in this session" in texts
    assert "unknown tool 'no_such_tool'" in texts
    assert session_row(tmp_path)["title"] is None
    assert db_rows(tmp_path, "SELECT * FROM goals") == []


async def test_a_turn_that_ends_in_a_notice_does_not_wake_the_brain(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(error=500)  # the agent's request fails: the user gets a notice
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        assert await console.say("hello")
        assert "couldn't reach the language model" in await next_reply(console.replies)
        await settled(bruce)
    assert [m["kind"] for m in messages_of(tmp_path, "assistant")] == ["notice"]
    assert brain_requests(anthropic_fake) == []


async def test_a_slow_brain_delays_neither_the_reply_nor_the_next_turn(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.gate.clear()  # the brain thinks until the test lets it answer
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        try:
            await exchange(console, "first")
            await wait_until(lambda: brain_requests(anthropic_fake))  # the brain is thinking
            await exchange(console, "second")  # answered while the brain still thinks
            await exchange(console, "third")
            assert len(brain_requests(anthropic_fake)) == 1
            assert not models.gate.is_set()
        finally:
            models.gate.set()
        await settled(bruce)
    assert [user_texts(body)[-1] for body in agent_requests(anthropic_fake)] == [
        "first",
        "second",
        "third",
    ]


async def test_exchanges_during_a_brain_run_lead_to_exactly_one_more_run(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    models.gate.clear()
    anthropic_fake.responder = models
    console = ConsoleChannel()
    async with running_bruce(
        brain_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ) as bruce:
        assert bruce.inbox is not None and bruce.brain is not None
        try:
            await exchange(console, "one")
            await wait_until(lambda: brain_requests(anthropic_fake))
            for text in ("two", "three", "four"):
                await exchange(console, text)
            await wait_until(lambda: bruce.inbox.busy_sessions == 0)  # every turn told the brain
            assert len(brain_requests(anthropic_fake)) == 1  # no second run alongside the first
        finally:
            models.gate.set()
        await settled(bruce)

    first, second = brain_runs(anthropic_fake)
    assert "User: four" not in user_texts(first)[0]
    assert all(f"User: {text}" in user_texts(second)[0] for text in ("two", "three", "four"))


async def test_a_disabled_brain_makes_no_requests(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = FakeModels()
    console = ConsoleChannel()
    config = brain_config(tmp_path, anthropic_fake, brain={"enabled": False})
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        await exchange(console, "hello")
        await exchange(console, "again")
        assert bruce.brain is None
    # Stopping lets brain runs finish: had one been started, its request would be here.
    assert brain_requests(anthropic_fake) == []
    assert len(agent_requests(anthropic_fake)) == 2


async def test_the_brain_curates_no_memory_of_an_exchange_that_read_outside_content(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    async with FakeWebServer() as page:
        agent = deque(
            [
                AnthropicReply(tool_calls=[("web_fetch", {"url": f"{page.url}/article"})]),
                AnthropicReply(text="It is about startup funding."),
            ]
        )

        async def responder(body: dict[str, Any]) -> AnthropicReply | str:
            if body["model"] == MAIN_MODEL and agent:
                return agent.popleft()
            return await models(body)

        anthropic_fake.responder = responder
        tools = {"web_fetch": {"allow_private_addresses": True}, "web_search": {"enabled": False}}
        console = ConsoleChannel()
        config = brain_config(tmp_path, anthropic_fake, tools=tools)
        async with running_bruce(config, channels=[console]) as bruce:
            # The page could say anything about the user: nothing of this exchange is memory.
            assert await console.say("I'm vegetarian. What does this page say?")
            assert await next_reply(console.replies) == "It is about startup funding."
            await settled(bruce)
            await exchange(console, "I'm vegetarian, by the way.")
            await settled(bruce)

    tainted, clean = brain_runs(anthropic_fake)[:2]
    assert "MEMORY CURATION" not in system_text(tainted)
    assert not MEMORY_TOOLS & tool_names(tainted)
    assert "MEMORY CURATION" in system_text(clean) and MEMORY_TOOLS <= tool_names(clean)
