"""The chat page's event stream (`/chat/stream`) over real HTTP: behind the login like the page,
`live` events with the answer so far while the fake model streams it, then `done`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer

TOKEN = "web-live-token-0f3a"
ANSWER = "Rain on Monday, sun from Wednesday, and a warm weekend in Lisbon."


async def read_events(response: httpx.Response, until: str) -> list[tuple[str, dict[str, str]]]:
    events: list[tuple[str, dict[str, str]]] = []
    name = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            events.append((name, json.loads(line.removeprefix("data: "))))
            if name == until:
                return events
    return events


async def test_the_stream_needs_the_login(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = make_config(tmp_path, anthropic_fake.base_url, web={"auth_token": TOKEN})
    async with running_bruce(config) as bruce, httpx.AsyncClient(base_url=bruce.web_url) as http:
        refused = await http.get("/chat/stream", follow_redirects=False)
    assert refused.status_code in (303, 401)
    assert "text/event-stream" not in refused.headers.get("content-type", "")


async def test_live_events_carry_the_answer_as_it_is_written_then_done(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(ANSWER)
    anthropic_fake.stream_pause_seconds = 0.03
    config = make_config(tmp_path, anthropic_fake.base_url, web={"auth_token": TOKEN})
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        running_bruce(config) as bruce,
        httpx.AsyncClient(base_url=bruce.web_url, headers=headers, timeout=10) as http,
        http.stream("GET", "/chat/stream") as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        reading = asyncio.ensure_future(read_events(stream, until="done"))
        posted = await http.post("/api/chat/messages", json={"text": "weather in Lisbon?"})
        assert posted.status_code == 202
        events = await asyncio.wait_for(reading, 10)
        messages = (await http.get("/api/chat/messages")).json()["messages"]

    texts = [event["text"] for name, event in events if name == "live"]
    assert len(texts) > 1 and len(set(texts)) == len(texts)  # it grew, piece by piece
    assert all(ANSWER.startswith(text) for text in texts)  # the answer so far, each time
    assert events[-1] == ("done", {"type": "done"})
    assert messages[-1]["content"] == ANSWER  # the stored reply, as the page then reads it
