"""Schedules from the dashboard's API against a running Bruce: creating a task (once or on a cron,
in a chosen timezone, delivered to a chosen chat), running it now, pausing and resuming, editing
and deleting it — the scheduler's job always following the row — and every refusal naming the
field to fix (a bad cron, an unknown timezone, a time in the past, a chat that does not exist,
a briefing too frequent). A task waiting for the user's confirmation is listed as such."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from bruce_bot.domain import SessionKey, utcnow
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.scheduler.service import job_id
from tests.conftest import wait_until
from tests.integration.dashboard_support import Dashboard, running_dashboard
from tests.integration.support import db_rows

TOKEN = "Pq1Wm5Kc2Rt8Lp4Zx9Nv6Bd3Hs7Fg0Jk-AeUiOoPuZ"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        await running.chat("alice", "hello")
        yield running


@pytest.fixture
async def client(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as http:
        yield http


async def alice(dashboard: Dashboard) -> int:
    assert dashboard.bruce.stores is not None
    session = await dashboard.bruce.stores.sessions.find(SessionKey("chat", "alice"))
    assert session is not None
    return session.id


def jobs(tmp_path: Path) -> set[str]:
    return {row["id"] for row in db_rows(tmp_path, "SELECT id FROM apscheduler_jobs")}


async def write(
    client: httpx.AsyncClient, method: str, path: str, body: Any = None, status: int = 200
) -> dict[str, Any]:
    response = await client.request(method, path, json=body, headers=JSON)
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    return response.json()  # type: ignore[no-any-return]


def in_a_week(zone: ZoneInfo) -> str:
    """A local time a week from now at 09:30, as a datetime-local input sends it."""
    later = datetime.fromtimestamp(utcnow().timestamp() + 7 * 86400, zone)
    return f"{later:%Y-%m-%d}T09:30"


async def test_a_task_made_in_the_dashboard_is_scheduled_in_its_timezone_for_the_chosen_chat(
    client: httpx.AsyncClient, dashboard: Dashboard, tmp_path: Path
) -> None:
    session_id = await alice(dashboard)
    when = in_a_week(BERLIN)
    once = {
        "session_id": session_id,
        "title": "Dentist",
        "mode": "message",
        "content": "Dentist at 10",
        "run_at": when,
        "timezone": "Europe/Berlin",
    }
    made = (await write(client, "POST", "/api/tasks", once, 201))["task"]
    assert (made["chat_id"], made["channel"], made["status"]) == ("alice", "chat", "active")
    local = datetime.fromisoformat(made["next_run_at"]).astimezone(BERLIN)
    assert f"{local:%Y-%m-%dT%H:%M}" == when
    assert made["schedule_words"] == f"once, {local:%a %Y-%m-%d} at 09:30 Europe/Berlin"
    assert made["awaiting_confirmation"] is False
    assert job_id(made["id"]) in jobs(tmp_path)

    weekdays = {**once, "title": "Standup", "run_at": None, "cron": "0 8 * * 1-5"}
    weekdays["timezone"] = "America/Sao_Paulo"
    cron = (await write(client, "POST", "/api/tasks", weekdays, 201))["task"]
    assert cron["schedule_words"] == "every weekday at 08:00 America/Sao_Paulo"
    next_local = datetime.fromisoformat(cron["next_run_at"]).astimezone(
        ZoneInfo("America/Sao_Paulo")
    )
    assert (next_local.hour, next_local.minute) == (8, 0) and next_local.weekday() < 5

    listed = {t["id"]: t for t in (await client.get("/api/tasks")).json()["tasks"]}
    assert {made["id"], cron["id"]} <= listed.keys()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"cron": "61 8 * * *", "run_at": None}, "cron", "minute field"),
        ({"cron": "0 8 * *", "run_at": None}, "cron", "five"),
        ({"timezone": "Mars/Olympus"}, "timezone", "IANA"),
        ({"run_at": "2001-01-01T09:00"}, "run_at", "in the past"),
        ({"run_at": "tomorrow-ish"}, "run_at", "ISO-8601"),
        ({"session_id": 999999}, "session_id", "no session"),
        ({"title": ""}, "title", "non-empty"),
        ({"mode": "shout"}, "mode", "message, agent"),
        ({"mode": "agent", "cron": "* * * * *", "run_at": None}, "cron", "at most every"),
    ],
)
async def test_a_refused_task_names_the_field_and_nothing_is_created(
    client: httpx.AsyncClient,
    dashboard: Dashboard,
    change: dict[str, Any],
    field: str,
    words: str,
) -> None:
    valid = {
        "session_id": await alice(dashboard),
        "title": "Something",
        "mode": "message",
        "content": "Do it",
        "run_at": "+2h",
        "timezone": "Europe/Berlin",
    }
    body = {**valid, **change}
    before = len((await client.get("/api/tasks")).json()["tasks"])
    response = await client.post("/api/tasks", json=body, headers=JSON)
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    assert f"'{field}'" in message and words in message, message
    assert len((await client.get("/api/tasks")).json()["tasks"]) == before

    both = {**valid, "cron": "0 8 * * *"}
    neither = {**valid, "run_at": None}
    for wrong in (both, neither):
        refused = await client.post("/api/tasks", json=wrong, headers=JSON)
        assert refused.status_code == 400 and "'run_at'" in refused.json()["error"]


async def test_run_now_delivers_once_and_keeps_the_schedule_pause_and_resume_follow_the_job(
    client: httpx.AsyncClient, dashboard: Dashboard, tmp_path: Path
) -> None:
    body = {
        "session_id": await alice(dashboard),
        "title": "Water",
        "mode": "message",
        "content": "Drink some water",
        "cron": "0 9 * * *",
        "timezone": "Europe/Berlin",
    }
    task = (await write(client, "POST", "/api/tasks", body, 201))["task"]

    ran = (await write(client, "POST", f"/api/tasks/{task['id']}/run"))["task"]

    assert "⏰ Drink some water" in dashboard.channel.texts("alice")
    assert ran["status"] == "active" and ran["next_run_at"] == task["next_run_at"]
    runs = (await client.get(f"/api/tasks/{task['id']}/runs")).json()["runs"]
    assert [r["status"] for r in runs] == ["delivered"] and runs[0]["late_seconds"] < 60

    paused = (await write(client, "POST", f"/api/tasks/{task['id']}/pause"))["task"]
    assert paused["status"] == "paused" and job_id(task["id"]) not in jobs(tmp_path)
    refused = await client.post(f"/api/tasks/{task['id']}/run", headers=JSON)
    assert refused.status_code == 409 and "paused" in refused.json()["error"]
    again = await client.post(f"/api/tasks/{task['id']}/pause", headers=JSON)
    assert again.status_code == 409

    resumed = (await write(client, "POST", f"/api/tasks/{task['id']}/resume"))["task"]
    assert resumed["status"] == "active" and job_id(task["id"]) in jobs(tmp_path)
    assert (await client.post(f"/api/tasks/{task['id']}/resume", headers=JSON)).status_code == 409


async def test_an_edit_keeps_the_id_and_moves_the_job_and_delete_removes_task_runs_and_job(
    client: httpx.AsyncClient, dashboard: Dashboard, tmp_path: Path
) -> None:
    await dashboard.chat("bob", "hi")
    body = {
        "session_id": await alice(dashboard),
        "title": "Report",
        "mode": "message",
        "content": "Weekly report",
        "cron": "0 9 * * 1",
        "timezone": "Europe/Berlin",
    }
    task = (await write(client, "POST", "/api/tasks", body, 201))["task"]
    await write(client, "POST", f"/api/tasks/{task['id']}/run")
    assert dashboard.bruce.stores is not None
    bob = await dashboard.bruce.stores.sessions.find(SessionKey("chat", "bob"))
    assert bob is not None

    edited = {**body, "title": "Report (Friday)", "cron": "30 17 * * 5", "session_id": bob.id}
    after = (await write(client, "PUT", f"/api/tasks/{task['id']}", edited))["task"]

    assert after["id"] == task["id"] and after["title"] == "Report (Friday)"
    assert after["chat_id"] == "bob"
    assert after["schedule_words"] == "every Friday at 17:30 Europe/Berlin"
    local = datetime.fromisoformat(after["next_run_at"]).astimezone(BERLIN)
    assert (local.weekday(), local.hour, local.minute) == (4, 17, 30)
    [job] = db_rows(
        tmp_path, "SELECT next_run_time FROM apscheduler_jobs WHERE id = ?", job_id(task["id"])
    )
    assert abs(job["next_run_time"] - local.timestamp()) < 1
    assert after["last_run"]["status"] == "delivered"  # its runs stay with it
    bad = await client.put(f"/api/tasks/{task['id']}", json={**edited, "cron": "0 25 * * *"})
    assert bad.status_code == 400 and "'cron'" in bad.json()["error"]

    deleted = await write(client, "DELETE", f"/api/tasks/{task['id']}")
    assert deleted == {"task_id": task["id"]}
    assert db_rows(tmp_path, "SELECT id FROM task_runs WHERE task_id = ?", task["id"]) == []
    assert job_id(task["id"]) not in jobs(tmp_path)
    assert (await client.delete(f"/api/tasks/{task['id']}", headers=JSON)).status_code == 404
    gone = await client.put(f"/api/tasks/{task['id']}", json=edited, headers=JSON)
    assert gone.status_code == 404


async def test_a_task_awaiting_confirmation_is_listed_as_such(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    tasks = dashboard.bruce.tasks
    assert tasks is not None
    waiting = await tasks.planner.create(
        NewTask(
            session_id=await alice(dashboard),
            channel="chat",
            chat_id="alice",
            title="Fetch the page",
            mode="agent",
            content="Fetch https://example.com",
            run_at="+3h",
            confirmed=False,
        )
    )
    listed = {t["id"]: t for t in (await client.get("/api/tasks")).json()["tasks"]}
    assert listed[waiting.id]["status"] == "unconfirmed"
    assert listed[waiting.id]["awaiting_confirmation"] is True
    only = (await client.get("/api/tasks", params={"status": "unconfirmed"})).json()["tasks"]
    assert [t["id"] for t in only] == [waiting.id]
    refused = await client.post(f"/api/tasks/{waiting.id}/run", headers=JSON)
    assert refused.status_code == 409


async def test_running_a_briefing_now_has_bruce_answer_it_in_the_chat(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    body = {
        "session_id": await alice(dashboard),
        "title": "Briefing",
        "mode": "agent",
        "content": "Summarise the day",
        "cron": "0 7 * * *",
        "timezone": "Europe/Berlin",
    }
    task = (await write(client, "POST", "/api/tasks", body, 201))["task"]
    await write(client, "POST", f"/api/tasks/{task['id']}/run")
    # The briefing's turn goes through the inbox and the (fake) model, then to the chat.
    await wait_until(
        lambda: any("Summarise the day" in t for t in dashboard.channel.texts("alice"))
    )

    async def delivered() -> bool:
        runs = (await client.get(f"/api/tasks/{task['id']}/runs")).json()["runs"]
        return bool(runs) and runs[0]["status"] == "delivered"

    await wait_until(delivered)
