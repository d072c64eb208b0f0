"""The Matrix channel end to end: Bruce (real matrix-nio inside a running Bruce) against a real
Synapse homeserver (tests/integration/channels/synapse.py), a second nio client as the person,
and the fake Anthropic server as the model. One Synapse serves the whole file (it takes seconds
to start); each test registers its own users, so tests do not see each other's rooms. Nothing
sleeps for a fixed time except to show that something does NOT happen, and then briefly."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import stat
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nio import AsyncClient, RoomCreateResponse, RoomMessagesResponse
from structlog.testing import capture_logs

from bruce_bot.app import Bruce
from bruce_bot.channels.matrix.channel import MAX_MESSAGE_CHARS
from bruce_bot.channels.matrix.probe import identify
from bruce_bot.channels.matrix.texts import ENCRYPTED_REFUSAL
from bruce_bot.channels.policy import BUTTON_INACTIVE
from bruce_bot.channels.probe import ProbeError
from bruce_bot.config.matrix import MatrixConfig
from bruce_bot.domain import Choice, OutboundMessage
from bruce_bot.scheduler.confirmations import CANCEL_PREFIX, CONFIRM_PREFIX
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import make_config, running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.integration.channels.synapse import MatrixUser, Synapse, synapse_python
from tests.integration.support import messages_of

QUIET_SECONDS = 2.0  # how long "nothing is answered" is watched for


@pytest.fixture(scope="module")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    python = synapse_python()
    if python is None:
        pytest.skip("no Synapse venv: run `make synapse` (or set BRUCE_SYNAPSE_PYTHON)")
    server = Synapse(tmp_path_factory.mktemp("synapse"), python)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def echo(body: dict[str, Any]) -> str:
    return f"You said: {last_user_text(body)}"


def fresh(synapse: Synapse, name: str) -> MatrixUser:
    return synapse.register(f"{name}-{uuid.uuid4().hex[:8]}")


@contextlib.asynccontextmanager
async def person(synapse: Synapse, user: MatrixUser) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(synapse.url, user.user_id, device_id=user.device_id)
    client.restore_login(user.user_id, user.device_id, user.access_token)
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def bruce_on_matrix(
    data_dir: Path,
    anthropic_fake: FakeAnthropicServer,
    synapse: Synapse,
    bot: MatrixUser,
    allowed: list[str],
    *,
    streaming: bool = False,
    builtin_tools: bool = False,
    pairing: bool = False,  # strangers refused (on by default in config.yml: offered a code)
) -> AsyncIterator[Bruce]:
    if anthropic_fake.responder is None:
        anthropic_fake.responder = echo
    section = {
        "enabled": True,
        "homeserver": synapse.url,
        "user_id": bot.user_id,
        "password": bot.password,
        "allowed_user_ids": allowed,
        "streaming": streaming,
        "pairing": pairing,
    }
    config = make_config(data_dir, anthropic_fake.base_url, channels={"matrix": section})
    async with running_bruce(config, tools=None if builtin_tools else ToolRegistry()) as bruce:
        bruce.channels["matrix"].live_interval = 0.1  # type: ignore[attr-defined]
        await wait_until(lambda: bruce.channels["matrix"].connected, timeout=20)  # type: ignore[attr-defined]
        yield bruce


async def create_room(
    client: AsyncClient, invite: list[str], *, direct: bool, encrypted: bool = False
) -> str:
    state = (
        [
            {
                "type": "m.room.encryption",
                "state_key": "",
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
            }
        ]
        if encrypted
        else []
    )
    answer = await client.room_create(is_direct=direct, invite=invite, initial_state=state)
    assert isinstance(answer, RoomCreateResponse), answer
    return str(answer.room_id)


async def members(client: AsyncClient, room_id: str) -> set[str]:
    answer = await client.joined_members(room_id)
    return {member.user_id for member in getattr(answer, "members", [])}


async def wait_for_join(client: AsyncClient, room_id: str, bot: MatrixUser) -> None:
    async def joined() -> bool:
        return bot.user_id in await members(client, room_id)

    await wait_until(joined, timeout=20, interval=0.2)


async def say(client: AsyncClient, room_id: str, text: str, **extra: Any) -> str:
    content = {"msgtype": "m.text", "body": text, **extra}
    answer = await client.room_send(room_id, "m.room.message", content)
    return str(answer.event_id)


async def from_bot(client: AsyncClient, room_id: str, bot: MatrixUser) -> list[dict[str, Any]]:
    """Bruce's messages in the room, oldest first (their contents)."""
    answer = await client.room_messages(room_id, start="", limit=100)
    assert isinstance(answer, RoomMessagesResponse), answer
    events = [event.source for event in reversed(answer.chunk)]
    return [
        event["content"]
        for event in events
        if event.get("sender") == bot.user_id and event.get("type") == "m.room.message"
    ]


