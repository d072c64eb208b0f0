"""Pairing end to end: a stranger on Telegram (the real python-telegram-bot against the fake Bot
API) is given a code, the owner approves it with `bruce pairing` run as a real subprocess beside
the running daemon or through the dashboard's API, and the stranger's next message is answered;
codes expire (on an injected clock), work once, read in any case, and at most ten wait; the
owner sees the user id and @username before the name a stranger chose; a revocation shuts the
person out again. The model is the fake Anthropic server, the database a
SQLite file. Nothing sleeps for a fixed time."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bruce_bot.app import Bruce
from bruce_bot.channels.policy import PAIRING_FULL
from bruce_bot.channels.telegram.channel import TelegramChannel
from bruce_bot.domain import utcnow
from bruce_bot.pairing import CODE_VALID_FOR, MAX_PENDING, WELCOME
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.integration.cli.test_cli import bruce as run_cli
from tests.integration.support import db_rows, messages_of

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
MALLORY = FakeTelegramServer.user(6666, "Mallory", "mallory")
TRUDY = FakeTelegramServer.user(7777, "Trudy")
STRANGERS = [FakeTelegramServer.user(8000 + n, f"Stranger{n}") for n in range(MAX_PENDING + 1)]
VALID_MINUTES = int(CODE_VALID_FOR.total_seconds() // 60)
MALLORY_SHOWN = "6666 @mallory — name they chose: “Mallory”"
TOKEN = "pairing-test-token-Zk4Lw9qXb2Rt7Nc5Vm8Hs3Jd"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}  # what API writes must declare
WITHIN = 15.0
CODE = re.compile(r"pairing code is ([A-Z0-9]{4}-[A-Z0-9]{4}) \(valid for (\d+) minutes\)")


class Clocks:
    """Bruce's clock (code expiry) and the Telegram adapter's (its reply throttle), both moved
    by hand on top of the real ones."""

    def __init__(self) -> None:
        self.ahead = timedelta()
        self.monotonic = 1000.0

    def now(self) -> datetime:
        return utcnow() + self.ahead

    def adapter(self) -> float:
        return self.monotonic

    def advance(self, minutes: float) -> None:
        self.ahead += timedelta(minutes=minutes)
        self.monotonic += minutes * 60


@dataclass
class Running:
    bruce: Bruce
    telegram: FakeTelegramServer
    config_path: Path
    clocks: Clocks
    url: str

    async def cli(self, *args: str) -> Any:
        return await run_cli(
            "pairing", *args, "--config", str(self.config_path), cwd=self.config_path.parent
        )

    async def code_for(self, user: Any, count: int = 1) -> tuple[str, int]:
        """The pairing code in the `count`th message the stranger got, and its minutes."""
        sent = await self.telegram.wait_for_messages(user.id, count, WITHIN)
        match = CODE.search(sent[count - 1].plain)
        assert match, sent[count - 1].plain
        return match[1], int(match[2])


def echo(body: dict[str, Any]) -> str:
    return f"You said: {last_user_text(body)}"


@contextlib.asynccontextmanager
async def running(tmp_path: Path, anthropic_fake: FakeAnthropicServer) -> AsyncIterator[Running]:
    anthropic_fake.responder = echo
    clocks = Clocks()
    async with FakeTelegramServer() as telegram:
        raw: dict[str, Any] = {
            "app": {"data_dir": str(tmp_path)},
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}"},
            "llm": {"provider": "anthropic", "api_key": "test-key", "max_retries": 0},
            "channels": {
                "telegram": {
                    "enabled": True,
                    "token": telegram.token,
                    "base_url": telegram.base_url,
                    "allowed_user_ids": [ALICE.id],
                    "streaming": False,
                }
            },
        }
        config_path = tmp_path / "config.yml"
        config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        config = make_config(
            tmp_path,
            anthropic_fake.base_url,
            channels=raw["channels"],
            web={"enabled": True, "auth_token": TOKEN},
        )
        channel = TelegramChannel(config.channels.telegram, clock=clocks.adapter)
        async with running_bruce(
            config, tools=ToolRegistry(), channels=[channel], clock=clocks.now
        ) as bruce:
            assert bruce.web_url is not None
            yield Running(bruce, telegram, config_path, clocks, bruce.web_url)


@pytest.fixture
async def bruce(tmp_path: Path, anthropic_fake: FakeAnthropicServer) -> AsyncIterator[Running]:
    async with running(tmp_path, anthropic_fake) as it:
        yield it


async def handled_after(bruce: Running, marker: str) -> None:
    """Alice writes after the others: once she is answered, what came before was handled."""
    before = len(bruce.telegram.sent_to(ALICE.id))
    bruce.telegram.private_text(ALICE, marker)
    await bruce.telegram.wait_for_messages(ALICE.id, before + 1, WITHIN)


def plain(messages: list[SentMessage]) -> list[str]:
    return [message.plain for message in messages]


# ---- the CLI beside the running daemon -------------------------------------------------------


async def test_a_code_approved_with_the_cli_lets_the_stranger_in_at_once_until_revoked(
    bruce: Running, tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    telegram = bruce.telegram
    telegram.private_text(MALLORY, "hi, my card is 4111 1111")
    code, minutes = await bruce.code_for(MALLORY)
    assert minutes == VALID_MINUTES == 30
    assert f"bruce pairing approve {code}" in telegram.sent_to(MALLORY.id)[0].plain
    await handled_after(bruce, "marker one")
    assert [row["user_id"] for row in messages_of(tmp_path, "user")] == [str(ALICE.id)]
    assert "4111" not in json.dumps(anthropic_fake.requests)

    listed = await bruce.cli("list")
    assert listed.code == 0, listed.err
    assert f"{code}  telegram  {MALLORY_SHOWN}  (expires " in listed.out, listed.out
    assert re.search(rf"telegram\s+{ALICE.id}\s+\(config\.yml", listed.out), listed.out

    approved = await bruce.cli("approve", code.lower())  # any case will do
    assert approved.code == 0, approved.err
    assert f"approved telegram user {MALLORY_SHOWN}: Bruce answers them" in approved.out
    approved.assert_no_traceback()

    # No restart: the very next message is answered.
    telegram.private_text(MALLORY, "thanks, what now?")
    replies = await telegram.wait_for_messages(MALLORY.id, 2, WITHIN)
    assert replies[1].plain == "You said: thanks, what now?"
    # The CLI stored "You're in"; the daemon's redelivery (every minute) sends it.
    assert bruce.bruce.outbox is not None
    assert await bruce.bruce.outbox.redeliver() == 1
    assert plain(await telegram.wait_for_messages(MALLORY.id, 3, WITHIN))[2] == WELCOME

    again = await bruce.cli("approve", code)
    assert again.code == 1
    assert f"no pending pairing code {code}" in again.out and "used, denied" in again.out
    again.assert_no_traceback()

    listed = await bruce.cli("list")
    assert f"telegram  {MALLORY_SHOWN}  (approved (cli), since " in listed.out, listed.out
    assert "pending codes (0)" in listed.out

    revoked = await bruce.cli("revoke", "telegram", str(MALLORY.id))
    assert revoked.code == 0, revoked.err
    yaml_user = await bruce.cli("revoke", "telegram", str(ALICE.id))
    assert yaml_user.code == 1 and "config.yml" in yaml_user.out
    telegram.private_text(MALLORY, "am I still in?")
    await handled_after(bruce, "marker two")
    # Shut out, and within the reply interval not even told again.
    assert len(telegram.sent_to(MALLORY.id)) == 3
    users = [row["content"] for row in messages_of(tmp_path, "user")]
    assert "am I still in?" not in users and "thanks, what now?" in users


async def test_cli_refuses_a_malformed_code_naming_the_fix(bruce: Running) -> None:
    result = await bruce.cli("approve", "K0QM-X3P")
    assert result.code == 1
    assert "is not a pairing code" in result.out and "K7QM-X3PA" in result.out
    result.assert_no_traceback()
    denied = await bruce.cli("deny", "AAAA-AAAA")
    assert denied.code == 1 and "no pending pairing code AAAA-AAAA" in denied.out


# ---- the dashboard's API ---------------------------------------------------------------------


async def test_the_api_approves_and_the_person_is_told_and_answered(bruce: Running) -> None:
    telegram = bruce.telegram
    telegram.private_text(TRUDY, "hello")
    code, _ = await bruce.code_for(TRUDY)
    async with httpx.AsyncClient(base_url=bruce.url, headers=AUTH, timeout=20) as http:
        people = (await http.get("/api/people")).json()
        assert people["pairing"] == ["telegram"]
        [pending] = people["pending"]
        assert pending["code"] == code and pending["user_id"] == str(TRUDY.id)
        assert pending["name"] == "Trudy" and pending["channel"] == "telegram"
        assert (pending["username"], pending["who"]) == ("", "7777 — name they chose: “Trudy”")
        assert [(p["user_id"], p["source"], p["revocable"]) for p in people["people"]] == [
            (str(ALICE.id), "config", False)
        ]

        response = await http.post("/api/pairing/approve", json={"code": code.replace("-", "")})
        assert response.status_code == 200, response.text
        assert response.json()["person"]["user_id"] == str(TRUDY.id)
        # Told at once, through the outbox of the running daemon.
        assert plain(await telegram.wait_for_messages(TRUDY.id, 2, WITHIN))[1] == WELCOME
        telegram.private_text(TRUDY, "hi Bruce")
        replies = await telegram.wait_for_messages(TRUDY.id, 3, WITHIN)
        assert replies[2].plain == "You said: hi Bruce"

        used = await http.post("/api/pairing/approve", json={"code": code})
        assert used.status_code == 404 and "used, denied or has expired" in used.json()["error"]
        malformed = await http.post("/api/pairing/approve", json={"code": "nope"})
        assert malformed.status_code == 400 and "is not a pairing code" in malformed.json()["error"]
        empty = await http.post("/api/pairing/approve", json={})
        assert empty.status_code == 400 and "code" in empty.json()["error"]
        not_json = await http.post(
            "/api/pairing/approve", content=b"code=x", headers={"Content-Type": "text/plain"}
        )
        assert not_json.status_code == 415

        people = (await http.get("/api/people")).json()
        assert people["pending"] == []
        trudy = next(p for p in people["people"] if p["user_id"] == str(TRUDY.id))
        assert trudy["source"] == "dashboard" and trudy["revocable"] and trudy["since"]

        refused = await http.delete(f"/api/people/telegram/{ALICE.id}", headers=JSON)
        assert refused.status_code == 409 and "config.yml" in refused.json()["error"]
        bad_channel = await http.delete(f"/api/people/fax/{TRUDY.id}", headers=JSON)
        assert bad_channel.status_code == 400 and "channel" in bad_channel.json()["error"]
        revoked = await http.delete(f"/api/people/telegram/{TRUDY.id}", headers=JSON)
        assert revoked.status_code == 200 and revoked.json()["revoked"]["name"] == "Trudy"
        gone = await http.delete(f"/api/people/telegram/{TRUDY.id}", headers=JSON)
        assert gone.status_code == 404

        telegram.private_text(TRUDY, "still there?")
        await handled_after(bruce, "marker")
        assert len(telegram.sent_to(TRUDY.id)) == 3

    async with httpx.AsyncClient(base_url=bruce.url, timeout=20) as anonymous:
        assert (await anonymous.get("/api/people")).status_code == 401
        assert (
            await anonymous.post("/api/pairing/approve", json={"code": code})
        ).status_code == 401


async def test_deny_throws_the_code_away(bruce: Running) -> None:
    bruce.telegram.private_text(MALLORY, "let me in")
    code, _ = await bruce.code_for(MALLORY)
    async with httpx.AsyncClient(base_url=bruce.url, headers=AUTH, timeout=20) as http:
        denied = await http.post("/api/pairing/deny", json={"code": code.lower()})
        assert denied.status_code == 200 and denied.json()["denied"]["code"] == code
        assert (await http.post("/api/pairing/deny", json={"code": code})).status_code == 404
        assert (await http.post("/api/pairing/approve", json={"code": code})).status_code == 404
        assert (await http.get("/api/people")).json()["pending"] == []
    bruce.telegram.private_text(MALLORY, "please?")
    await handled_after(bruce, "marker")
    assert len(bruce.telegram.sent_to(MALLORY.id)) == 1  # refused in silence within the interval


# ---- bad input: limits and expiry -------------------------------------------------------------


async def test_codes_expire_at_most_ten_wait_and_a_stranger_keeps_their_code(
    bruce: Running, tmp_path: Path
) -> None:
    telegram = bruce.telegram
    assert (MAX_PENDING, VALID_MINUTES) == (10, 30)  # three throwaway accounts fill nothing
    waiting, late = STRANGERS[:MAX_PENDING], STRANGERS[MAX_PENDING]
    for stranger in waiting:
        telegram.private_text(stranger, "hi")
    codes = [(await bruce.code_for(stranger))[0] for stranger in waiting]
    assert len(set(codes)) == MAX_PENDING
    telegram.private_text(late, "me too")
    [full] = await telegram.wait_for_messages(late.id, 1, WITHIN)
    assert full.plain == PAIRING_FULL

    # A flood gets no more replies; after the interval, the same code, with less time left.
    for _ in range(5):
        telegram.private_text(STRANGERS[0], "hello?? " * 3)
    await handled_after(bruce, "marker one")
    assert len(telegram.sent_to(STRANGERS[0].id)) == 1
    bruce.clocks.advance(10)
    telegram.private_text(STRANGERS[0], "I lost my code")
    again, minutes = await bruce.code_for(STRANGERS[0], 2)
    assert again == codes[0] and minutes == VALID_MINUTES - 10

    bruce.clocks.advance(VALID_MINUTES - 10 + 1)  # every code has expired now
    async with httpx.AsyncClient(base_url=bruce.url, headers=AUTH, timeout=20) as http:
        expired = await http.post("/api/pairing/approve", json={"code": codes[1]})
        assert expired.status_code == 404 and "expired" in expired.json()["error"]
        assert "codes last 30 minutes" in expired.json()["error"]
        assert (await http.get("/api/people")).json()["pending"] == []
    telegram.private_text(late, "my turn?")
    fresh, minutes = await bruce.code_for(late, 2)
    assert fresh not in codes and minutes == VALID_MINUTES
    assert db_rows(tmp_path, "SELECT count(*) AS n FROM approved_users")[0]["n"] == 0
    assert [row["user_id"] for row in messages_of(tmp_path, "user")] == [str(ALICE.id)]


async def test_the_owner_goes_by_id_and_username_not_by_the_name_a_stranger_chose(
    bruce: Running,
) -> None:
    # Mallory calls herself "Alice", with a line break and a right-to-left override in it.
    impostor = FakeTelegramServer.user(6667, "Alice\u202e (owner)\nApproved", "mallory_2")
    bruce.telegram.private_text(impostor, "it's me, Alice, from my new phone")
    code, _ = await bruce.code_for(impostor)
    shown = "6667 @mallory_2 — name they chose: “Alice (owner) Approved”"
    async with httpx.AsyncClient(base_url=bruce.url, headers=AUTH, timeout=20) as http:
        [pending] = (await http.get("/api/people")).json()["pending"]
        assert (pending["user_id"], pending["username"]) == ("6667", "mallory_2")
        assert pending["who"] == shown
        approved = await http.post("/api/pairing/approve", json={"code": code})
        assert approved.json()["person"]["who"] == shown
        people = (await http.get("/api/people")).json()["people"]
    assert [person["who"] for person in people] == [str(ALICE.id), shown]
    listed = await bruce.cli("list")
    assert f"telegram  {shown}  (approved (dashboard), since " in listed.out, listed.out
