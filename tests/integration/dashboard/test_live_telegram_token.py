"""A Telegram token changed through the dashboard's API (`/api/channels/telegram/token`): tried
with getMe against the fake Telegram server, stored, and the channel reconnected with it — the
next message is fetched and answered with the new token, no restart. A token Telegram refuses is
not stored and the running channel keeps its own."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegramServer

TOKEN = "Hk2mV8qR4tY7uI1oP3aS6dF9gJ0lZ5xC2vB8nM4qW7e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
OLD, NEW = "111:OLD-token-aaaa", "222:NEW-token-bbbb"


async def test_a_new_token_reconnects_the_channel_and_a_refused_one_changes_nothing(
    tmp_path: Path,
) -> None:
    async with (
        FakeAnthropicServer(responder=lambda body: f"You said: {last_user_text(body)}") as llm,
        FakeTelegramServer(token=OLD) as telegram,
    ):
        config = make_config(
            tmp_path,
            llm.base_url,
            web={"auth_token": TOKEN},
            channels={
                "telegram": {
                    "enabled": True,
                    "token": OLD,
                    "base_url": telegram.base_url,
                    "allowed_user_ids": [ALICE.id],
                    "streaming": False,
                }
            },
        )
        async with (
            running_bruce(config) as bruce,
            httpx.AsyncClient(base_url=str(bruce.web_url), headers=AUTH, timeout=30) as http,
        ):
            telegram.private_text(ALICE, "first")
            [first] = await telegram.wait_for_messages(ALICE.id, 1)
            assert first.text.startswith("You said: first")

            refused = await http.put("/api/channels/telegram/token", json={"token": "333:WRONG"})
            assert refused.status_code == 400
            assert "not saved, the old token stays" in refused.json()["error"]
            assert "Telegram refused the token" in refused.json()["error"]
            shown = (await http.get("/api/channels/telegram/token")).json()
            assert shown == {
                "enabled": True,
                "token": "111…aaaa",
                "source": "config",
                "bot": None,
                "link": None,
            }

            # The bot's token is revoked at @BotFather and a new one issued.
            telegram.token = NEW
            changed = await http.put("/api/channels/telegram/token", json={"token": NEW})
            assert changed.status_code == 200, changed.text
            assert changed.json() == {
                "enabled": True,
                "token": "222…bbbb",
                "source": "dashboard",
                "bot": f"@{BOT_USERNAME}",
                "link": f"https://t.me/{BOT_USERNAME}",
            }
            assert NEW not in changed.text

            telegram.private_text(ALICE, "second")
            sent = await telegram.wait_for_messages(ALICE.id, 2)
            assert sent[1].text.startswith("You said: second")