async def wait_for_replies(
    client: AsyncClient, room_id: str, bot: MatrixUser, count: int
) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]]:
        found = await from_bot(client, room_id, bot)
        return found if len(found) >= count else []

    found: list[dict[str, Any]] = await wait_until(enough, timeout=20, interval=0.2)
    return found


# ---- conversations -------------------------------------------------------------------------


async def test_a_direct_chat_is_joined_and_answered_with_html(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    anthropic_fake.responder = lambda body: f"**Hello** {last_user_text(body)}"
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id], direct=True)
        await wait_for_join(client, room, bot)
        await say(client, room, "hi there")
        (reply,) = await wait_for_replies(client, room, bot, 1)
    assert reply["msgtype"] == "m.text"
    assert reply["body"] == "**Hello** hi there"
    assert reply["format"] == "org.matrix.custom.html"
    assert reply["formatted_body"] == "<b>Hello</b> hi there"


async def test_in_a_room_only_a_mention_is_answered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, bob = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "bob")
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id, bob.user_id], direct=False)
        await wait_for_join(client, room, bot)
        await say(client, room, "just chatting, not for the bot")
        mention = {"m.mentions": {"user_ids": [bot.user_id]}}
        await say(client, room, f"{bot.user_id}: what's up?", **mention)
        (reply,) = await wait_for_replies(client, room, bot, 1)
        await asyncio.sleep(QUIET_SECONDS)
        assert len(await from_bot(client, room, bot)) == 1
    # In a room the model is told who speaks; the mention of Bruce is taken off.
    local = alice.user_id[1:].split(":")[0]
    assert reply["body"] == f"You said: {local}: what's up?"
    assert len(anthropic_fake.requests) == 1


async def test_a_strangers_invite_is_declined(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, mallory = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "mal")
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, mallory) as client,
    ):
        room = await create_room(client, [bot.user_id], direct=True)

        async def declined() -> bool:
            answer = await client.room_get_state_event(room, "m.room.member", bot.user_id)
            return getattr(answer, "content", {}).get("membership") == "leave"

        await wait_until(declined, timeout=20, interval=0.2)
    assert anthropic_fake.requests == []


