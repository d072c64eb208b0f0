"""A Discord token changed through the dashboard's API (`/api/channels/discord/token`), with the
real discord.py against the fake Discord (REST login and gateway): tried with the login first, a
refused one changes nothing; a good one is stored and the channel reconnects with it, and the
next direct message is answered, without a restart. A Discord enabled in config.yml without a
token waits for one: it is not started at boot, and starts once a token is saved."""

from __future__ import annotations

from pathlib import Path

from bruce_bot.channels.discord.channel import DiscordChannel
from tests.conftest import web_client
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.discord_server import FakeDiscordServer
from tests.integration.channels.test_discord import OWNER, OWNER_ID, bruce_on_discord

JSON = {"Content-Type": "application/json"}  # API writes must say so
OLD, NEW = "old-discord-token-aaaa", "new-discord-token-bbbb"
INVITE = (
    f"https://discord.com/oauth2/authorize?client_id={FakeDiscordServer.APP_ID}"
    "&scope=bot&permissions=101376"
)


async def test_a_new_token_reconnects_discord_and_a_refused_one_changes_nothing(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with (
        FakeDiscordServer(token=OLD) as discord,
        bruce_on_discord(tmp_path, anthropic_fake, discord, web=True) as (bruce, first),
        web_client(bruce, timeout=30) as http,
    ):
        dm = discord.dm_channel_id(OWNER_ID)
        await discord.send_dm(OWNER, "first")
        assert await discord.wait_for_sent(dm) == ["You said: first"]

        refused = await http.put("/api/channels/discord/token", json={"token": "wrong"})
        assert refused.status_code == 400
        assert "not saved, the old token stays" in refused.json()["error"]
        assert "Discord refused the token" in refused.json()["error"]
        shown = (await http.get("/api/channels/discord/token")).json()
        assert shown == {
            "enabled": True,
            "token": "old…aaaa",
            "source": "config",
            "bot": None,
            "link": None,
        }
        assert bruce.channels["discord"] is first and discord.identifies == 1

        # The token is reset in the Developer Portal: the old one stops working.
        discord.token = NEW
        changed = await http.put("/api/channels/discord/token", json={"token": NEW})
        assert changed.status_code == 200, changed.text
        assert changed.json() == {
            "enabled": True,
            "token": "new…bbbb",
            "source": "dashboard",
            "bot": "Bruce",
            "link": INVITE,
        }
        assert NEW not in changed.text
        # "Test connection" with an empty field tries the token in use: the saved one.
        tried = (await http.post("/api/channels/discord/test", json={})).json()
        assert tried["ok"] is True, tried
        assert bruce.channels["discord"] is not first
        await discord.wait_for_session()
        assert discord.identifies == 2

        await discord.send_dm(OWNER, "second")
        assert await discord.wait_for_sent(dm, 2) == ["You said: first", "You said: second"]


async def test_discord_enabled_without_a_token_waits_and_starts_once_one_is_saved(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with (
        FakeDiscordServer(token=NEW) as discord,
        bruce_on_discord(tmp_path, anthropic_fake, discord, web=True, token="") as (bruce, _),
        web_client(bruce, timeout=30) as http,
    ):
        assert discord.identifies == 0  # not started: no token anywhere
        shown = (await http.get("/api/channels/discord/token")).json()
        assert shown["enabled"] is True and shown["token"] == "" and shown["source"] == "config"

        changed = await http.put("/api/channels/discord/token", json={"token": NEW})
        assert changed.status_code == 200, changed.text
        await discord.wait_for_session()
        dm = discord.dm_channel_id(OWNER_ID)
        await discord.send_dm(OWNER, "hello")
        assert await discord.wait_for_sent(dm) == ["You said: hello"]

        # Back to config.yml's (no token): the channel stops.
        reset = (await http.delete("/api/channels/discord/token", headers=JSON)).json()
        assert reset["source"] == "config" and reset["token"] == ""
        adapter = bruce.channels["discord"]
        assert isinstance(adapter, DiscordChannel) and not adapter.connected
