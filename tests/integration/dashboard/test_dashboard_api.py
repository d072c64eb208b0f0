"""The dashboard's JSON API (docs/design.md) against a running Bruce, with data made the way users
make it: chat turns through a channel and the fake Anthropic server (which calls real tools, one of
them failing), `artifact_save`, tasks created through the task service, and a reply to a chat
that blocked the bot. Each route answers what an owner would expect to see; every route needs
the token; bad parameters are a 400 that names them; writes need a JSON content type."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from bruce_bot.domain import utcnow
from bruce_bot.scheduler.service import job_id
from bruce_bot.settings.editable import MAX_TURNS_SETTING, SYSTEM_PROMPT_SETTING, TIMEZONE_SETTING
from bruce_bot.storage.models import LLMCallRow
from bruce_bot.web.api import MAX_LIMIT, usage_days
from tests.conftest import clock_from, days_ahead_at, wait_until
from tests.integration.dashboard_support import (
    YAML_PROMPT,
    Dashboard,
    create_task,
    running_dashboard,
)
from tests.integration.support import db_rows, system_text

TOKEN = "gFaXjOMHl_9-UNCG779VuchwICtnVCO42rc_FvW2xPk"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}  # what API writes must declare
SAO_PAULO = ZoneInfo("America/Sao_Paulo")


@pytest.fixture
def clock_start() -> datetime | None:
    """Where Bruce's clock starts; None is the real clock. A test that depends on the date or
    the time of day sets it with `@pytest.mark.parametrize("clock_start", [...])`."""
    return None


@pytest.fixture
async def dashboard(tmp_path: Path, clock_start: datetime | None) -> AsyncIterator[Dashboard]:
    clock = utcnow if clock_start is None else clock_from(clock_start)
    async with running_dashboard(tmp_path, TOKEN, clock) as running:
        yield running


@pytest.fixture
async def client(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as http:
        yield http


async def get_json(client: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()  # type: ignore[no-any-return]


def client_error(response: httpx.Response, status: int) -> str:
    """The `error` message of a JSON 4xx (never a 500 or a traceback)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "Traceback" not in response.text
    message = response.json()["error"]
    assert isinstance(message, str) and message
    return message


def session_of(sessions: list[dict[str, Any]], chat_id: str) -> dict[str, Any]:
    [session] = [s for s in sessions if s["channel"] == "chat" and s["chat_id"] == chat_id]
    return session


# ---- auth and the guards ---------------------------------------------------------------------