async def test_with_pairing_a_strangers_direct_chat_gets_a_code_and_after_approval_answers(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, mallory = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "mal")
    async with (
        bruce_on_matrix(
            tmp_path, anthropic_fake, synapse, bot, [alice.user_id], pairing=True
        ) as bruce,
        person(synapse, mallory) as client,
    ):
        group = await create_room(client, [bot.user_id], direct=False)  # a room of theirs: no
        room = await create_room(client, [bot.user_id], direct=True)
        await wait_for_join(client, room, bot)
        await say(client, room, "hi, my card is 4111")
        (offer,) = await wait_for_replies(client, room, bot, 1)
        match = re.search(r"pairing code is ([A-Z0-9]{4}-[A-Z0-9]{4})", offer["body"])
        assert match, offer
        assert messages_of(tmp_path, "user") == []  # nothing of a stranger's is kept
        assert bruce.parts is not None
        person_in = await bruce.parts.pairing.approve(match[1], by="dashboard")
        assert person_in.user_id == mallory.user_id and person_in.channel == "matrix"
        people = {(p.channel, p.user_id) for p in await bruce.parts.pairing.people()}
        assert ("matrix", mallory.user_id) in people  # the People page lists them
        welcome = (await wait_for_replies(client, room, bot, 2))[1]
        assert welcome["body"].startswith("You're in")
        await say(client, room, "thanks!")
        replies = await wait_for_replies(client, room, bot, 3)
        state = await client.room_get_state_event(group, "m.room.member", bot.user_id)
    assert replies[2]["body"] == "You said: thanks!"
    assert getattr(state, "content", {}).get("membership") != "join"
    assert [row["content"] for row in messages_of(tmp_path, "user")] == ["thanks!"]
    assert "4111" not in json.dumps(anthropic_fake.requests)


async def test_a_restart_neither_replays_nor_loses_a_message(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    async with person(synapse, alice) as client:
        async with bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]):
            room = await create_room(client, [bot.user_id], direct=True)
            await wait_for_join(client, room, bot)
            await say(client, room, "before the restart")
            await wait_for_replies(client, room, bot, 1)
        state_file = tmp_path / "matrix" / "sync.json"
        device = json.loads(state_file.read_text())["device_id"]
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        await say(client, room, "while Bruce was down")
        async with bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]):
            replies = await wait_for_replies(client, room, bot, 2)
            # The same device, without a new login (its token was kept).
            assert json.loads(state_file.read_text())["device_id"] == device
            await asyncio.sleep(QUIET_SECONDS)
            replies = await from_bot(client, room, bot)
    assert [reply["body"] for reply in replies] == [
        "You said: before the restart",
        "You said: while Bruce was down",
    ]
    assert len(anthropic_fake.requests) == 2


async def test_an_encrypted_room_is_refused_with_one_message(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    ciphertext = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "ciphertext": "AwgAEnAC",
        "sender_key": "abc",
        "session_id": "def",
        "device_id": alice.device_id,
    }
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id], direct=True, encrypted=True)
        await wait_for_join(client, room, bot)
        await client.room_send(room, "m.room.encrypted", ciphertext)
        (notice,) = await wait_for_replies(client, room, bot, 1)
        await asyncio.sleep(QUIET_SECONDS)
        assert len(await from_bot(client, room, bot)) == 1
    assert notice["msgtype"] == "m.notice"
    assert notice["body"] == ENCRYPTED_REFUSAL
    assert anthropic_fake.requests == []


async def test_a_reply_to_bruce_in_a_room_is_answered_and_odd_events_are_ignored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, bob = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "bob")
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id, bob.user_id], direct=False)
        await wait_for_join(client, room, bot)
        first = await say(client, room, f"{bot.user_id} first question")
        await wait_for_replies(client, room, bot, 1)
        answer = await client.room_messages(room, start="", limit=20)
        bruce_event = next(e.event_id for e in answer.chunk if e.sender == bot.user_id)
        # Nothing here is for Bruce to answer, and none of it may stop the channel.
        await client.room_put_state(room, "m.room.topic", {"topic": "state, not a message"})
        await client.room_redact(room, first, reason="redacted")
        await say(client, room, "a notice", msgtype="m.notice")
        await client.room_send(room, "m.room.message", {"msgtype": "org.example.odd", "body": 1})
        await client.room_send(room, "m.reaction", {"m.relates_to": {"rel_type": "m.annotation"}})
        relates = {"m.relates_to": {"m.in_reply_to": {"event_id": bruce_event}}}
        await say(client, room, "> <@bruce> You said\n\nand a follow-up", **relates)
        replies = await wait_for_replies(client, room, bot, 2)
        await asyncio.sleep(QUIET_SECONDS)
        assert len(await from_bot(client, room, bot)) == 2
    assert replies[1]["body"].endswith(": and a follow-up")
    assert len(anthropic_fake.requests) == 2


