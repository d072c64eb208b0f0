"""The API's description, `/api/openapi.json`, is generated from the same models the routes use:
checked here against the app's real route table and real answers, so it cannot drift. Every
documented query parameter refuses a bad value with a 400 naming it, the page `/api/docs` shows
the document, and both need the dashboard's token like the rest of `/api/`."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from starlette.routing import Route

from bruce_bot.settings.editable import SYSTEM_PROMPT_SETTING
from bruce_bot.web.app import create_app
from bruce_bot.web.context import WebContext
from bruce_bot.web.lazy_routes import LazyRoutes
from tests.integration.dashboard_support import Dashboard, create_task, running_dashboard

TOKEN = "Vq3r8mX2kP9sLw7nB4tY6hJ1cF5dG0aZ_eRuIoNpQsA"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
# A valid value for each path parameter: the request gets as far as the query parameters.
PATH_VALUES = {
    "session_id": "1",
    "task_id": "1",
    "key": SYSTEM_PROMPT_SETTING,
    "public_id": "x",
    "memory_id": "1",
    "owner": "chat:alice",
    "channel": "telegram",
    "user_id": "1",
    "approval_id": "1",
}


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        yield running


@pytest.fixture
async def client(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as http:
        yield http


@pytest.fixture
async def spec(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/api/openapi.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()  # type: ignore[no-any-return]


def api_routes(dashboard: Dashboard) -> set[tuple[str, str]]:
    """(method, path) of every /api/ route of the app, as Starlette serves it."""
    bruce = dashboard.bruce
    assert bruce.stores is not None and bruce.web_channel is not None
    app = create_app(WebContext(bruce.stores, bruce.web_channel, TOKEN))
    # The API's routes are made on its first request, inside their LazyRoutes.
    routes = [r for x in app.routes for r in (x.routes if isinstance(x, LazyRoutes) else [x])]
    return {
        (method.lower(), route.path_format)
        for route in routes
        if isinstance(route, Route) and route.path.startswith("/api/")
        for method in route.methods or ()
        if method != "HEAD"
    }


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, methods in spec["paths"].items()
        for method, operation in methods.items()
    ]


def schema_of(spec: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """A schema of the document that resolves its `$ref`s against the document's components."""
    return {**ref, "components": spec["components"]}


def bad_value(schema: dict[str, Any]) -> str | None:
    """A value the parameter's schema refuses (None: anything goes)."""
    kinds = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    kind = kinds[0]
    if "enum" in kind:
        return "bogus"
    if "maxLength" in kind:
        return "x" * (kind["maxLength"] + 1)
    return {"integer": "abc", "number": "soon", "boolean": "maybe"}.get(kind.get("type", ""))


async def test_the_document_lists_every_api_route_and_nothing_else(
    dashboard: Dashboard, spec: dict[str, Any]
) -> None:
    documented = {(method, path) for method, path, _ in operations(spec)}
    assert documented == api_routes(dashboard)
    assert ("get", "/api/openapi.json") in documented and ("get", "/api/docs") in documented


async def test_every_operation_documents_its_path_parameters_and_its_answer(
    spec: dict[str, Any],
) -> None:
    schemas = spec["components"]["schemas"]
    for method, path, operation in operations(spec):
        where = f"{method.upper()} {path}"
        in_path = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
        assert in_path == set(path.replace("}", "{").split("{")[1::2]), where
        assert all(p["required"] for p in operation["parameters"] if p["in"] == "path"), where
        assert all("schema" in p and p["description"] for p in operation["parameters"]), where
        success = [status for status in operation["responses"] if status.startswith("2")]
        assert len(success) == 1, where
        content = operation["responses"][success[0]]["content"]
        if path == "/api/docs":
            assert "text/html" in content
            continue
        ref = content["application/json"]["schema"]["$ref"]
        assert ref.removeprefix("#/components/schemas/") in schemas, where
        assert "401" in operation["responses"], where


async def test_real_answers_match_their_documented_schema(
    dashboard: Dashboard, client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    assert await dashboard.chat("alice", "hello") == "You said: hello"
    await dashboard.use_tool("alice", "lookup", {"query": "weather"})  # fails: a logged error
    report = {"filename": "r.html", "title": "Report", "content": "<p>hi</p>"}
    await dashboard.use_tool("alice", "artifact_save", report)
    await dashboard.use_tool("alice", "memory_save", {"text": "Likes green tea", "tags": ["tea"]})
    task = await create_task(dashboard, "alice", title="Call Ana", content="Call", run_at="+2h")
    session_id = (await client.get("/api/sessions")).json()["sessions"][0]["id"]
    checked = 0
    for method, path, operation in operations(spec):
        if method != "get" or path == "/api/docs":
            continue
        response = await client.get(
            path.format(session_id=session_id, task_id=task.id, channel="telegram")
        )
        assert response.status_code == 200, f"{path}: {response.text}"
        ref = operation["responses"]["200"]["content"]["application/json"]["schema"]
        jsonschema.validate(response.json(), schema_of(spec, ref))
        checked += 1
    assert checked >= 15


async def test_every_documented_query_parameter_refuses_a_bad_value_naming_it(
    client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    tried = 0
    for method, path, operation in operations(spec):
        url = path.format(**PATH_VALUES)
        for parameter in operation["parameters"]:
            value = bad_value(parameter["schema"])
            if parameter["in"] != "query" or value is None:
                continue
            response = await client.request(
                method, url, params={parameter["name"]: value}, headers=JSON, json={}
            )
            where = f"{method.upper()} {path}?{parameter['name']}={value[:20]}"
            assert response.status_code == 400, f"{where}: {response.text}"
            assert f"'{parameter['name']}'" in response.json()["error"], where
            tried += 1
    assert tried >= 15


async def test_a_bad_parameter_message_says_what_is_allowed(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/tasks", params={"status": "bogus", "limit": "0"})
    assert response.status_code == 400
    message = response.json()["error"]
    assert "'status' must be one of active, paused, unconfirmed, done, cancelled, missed" in message
    assert "'limit' must be an integer from 1 to 500" in message
    assert "not 'bogus'" in message and "not '0'" in message


@pytest.mark.parametrize("path", ["/api/openapi.json", "/api/docs"])
async def test_the_document_and_its_page_need_the_token(dashboard: Dashboard, path: str) -> None:
    async with httpx.AsyncClient(base_url=dashboard.url) as anonymous:
        for headers in ({}, {"Authorization": "Bearer nope"}):
            refused = await anonymous.get(path, headers=headers)
            assert refused.status_code == 401
            assert "Authorization: Bearer" in refused.json()["error"]
        allowed = await anonymous.get(path, headers=AUTH)
        assert allowed.status_code == 200


async def test_the_docs_page_is_a_dashboard_page_reading_the_document(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/api/docs")
    assert response.headers["content-type"].startswith("text/html")
    assert "Content-Security-Policy" in response.headers
    page = response.text
    assert '<nav class="nav"' in page and "/static/dashboard.js" in page
    assert 'api("/api/openapi.json")' in page


async def test_page_views_read_no_file(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_reading(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("a page view read a file")

    monkeypatch.setattr(pathlib.Path, "read_text", no_reading)
    monkeypatch.setattr(pathlib.Path, "read_bytes", no_reading)
    pages = ("/chat", "/sessions", "/schedules", "/artifacts", "/people", "/logs", "/settings")
    for path in (*pages, "/usage"):
        response = await client.get(path)
        assert response.status_code == 200, path
        assert 'aria-current="page"' in response.text