ROUTES = [
    ("GET", "/api/sessions"),
    ("GET", "/api/sessions/1"),
    ("DELETE", "/api/sessions/1"),
    ("GET", "/api/sessions/1/messages"),
    ("GET", "/api/tasks"),
    ("GET", "/api/tasks/1/runs"),
    ("POST", "/api/tasks/1/cancel"),
    ("POST", "/api/tasks"),
    ("PUT", "/api/tasks/1"),
    ("DELETE", "/api/tasks/1"),
    ("POST", "/api/tasks/1/run"),
    ("POST", "/api/tasks/1/pause"),
    ("POST", "/api/tasks/1/resume"),
    ("GET", "/api/artifacts"),
    ("GET", "/api/tool-executions"),
    ("GET", "/api/deliveries"),
    ("GET", "/api/settings"),
    ("PUT", f"/api/settings/{SYSTEM_PROMPT_SETTING}"),
    ("DELETE", f"/api/settings/{SYSTEM_PROMPT_SETTING}"),
    ("GET", "/api/llm"),
    ("PUT", "/api/llm"),
    ("DELETE", "/api/llm"),
    ("POST", "/api/llm/test"),
    ("POST", "/api/llm/models"),
    ("POST", "/api/channels/telegram/test"),
    ("GET", "/api/channels/telegram/token"),
    ("PUT", "/api/channels/telegram/token"),
    ("DELETE", "/api/channels/telegram/token"),
    ("GET", "/api/usage"),
    ("GET", "/api/usage/summary"),
    ("GET", "/api/usage/budget"),
    ("GET", "/api/usage/prices"),
    ("GET", "/api/memories/people"),
    ("GET", "/api/memories"),
    ("PUT", "/api/memories/1"),
    ("DELETE", "/api/memories/1"),
    ("POST", "/api/memories/links"),
    ("DELETE", "/api/memories/links/chat:alice"),
    ("GET", "/api/people"),
    ("POST", "/api/pairing/approve"),
    ("POST", "/api/pairing/deny"),
    ("DELETE", "/api/people/telegram/1"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_every_dashboard_route_is_401_without_the_token(
    dashboard: Dashboard, method: str, path: str
) -> None:
    async with httpx.AsyncClient(base_url=dashboard.url) as anonymous:
        response = await anonymous.request(method, path, json={"value": "x"})
        assert "Authorization: Bearer" in client_error(response, 401)
        wrong = await anonymous.request(
            method, path, json={"value": "x"}, headers={"Authorization": "Bearer nope"}
        )
        client_error(wrong, 401)
    prompt = await dashboard.bruce.stores.settings.get(SYSTEM_PROMPT_SETTING)  # type: ignore[union-attr]
    assert prompt is None, "a refused request changed a setting"


@pytest.mark.parametrize(
    ("method", "path"), [(m, p) for m, p in ROUTES if m != "GET"] + [("POST", "/api/chat/messages")]
)
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_writes_without_a_json_content_type_are_refused(
    client: httpx.AsyncClient, method: str, path: str, content_type: str | None
) -> None:
    # What a cross-site form could send: never acted upon, even with valid credentials.
    headers = {"Content-Type": content_type} if content_type else {}
    response = await client.request(method, path, content=b'{"value": "x"}', headers=headers)
    assert "Content-Type: application/json" in client_error(response, 415)
    settings = await get_json(client, "/api/settings")
    assert settings["settings"][0]["source"] == "config"


async def test_unknown_api_routes_and_methods_answer_in_json(client: httpx.AsyncClient) -> None:
    assert "/api/nothing-here" in client_error(await client.get("/api/nothing-here"), 404)
    message = client_error(await client.delete("/api/sessions", headers=JSON), 405)
    assert "DELETE" in message


# ---- sessions and messages -------------------------------------------------------------------


async def test_sessions_list_the_chats_with_their_last_activity_and_honour_limit(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    assert await dashboard.chat("alice", "hello") == "You said: hello"
    assert await dashboard.chat("bob", "hi there") == "You said: hi there"

    sessions = (await get_json(client, "/api/sessions"))["sessions"]
    alice, bob = session_of(sessions, "alice"), session_of(sessions, "bob")
    assert alice["last_message_at"] and bob["last_message_at"]
    assert {"id", "channel", "chat_id", "title", "kind", "last_message_at"} <= set(alice)
    # Most recent activity first.
    assert sessions.index(bob) < sessions.index(alice)

    [newest] = (await get_json(client, "/api/sessions", limit=1))["sessions"]
    assert newest["chat_id"] == "bob"


async def test_a_sessions_messages_come_with_role_kind_and_status_and_page_with_after(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await dashboard.chat("alice", "first")
    await dashboard.chat("alice", "second")
    alice = session_of((await get_json(client, "/api/sessions"))["sessions"], "alice")

    page = await get_json(client, f"/api/sessions/{alice['id']}/messages")
    assert page["session"]["chat_id"] == "alice"
    assert [(m["role"], m["content"], m["status"]) for m in page["messages"]] == [
        ("user", "first", "done"),
        ("assistant", "You said: first", "sent"),
        ("user", "second", "done"),
        ("assistant", "You said: second", "sent"),
    ]
    assert all(m["kind"] == "chat" and m["created_at"] for m in page["messages"])
    assert page["next_after"] is None

    first = await get_json(client, f"/api/sessions/{alice['id']}/messages", limit=3)
    assert len(first["messages"]) == 3
    rest = await get_json(
        client, f"/api/sessions/{alice['id']}/messages", after=first["next_after"]
    )
    assert [m["content"] for m in rest["messages"]] == ["You said: second"]


async def test_messages_of_a_session_that_does_not_exist_are_404(
    client: httpx.AsyncClient,
) -> None:
    message = client_error(await client.get("/api/sessions/424242/messages"), 404)
    assert "424242" in message and "/api/sessions" in message


# ---- the tool log ----------------------------------------------------------------------------


async def test_tool_executions_show_a_failed_call_with_its_error_and_filter(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await dashboard.use_tool("alice", "add", {"a": 2, "b": 3})
    await dashboard.use_tool("alice", "lookup", {"query": "the weather"})
    await dashboard.use_tool("bob", "add", {"a": 1, "b": 1})

    everything = (await get_json(client, "/api/tool-executions"))["tool_executions"]
    assert [row["tool"] for row in everything] == ["add", "lookup", "add"]  # newest first

    [failed] = (await get_json(client, "/api/tool-executions", errors_only="true"))[
        "tool_executions"
    ]
    assert failed["tool"] == "lookup"
    assert failed["is_error"] is True
    assert "the index is offline; could not look up the weather" in failed["error"]
    assert failed["output"] is None
    assert '"query": "the weather"' in failed["input"]
    assert (failed["channel"], failed["chat_id"]) == ("chat", "alice")
    assert failed["turn"] == 1 and failed["duration_ms"] >= 0 and failed["created_at"]

    adds = (await get_json(client, "/api/tool-executions", tool="add"))["tool_executions"]
    assert [(row["output"], row["error"], row["is_error"]) for row in adds] == [
        ("2", None, False),
        ("5", None, False),
    ]
    bob_rows = (await get_json(client, "/api/tool-executions", session_id=adds[0]["session_id"]))[
        "tool_executions"
    ]
    assert [row["chat_id"] for row in bob_rows] == ["bob"]

    # Paging back: two rows, then the one before them.
    page = await get_json(client, "/api/tool-executions", limit=2)
    assert len(page["tool_executions"]) == 2 and page["next_before"] is not None
    older = await get_json(client, "/api/tool-executions", before=page["next_before"])
    assert [row["tool"] for row in older["tool_executions"]] == ["add"]
    assert older["tool_executions"][0]["chat_id"] == "alice"


# ---- tasks -----------------------------------------------------------------------------------


# 10:00 UTC: two hours on, 12:00, comes before 09:00 in Berlin (07:00 or 08:00 UTC) the next day.
@pytest.mark.parametrize("clock_start", [days_ahead_at(10)], ids=["10:00 UTC"])
async def test_tasks_list_schedule_timezone_status_and_next_run(
    client: httpx.AsyncClient, dashboard: Dashboard, clock_start: datetime
) -> None:
    briefing = await create_task(
        dashboard,
        "alice",
        title="Morning briefing",
        mode="agent",
        content="Summarise the news",
        cron="0 9 * * *",
        timezone="Europe/Berlin",
    )
    reminder = await create_task(
        dashboard, "alice", title="Call Ana", content="Call Ana now", run_at="+2h"
    )

    data = await get_json(client, "/api/tasks")
    assert data["timezone"] == "America/Sao_Paulo"
    tasks = {task["id"]: task for task in data["tasks"]}
    listed = tasks[briefing.id]
    assert {
        key: listed[key]
        for key in ("title", "mode", "schedule", "cron", "timezone", "status", "channel")
    } == {
        "title": "Morning briefing",
        "mode": "agent",
        "schedule": "cron 0 9 * * *",
        "cron": "0 9 * * *",
        "timezone": "Europe/Berlin",
        "status": "active",
        "channel": "chat",
    }
    assert listed["chat_id"] == "alice" and listed["session_id"] == briefing.session_id
    next_run = datetime.fromisoformat(listed["next_run_at"])
    assert next_run == briefing.next_run_at
    berlin = next_run.astimezone(ZoneInfo("Europe/Berlin"))
    assert berlin.strftime("%H:%M") == "09:00"
    assert berlin.date() == clock_start.date() + timedelta(days=1)
    # The description says when that is for the user, in the app's timezone.
    assert "America/Sao_Paulo" in listed["next_run"]
    assert listed["last_run"] is None

    once = tasks[reminder.id]
    assert (once["schedule"], once["mode"], once["content"]) == ("once", "message", "Call Ana now")
    assert (
        timedelta(0)
        <= reminder.next_run_at - clock_start - timedelta(hours=2)
        < timedelta(minutes=1)
    )
    # Soonest next run first among active tasks.
    assert [task["id"] for task in data["tasks"]] == [reminder.id, briefing.id]

    active = await get_json(client, "/api/tasks", status="active")
    assert {task["id"] for task in active["tasks"]} == {briefing.id, reminder.id}
    assert (await get_json(client, "/api/tasks", status="done"))["tasks"] == []


async def test_cancelling_through_the_api_removes_the_job_and_the_task_never_fires(
    client: httpx.AsyncClient, dashboard: Dashboard, tmp_path: Path
) -> None:
    doomed = await create_task(
        dashboard, "alice", title="Doomed", content="this must never arrive", run_at="+2s"
    )
    control = await create_task(
        dashboard, "alice", title="Control", content="the control reminder", run_at="+3s"
    )
    jobs = {row["id"] for row in db_rows(tmp_path, "SELECT id FROM apscheduler_jobs")}
    assert job_id(doomed.id) in jobs

    response = await client.post(f"/api/tasks/{doomed.id}/cancel", headers=JSON)
    assert response.status_code == 200, response.text
    cancelled = response.json()["task"]
    assert (cancelled["id"], cancelled["status"], cancelled["next_run_at"]) == (
        doomed.id,
        "cancelled",
        None,
    )
    jobs = {row["id"] for row in db_rows(tmp_path, "SELECT id FROM apscheduler_jobs")}
    assert job_id(doomed.id) not in jobs
    assert job_id(control.id) in jobs

    # The control was due after the cancelled one: once it has fired, the other would have too.
    await wait_until(lambda: "⏰ the control reminder" in dashboard.channel.texts("alice"), 15)
    assert not any("never arrive" in text for text in dashboard.channel.texts("alice"))
    runs = (await get_json(client, f"/api/tasks/{doomed.id}/runs"))["runs"]
    assert runs == []
    [control_run] = (await get_json(client, f"/api/tasks/{control.id}/runs"))["runs"]
    assert control_run["status"] == "delivered" and control_run["delivered_at"]
    listed = {t["id"]: t for t in (await get_json(client, "/api/tasks"))["tasks"]}
    assert listed[doomed.id]["status"] == "cancelled"
    assert listed[control.id]["status"] == "done"
    assert listed[control.id]["last_run"]["status"] == "delivered"

    # Cancelling again, or something that does not exist, says why.
    assert "cancelled" in client_error(
        await client.post(f"/api/tasks/{doomed.id}/cancel", headers=JSON), 409
    )
    assert "done" in client_error(
        await client.post(f"/api/tasks/{control.id}/cancel", headers=JSON), 409
    )
    assert "/api/tasks" in client_error(
        await client.post("/api/tasks/999999/cancel", headers=JSON), 404
    )
    client_error(await client.get("/api/tasks/999999/runs"), 404)


# ---- artifacts -------------------------------------------------------------------------------


async def test_artifacts_list_title_file_size_session_and_a_working_link(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    content = "<h1>Prices</h1><p>apples: 42</p>"
    await dashboard.use_tool(
        "alice",
        "artifact_save",
        {"filename": "prices.html", "title": "Fruit prices", "content": content},
    )
    [artifact] = (await get_json(client, "/api/artifacts"))["artifacts"]
    assert artifact["title"] == "Fruit prices"
    assert artifact["filename"] == "prices.html"
    assert artifact["size_bytes"] == len(content.encode())
    assert (artifact["channel"], artifact["chat_id"]) == ("chat", "alice")
    assert artifact["created_at"]
    assert artifact["url"] == f"/artifacts/{artifact['uuid']}/prices.html"

    async with httpx.AsyncClient(base_url=dashboard.url) as anonymous:  # a capability URL
        served = await anonymous.get(artifact["url"])
    assert served.status_code == 200 and served.text == content

    mine = await get_json(client, "/api/artifacts", session_id=artifact["session_id"])
    assert len(mine["artifacts"]) == 1
    other = await get_json(client, "/api/artifacts", session_id=artifact["session_id"] + 1)
    assert other["artifacts"] == []


# ---- deliveries ------------------------------------------------------------------------------


async def test_a_reply_the_chat_refused_is_listed_with_its_error_and_attempts(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    await dashboard.chat("alice", "all fine here")
    dashboard.channel.refusing.add("gone")
    await dashboard.say("gone", "are you there?")

    async def failed() -> list[dict[str, Any]]:
        return (await get_json(client, "/api/deliveries", status="failed"))["deliveries"]

    [delivery] = await wait_until(failed)
    assert delivery["content"] == "You said: are you there?"
    assert (delivery["channel"], delivery["chat_id"]) == ("chat", "gone")
    assert delivery["status"] == "failed"
    assert delivery["error"] == "Forbidden: bot was blocked by the user"
    assert delivery["attempts"] == 1  # permanent: not retried
    assert delivery["last_attempt_at"] and delivery["kind"] == "chat"

    # Both kinds by default; none of them undelivered; delivered replies never listed.
    everything = (await get_json(client, "/api/deliveries"))["deliveries"]
    assert [d["message_id"] for d in everything] == [delivery["message_id"]]
    assert (await get_json(client, "/api/deliveries", status="undelivered"))["deliveries"] == []


# ---- settings --------------------------------------------------------------------------------


async def setting_of(client: httpx.AsyncClient, key: str) -> dict[str, Any]:
    [setting] = [
        s for s in (await get_json(client, "/api/settings"))["settings"] if s["key"] == key
    ]
    return setting


async def test_the_timezone_set_in_the_dashboard_is_the_next_turns_and_a_bad_one_is_refused(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    setting = await setting_of(client, TIMEZONE_SETTING)
    assert (setting["value"], setting["source"]) == ("America/Sao_Paulo", "config")
    refused = await client.put(f"/api/settings/{TIMEZONE_SETTING}", json={"value": "Mars/Olympus"})
    assert "'Mars/Olympus' is not a timezone" in client_error(refused, 400)
    assert (await setting_of(client, TIMEZONE_SETTING))["source"] == "config"

    response = await client.put(f"/api/settings/{TIMEZONE_SETTING}", json={"value": "Asia/Tokyo"})
    assert response.status_code == 200, response.text
    await dashboard.chat("alice", "what time is it?")
    assert "Timezone: Asia/Tokyo" in json.dumps(dashboard.fake.requests[-1])


# 10:00 UTC: 08:00 the next day in Tokyo is 23:00 UTC today; in Sao Paulo, 11:00 UTC tomorrow.
@pytest.mark.parametrize("clock_start", [days_ahead_at(10)], ids=["10:00 UTC"])
async def test_the_timezone_set_in_the_dashboard_is_new_tasks_and_the_pages_without_a_restart(
    client: httpx.AsyncClient, dashboard: Dashboard, clock_start: datetime
) -> None:
    before = await create_task(dashboard, "alice", title="Old", content="x", cron="0 8 * * *")
    assert before.timezone == "America/Sao_Paulo"
    response = await client.put(f"/api/settings/{TIMEZONE_SETTING}", json={"value": "Asia/Tokyo"})
    assert response.status_code == 200, response.text

    # A reminder made without a zone, as proactive_schedule makes one, is in the new zone.
    made = await create_task(dashboard, "alice", title="Water", content="Drink", cron="0 8 * * *")
    assert made.timezone == "Asia/Tokyo"
    assert made.next_run_at == datetime.combine(clock_start.date(), time(23), UTC)
    # So is one made on the Schedules page with its timezone field left empty.
    posted = await client.post(
        "/api/tasks",
        json={
            "session_id": made.session_id,
            "title": "Tea",
            "mode": "message",
            "content": "Tea time",
            "run_at": "2099-01-01T17:00",
        },
    )
    assert posted.status_code == 201, posted.text
    tea = posted.json()["task"]
    assert tea["timezone"] == "Asia/Tokyo"
    assert tea["next_run_at"].startswith("2099-01-01T08:00:00")  # 17:00 in Tokyo, in UTC

    # The pages show times in it, and the older task's next run is told in it for the user.
    listing = await get_json(client, "/api/tasks")
    assert listing["timezone"] == "Asia/Tokyo"
    old = next(task for task in listing["tasks"] if task["id"] == before.id)
    assert old["schedule_words"].endswith("America/Sao_Paulo")
    assert "(Asia/Tokyo, UTC+0900)" in old["next_run"]
    assert (await get_json(client, "/api/usage"))["timezone"] == "Asia/Tokyo"
    assert (await get_json(client, "/api/usage/summary"))["timezone"] == "Asia/Tokyo"
    detail = await get_json(client, f"/api/sessions/{made.session_id}")
    assert detail["timezone"] == "Asia/Tokyo"
    page = await client.get("/sessions")
    assert 'data-timezone="Asia/Tokyo"' in page.text and "Times in Asia/Tokyo." in page.text

    # Reset to config: the YAML's zone again, for pages and new tasks alike.
    reset = await client.delete(f"/api/settings/{TIMEZONE_SETTING}", headers=JSON)
    assert reset.status_code == 200, reset.text
    assert 'data-timezone="America/Sao_Paulo"' in (await client.get("/usage")).text
    again = await create_task(dashboard, "alice", title="Again", content="y", run_at="+1h")
    assert again.timezone == "America/Sao_Paulo"


async def test_max_turns_set_in_the_dashboard_caps_the_next_turn(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    for bad in ("0", "51", "x"):
        refused = await client.put(f"/api/settings/{MAX_TURNS_SETTING}", json={"value": bad})
        assert "from 1 to 50" in client_error(refused, 400)
    response = await client.put(f"/api/settings/{MAX_TURNS_SETTING}", json={"value": "1"})
    assert response.json()["setting"] == {**response.json()["setting"], "value": "1"}

    before = len(dashboard.fake.requests)
    dashboard.fake.script(tool_calls=[("add", {"a": 1, "b": 2})])
    dashboard.fake.script(tool_calls=[("add", {"a": 3, "b": 4})])
    await dashboard.chat("bob", "add things")
    # One round with tools, then the last call with tools switched off: no second round.
    turn = dashboard.fake.requests[before:]
    assert len(turn) == 2
    assert turn[-1].get("tool_choice") == {"type": "none"}


async def test_the_system_prompt_set_in_the_dashboard_is_what_the_next_request_carries(
    client: httpx.AsyncClient, dashboard: Dashboard
) -> None:
    setting = await setting_of(client, SYSTEM_PROMPT_SETTING)
    assert (setting["value"], setting["config_value"], setting["source"]) == (
        YAML_PROMPT,
        YAML_PROMPT,
        "config",
    )
    await dashboard.chat("alice", "before")
    assert YAML_PROMPT in system_text(dashboard.fake.requests[-1])

    edited = "You are Dashboard Bruce. Answer in haiku."
    response = await client.put(f"/api/settings/{SYSTEM_PROMPT_SETTING}", json={"value": edited})
    assert response.status_code == 200, response.text
    assert response.json()["setting"]["value"] == edited
    assert response.json()["setting"]["source"] == "dashboard"
    listed = await setting_of(client, SYSTEM_PROMPT_SETTING)
    assert (listed["value"], listed["config_value"]) == (edited, YAML_PROMPT)

    await dashboard.chat("alice", "after the edit")
    system = system_text(dashboard.fake.requests[-1])
    assert edited in system and YAML_PROMPT not in system

    reset = await client.delete(f"/api/settings/{SYSTEM_PROMPT_SETTING}", headers=JSON)
    assert reset.status_code == 200, reset.text
    assert reset.json()["setting"]["value"] == YAML_PROMPT
    assert reset.json()["setting"]["source"] == "config"
    await dashboard.chat("alice", "after the reset")
    system = system_text(dashboard.fake.requests[-1])
    assert YAML_PROMPT in system and edited not in system


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, "'value'"),
        ({"value": None}, "'value'"),
        ({"value": 42}, "'value'"),
        ({"value": ["a"]}, "'value'"),
        ({"value": "   \n"}, "non-empty"),
        ({"value": "x" * 50_001}, "at most 50000"),
    ],
    ids=["missing", "null", "number", "list", "blank", "too-long"],
)
async def test_a_bad_setting_value_is_400_and_changes_nothing(
    client: httpx.AsyncClient, body: dict[str, Any], expected: str
) -> None:
    response = await client.put(f"/api/settings/{SYSTEM_PROMPT_SETTING}", json=body)
    assert expected in client_error(response, 400)
    setting = await setting_of(client, SYSTEM_PROMPT_SETTING)
    assert setting["source"] == "config"


async def test_only_known_settings_can_be_edited(client: httpx.AsyncClient) -> None:
    for key in ("llm.api_key", "web.auth_token", "agent", "x" * 300):
        response = await client.put(f"/api/settings/{key}", json={"value": "pwned"})
        message = client_error(response, 404)
        assert SYSTEM_PROMPT_SETTING in message  # says which keys are editable
        client_error(
            await client.delete(f"/api/settings/{key}", headers=JSON),
            404,
        )
    for broken in (b"{not json", b"[1]"):
        response = await client.put(
            f"/api/settings/{SYSTEM_PROMPT_SETTING}",
            content=broken,
            headers=JSON,
        )
        assert "JSON" in client_error(response, 400)


# ---- usage -----------------------------------------------------------------------------------


async def test_usage_is_aggregated_per_day_model_and_purpose(
    client: httpx.AsyncClient, dashboard: Dashboard, tmp_path: Path
) -> None:
    await dashboard.chat("alice", "one")
    await dashboard.use_tool("alice", "add", {"a": 1, "b": 2})  # two calls in one turn
    before = datetime.now(SAO_PAULO).date()
    data = await get_json(client, "/api/usage", days=7)
    after = datetime.now(SAO_PAULO).date()
    assert data["days"] == 7 and data["timezone"] == "America/Sao_Paulo"

    [row] = [r for r in data["rows"] if r["purpose"] == "agent"]
    assert row["day"] in {before.isoformat(), after.isoformat()}
    assert row["model"] == dashboard.bruce.config.llm.model
    assert row["calls"] == 3 == len(dashboard.fake.requests)
    assert row["errors"] == 0
    raw = db_rows(
        tmp_path,
        "SELECT SUM(input_tokens) i, SUM(output_tokens) o, SUM(cache_read_tokens) r, "
        "SUM(cache_write_tokens) w FROM llm_calls WHERE purpose = 'agent'",
    )[0]
    assert (
        row["input_tokens"],
        row["output_tokens"],
        row["cache_read_tokens"],
        row["cache_write_tokens"],
    ) == (raw["i"], raw["o"], raw["r"], raw["w"])
    assert row["input_tokens"] > 0 and row["output_tokens"] > 0
    assert data["totals"]["calls"] == sum(r["calls"] for r in data["rows"])


# Five minutes after midnight in São Paulo (03:05 UTC): the days are São Paulo's, not UTC's.
@pytest.mark.parametrize(
    "clock_start", [datetime(2026, 3, 29, 0, 5, tzinfo=SAO_PAULO)], ids=["00:05 São Paulo"]
)
async def test_usage_days_are_the_app_timezone_days(
    client: httpx.AsyncClient, dashboard: Dashboard, clock_start: datetime
) -> None:
    today = clock_start.date()
    yesterday, two_days_ago = today - timedelta(days=1), today - timedelta(days=2)
    # 23:30 in São Paulo is 02:30 UTC the next day: it belongs to the São Paulo day.
    late_evening = datetime.combine(two_days_ago, time(23, 30), tzinfo=SAO_PAULO)
    too_old = late_evening - timedelta(days=30)
    calls = [  # (purpose, model, input tokens, output tokens, error)
        ("summary", "m-small", 10, 5, None),
        ("summary", "m-small", 7, 1, "overloaded"),
        ("agent", "m-big", 100, 50, None),
    ]
    # Every row has every key: an executemany takes its columns from the first row.
    rows = [
        {"purpose": p, "model": m, "input_tokens": i, "output_tokens": o, "error": e}
        for p, m, i, o, e in calls
    ]
    stores = dashboard.bruce.stores
    assert stores is not None
    async with stores.database.engine.begin() as connection:
        await connection.execute(
            LLMCallRow.__table__.insert(),
            [{**row, "created_at": late_evening} for row in rows]
            + [{**rows[0], "created_at": too_old}]
            # A minute before and a minute after midnight: yesterday and today, in São Paulo
            # (both are today in UTC).
            + [{**rows[2], "created_at": clock_start - timedelta(minutes=6)}]
            + [{**rows[2], "created_at": clock_start - timedelta(minutes=4), "input_tokens": 3}],
        )

    def summary(data: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [
            (r["day"], r["model"], r["purpose"], r["calls"], r["input_tokens"], r["errors"])
            for r in data["rows"]
        ]

    data = await get_json(client, "/api/usage", days=7)
    assert summary(data) == [
        (today.isoformat(), "m-big", "agent", 1, 3, 0),
        (yesterday.isoformat(), "m-big", "agent", 1, 100, 0),
        (two_days_ago.isoformat(), "m-big", "agent", 1, 100, 0),
        (two_days_ago.isoformat(), "m-small", "summary", 2, 17, 1),
    ]
    assert data["totals"]["output_tokens"] == 156
    # The day before yesterday is outside a two-day window, yesterday outside a one-day one.
    assert [r["day"] for r in (await get_json(client, "/api/usage", days=2))["rows"]] == [
        today.isoformat(),
        yesterday.isoformat(),
    ]
    assert summary(await get_json(client, "/api/usage", days=1)) == [
        (today.isoformat(), "m-big", "agent", 1, 3, 0)
    ]


def test_usage_days_follow_daylight_saving_time() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2024, 4, 1, 12, 0, tzinfo=UTC)
    days = usage_days(3, berlin, now)
    assert [day for day, _ in days] == [date(2024, 3, 30), date(2024, 3, 31), date(2024, 4, 1)]
    starts = [start for _, start in days]
    assert starts[0] == datetime(2024, 3, 29, 23, 0, tzinfo=UTC)  # CET, UTC+1
    assert starts[2] - starts[1] == timedelta(hours=23)  # the clocks went forward on the 31st
    assert starts[2] == datetime(2024, 3, 31, 22, 0, tzinfo=UTC)  # CEST, UTC+2


# ---- bad parameters --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        ("/api/sessions", {"limit": "0"}, "'limit'"),
        ("/api/sessions", {"limit": "abc"}, "'limit'"),
        ("/api/sessions", {"limit": str(MAX_LIMIT + 1)}, "'limit'"),
        ("/api/sessions/abc/messages", {}, "'session_id'"),
        ("/api/sessions/0/messages", {}, "'session_id'"),
        ("/api/sessions/99999999999999999999999/messages", {}, "'session_id'"),
        ("/api/sessions/1/messages", {"after": "-1"}, "'after'"),
        ("/api/sessions/1/messages", {"after": "1.5"}, "'after'"),
        ("/api/sessions/1/messages", {"limit": "9999"}, "'limit'"),
        ("/api/tasks", {"status": "bogus"}, "'status'"),
        ("/api/tasks", {"limit": "-3"}, "'limit'"),
        ("/api/tasks/x/runs", {}, "'task_id'"),
        ("/api/tasks/1/runs", {"limit": "none"}, "'limit'"),
        ("/api/artifacts", {"session_id": "me"}, "'session_id'"),
        ("/api/tool-executions", {"errors_only": "maybe"}, "'errors_only'"),
        ("/api/tool-executions", {"session_id": "1e3"}, "'session_id'"),
        ("/api/tool-executions", {"before": "yesterday"}, "'before'"),
        ("/api/tool-executions", {"tool": "t" * 65}, "'tool'"),
        ("/api/deliveries", {"status": "sent"}, "'status'"),
        ("/api/deliveries", {"limit": "1000"}, "'limit'"),
        ("/api/usage", {"days": "0"}, "'days'"),
        ("/api/usage", {"days": "367"}, "'days'"),
        ("/api/usage", {"days": "a week"}, "'days'"),
    ],
)
async def test_bad_parameters_are_400_naming_the_parameter(
    client: httpx.AsyncClient, path: str, params: dict[str, str], named: str
) -> None:
    message = client_error(await client.get(path, params=params), 400)
    assert named in message


async def test_a_bad_task_id_in_cancel_is_400(client: httpx.AsyncClient) -> None:
    for task_id in ("abc", "0", "-1", "1" * 30):
        response = await client.post(f"/api/tasks/{task_id}/cancel", headers=JSON)
        assert "'task_id'" in client_error(response, 400)


# ---- PostgreSQL ------------------------------------------------------------------------------


async def test_the_dashboard_queries_run_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    # The listings group, order and join differently per dialect (a CASE grouped by its label,
    # NULLS LAST, a sub-select of the latest runs): the same answers on PostgreSQL.
    async with (
        running_dashboard(tmp_path, TOKEN, database={"url": postgres_url}) as dashboard,
        httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as client,
    ):
        await dashboard.use_tool("alice", "lookup", {"query": "news"})
        task = await create_task(dashboard, "alice", title="Ping", content="ping", run_at="+1s")
        later = await create_task(dashboard, "alice", title="Later", content="x", cron="0 9 * * *")
        dashboard.channel.refusing.add("gone")
        await dashboard.say("gone", "hello?")
        await wait_until(lambda: "⏰ ping" in dashboard.channel.texts("alice"), 15)

        alice = session_of((await get_json(client, "/api/sessions", limit=5))["sessions"], "alice")
        messages = (await get_json(client, f"/api/sessions/{alice['id']}/messages"))["messages"]
        assert [m["content"] for m in messages][:2] == ["please use lookup", "Done."]
        [failed] = (await get_json(client, "/api/tool-executions", errors_only="1"))[
            "tool_executions"
        ]
        assert failed["tool"] == "lookup" and failed["chat_id"] == "alice"

        async def ran() -> dict[str, Any] | None:
            tasks = {t["id"]: t for t in (await get_json(client, "/api/tasks"))["tasks"]}
            return tasks[task.id]["last_run"]

        assert (await wait_until(ran))["status"] == "delivered"
        listed = (await get_json(client, "/api/tasks"))["tasks"]
        assert [t["id"] for t in listed] == [later.id, task.id]  # active first, then done

        async def refused() -> list[dict[str, Any]]:
            return (await get_json(client, "/api/deliveries"))["deliveries"]

        [delivery] = await wait_until(refused)
        assert delivery["chat_id"] == "gone" and delivery["attempts"] == 1

        today = datetime.now(SAO_PAULO).date()
        [row] = (await get_json(client, "/api/usage", days=3))["rows"]
        assert row["day"] in {today.isoformat(), datetime.now(SAO_PAULO).date().isoformat()}
        assert row["calls"] == len(dashboard.fake.requests)
        # The finer grouping (per session too) and the month's cost run there as well.
        summary = await get_json(client, "/api/usage/summary", days=3)
        assert summary["totals"]["calls"] == len(dashboard.fake.requests)
        assert summary["totals"]["cost_usd"] > 0  # claude-sonnet-4-6: a built-in price
        assert {s["chat_id"] for s in summary["by_session"]} == {"alice", "gone"}
        budget = await get_json(client, "/api/usage/budget")
        # The budget is told rounded to a millionth of a dollar.
        assert budget["spent_usd"] == pytest.approx(summary["totals"]["cost_usd"], abs=1e-6)

        response = await client.post(f"/api/tasks/{later.id}/cancel", headers=JSON)
        assert response.status_code == 200, response.text
        assert response.json()["task"]["status"] == "cancelled"

        # Signed-in browsers: stored, listed and revoked on PostgreSQL too.
        login = await client.post("/login", data={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/chat"
        [mine] = (await get_json(client, "/api/web-sessions"))["web_sessions"]  # by the cookie
        assert mine["current"] is True and mine["client_address"] == "127.0.0.1"
        response = await client.delete(f"/api/web-sessions/{mine['id']}", headers=JSON)
        assert response.status_code == 200, response.text
        assert (await get_json(client, "/api/web-sessions"))["web_sessions"] == []
