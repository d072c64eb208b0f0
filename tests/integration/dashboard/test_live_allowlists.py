"""The allowlists the Settings page edits (`/api/channels/{channel}/allowlist`), with the real
python-telegram-bot against the fake Telegram server: a stranger is refused (given a pairing
code), the owner adds their id through the dashboard's API, and the stranger's next message is
answered, without a restart; an id removed is refused from its next message; a reset goes back
to config.yml's list; a wrong id is a 400 naming the entry, and nothing changes. Discord's ids
(larger than a browser's exact numbers) travel as text."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_config, running_bruce, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.fakes.telegram_server import FakeTelegramServer

JSON = {"Content-Type": "application/json"}  # API writes must say so
ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
BOB = FakeTelegramServer.user(2002, "Bob", "bob")
DISCORD_ID = "700000000000000123"  # beyond 2**53: kept exactly as text


async def test_an_id_added_in_the_dashboard_is_answered_from_its_next_message(
    tmp_path: Path,
) -> None:
    async with (
        FakeAnthropicServer(responder=lambda body: f"You said: {last_user_text(body)}") as llm,
        FakeTelegramServer() as telegram,
    ):
        config = make_config(
            tmp_path,
            llm.base_url,
            channels={
                "telegram": {
                    "enabled": True,
                    "token": telegram.token,
                    "base_url": telegram.base_url,
                    "allowed_user_ids": [ALICE.id],
                    "streaming": False,
                }
            },
        )
        async with (
            running_bruce(config) as bruce,
            web_client(bruce, timeout=30) as http,
        ):
            path = "/api/channels/telegram/allowlist"
            assert (await http.get(path)).json() == {
                "channel": "telegram",
                "allowed_user_ids": ["1001"],
                "source": "config",
                "config_user_ids": ["1001"],
            }
            telegram.private_text(BOB, "hello?")
            [refused] = await telegram.wait_for_messages(BOB.id, 1)
            assert "pairing code" in refused.text

            wrong = await http.put(path, json={"allowed_user_ids": ["1001", "bob"]})
            assert wrong.status_code == 400
            assert "allowed_user_ids[1]: 'bob' is not a user id" in wrong.json()["error"]
            assert (await http.get(path)).json()["source"] == "config"

            added = await http.put(path, json={"allowed_user_ids": ["1001", BOB.id]})
            assert added.status_code == 200, added.text
            assert added.json()["allowed_user_ids"] == ["1001", "2002"]
            assert added.json()["source"] == "dashboard"
            telegram.private_text(BOB, "now?")
            answered = await telegram.wait_for_messages(BOB.id, 2)
            assert answered[1].text == "You said: now?"

            # Alice removed: refused from her next message; the reset lets her in again.
            await http.put(path, json={"allowed_user_ids": [str(BOB.id)]})
            telegram.private_text(ALICE, "me too")
            [told] = await telegram.wait_for_messages(ALICE.id, 1)
            assert "pairing code" in told.text
            reset = (await http.delete(path, headers=JSON)).json()
            assert reset["source"] == "config" and reset["allowed_user_ids"] == ["1001"]
            telegram.private_text(ALICE, "again")
            assert (await telegram.wait_for_messages(ALICE.id, 2))[1].text == "You said: again"

            discord = await http.put(
                "/api/channels/discord/allowlist", json={"allowed_user_ids": [DISCORD_ID]}
            )
            assert discord.json()["allowed_user_ids"] == [DISCORD_ID]
            people = (await http.get("/api/people")).json()
            assert DISCORD_ID in str(people)
