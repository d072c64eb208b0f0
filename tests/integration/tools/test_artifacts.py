"""Artifacts end to end: `artifact_save` writes a file and a row, a running Bruce serves it at
`/artifacts/<uuid>/<filename>` with sandboxing headers, and nothing else under that path (or
outside the artifacts folder) can be reached. The last test runs the seed's example through the
fake Anthropic server: search, save a dashboard, answer with its link."""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bruce_bot.app import Bruce
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.config import Config
from bruce_bot.domain import SessionKey, ToolCall, ToolResult
from bruce_bot.tools.catalog import build_tools
from bruce_bot.tools.registry import ToolContext, ToolRegistry
from bruce_bot.web.artifacts import ARTIFACT_CSP
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer
from tests.fakes.web_server import FakeWebServer
from tests.integration.support import (
    block_text,
    db_rows,
    last_tool_results,
    next_reply,
    untrusted_body,
)

TOKEN = "artifact-test-token"
LINK = re.compile(r"Artifact saved at (http://\S+/artifacts/([0-9a-f-]{36})/(\S+))$")
DASHBOARD = """<!doctype html><html><head><meta charset="utf-8"><title>Tech news</title>
<script>document.title = "scripts run";</script></head>
<body><h1>Tech news in Brazil</h1><ul><li>São Paulo</li></ul></body></html>"""
_ids = itertools.count(1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def artifact_config(tmp_path: Path, llm_url: str | None = None, **overrides: Any) -> Config:
    """Web on a known port, so `app.public_url` (the base of the links) points at it."""
    port = free_port()
    return make_config(
        tmp_path,
        llm_url,
        app={"public_url": f"http://127.0.0.1:{port}"},
        web={"port": port, "auth_token": TOKEN},
        **overrides,
    )


class Running:
    def __init__(self, bruce: Bruce, config: Config, session_id: int) -> None:
        self.bruce = bruce
        self.config = config
        self.session_id = session_id
        assert bruce.stores is not None
        self.tools: ToolRegistry = build_tools(config, bruce.stores)
        self.root = config.app.data_dir / "artifacts"

    async def save(self, **arguments: Any) -> ToolResult:
        call = ToolCall(f"call_{next(_ids)}", "artifact_save", arguments)
        return await self.tools.execute(
            call, ToolContext(session_id=self.session_id, channel="console", chat_id="local")
        )

    async def save_ok(self, **arguments: Any) -> tuple[str, str, str]:
        """(link, uuid, filename) of a successful save."""
        result = await self.save(**arguments)
        assert not result.is_error, result.content
        match = LINK.fullmatch(result.content)
        assert match, result.content
        return match.group(1), match.group(2), match.group(3)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    config = artifact_config(tmp_path, tools={"artifacts": {"max_bytes": 5000}})
    async with running_bruce(config) as bruce:
        assert bruce.stores is not None
        session = await bruce.stores.sessions.get_or_create(SessionKey("console", "local"))
        yield Running(bruce, config, session.id)


async def raw_get(base_url: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET `path` exactly as written (no client-side normalisation of `..` or `%2e`)."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


# ---- saving and serving ---------------------------------------------------------------------


async def test_a_saved_artifact_is_served_at_its_link_with_sandboxing_headers(
    running: Running,
) -> None:
    link, artifact_uuid, filename = await running.save_ok(
        filename="news.html", title="Tech news in Brazil", content=DASHBOARD
    )

    assert link == f"{running.config.app.public_url}/artifacts/{artifact_uuid}/news.html"
    assert uuid.UUID(artifact_uuid).version == 4
    assert filename == "news.html"
    async with httpx.AsyncClient() as client:
        response = await client.get(link)  # no token: the link itself is the capability
        api = await client.get(f"{running.bruce.web_url}/api/sessions")
    assert response.status_code == 200
    assert response.content == DASHBOARD.encode()
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == ARTIFACT_CSP
    assert "allow-same-origin" not in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "set-cookie" not in response.headers
    assert api.status_code == 401  # the rest of the web app still needs the token


async def test_the_artifact_row_and_file_are_stored_for_the_session(running: Running) -> None:
    content = "city,startups\nSão Paulo,1200\n"
    _, artifact_uuid, _ = await running.save_ok(
        filename="startups.csv", title="  Startups\nby city in São\u200b Paulo ", content=content
    )

    (row,) = db_rows(running.config.app.data_dir, "SELECT * FROM artifacts")
    assert row["uuid"] == artifact_uuid
    assert row["session_id"] == running.session_id
    assert (row["title"], row["filename"]) == ("Startups by city in São Paulo", "startups.csv")
    assert row["content_type"] == "text/csv; charset=utf-8"
    assert row["size_bytes"] == len(content.encode()) and row["created_at"]
    stored = running.root / artifact_uuid / "startups.csv"
    assert stored.read_text(encoding="utf-8") == content
    async with httpx.AsyncClient() as client:
        response = await client.get(
            f"{running.bruce.web_url}/artifacts/{artifact_uuid}/startups.csv"
        )
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.text == content


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("../../x.html", "x.html"),
        ("/etc/passwd", "passwd.html"),
        ("a/b.html", "b.html"),
        ("evil\x00.html", "evil.html"),
        ("..", "artifact.html"),
        (".htaccess", "htaccess.html"),
        ("..／..／bruce.db", "bruce.html"),
        ("..\\..\\boot.ini", "boot.html"),
        ("\u202eLMTH.exe", "LMTH.html"),
    ],
)
async def test_file_names_cannot_leave_the_artifacts_folder(
    tmp_path: Path, running: Running, raw: str, safe: str
) -> None:
    def files() -> set[Path]:
        return {path for path in tmp_path.rglob("*") if path.is_file()}

    before = files()
    link, artifact_uuid, filename = await running.save_ok(
        filename=raw, title="attempt", content="<p>hi</p>"
    )

    assert filename == safe
    new_files = {path for path in files() - before if not path.name.startswith("bruce.db")}
    assert new_files == {running.root / artifact_uuid / safe}  # one file, in its own folder
    assert (running.root / artifact_uuid / safe).resolve().parent.parent == running.root.resolve()
    async with httpx.AsyncClient() as client:
        assert (await client.get(link)).text == "<p>hi</p>"