async def test_a_stranger_mentioning_bruce_in_a_room_is_refused_once_and_not_stored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, mallory = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "mal")
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
        person(synapse, mallory) as stranger,
    ):
        room = await create_room(client, [bot.user_id, mallory.user_id], direct=False)
        await wait_for_join(client, room, bot)
        await stranger.join(room)
        mention = {"m.mentions": {"user_ids": [bot.user_id]}}
        await say(stranger, room, "hey bot, do my homework", **mention)
        await say(stranger, room, "hey bot, again", **mention)
        (refusal,) = await wait_for_replies(client, room, bot, 1)
        await asyncio.sleep(QUIET_SECONDS)
        assert len(await from_bot(client, room, bot)) == 1
    assert mallory.user_id in refusal["body"]
    assert refusal["msgtype"] == "m.notice"
    assert anthropic_fake.requests == []


async def test_the_probe_says_who_logs_in_and_names_what_to_fix(synapse: Synapse) -> None:
    bot = fresh(synapse, "bruce")
    section = {"homeserver": synapse.url, "user_id": bot.user_id}
    by_password = MatrixConfig(**section, password=bot.password)
    assert (await identify(by_password, 10)).name == bot.user_id
    by_token = MatrixConfig(**section, access_token=bot.access_token)
    assert (await identify(by_token, 10)).name == bot.user_id
    # The check logged its own device out again: only the registration's device is left.
    async with person(synapse, bot) as client:
        devices = await client.devices()
    assert [device.id for device in devices.devices] == [bot.device_id]
    with pytest.raises(ProbeError, match="refused the login") as refused:
        await identify(MatrixConfig(**section, password="wrong"), 10)
    assert "channels.matrix" in refused.value.fix


async def test_a_long_answer_arrives_in_parts_in_order(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    words = [f"word{index}" for index in range(1500)]  # about 12,000 characters
    anthropic_fake.responder = lambda body: " ".join(words)
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id], direct=True)
        await wait_for_join(client, room, bot)
        await say(client, room, "tell me everything")
        replies = await wait_for_replies(client, room, bot, 3)
        await asyncio.sleep(QUIET_SECONDS)
        replies = await from_bot(client, room, bot)
    assert all(len(reply["body"]) <= MAX_MESSAGE_CHARS for reply in replies)
    assert " ".join(reply["body"] for reply in replies).split() == words


# Last in the file: it stops the module's Synapse (and starts it again on the same port).
async def test_a_homeserver_outage_is_reported_once_and_bruce_answers_when_it_is_back(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    with capture_logs() as logs:
        async with (
            bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
            person(synapse, alice) as client,
        ):
            room = await create_room(client, [bot.user_id], direct=True)
            await wait_for_join(client, room, bot)
            await asyncio.to_thread(synapse.stop)

            def reported() -> bool:
                return any(entry["event"] == "matrix_unreachable" for entry in logs)

            await wait_until(reported, timeout=60, interval=0.2)
            await asyncio.to_thread(synapse.start)
            await say(client, room, "are you back?")
            (reply,) = await wait_for_replies(client, room, bot, 1)
            await wait_until(lambda: any(e["event"] == "matrix_reachable_again" for e in logs))
    assert reply["body"] == "You said: are you back?"
    assert [e["event"] for e in logs].count("matrix_unreachable") == 1


# ---- threads -------------------------------------------------------------------------------


def thread(root: str, latest: str) -> dict[str, Any]:
    """What Element sends in a thread: the thread relation, falling back to a reply."""
    return {
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": latest},
        }
    }


