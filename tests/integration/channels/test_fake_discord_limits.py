"""The fake Discord pushes back as Discord does: per-route rate limits with Discord's headers and
429 bodies, and Discord's size limits with its 400 body. discord.py's own HTTP client runs
against it, so its handling of the headers (waiting for a bucket to reset) and of a 429
(sleeping `retry_after`, then retrying) is what is exercised; the wire shapes are checked with
plain aiohttp."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import discord
import pytest
from discord.http import HTTPClient, Route, handle_message_parameters

from tests.fakes.discord_server import FakeDiscordServer, RouteLimits

CHANNEL = FakeDiscordServer.TEXT_CHANNEL_ID


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer(limits=RouteLimits(per_route=2, window=0.5)) as fake:
        yield fake


@pytest.fixture
def routed_to(discord_fake: FakeDiscordServer) -> Iterator[None]:
    base = Route.BASE
    Route.BASE = discord_fake.api_base_url
    yield
    Route.BASE = base


async def post(session: aiohttp.ClientSession, fake: FakeDiscordServer, content: str) -> Any:
    url = f"{fake.api_base_url}/channels/{CHANNEL}/messages"
    headers = {"Authorization": f"Bot {fake.token}"}
    async with session.post(url, json={"content": content}, headers=headers) as response:
        return response.status, dict(response.headers), await response.json()


async def test_a_bucket_answers_with_discords_headers_then_429(
    discord_fake: FakeDiscordServer,
) -> None:
    async with aiohttp.ClientSession() as session:
        first = await post(session, discord_fake, "one")
        second = await post(session, discord_fake, "two")
        third = await post(session, discord_fake, "three")
    for status, headers, _ in (first, second):
        assert status == 200
        assert headers["X-RateLimit-Limit"] == "2"
        assert 0 < float(headers["X-RateLimit-Reset-After"]) <= 0.5
        assert float(headers["X-RateLimit-Reset"]) > 1_600_000_000  # epoch seconds
        assert headers["X-RateLimit-Bucket"] == first[1]["X-RateLimit-Bucket"]
    assert [first[1]["X-RateLimit-Remaining"], second[1]["X-RateLimit-Remaining"]] == ["1", "0"]
    status, headers, body = third
    assert status == 429
    assert body.keys() == {"message", "retry_after", "global"}
    assert body["message"] == "You are being rate limited." and body["global"] is False
    assert 0 < body["retry_after"] <= 0.5
    assert headers["X-RateLimit-Scope"] == "user" and headers["Retry-After"] == "1"
    assert discord_fake.texts(CHANNEL) == ["one", "two"]


async def test_discord_py_waits_for_the_bucket_and_retries_a_429(
    discord_fake: FakeDiscordServer, routed_to: None
) -> None:
    # Two processes of one bot (a cluster) post into one channel, three posts each at once, in a
    # bucket of two per half second: each one's discord.py holds its posts back by the headers,
    # and retries after `retry_after` the ones the other's posts made meet a 429. All six
    # arrive, once each.
    loop = asyncio.get_running_loop()
    clients = [HTTPClient(loop), HTTPClient(loop)]
    for http in clients:
        await http.static_login(discord_fake.token)
    try:

        async def send(http: HTTPClient, n: int) -> None:
            with handle_message_parameters(content=f"m{n}") as params:
                await http.send_message(CHANNEL, params=params)

        await asyncio.gather(*(send(clients[n % 2], n) for n in range(6)))
    finally:
        for http in clients:
            await http.close()
    assert sorted(discord_fake.texts(CHANNEL)) == [f"m{n}" for n in range(6)]
    assert discord_fake.exhausted >= 2
    assert discord_fake.rate_limited  # met, waited out and retried by discord.py


async def test_the_global_limit_is_a_global_429() -> None:
    limits = RouteLimits(per_route=100, global_per_second=3)
    async with FakeDiscordServer(limits=limits) as fake, aiohttp.ClientSession() as session:
        answers = [await post(session, fake, f"g{n}") for n in range(4)]
    _, headers, body = answers[-1]
    assert [answer[0] for answer in answers] == [200, 200, 200, 429]
    assert body["global"] is True and headers["X-RateLimit-Global"] == "true"


async def test_content_over_2000_characters_is_refused_with_discords_body(
    discord_fake: FakeDiscordServer,
) -> None:
    async with aiohttp.ClientSession() as session:
        status, _, body = await post(session, discord_fake, "x" * 2001)
    assert status == 400
    assert body == {
        "message": "Invalid Form Body",
        "code": 50035,
        "errors": {
            "content": {
                "_errors": [
                    {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
                ]
            }
        },
    }


async def test_discord_py_raises_the_refusal_as_an_http_exception(
    discord_fake: FakeDiscordServer, routed_to: None
) -> None:
    http = HTTPClient(asyncio.get_running_loop())
    await http.static_login(discord_fake.token)
    try:
        with (
            pytest.raises(discord.HTTPException) as refused,
            handle_message_parameters(content="y" * 2001) as params,
        ):
            await http.send_message(CHANNEL, params=params)
    finally:
        await http.close()
    assert refused.value.status == 400 and refused.value.code == 50035
    assert "Must be 2000 or fewer in length." in refused.value.text
