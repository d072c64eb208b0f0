"""A Matrix login of several fields given through the dashboard's API, against a real Synapse
(tests/integration/channels/synapse.py): `/api/platforms` lists Matrix's login fields; Matrix
enabled in config.yml with no login waits; `PUT /api/channels/matrix/login` with homeserver,
user id and a wrong password is refused with the homeserver's words and nothing is stored; with
the right one it is stored, the secret never answered back, and the channel connects and answers
a direct message, without a restart."""

from __future__ import annotations

from pathlib import Path

from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import make_config, running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.channels.synapse import Synapse
from tests.integration.channels.test_matrix import (
    create_room,
    echo,
    fresh,
    person,
    say,
    synapse,  # noqa: F401 (the fixture)
    wait_for_join,
    wait_for_replies,
)


async def test_platforms_list_the_login_fields_of_each_platform(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = make_config(tmp_path, anthropic_fake.base_url)
    async with running_bruce(config, tools=ToolRegistry()) as bruce, web_client(bruce) as http:
        answer = (await http.get("/api/platforms")).json()
    found = {p["name"]: p for p in answer["platforms"]}
    assert {"telegram", "discord", "matrix"} <= set(found)
    assert found["telegram"]["single_token"] is True
    assert [(f["key"], f["secret"]) for f in found["telegram"]["fields"]] == [("token", True)]
    matrix = found["matrix"]
    assert matrix["single_token"] is False
    assert [(f["key"], f["secret"], f["optional"]) for f in matrix["fields"]] == [
        ("homeserver", False, False),
        ("user_id", False, False),
        ("password", True, True),
        ("access_token", True, True),
    ]
    assert matrix["fields"][1]["placeholder"] == "@bruce:example.org"


async def test_a_matrix_login_saved_in_the_dashboard_connects_the_waiting_channel(
    tmp_path: Path,
    anthropic_fake: FakeAnthropicServer,
    synapse: Synapse,  # noqa: F811 (the fixture)
) -> None:
    anthropic_fake.responder = echo
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    section = {"enabled": True, "allowed_user_ids": [alice.user_id]}
    config = make_config(tmp_path, anthropic_fake.base_url, channels={"matrix": section})
    async with (
        running_bruce(config, tools=ToolRegistry()) as bruce,
        web_client(bruce, timeout=30) as http,
    ):
        path = "/api/channels/matrix/login"
        waiting = (await http.get(path)).json()
        assert waiting["enabled"] is True and waiting["source"] == "config"
        assert all(not f["set"] for f in waiting["fields"])

        login = {"homeserver": synapse.url, "user_id": bot.user_id}
        refused = await http.put(path, json={"fields": {**login, "password": "not-it"}})
        assert refused.status_code == 400, refused.text
        assert "not saved, the old login stays" in refused.json()["error"]
        assert "refused the login" in refused.json()["error"]
        assert (await http.get(path)).json()["source"] == "config"

        bad_id = await http.put(path, json={"fields": {**login, "user_id": "bruce"}})
        assert bad_id.status_code == 400
        assert "channels.matrix: user_id: 'bruce' is not a Matrix user id" in bad_id.json()["error"]

        saved = await http.put(path, json={"fields": {**login, "password": bot.password}})
        assert saved.status_code == 200, saved.text
        answer = saved.json()
        assert answer["source"] == "dashboard" and answer["bot"] == bot.user_id
        assert bot.password not in saved.text
        fields = {f["key"]: f for f in answer["fields"]}
        assert fields["homeserver"]["value"] == synapse.url
        assert fields["user_id"]["value"] == bot.user_id
        assert fields["password"]["set"] and fields["password"]["value"] == "sec…word"
        assert not fields["access_token"]["set"]
        await wait_until(lambda: bruce.channels["matrix"].connected, timeout=20)  # type: ignore[attr-defined]

        # A secret sent empty keeps the saved one: "Test connection" of the form as it is.
        tried = await http.post("/api/channels/matrix/test", json={"fields": {"password": ""}})
        assert tried.json()["ok"] is True, tried.text
        # A login of several fields is not a token: the /token route says where to go.
        token = await http.put("/api/channels/matrix/token", json={"token": "x"})
        assert token.status_code == 409 and "/login" in token.json()["error"]

        async with person(synapse, alice) as client:
            room = await create_room(client, [bot.user_id], direct=True)
            await wait_for_join(client, room, bot)
            await say(client, room, "hello")
            [reply] = await wait_for_replies(client, room, bot, 1)
            assert reply["body"] == "You said: hello"