async def test_a_thread_is_its_own_session_and_is_answered_in_the_thread(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, bob = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "bob")
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id, bob.user_id], direct=False)
        await wait_for_join(client, room, bot)
        await say(client, room, f"{bot.user_id} room question")
        await wait_for_replies(client, room, bot, 1)
        root = await say(client, room, "a topic to discuss")
        await say(client, room, f"{bot.user_id} thread question", **thread(root, root))
        replies = await wait_for_replies(client, room, bot, 2)
        # A follow-up in the thread needs no mention: Bruce answers in that thread.
        await say(client, room, "and a follow-up", **thread(root, root))
        replies = await wait_for_replies(client, room, bot, 3)
        await asyncio.sleep(QUIET_SECONDS)
        assert len(await from_bot(client, room, bot)) == 3
    assert "m.relates_to" not in replies[0]
    for reply in replies[1:]:
        relates = reply["m.relates_to"]
        assert relates["rel_type"] == "m.thread" and relates["event_id"] == root
        assert relates["is_falling_back"] is True
        assert relates["m.in_reply_to"] == {"event_id": root}
    assert replies[2]["body"].endswith(": and a follow-up")
    # The thread's session has its own history: the room question is not in it.
    thread_history = json.dumps(anthropic_fake.requests[2]["messages"])
    assert "thread question" in thread_history and "room question" not in thread_history


# ---- streaming by edits ----------------------------------------------------------------------

LIVE_ANSWER = (
    "The **rain** in Lisbon keeps on through the week, so an umbrella is the thing to carry "
    "every single day, and boots too if you walk by the river in the evening."
)


async def test_a_streamed_answer_is_one_message_edited_until_it_is_the_reply(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    anthropic_fake.script(LIVE_ANSWER)
    anthropic_fake.stream_pause_seconds = 0.03
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id], streaming=True),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id], direct=True)
        await wait_for_join(client, room, bot)
        await say(client, room, "weather in Lisbon?")

        async def done() -> list[dict[str, Any]]:
            found = await from_bot(client, room, bot)
            last = found[-1] if found else {}
            return found if last.get("m.new_content", {}).get("body") == LIVE_ANSWER else []

        seen = await wait_until(done, timeout=20, interval=0.2)
    assert anthropic_fake.requests[0]["stream"] is True
    first, *edits = seen
    assert "m.relates_to" not in first and first["body"] != LIVE_ANSWER  # its first words
    assert edits  # then edits of that one message, never a second message
    for edit in edits:
        assert edit["m.relates_to"]["rel_type"] == "m.replace"
        new = edit["m.new_content"]
        assert edit["body"] == f"* {new['body']}"
        assert edit["formatted_body"] == f"* {new['formatted_body']}"
        assert new["format"] == "org.matrix.custom.html"
    assert {edit["m.relates_to"]["event_id"] for edit in edits} == {
        edits[0]["m.relates_to"]["event_id"]
    }
    bodies = [edit["m.new_content"]["body"] for edit in edits]
    assert len(bodies) == len(set(bodies))  # never an edit that changes nothing
    assert "<b>rain</b>" in edits[-1]["m.new_content"]["formatted_body"]


# ---- confirmations by reaction -------------------------------------------------------------


async def bot_events(client: AsyncClient, room_id: str, bot: MatrixUser) -> list[dict[str, Any]]:
    answer = await client.room_messages(room_id, start="", limit=100)
    assert isinstance(answer, RoomMessagesResponse), answer
    return [e.source for e in reversed(answer.chunk) if e.source.get("sender") == bot.user_id]


