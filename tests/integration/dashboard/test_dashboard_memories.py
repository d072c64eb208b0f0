"""The Memory page's API against a running Bruce: memories made the way people make them (the
model calls memory_save in a chat turn), then listed per person, edited, deleted and linked
across owners through `/api/memories`, with what the next chat turn shows the model checked.
Bad input is a 400 that says what to fix; an unknown memory a 404; nothing changes on either."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.integration.dashboard.test_dashboard_api import AUTH, JSON, TOKEN, client_error, get_json
from tests.integration.dashboard_support import Dashboard, running_dashboard
from tests.integration.support import db_rows, system_text


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN) as running:
        yield running


@pytest.fixture
async def client(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as http:
        yield http


async def remember(dashboard: Dashboard, chat_id: str, text: str, *tags: str) -> None:
    await dashboard.use_tool(chat_id, "memory_save", {"text": text, "tags": list(tags)})


async def test_memories_are_listed_per_person_edited_and_deleted(
    dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    await remember(dashboard, "alice", "Is vegetarian", "diet")
    await remember(dashboard, "alice", "Lives in Lisbon")
    await remember(dashboard, "bob", "Plays the cello")

    people = (await get_json(client, "/api/memories/people"))["people"]
    assert [(p["person"], p["memories"]) for p in people] == [("chat:bob", 1), ("chat:alice", 2)]
    assert people[1]["owners"][0]["name"] == "alice"
    listing = await get_json(client, "/api/memories", owner="chat:alice")
    assert [m["content"] for m in listing["memories"]] == ["Lives in Lisbon", "Is vegetarian"]
    assert listing["total"] == 2 and listing["person"] == ["chat:alice"]
    lisbon, vegetarian = listing["memories"]
    assert vegetarian["tags"] == ["diet"] and vegetarian["source_session_id"] is not None
    found = await get_json(client, "/api/memories", owner="chat:alice", query="diet")
    assert [m["id"] for m in found["memories"]] == [vegetarian["id"]]

    response = await client.put(
        f"/api/memories/{lisbon['id']}",
        json={"content": "Lives in Porto since May", "tags": ["Home"]},
        headers=JSON,
    )
    assert response.status_code == 200, response.text
    edited = response.json()["memory"]
    assert (edited["content"], edited["tags"]) == ("Lives in Porto since May", ["home"])
    assert edited["updated_at"] > lisbon["updated_at"]
    await dashboard.chat("alice", "where do I live?")
    assert "Lives in Porto since May" in system_text(dashboard.fake.requests[-1])

    response = await client.delete(f"/api/memories/{vegetarian['id']}", headers=JSON)
    assert response.json()["memory"]["content"] == "Is vegetarian"
    again = await client.delete(f"/api/memories/{vegetarian['id']}", headers=JSON)
    assert f"there is no memory {vegetarian['id']}" in client_error(again, 404)
    await dashboard.chat("alice", "what should I cook?")
    assert "Is vegetarian" not in system_text(dashboard.fake.requests[-1])
    rows = db_rows(dashboard.bruce.config.app.data_dir, "SELECT owner, content FROM memories")
    assert sorted(tuple(row) for row in rows) == [
        ("chat:alice", "Lives in Porto since May"),
        ("chat:bob", "Plays the cello"),
    ]


async def test_linked_owners_share_their_memories_until_unlinked(
    dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    await remember(dashboard, "alice", "Is vegetarian")
    await remember(dashboard, "bob", "Plays the cello")
    link = await client.post(
        "/api/memories/links", json={"owner": "chat:alice", "other": "chat:bob"}, headers=JSON
    )
    assert link.json() == {"person": "chat:alice", "owners": ["chat:alice", "chat:bob"]}
    [person] = (await get_json(client, "/api/memories/people"))["people"]
    assert [o["owner"] for o in person["owners"]] == ["chat:alice", "chat:bob"]
    assert person["memories"] == 2
    await dashboard.chat("bob", "hello")
    assert "Is vegetarian" in system_text(dashboard.fake.requests[-1])

    unlinked = await client.delete("/api/memories/links/chat:bob", headers=JSON)
    assert unlinked.json() == {"person": "chat:bob", "owners": ["chat:bob"]}
    await dashboard.chat("bob", "hello again")
    assert "Is vegetarian" not in system_text(dashboard.fake.requests[-1])
    not_linked = await client.delete("/api/memories/links/chat:bob", headers=JSON)
    assert "chat:bob is not linked to anyone" in client_error(not_linked, 404)
    same = await client.post(
        "/api/memories/links", json={"owner": "chat:bob", "other": "chat:bob"}, headers=JSON
    )
    assert "the same" in client_error(same, 400)


async def test_bad_edits_are_400_saying_what_to_fix_and_change_nothing(
    dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    await remember(dashboard, "alice", "Is vegetarian")
    [memory] = (await get_json(client, "/api/memories", owner="chat:alice"))["memories"]
    path = f"/api/memories/{memory['id']}"
    for body, named in (
        ({}, "nothing to change"),
        ({"content": ""}, "'content'"),
        ({"content": "   "}, "'content'"),
        ({"content": "x" * 501}, "'content'"),
        ({"content": 42}, "'content'"),
        ({"tags": ["a"] * 9}, "'tags'"),
        ({"content": "Bank PIN: 4471"}, "looks like a password or PIN"),
        ({"content": "card 4111 1111 1111 1111"}, "looks like a card number"),
    ):
        response = await client.put(path, json=body, headers=JSON)
        assert named in client_error(response, 400), body
    assert "there is no memory 999" in client_error(
        await client.put("/api/memories/999", json={"content": "x"}, headers=JSON), 404
    )
    everyone = await get_json(client, "/api/memories")
    assert (everyone["owner"], everyone["total"]) == (None, 1)
    needs_owner = await client.get("/api/memories", params={"query": "tea"})
    assert "give 'owner' too" in client_error(needs_owner, 400)
    for owner in ("alice", "chat:", ":alice", "Chat:alice", "chat:a b"):
        response = await client.get("/api/memories", params={"owner": owner})
        assert "'owner'" in client_error(response, 400), owner
    assert "'memory_id'" in client_error(
        await client.delete("/api/memories/abc", headers=JSON), 400
    )
    [unchanged] = (await get_json(client, "/api/memories", owner="chat:alice"))["memories"]
    assert unchanged == memory