async def test_content_over_the_size_limit_is_refused_and_nothing_is_written(
    running: Running,
) -> None:
    result = await running.save(filename="big.html", title="too big", content="x" * 5001)

    assert result.is_error
    assert "5,001 bytes, over the limit of 5,000 bytes (tools.artifacts.max_bytes)" in (
        result.content
    )
    assert not running.root.exists() or not any(running.root.iterdir())
    assert db_rows(running.config.app.data_dir, "SELECT * FROM artifacts") == []


async def test_the_size_limit_counts_bytes_not_characters(running: Running) -> None:
    result = await running.save(filename="big.txt", title="accents", content="é" * 2501)

    assert result.is_error and "5,002 bytes" in result.content


async def test_wrong_argument_types_are_error_results_naming_the_field(running: Running) -> None:
    result = await running.save(filename=["news.html"], title="t", content="c")
    missing = await running.save(filename="news.html", content="c")

    assert result.is_error and "argument 'filename'" in result.content
    assert missing.is_error and "'title' is a required property" in missing.content


async def test_svg_is_served_as_an_image_and_sandboxed_too(running: Running) -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    link, _, _ = await running.save_ok(filename="chart.svg", title="chart", content=svg)

    async with httpx.AsyncClient() as client:
        response = await client.get(link)
    assert response.headers["content-type"] == "image/svg+xml; charset=utf-8"
    assert response.headers["content-security-policy"] == ARTIFACT_CSP


# ---- everything else under /artifacts is a 404 ------------------------------------------------


async def test_unknown_or_malformed_artifact_paths_are_not_found(running: Running) -> None:
    _, artifact_uuid, _ = await running.save_ok(filename="news.html", title="t", content="<p>a</p>")
    planted_uuid = str(uuid.uuid4())
    (running.root / planted_uuid).mkdir()
    (running.root / planted_uuid / "planted.html").write_text("not saved by the tool")
    base = running.bruce.web_url
    assert base is not None
    paths = [
        f"/artifacts/{uuid.uuid4()}/news.html",  # unknown uuid
        f"/artifacts/{artifact_uuid}/other.html",  # wrong file name
        f"/artifacts/{artifact_uuid}/NEWS.html",
        f"/artifacts/{artifact_uuid.upper()}/news.html",  # not the canonical form
        f"/artifacts/{artifact_uuid.replace('-', '')}/news.html",
        f"/artifacts/{planted_uuid}/planted.html",  # a file without a row
        "/artifacts/",  # no listing
        "/artifacts",
        f"/artifacts/{artifact_uuid}",
        f"/artifacts/{artifact_uuid}/",
        f"/artifacts/{artifact_uuid}/news.html/",
        "/artifacts/not-a-uuid/news.html",
        "/artifacts/../bruce.db",
        "/artifacts/../api/sessions",  # the open prefix does not open the API
        f"/artifacts/{artifact_uuid}/../../bruce.db",
        f"/artifacts/{artifact_uuid}/..%2f..%2fbruce.db",
        f"/artifacts/{artifact_uuid}/%2e%2e%2f%2e%2e%2fbruce.db",
        f"/artifacts/{artifact_uuid}/%2e%2e/%2e%2e/bruce.db",
        "/artifacts/%2e%2e/bruce.db",
        "/artifacts/..%2fbruce.db",
        f"/artifacts/{artifact_uuid}/news.html%00.db",
        f"/artifacts/{artifact_uuid}/..%5c..%5cbruce.db",
    ]

    answers = {path: await raw_get(base, path) for path in paths}

    for path, (status, headers, body) in answers.items():
        if path == "/artifacts":  # outside the open /artifacts/ prefix: the login wall
            assert status in (303, 307, 404), (path, status)
            continue
        assert status == 404, (path, status, body[:200])
        assert b"SQLite" not in body and b"not saved by the tool" not in body, path
        assert headers.get("x-content-type-options") == "nosniff", path