async def test_a_reaction_of_an_allowed_user_answers_a_question_and_a_strangers_is_ignored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, bob = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "bob")
    choices = (Choice("Confirm", f"{CONFIRM_PREFIX}999"), Choice("Cancel", f"{CANCEL_PREFIX}999"))
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]) as bruce,
        person(synapse, alice) as client,
        person(synapse, bob) as stranger,
    ):
        room = await create_room(client, [bot.user_id, bob.user_id], direct=False)
        await wait_for_join(client, room, bot)
        await stranger.join(room)
        text = "Please confirm the task (or answer yes 999)."
        await bruce.channels["matrix"].send(
            OutboundMessage("matrix", room, text, kind="notice", choices=choices)
        )

        async def offered() -> list[dict[str, Any]]:
            found = [e for e in await bot_events(client, room, bot) if e["type"] == "m.reaction"]
            return found if len(found) == 2 else []

        reactions = await wait_until(offered, timeout=20, interval=0.2)
        question = reactions[0]["content"]["m.relates_to"]["event_id"]
        assert [r["content"]["m.relates_to"]["key"] for r in reactions] == ["\u2705", "\u274c"]
        yes = {"m.relates_to": {"rel_type": "m.annotation", "event_id": question, "key": "✅️"}}
        await stranger.room_send(room, "m.reaction", yes)
        await asyncio.sleep(QUIET_SECONDS)
        assert len(await from_bot(client, room, bot)) == 1  # the stranger's tap did nothing
        with capture_logs() as logs:
            await client.room_send(room, "m.reaction", yes)
            replies = await wait_for_replies(client, room, bot, 2)
    assert replies[0]["body"] == text
    # The tap reached inbox.choose as the Confirm choice's data: no task 999 waits, so the
    # answer is the policy's "no longer active" (a real confirmation: test_discord_buttons.py).
    (pressed,) = [e for e in logs if e["event"] == "button_pressed"]
    assert pressed["data"] == f"{CONFIRM_PREFIX}999" and pressed["chat_id"] == room
    assert replies[1]["body"] == BUTTON_INACTIVE and replies[1]["msgtype"] == "m.notice"


# ---- reminders -----------------------------------------------------------------------------


async def test_a_reminder_made_in_a_thread_arrives_in_that_thread(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, bob = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "bob")
    reminder = {
        "title": "Stretch",
        "execution_mode": "message",
        "content": "Stand up and stretch",
        "run_at": "+1s",
    }
    anthropic_fake.script(tool_calls=[("proactive_create", reminder)])
    anthropic_fake.script("Done.")
    async with (
        bruce_on_matrix(
            tmp_path, anthropic_fake, synapse, bot, [alice.user_id], builtin_tools=True
        ),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id, bob.user_id], direct=False)
        await wait_for_join(client, room, bot)
        root = await say(client, room, "plans for today")
        await say(client, room, f"{bot.user_id} remind me to stretch", **thread(root, root))

        async def reminded() -> list[dict[str, Any]]:
            found = await from_bot(client, room, bot)
            return found if any(r["body"].startswith("\u23f0") for r in found) else []

        replies = await wait_until(reminded, timeout=30, interval=0.3)
    (alarm,) = [r for r in replies if r["body"].startswith("\u23f0")]
    assert alarm["body"] == "\u23f0 Stand up and stretch"
    assert alarm["m.relates_to"]["rel_type"] == "m.thread"
    assert alarm["m.relates_to"]["event_id"] == root


# ---- media ---------------------------------------------------------------------------------


def png_bytes() -> bytes:
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(buffer, "PNG")
    return buffer.getvalue()


async def test_an_image_is_downloaded_from_the_homeserver_and_shown_to_the_model(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    anthropic_fake.responder = lambda body: "A red rectangle."
    data = png_bytes()
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id], direct=True)
        await wait_for_join(client, room, bot)
        uploaded, _ = await client.upload(
            lambda *_: data, content_type="image/png", filename="red.png", filesize=len(data)
        )
        url = uploaded.content_uri
        content = {
            "msgtype": "m.image",
            "body": "what is this?",
            "filename": "red.png",
            "url": url,
            "info": {"mimetype": "image/png", "size": len(data), "w": 40, "h": 30},
        }
        await client.room_send(room, "m.room.message", content)
        (reply,) = await wait_for_replies(client, room, bot, 1)
    assert reply["body"] == "A red rectangle."
    sent = json.dumps(anthropic_fake.requests[0]["messages"])
    assert '"type": "image"' in sent and "what is this?" in sent


