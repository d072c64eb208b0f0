"""One session in the dashboard's API: its messages with each turn's tool calls under the reply,
the detail (summary, goals, skills and workflow, sub-agents, tasks, artifacts) and deleting it —
rows, scheduler jobs and files — against a running Bruce whose turns go through the fake
Anthropic server. A delete that would cut a running turn short is refused and deletes nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bruce_bot.domain import SessionKey
from bruce_bot.scheduler.service import job_id
from tests.conftest import wait_until
from tests.fakes.anthropic_server import last_user_text
from tests.integration.dashboard_support import Dashboard, create_task, running_dashboard
from tests.integration.postgres.server import postgres_server, postgres_url  # noqa: F401 (fixtures)
from tests.integration.support import db_rows

TOKEN = "hF3kY8wq2Zp0Lr5Tn7Vb1Xc4Md6Js9Ga-QeUuIoP0aS"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        yield running


@pytest.fixture
async def client(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as http:
        yield http


async def get_json(client: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def session_id_of(dashboard: Dashboard, chat_id: str) -> int:
    assert dashboard.bruce.stores is not None
    session = await dashboard.bruce.stores.sessions.find(SessionKey("chat", chat_id))
    assert session is not None
    return session.id


async def test_a_reply_carries_the_tool_calls_of_its_turn_with_input_output_and_duration(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await dashboard.chat("alice", "hello")
    await dashboard.use_tool("alice", "add", {"a": 2, "b": 3})
    await dashboard.use_tool("alice", "lookup", {"query": "the weather"})  # fails
    session_id = await session_id_of(dashboard, "alice")

    messages = (await get_json(client, f"/api/sessions/{session_id}/messages"))["messages"]

    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "hello"),
        ("assistant", "You said: hello"),
        ("user", "please use add"),
        ("assistant", "Done."),
        ("user", "please use lookup"),
        ("assistant", "Done."),
    ]
    assert [len(m["tool_calls"]) for m in messages] == [0, 0, 0, 1, 0, 1]
    [added] = messages[3]["tool_calls"]
    assert added["tool_name"] == "add"
    assert json.loads(added["input"]) == {"a": 2, "b": 3}
    assert added["output"] == "5" and added["error"] is None
    assert added["duration_ms"] >= 0 and added["created_at"]
    [looked_up] = messages[5]["tool_calls"]
    assert looked_up["tool_name"] == "lookup" and looked_up["output"] is None
    assert "the index is offline" in looked_up["error"]


async def test_the_detail_shows_summary_goals_skills_sub_agents_tasks_and_artifacts(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await dashboard.chat("alice", "plan my trip")
    report = {"filename": "trip.html", "title": "Trip plan", "content": "<p>Lisbon</p>"}
    await dashboard.use_tool("alice", "artifact_save", report)
    await create_task(dashboard, "alice", title="Pack bags", content="Pack", run_at="+3h")
    stores = dashboard.bruce.stores
    assert stores is not None
    session_id = await session_id_of(dashboard, "alice")
    # What the analytical brain keeps, written through its stores.
    trip = await stores.goals.add(session_id, "Plan the trip to Lisbon", None)
    flights = await stores.goals.add(session_id, "Book the flights", trip.id)
    await stores.goals.add(session_id, "Find a hotel", trip.id)
    await stores.goals.complete(flights)
    await stores.summaries.save(session_id, "Alice is planning a trip to Lisbon.", 2)
    await stores.sessions.set_active_skills(session_id, ["travel"])
    await stores.sessions.set_active_workflow(session_id, "trip-planning")
    child = await stores.sessions.create_child(session_id, SessionKey("chat", "alice/sub-1"))

    detail = await get_json(client, f"/api/sessions/{session_id}")

    assert detail["session"]["id"] == session_id and detail["session"]["chat_id"] == "alice"
    assert detail["summary"]["content"] == "Alice is planning a trip to Lisbon."
    assert [(g["description"], g["status"], g["parent_goal_id"]) for g in detail["goals"]] == [
        ("Plan the trip to Lisbon", "active", None),
        ("Book the flights", "completed", trip.id),
        ("Find a hotel", "active", trip.id),
    ]
    assert detail["active_skills"] == ["travel"]
    assert detail["active_workflow"] == "trip-planning"
    assert [c["id"] for c in detail["children"]] == [child.id]
    assert [(t["title"], t["status"]) for t in detail["tasks"]] == [("Pack bags", "active")]
    assert detail["tasks"][0]["next_run"]
    [artifact] = detail["artifacts"]
    assert (artifact["title"], artifact["filename"]) == ("Trip plan", "trip.html")
    opened = await client.get(artifact["url"])
    assert opened.status_code == 200 and "Lisbon" in opened.text

    child_detail = await get_json(client, f"/api/sessions/{child.id}")
    assert child_detail["parent_id"] == session_id and child_detail["session"]["kind"] == "child"


async def test_deleting_a_session_removes_its_rows_jobs_and_files_and_the_chat_starts_afresh(
    client: httpx.AsyncClient, dashboard: Dashboard, tmp_path: Path
) -> None:
    await dashboard.chat("alice", "hello")
    await dashboard.use_tool("alice", "add", {"a": 1, "b": 1})
    report = {"filename": "notes.html", "title": "Notes", "content": "<p>secret notes</p>"}
    await dashboard.use_tool("alice", "artifact_save", report)
    await dashboard.chat("bob", "I stay")
    task = await create_task(dashboard, "alice", title="Daily", content="Hi", cron="0 8 * * *")
    stores = dashboard.bruce.stores
    assert stores is not None
    session_id = await session_id_of(dashboard, "alice")
    bob_id = await session_id_of(dashboard, "bob")
    child = await stores.sessions.create_child(session_id, SessionKey("chat", "alice/sub-1"))
    await stores.goals.add(session_id, "A goal", None)
    await stores.summaries.save(session_id, "A summary", 1)
    [artifact] = (await get_json(client, "/api/artifacts", session_id=session_id))["artifacts"]
    artifact_path = tmp_path / "artifacts" / artifact["uuid"] / "notes.html"
    assert artifact_path.exists()
    picture = tmp_path / "media" / str(session_id) / "7-0.jpg"  # where stored pictures live
    picture.parent.mkdir(parents=True)
    picture.write_bytes(b"\xff\xd8 a picture")
    calls_before = db_rows(tmp_path, "SELECT count(*) AS n FROM llm_calls")[0]["n"]
    jobs = {row["id"] for row in db_rows(tmp_path, "SELECT id FROM apscheduler_jobs")}
    assert job_id(task.id) in jobs

    response = await client.delete(f"/api/sessions/{session_id}", headers=JSON)

    assert response.status_code == 200, response.text
    deleted = response.json()
    assert deleted["session_ids"] == [session_id, child.id]
    assert deleted["messages"] == 6 and deleted["tasks_cancelled"] == 1
    assert deleted["artifacts"] == 1 and deleted["files_removed"] == 2
    for table in ("messages", "tool_executions", "session_summaries", "goals", "artifacts"):
        rows = db_rows(
            tmp_path, f"SELECT id FROM {table} WHERE session_id IN (?, ?)", session_id, child.id
        )
        assert rows == [], table
    assert db_rows(tmp_path, "SELECT id FROM proactive_tasks WHERE id = ?", task.id) == []
    jobs = {row["id"] for row in db_rows(tmp_path, "SELECT id FROM apscheduler_jobs")}
    assert job_id(task.id) not in jobs
    assert not artifact_path.exists() and not artifact_path.parent.exists()
    assert not picture.parent.exists()
    # The usage history stays (without its session); the other chat is untouched.
    assert db_rows(tmp_path, "SELECT count(*) AS n FROM llm_calls")[0]["n"] == calls_before
    listed = {s["id"] for s in (await get_json(client, "/api/sessions"))["sessions"]}
    assert session_id not in listed and child.id not in listed and bob_id in listed
    assert (await client.get(f"/api/sessions/{session_id}")).status_code == 404
    assert (await client.get(artifact["url"])).status_code == 404

    # Alice writes again: a new conversation, answered, with nothing of the old one.
    assert await dashboard.chat("alice", "are you there?") == "You said: are you there?"
    new_id = await session_id_of(dashboard, "alice")
    fresh = await get_json(client, f"/api/sessions/{new_id}")
    assert fresh["summary"] is None and fresh["goals"] == [] and fresh["tasks"] == []
    messages = (await get_json(client, f"/api/sessions/{new_id}/messages"))["messages"]
    assert [m["content"] for m in messages] == ["are you there?", "You said: are you there?"]


async def test_a_session_bruce_is_answering_is_not_deleted_and_unknown_ones_are_404(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await dashboard.chat("alice", "hello")
    session_id = await session_id_of(dashboard, "alice")
    release = asyncio.Event()

    async def slow(body: dict[str, Any]) -> str:
        await release.wait()
        return f"You said: {last_user_text(body)}"

    dashboard.fake.responder = slow
    requests = len(dashboard.fake.requests)
    await dashboard.say("alice", "think hard")
    await wait_until(lambda: len(dashboard.fake.requests) > requests)

    response = await client.delete(f"/api/sessions/{session_id}", headers=JSON)
    assert response.status_code == 409, response.text
    assert "still answering" in response.json()["error"]
    release.set()
    await wait_until(lambda: "You said: think hard" in dashboard.channel.texts("alice"))
    assert (await get_json(client, f"/api/sessions/{session_id}"))["session"]["id"] == session_id

    missing = await client.delete("/api/sessions/999999", headers=JSON)
    assert missing.status_code == 404 and "/api/sessions" in missing.json()["error"]
    bad = await client.delete("/api/sessions/zero", headers=JSON)
    assert bad.status_code == 400 and "'session_id'" in bad.json()["error"]


async def test_the_session_page_and_its_delete_work_on_postgresql(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 (the fixture)
) -> None:
    async with (
        running_dashboard(tmp_path, TOKEN, database={"url": postgres_url}) as dashboard,
        httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as client,
    ):
        await dashboard.use_tool("alice", "add", {"a": 2, "b": 2})
        await create_task(dashboard, "alice", title="Daily", content="Hi", cron="0 8 * * *")
        stores = dashboard.bruce.stores
        assert stores is not None
        session_id = await session_id_of(dashboard, "alice")
        child = await stores.sessions.create_child(session_id, SessionKey("chat", "alice/sub"))
        await stores.goals.add(session_id, "A goal", None)

        detail = await get_json(client, f"/api/sessions/{session_id}")
        assert [c["id"] for c in detail["children"]] == [child.id]
        assert [t["title"] for t in detail["tasks"]] == ["Daily"] and len(detail["goals"]) == 1
        messages = (await get_json(client, f"/api/sessions/{session_id}/messages"))["messages"]
        assert [len(m["tool_calls"]) for m in messages] == [0, 1]

        response = await client.delete(f"/api/sessions/{session_id}", headers=JSON)
        assert response.status_code == 200, response.text
        assert response.json()["session_ids"] == [session_id, child.id]
        assert response.json()["tasks_cancelled"] == 1
        assert (await client.get(f"/api/sessions/{session_id}")).status_code == 404
        assert await dashboard.chat("alice", "again") == "You said: again"
