"""A platform added as a plug-in, touching no module of Bruce's: a minimal in-test platform
("parrot": its config section, an adapter on the shared ChannelPolicy, a token probe) registered
in bruce_bot/platforms.py and nothing else. Config validation checks its section with its model
(and scrubs its token), `bruce doctor` tries its token, Bruce builds and starts its adapter, a
stranger on it gets a pairing code, the People API lists the code and approves it (the welcome
goes out through the plug-in), the approved person is answered by the model, the dashboard's
platform list shows it, and the person is revoked again — all through Bruce's real parts: the
inbox, the outbox, pairing, the dashboard's HTTP API and the SQLite file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from bruce_bot import platforms
from bruce_bot.channels.base import InboxPort
from bruce_bot.channels.policy import (
    NEW_CONVERSATION,
    AllowlistPort,
    ChannelPolicy,
    PairingPort,
    PolicyTexts,
)
from bruce_bot.channels.probe import ProbeError
from bruce_bot.cli.doctor import examine
from bruce_bot.config import ConfigError, SecretText, Section, validate
from bruce_bot.domain import InboundMessage, OutboundMessage
from bruce_bot.platforms import BotIdentity, PlatformSpec
from tests.conftest import make_config, running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer

GOOD_TOKEN = "parrot-token-7d1c9e4f"
OWNER, STRANGER = 7, 99


class ParrotConfig(Section):
    enabled: bool = False
    token: SecretText = ""
    allowed_user_ids: list[int] = Field(default_factory=list)
    pairing: bool = True
    perch: str = "kitchen"  # a key of its own


class ParrotChannel:
    """The smallest adapter: messages are `hear`d, replies are kept in `sent`."""

    name = "parrot"
    max_message_chars = 500
    built: ClassVar[list[ParrotChannel]] = []

    def __init__(self, section: ParrotConfig) -> None:
        self.section = section
        texts = PolicyTexts(stranger="I only talk to people my owner listed (id {user_id}).")
        self.policy = ChannelPolicy("parrot", section.allowed_user_ids, [NEW_CONVERSATION], texts)
        self.inbox: InboxPort | None = None
        self.sent: list[tuple[str, str]] = []
        ParrotChannel.built.append(self)

    def use_pairing(self, pairing: PairingPort) -> None:
        self.policy.pair_with(pairing)

    def use_allowlist(self, allowlist: AllowlistPort) -> None:
        self.policy.allow_from(allowlist)

    async def start(self, inbox: InboxPort) -> None:
        self.inbox = inbox

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        self.sent.append((message.chat_id, message.text))

    async def typing(self, chat_id: str) -> None:
        return None

    async def hear(self, user_id: int, text: str) -> None:
        admission = await self.policy.admit(user_id, chat_id=str(user_id), user_name="Polly")
        if not admission.allowed:
            if admission.refusal:
                self.sent.append((str(user_id), admission.refusal))
            return
        assert self.inbox is not None
        await self.inbox.submit(
            InboundMessage("parrot", str(user_id), text, user_id=str(user_id), user_name="Polly")
        )

    def texts(self, chat_id: int) -> list[str]:
        return [text for chat, text in self.sent if chat == str(chat_id)]


async def identify(section: ParrotConfig, timeout_seconds: float) -> BotIdentity:
    if section.token != GOOD_TOKEN:
        raise ProbeError("the parrot refused the token", "set channels.parrot.token")
    return BotIdentity("@polly", "https://parrot.example/polly")


PARROT = PlatformSpec(
    name="parrot",
    title="Parrot",
    section=ParrotConfig,
    adapter=ParrotChannel,
    identify=identify,
    token_help="ask the parrot for a token",
    capabilities=frozenset({"edits"}),
)


@pytest.fixture
def parrot() -> Iterator[PlatformSpec]:
    ParrotChannel.built.clear()
    with platforms.registered(PARROT) as spec:
        yield spec


def parrot_section(**values: Any) -> dict[str, Any]:
    return {"enabled": True, "token": GOOD_TOKEN, "allowed_user_ids": [OWNER], **values}


def problems(raw: dict[str, Any]) -> Sequence[str]:
    with pytest.raises(ConfigError) as refused:
        validate(raw)
    return refused.value.problems


def test_config_validation_reads_the_plugins_section_with_its_model(parrot: PlatformSpec) -> None:
    config = validate({"channels": {"parrot": parrot_section(perch="attic")}})
    section = config.channels.section("parrot")
    assert isinstance(section, ParrotConfig) and section.perch == "attic"
    assert [spec.name for spec, _ in config.channels.enabled()] == ["parrot"]
    assert GOOD_TOKEN in config.secrets()  # its token is scrubbed from the logs like any other
    [problem] = problems({"channels": {"parrot": parrot_section(perc="attic")}})
    assert "channels.parrot.perc" in problem
    no_one = validate({"channels": {"parrot": parrot_section(allowed_user_ids=[], pairing=False)}})
    assert any("channels.parrot.allowed_user_ids is empty" in w for w in no_one.warnings())
    assert validate({}).channels.section("parrot").enabled is False  # its defaults


def test_without_its_registration_the_section_is_refused_naming_the_platforms() -> None:
    [problem] = problems({"channels": {"parrot": parrot_section()}})
    assert "unknown platform channels.parrot" in problem and "telegram, discord" in problem


def test_the_doctor_tries_the_plugins_token(parrot: PlatformSpec, tmp_path: Path) -> None:
    good = make_config(tmp_path / "a", channels={"parrot": parrot_section()})
    bad = make_config(tmp_path / "b", channels={"parrot": parrot_section(token="wrong")})
    [ok] = [check for check in examine(good, None).checks if check.name == "parrot"]
    assert ok.status == "ok" and ok.detail == "logged in as @polly"
    [refused] = [check for check in examine(bad, None).checks if check.name == "parrot"]
    assert refused.status == "fail" and refused.detail == "the parrot refused the token"
    assert refused.fix == "set channels.parrot.token"


async def test_a_stranger_pairs_through_the_plugin_and_the_people_api(
    parrot: PlatformSpec, tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    config = make_config(tmp_path, anthropic_fake.base_url, channels={"parrot": parrot_section()})
    async with running_bruce(config) as bruce, web_client(bruce) as http:
        [channel] = ParrotChannel.built
        assert channel.inbox is not None  # built from the registry and started by Bruce

        listed = (await http.get("/api/platforms")).json()["platforms"]
        assert {"name": "parrot", "title": "Parrot", "enabled": True} in [
            {key: p[key] for key in ("name", "title", "enabled")} for p in listed
        ]

        await channel.hear(STRANGER, "hello?")
        [offer] = channel.texts(STRANGER)
        people = (await http.get("/api/people")).json()
        [pending] = people["pending"]
        assert pending["channel"] == "parrot" and pending["user_id"] == str(STRANGER)
        assert pending["code"].replace("-", "") in offer.replace("-", "")
        assert "parrot" in people["pairing"]
        owner = [p for p in people["people"] if p["channel"] == "parrot"]
        assert [p["user_id"] for p in owner] == [str(OWNER)]  # config.yml's

        approved = await http.post("/api/pairing/approve", json={"code": pending["code"]})
        assert approved.status_code == 200, approved.text
        await wait_until(lambda: len(channel.texts(STRANGER)) == 2)
        assert "approved" in channel.texts(STRANGER)[1]  # the welcome, through the plug-in

        anthropic_fake.script("Hello Polly's friend.")
        await channel.hear(STRANGER, "am I in now?")
        await wait_until(lambda: "Hello Polly's friend." in channel.texts(STRANGER))

        revoked = await http.delete(
            f"/api/people/parrot/{STRANGER}", headers={"Content-Type": "application/json"}
        )
        assert revoked.status_code == 200, revoked.text
        unknown = await http.delete(
            f"/api/people/pigeon/{STRANGER}", headers={"Content-Type": "application/json"}
        )
        assert unknown.status_code == 400
        assert "no platform 'pigeon'" in unknown.text and "parrot" in unknown.text
        before = len(anthropic_fake.requests)
        await channel.hear(STRANGER, "still there?")
        assert len(anthropic_fake.requests) == before
