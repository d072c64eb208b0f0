"""A Slack login (bot token and app-level token) given through the dashboard's API, against the
fake Slack (tests/fakes/slack_server.py): Slack enabled in config.yml without tokens waits;
`PUT /api/channels/slack/login` with a wrong bot token is refused in Slack's words and nothing is
stored; with the right tokens they are stored, never answered back, and the channel connects
over Socket Mode and answers a direct message, without a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import make_config, running_bruce, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.slack_server import FakeSlackServer

WITHIN = 15.0


@pytest.fixture
async def slack_fake() -> AsyncIterator[FakeSlackServer]:
    async with FakeSlackServer() as server:
        yield server


async def test_a_slack_login_saved_in_the_dashboard_connects_the_waiting_channel(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, slack_fake: FakeSlackServer
) -> None:
    anthropic_fake.script("Hello from Slack.")
    section = {
        "enabled": True,
        "api_base_url": slack_fake.api_base_url,
        "allowed_user_ids": [FakeSlackServer.USER_ID],
        "streaming": False,
    }
    config = make_config(tmp_path, anthropic_fake.base_url, channels={"slack": section})
    async with (
        running_bruce(config, tools=ToolRegistry()) as bruce,
        web_client(bruce, timeout=30) as http,
    ):
        path = "/api/channels/slack/login"
        waiting = (await http.get(path)).json()
        assert waiting["enabled"] is True and waiting["source"] == "config"
        assert all(not f["set"] for f in waiting["fields"])
        assert slack_fake.hellos == 0  # nobody connected: the channel waits

        wrong = {"bot_token": "xoxb-0000000000-wrongwrongwrong", "app_token": slack_fake.APP_TOKEN}
        refused = await http.put(path, json={"fields": wrong})
        assert refused.status_code == 400, refused.text
        assert "not saved, the old login stays" in refused.json()["error"]
        assert "channels.slack.bot_token" in refused.json()["error"], refused.text
        assert (await http.get(path)).json()["source"] == "config"

        login = {"bot_token": slack_fake.BOT_TOKEN, "app_token": slack_fake.APP_TOKEN}
        saved = await http.put(path, json={"fields": login})
        assert saved.status_code == 200, saved.text
        assert saved.json()["source"] == "dashboard"
        assert slack_fake.BOT_TOKEN not in saved.text and slack_fake.APP_TOKEN not in saved.text
        await slack_fake.wait_for_connection(within=WITHIN)
        assert bruce.channels["slack"].connected  # type: ignore[attr-defined]

        await slack_fake.inject_message(FakeSlackServer.USER_ID, FakeSlackServer.DM_CHANNEL, "hi")
        await slack_fake.wait_for_messages(FakeSlackServer.DM_CHANNEL, 1, WITHIN)
    assert slack_fake.texts(FakeSlackServer.DM_CHANNEL) == ["Hello from Slack."]