async def test_an_artifact_whose_file_is_gone_is_not_found(running: Running) -> None:
    link, artifact_uuid, _ = await running.save_ok(filename="gone.html", title="t", content="x")
    (running.root / artifact_uuid / "gone.html").unlink()

    async with httpx.AsyncClient() as client:
        assert (await client.get(link)).status_code == 404


# ---- the seed's example, end to end ------------------------------------------------------------

REQUEST = (
    "search for recent tech news in Brazil, summarise the top 3 and generate an HTML dashboard "
    "called news.html"
)


def newsroom_model(body: dict[str, Any]) -> AnthropicReply | str:
    """A model that searches, writes a dashboard of the top 3 results, then links to it."""
    last = body["messages"][-1]
    results = [block for block in last["content"] if block.get("type") == "tool_result"]
    if not results:
        return AnthropicReply(
            text="Let me search.",
            tool_calls=[("web_search", {"query": "recent tech news Brazil", "max_results": 3})],
        )
    outcome = block_text(last_tool_results(body)[0])
    if outcome.startswith('<untrusted_content source="web_search">'):
        outcome = untrusted_body(outcome, "web_search")
        titles = re.findall(r"^\d\. (.+)$", outcome, flags=re.M)[:3]
        items = "".join(f"<li>{title}</li>" for title in titles)
        html = (
            f"<!doctype html><html><body><h1>Tech news in Brazil</h1><ol>{items}</ol></body></html>"
        )
        return AnthropicReply(
            text="Writing the dashboard.",
            tool_calls=[
                (
                    "artifact_save",
                    {"filename": "news.html", "title": "Tech news in Brazil", "content": html},
                )
            ],
        )
    link = outcome.removeprefix("Artifact saved at ")
    return (
        "Top 3 tech stories in Brazil: a record quarter for startups, Pix turns five, and a new "
        f"chip plant in Minas Gerais. Your dashboard: {link}"
    )


async def test_search_summarise_and_dashboard_end_to_end(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = newsroom_model
    console = ConsoleChannel()
    async with FakeWebServer() as searxng:
        config = artifact_config(
            tmp_path,
            anthropic_fake.base_url,
            tools={"web_search": {"provider": "searxng", "searxng_url": searxng.url}},
        )
        async with running_bruce(config, channels=[console]):
            assert await console.say(REQUEST)
            answer = await next_reply(console.replies)
            # The page is saved after reading search results: it waits for the user's yes.
            question = await next_reply(console.replies)
            assert question.startswith("⚠️ Please confirm") and "artifact_save" in question
            assert await console.say("yes")
            done = await next_reply(console.replies)
            link = re.search(r"(http://\S+/artifacts/\S+/news\.html)", done)
            assert link, done
            async with httpx.AsyncClient() as client:
                served = await client.get(link.group(1))
        assert [request.path.split("?")[0] for request in searxng.requests] == ["/search"]

    assert answer.startswith("Top 3 tech stories in Brazil")
    assert link.group(1).startswith(f"{config.app.public_url}/artifacts/")
    assert served.status_code == 200
    assert served.headers["content-security-policy"] == ARTIFACT_CSP
    assert "<ol><li>Brazil's tech sector: record quarter</li><li>Pix turns five</li>" in (
        served.text
    )
    assert "<li>Chip plant opens in Minas Gerais</li></ol>" in served.text
    names = [row["tool_name"] for row in db_rows(tmp_path, "SELECT * FROM tool_executions")]
    assert names == ["web_search", "artifact_save", "artifact_save"]  # held, then run
    (artifact,) = db_rows(tmp_path, "SELECT * FROM artifacts")
    (session,) = db_rows(tmp_path, "SELECT id FROM sessions WHERE channel = 'console'")
    assert artifact["session_id"] == session["id"]
    assert artifact["filename"] == "news.html"
    # The user got the link the tool returned, exactly.
    assert f"Artifact saved at {link.group(1)}" in done
    offered = [tool["name"] for tool in anthropic_fake.requests[0]["tools"]]
    assert {"web_search", "web_fetch", "artifact_save"} <= set(offered)
