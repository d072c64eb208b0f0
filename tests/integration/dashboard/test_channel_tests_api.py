"""`POST /api/channels/{channel}/test` against the fake Telegram and Discord servers, through the
real python-telegram-bot and discord.py: a good token answers with the bot's name and link
(t.me/<username>, the Discord invite URL with the application id), a wrong one with what the
platform said, and nothing is stored either way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegramServer
from tests.integration.dashboard_support import running_dashboard

TOKEN = "Zr1m7Q0cVv3eX8sJ4kT2bN6pL9aW5yD1fG3hK7uC0oE"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, FakeDiscordServer]]:
    async with FakeTelegramServer() as telegram, FakeDiscordServer() as discord:
        channels: dict[str, Any] = {
            # Not connected (enabled: false): only the tests reach the platforms.
            "telegram": {"token": telegram.token, "base_url": telegram.base_url},
            "discord": {**discord.discord_config(allowed_user_ids=[]), "enabled": False},
        }
        async with (
            running_dashboard(tmp_path, TOKEN, channels=channels) as dashboard,
            httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=30) as http,
        ):
            yield http, discord


async def test_a_telegram_token_is_tried_with_getme(
    client: tuple[httpx.AsyncClient, FakeDiscordServer],
) -> None:
    http, _ = client
    answer = (await http.post("/api/channels/telegram/test", json={})).json()
    assert answer == {
        "ok": True,
        "detail": f"logged in as @{BOT_USERNAME}",
        "fix": "",
        "link": f"https://t.me/{BOT_USERNAME}",
    }
    wrong = (await http.post("/api/channels/telegram/test", json={"token": "1:WRONG"})).json()
    assert wrong["ok"] is False and wrong["link"] is None
    assert "Telegram refused the token (401 Unauthorized)" in wrong["detail"]
    assert "@BotFather" in wrong["fix"]


async def test_a_discord_token_is_tried_with_its_login_and_gives_the_invite(
    client: tuple[httpx.AsyncClient, FakeDiscordServer],
) -> None:
    http, discord = client
    answer = (await http.post("/api/channels/discord/test", json={})).json()
    assert answer["ok"] is True and answer["detail"] == "logged in as Bruce"
    assert ("GET", "/users/@me") in discord.rest_requests  # the login, no gateway
    assert answer["link"] == (
        f"https://discord.com/oauth2/authorize?client_id={FakeDiscordServer.APP_ID}"
        "&scope=bot&permissions=101376"
    )
    wrong = (await http.post("/api/channels/discord/test", json={"token": "nope"})).json()
    assert wrong["ok"] is False
    assert "Discord refused the token" in wrong["detail"]


async def test_only_a_registered_platform_can_be_tried(
    client: tuple[httpx.AsyncClient, FakeDiscordServer],
) -> None:
    http, _ = client
    response = await http.post("/api/channels/irc/test", json={})
    assert response.status_code == 400
    assert "'channel'" in response.json()["error"]