async def test_a_saved_artifact_is_uploaded_and_sent_as_a_file(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    report = "<!doctype html><html><body><h1>Weekly</h1></body></html>"
    arguments = {"title": "Weekly", "filename": "report.html", "content": report}
    anthropic_fake.script(tool_calls=[("artifact_save", arguments)])
    anthropic_fake.script("Here is your report.")
    async with (
        bruce_on_matrix(
            tmp_path, anthropic_fake, synapse, bot, [alice.user_id], builtin_tools=True
        ),
        person(synapse, alice) as client,
    ):
        room = await create_room(client, [bot.user_id], direct=True)
        await wait_for_join(client, room, bot)
        await say(client, room, "save me the weekly report")

        async def with_file() -> list[dict[str, Any]]:
            found = await from_bot(client, room, bot)
            return found if any(r.get("msgtype") == "m.file" for r in found) else []

        replies = await wait_until(with_file, timeout=30, interval=0.3)
        (file,) = [r for r in replies if r["msgtype"] == "m.file"]
        downloaded = await client.download(mxc=file["url"])
    assert replies[0]["body"].startswith("Here is your report.")
    assert file["body"] == "report.html" and file["info"]["mimetype"].startswith("text/html")
    assert downloaded.body.decode() == report


# ---- the dashboard's allowlist -------------------------------------------------------------


async def test_a_matrix_id_added_in_the_dashboard_is_answered_and_a_bad_one_is_refused(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice, bob = fresh(synapse, "bruce"), fresh(synapse, "alice"), fresh(synapse, "bob")
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]) as bruce,
        web_client(bruce, timeout=30) as http,
        person(synapse, alice) as client,
        person(synapse, bob) as stranger,
    ):
        room = await create_room(client, [bot.user_id, bob.user_id], direct=False)
        await wait_for_join(client, room, bot)
        await stranger.join(room)
        path = "/api/channels/matrix/allowlist"
        wrong = await http.put(path, json={"allowed_user_ids": [alice.user_id, "bob"]})
        assert wrong.status_code == 400
        assert "allowed_user_ids[1]: 'bob' is not a Matrix user id" in wrong.json()["error"]
        added = await http.put(path, json={"allowed_user_ids": [alice.user_id, bob.user_id]})
        assert added.status_code == 200, added.text
        assert added.json()["allowed_user_ids"] == sorted([alice.user_id, bob.user_id])
        await say(stranger, room, f"{bot.user_id} hello from bob")
        (reply,) = await wait_for_replies(client, room, bot, 1)
    assert reply["body"].endswith(": hello from bob")


# ---- a new access token from the dashboard -------------------------------------------------


async def test_a_new_access_token_swaps_the_adapter_which_keeps_the_sync_state(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, synapse: Synapse
) -> None:
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    async with (
        bruce_on_matrix(tmp_path, anthropic_fake, synapse, bot, [alice.user_id]) as bruce,
        web_client(bruce, timeout=30) as http,
        person(synapse, alice) as client,
    ):
        first = bruce.channels["matrix"]
        room = await create_room(client, [bot.user_id], direct=True)
        await wait_for_join(client, room, bot)
        await say(client, room, "before the swap")
        await wait_for_replies(client, room, bot, 1)
        other = AsyncClient(synapse.url, bot.user_id)
        login = await other.login(bot.password, device_name="second")
        await other.close()
        fields = {"access_token": login.access_token}
        changed = await http.put("/api/channels/matrix/login", json={"fields": fields})
        assert changed.status_code == 200, changed.text
        # Written while the new adapter starts: it must be answered (no loss), and the first
        # message not again (no replay).
        await say(client, room, "during the swap")
        replies = await wait_for_replies(client, room, bot, 2)
        await asyncio.sleep(QUIET_SECONDS)
        assert len(await from_bot(client, room, bot)) == 2
        assert bruce.channels["matrix"] is not first
    assert [r["body"] for r in replies] == [
        "You said: before the swap",
        "You said: during the swap",
    ]
