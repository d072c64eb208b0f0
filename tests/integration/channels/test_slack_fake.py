"""The fake Slack (tests/fakes/slack_server.py) speaks what the real slack_sdk speaks: its
AsyncWebClient calls the Web API over HTTP and meets Slack's refusals with Slack's bodies (a
SlackApiError carrying them), and its Socket Mode client (slack_sdk.socket_mode.aiohttp)
connects through apps.connections.open, receives the injected envelopes and acks them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_server import (
    FakeSlackServer,
    RateLimits,
    load_fixture,
    post_signed_event,
    sign,
)

DM = FakeSlackServer.DM_CHANNEL
CHANNEL = FakeSlackServer.CHANNEL
OWNER = FakeSlackServer.USER_ID


@pytest.fixture
async def slack_fake() -> AsyncIterator[FakeSlackServer]:
    async with FakeSlackServer() as fake:
        yield fake


def client(fake: FakeSlackServer, token: str = FakeSlackServer.BOT_TOKEN) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=fake.api_base_url)


async def test_auth_test_answers_who_the_bot_is(slack_fake: FakeSlackServer) -> None:
    answer = await client(slack_fake).auth_test()
    assert answer["ok"] is True
    assert answer["user_id"] == FakeSlackServer.BOT_USER_ID
    assert answer["bot_id"] == FakeSlackServer.BOT_ID
    assert answer["team_id"] == FakeSlackServer.TEAM_ID


@pytest.mark.parametrize(
    ("token", "error"),
    [
        ("xoxb-0000-wrong", "invalid_auth"),
        (None, "not_authed"),
        (FakeSlackServer.APP_TOKEN, "not_allowed_token_type"),
    ],
)
async def test_a_wrong_or_missing_token_gets_slacks_body(
    slack_fake: FakeSlackServer, token: str | None, error: str
) -> None:
    with pytest.raises(SlackApiError) as raised:
        await AsyncWebClient(token=token, base_url=slack_fake.api_base_url).auth_test()
    assert raised.value.response.status_code == 200  # Slack refuses a token with a 200
    assert raised.value.response.data == {"ok": False, "error": error}
    if error != "not_allowed_token_type":
        assert raised.value.response.data == load_fixture(f"error_{error}.json")


async def test_a_post_is_stored_and_waited_for(slack_fake: FakeSlackServer) -> None:
    web = client(slack_fake)
    root = await web.chat_postMessage(channel=CHANNEL, text="hello")
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*in* thread"}}]
    reply = await web.chat_postMessage(
        channel=CHANNEL, text="in thread", thread_ts=root["ts"], blocks=blocks
    )
    posted = await slack_fake.wait_for_messages(CHANNEL, 2)
    assert [m["text"] for m in posted] == ["hello", "in thread"]
    assert posted[1]["thread_ts"] == root["ts"] and posted[1]["blocks"] == blocks
    assert reply["message"]["thread_ts"] == root["ts"]
    assert reply["message"]["bot_id"] == FakeSlackServer.BOT_ID
    assert float(reply["ts"]) > float(root["ts"])


async def test_update_delete_and_react(slack_fake: FakeSlackServer) -> None:
    web = client(slack_fake)
    posted = await web.chat_postMessage(channel=DM, text="draft")
    updated = await web.chat_update(channel=DM, ts=posted["ts"], text="final")
    assert updated["text"] == "final" and "edited" in updated["message"]
    await web.reactions_add(channel=DM, timestamp=posted["ts"], name="eyes")
    await web.chat_delete(channel=DM, ts=posted["ts"])
    message = slack_fake.message(DM, posted["ts"])
    assert message["edits"] == ["draft", "final"]
    assert message["reactions"] == ["eyes"] and message["deleted"] is True
    with pytest.raises(SlackApiError) as raised:
        await web.chat_update(channel=DM, ts=posted["ts"], text="again")
    assert raised.value.response["error"] == "message_not_found"


async def test_an_unknown_channel_and_a_long_text_are_refused(
    slack_fake: FakeSlackServer,
) -> None:
    web = client(slack_fake)
    with pytest.raises(SlackApiError) as raised:
        await web.chat_postMessage(channel="C0NOWHERE", text="hi")
    assert raised.value.response.data == load_fixture("error_channel_not_found.json")
    with pytest.raises(SlackApiError) as raised:
        await web.chat_postMessage(channel=DM, text="x" * 40_001)
    assert raised.value.response.data == load_fixture("error_msg_too_long.json")
    await web.chat_postMessage(channel=DM, text="x" * 40_000)
    assert len(slack_fake.messages(DM)) == 1


async def test_a_forced_429_raises_with_status_and_retry_after(
    slack_fake: FakeSlackServer,
) -> None:
    web = client(slack_fake)
    slack_fake.force_429("chat.postMessage", retry_after=7)
    with pytest.raises(SlackApiError) as raised:
        await web.chat_postMessage(channel=DM, text="hi")
    response = raised.value.response
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert response.data == load_fixture("error_ratelimited.json")
    await web.chat_postMessage(channel=DM, text="hi")  # only the next call was forced
    assert slack_fake.texts(DM) == ["hi"]


async def test_chat_update_is_limited_per_channel() -> None:
    # A clock the test moves: the window is the fake's, so no wall clock decides the result.
    now = [100.0]
    limits = RateLimits(per_channel={"chat.update": 2}, window=1.0)
    async with FakeSlackServer(limits=limits, clock=lambda: now[0]) as fake:
        web = client(fake)
        dm = await web.chat_postMessage(channel=DM, text="0")
        other = await web.chat_postMessage(channel=CHANNEL, text="0")
        for text in ("1", "2"):
            await web.chat_update(channel=DM, ts=dm["ts"], text=text)
        with pytest.raises(SlackApiError) as raised:
            await web.chat_update(channel=DM, ts=dm["ts"], text="3")
        assert raised.value.response.status_code == 429
        assert raised.value.response.headers["Retry-After"] == "1"
        await web.chat_update(channel=CHANNEL, ts=other["ts"], text="1")  # another channel
        now[0] += 1.0
        await web.chat_update(channel=DM, ts=dm["ts"], text="3")
        assert fake.message(DM, dm["ts"])["edits"] == ["0", "1", "2", "3"]


async def test_files_upload_v2_round_trip(slack_fake: FakeSlackServer) -> None:
    web = client(slack_fake)
    root = await web.chat_postMessage(channel=DM, text="report follows")
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    answer = await web.files_upload_v2(
        channel=DM,
        thread_ts=root["ts"],
        filename="chart.png",
        content=data,
        title="Chart",
        initial_comment="here it is",
    )
    file_id = answer["file"]["id"]
    assert slack_fake.uploads[file_id] == data
    shared = (await slack_fake.wait_for_messages(DM, 2))[1]
    assert shared["text"] == "here it is" and shared["thread_ts"] == root["ts"]
    assert [f["id"] for f in shared["files"]] == [file_id]
    assert [m for m, _ in slack_fake.calls][-2:] == [
        "files.getUploadURLExternal",
        "files.completeUploadExternal",
    ]
    url = shared["files"][0]["url_private"]
    headers = {"Authorization": f"Bearer {FakeSlackServer.BOT_TOKEN}"}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as got:
        assert got.status == 200 and await got.read() == data
        assert got.content_type == "image/png"


async def test_url_private_without_the_token_is_the_sign_in_page(
    slack_fake: FakeSlackServer,
) -> None:
    sent = await slack_fake.inject_file_message(
        OWNER, DM, "look", [("a.txt", b"secret", "text/plain")]
    )
    url = sent["payload"]["event"]["files"][0]["url_private"]
    async with aiohttp.ClientSession() as session:
        async with session.get(url, allow_redirects=False) as bare:
            assert bare.status == 302 and "/signin" in bare.headers["Location"]
        async with session.get(url) as followed:  # what a naive download saves
            assert followed.status == 200 and followed.content_type == "text/html"
            assert b"secret" not in await followed.read()
        wrong = {"Authorization": "Bearer xoxb-0000-wrong"}
        async with session.get(url, headers=wrong, allow_redirects=False) as refused:
            assert refused.status == 302


class Listener:
    """A Socket Mode listener that acks each request and keeps what it received."""

    def __init__(self, fake: FakeSlackServer) -> None:
        self.fake = fake
        self.received: list[SocketModeRequest] = []
        self.stored_when_acked: list[bool] = []

    async def __call__(self, sm: Any, request: SocketModeRequest) -> None:
        self.received.append(request)
        await sm.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))


@pytest.fixture
async def socket_client(slack_fake: FakeSlackServer) -> AsyncIterator[SocketModeClient]:
    sm = SocketModeClient(
        app_token=FakeSlackServer.APP_TOKEN,
        web_client=client(slack_fake),
        ping_interval=1,
        auto_reconnect_enabled=True,
    )
    yield sm
    await sm.close()


async def test_socket_mode_receives_an_injected_message_and_acks(
    slack_fake: FakeSlackServer, socket_client: SocketModeClient
) -> None:
    listener = Listener(slack_fake)
    socket_client.socket_mode_request_listeners.append(listener)
    # The ack reaches the fake only after the listener has the request: a listener that
    # stores first and acks second is seen that way by `on_ack`.
    slack_fake.on_ack = lambda ack: listener.stored_when_acked.append(
        any(r.envelope_id == ack.envelope_id for r in listener.received)
    )
    await socket_client.connect()
    await slack_fake.wait_for_connection()
    sent = await slack_fake.inject_message(OWNER, DM, "hello bruce")
    ack = await slack_fake.wait_for_ack(sent["envelope_id"])
    assert ack.payload is None
    assert listener.stored_when_acked == [True]
    (request,) = listener.received
    assert request.type == "events_api"
    event = request.payload["event"]
    assert (event["type"], event["channel_type"], event["text"]) == ("message", "im", "hello bruce")
    assert event["channel"] == DM and event["user"] == OWNER


async def test_socket_mode_mention_block_action_and_replay(
    slack_fake: FakeSlackServer, socket_client: SocketModeClient
) -> None:
    listener = Listener(slack_fake)
    socket_client.socket_mode_request_listeners.append(listener)
    # Injected before any connection: delivered after the hello.
    mention = await slack_fake.inject_mention(OWNER, CHANNEL, "status?")
    await socket_client.connect()
    question = await client(slack_fake).chat_postMessage(channel=CHANNEL, text="Approve?")
    press = await slack_fake.inject_block_action(OWNER, CHANNEL, question["ts"], "approve", "yes")
    replayed = await slack_fake.replay(
        "socket_events_api_app_mention.json", {"U111": FakeSlackServer.BOT_USER_ID}
    )
    for envelope in (mention, press, replayed):
        await slack_fake.wait_for_ack(envelope["envelope_id"])
    kinds = [
        (r.type, r.payload.get("event", {}).get("type") or r.payload["type"])
        for r in listener.received
    ]
    assert kinds == [
        ("events_api", "app_mention"),
        ("events_api", "message"),  # the bot's own "Approve?", sent back as Slack does
        ("interactive", "block_actions"),
        ("events_api", "app_mention"),
    ]
    own = listener.received[1].payload["event"]
    assert own["bot_id"] == FakeSlackServer.BOT_ID and own["text"] == "Approve?"
    mention_text = listener.received[0].payload["event"]["text"]
    assert mention_text == f"<@{FakeSlackServer.BOT_USER_ID}> status?"
    action = listener.received[2].payload
    assert action["actions"][0]["action_id"] == "approve" and action["actions"][0]["value"] == "yes"
    assert action["container"]["message_ts"] == question["ts"]
    assert action["message"]["text"] == "Approve?"


async def test_disconnect_then_redelivery_with_retry_attempt(
    slack_fake: FakeSlackServer, socket_client: SocketModeClient
) -> None:
    received: list[SocketModeRequest] = []

    async def keep_without_ack(sm: Any, request: SocketModeRequest) -> None:
        received.append(request)

    socket_client.socket_mode_request_listeners.append(keep_without_ack)
    await socket_client.connect()
    await slack_fake.wait_for_connection()
    sent = await slack_fake.inject_message(OWNER, DM, "one")
    await slack_fake.wait_for(lambda: len(received) == 1)
    await slack_fake.disconnect()
    await slack_fake.wait_for_connection(hellos=2)  # slack_sdk reconnected by itself
    again = await slack_fake.redeliver_unacked()
    assert [e["envelope_id"] for e in again] == [sent["envelope_id"]]
    await slack_fake.wait_for(lambda: len(received) == 2)
    assert received[1].envelope_id == received[0].envelope_id
    assert received[1].retry_attempt == 1 and received[1].retry_reason == "timeout"
    assert slack_fake.acks == []


async def test_a_signed_event_verifies_with_slack_sdk() -> None:
    # A tiny Events API endpoint that checks the signature the way Bruce would.
    verifier = SignatureVerifier(FakeSlackServer.SIGNING_SECRET)
    seen: list[dict[str, Any]] = []

    async def endpoint(request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = await request.text()
        if not verifier.is_valid_request(body, dict(request.headers)):
            return aiohttp.web.Response(status=401)
        seen.append({"retry": request.headers.get("X-Slack-Retry-Num"), **json.loads(body)})
        return aiohttp.web.Response(status=200)

    app = aiohttp.web.Application()
    app.router.add_post("/slack/events", endpoint)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    try:
        async with FakeSlackServer() as fake:
            payload = fake.message_event(OWNER, DM, "over http")
            ok = await post_signed_event(url, payload, signing_secret=fake.SIGNING_SECRET)
            retried = await post_signed_event(
                url, payload, signing_secret=fake.SIGNING_SECRET, retry=(1, "http_timeout")
            )
            forged = await post_signed_event(url, payload, signing_secret="not-the-secret")
            stale = await post_signed_event(
                url, payload, signing_secret=fake.SIGNING_SECRET, timestamp=1_000_000_000
            )
    finally:
        await runner.cleanup()
    assert [ok.status, retried.status, forged.status, stale.status] == [200, 200, 401, 401]
    assert [s["retry"] for s in seen] == [None, "1"]
    assert seen[0]["event"]["text"] == "over http"
    assert sign("secret", "1", "{}") == SignatureVerifier("secret").generate_signature(
        timestamp="1", body="{}"
    )


def test_recorded_events_are_event_callbacks() -> None:
    for name in (
        "events_message_im_docs.json",
        "events_message_im_thread_reply.json",
        "events_message_file_share.json",
        "events_message_thread_broadcast.json",
    ):
        recorded = load_fixture(name)
        assert recorded["type"] == "event_callback" and recorded["event"]["type"] == "message"
    assert load_fixture("events_url_verification.json")["type"] == "url_verification"
    assert load_fixture("socket_hello.json")["type"] == "hello"


async def test_the_bots_edits_and_deletes_come_back_as_hidden_events(
    slack_fake: FakeSlackServer, socket_client: SocketModeClient
) -> None:
    listener = Listener(slack_fake)
    socket_client.socket_mode_request_listeners.append(listener)
    await socket_client.connect()
    web = client(slack_fake)
    posted = await web.chat_postMessage(channel=DM, text="thinking")
    await web.chat_update(channel=DM, ts=posted["ts"], text="done")
    await web.chat_delete(channel=DM, ts=posted["ts"])
    await slack_fake.wait_for(lambda: len(listener.received) == 3)
    await slack_fake.wait_for(lambda: len(slack_fake.acks) == 3)
    post, change, delete = (r.payload["event"] for r in listener.received)
    recorded = load_fixture("events_message_changed_recorded.json")["event"]
    assert post.get("subtype") is None and post["channel_type"] == "im"
    assert change["subtype"] == "message_changed" and change["hidden"] is True
    assert change.keys() >= recorded.keys()
    assert (change["message"]["text"], change["previous_message"]["text"]) == ("done", "thinking")
    assert delete["subtype"] == "message_deleted" and delete["deleted_ts"] == posted["ts"]


async def test_dm_by_user_id_membership_threads_and_reactions(
    slack_fake: FakeSlackServer,
) -> None:
    web = client(slack_fake)
    opened = await web.conversations_open(users=OWNER)
    assert opened["channel"]["id"] == DM
    by_user = await web.chat_postMessage(channel=OWNER, text="to the owner")
    assert by_user["channel"] == DM  # Slack posts to the app's DM with that user
    slack_fake.add_channel("C0OUTSIDE", name="outside", is_member=False)
    with pytest.raises(SlackApiError) as raised:
        await web.chat_postMessage(channel="C0OUTSIDE", text="hi")
    assert raised.value.response["error"] == "not_in_channel"
    asked = await slack_fake.inject_message(OWNER, CHANNEL, "root")
    assert asked["payload"]["event"]["channel_type"] == "channel"  # inferred: not a DM
    root_ts = asked["payload"]["event"]["ts"]
    await web.chat_postMessage(channel=CHANNEL, text="reply", thread_ts=root_ts)
    other = slack_fake.add_user("U0OTHER01", "bea")["id"]
    more = await slack_fake.inject_message(other, CHANNEL, "me too", thread_ts=root_ts)
    assert more["payload"]["event"]["parent_user_id"] == OWNER  # the root's author
    thread = await web.conversations_replies(channel=CHANNEL, ts=root_ts)
    assert [m["text"] for m in thread["messages"]] == ["root", "reply", "me too"]
    assert thread["messages"][0]["user"] == OWNER
    await web.reactions_add(channel=CHANNEL, timestamp=root_ts, name="eyes")
    await web.reactions_remove(channel=CHANNEL, timestamp=root_ts, name="eyes")
    with pytest.raises(SlackApiError) as raised:
        await web.reactions_remove(channel=CHANNEL, timestamp=root_ts, name="eyes")
    assert raised.value.response["error"] == "no_reaction"
    info = await web.conversations_info(channel=DM)
    assert info["channel"]["is_im"] is True and info["channel"]["user"] == OWNER
    assert (await web.users_info(user=OWNER))["user"]["real_name"] == "Ada Owner"


async def test_a_cut_connection_is_reopened_and_gets_what_was_not_acked(
    slack_fake: FakeSlackServer, socket_client: SocketModeClient
) -> None:
    received: list[str] = []
    acked_after: list[list[str]] = []

    async def ack_once(sm: Any, request: SocketModeRequest) -> None:
        received.append(request.payload["event"]["text"])
        if request.retry_attempt:  # the first delivery is lost with the connection
            await sm.send_socket_mode_response(SocketModeResponse(request.envelope_id))

    async def check(ack: Any) -> None:  # an async on_ack is awaited before the ack counts
        acked_after.append(list(received))

    slack_fake.on_ack = check
    socket_client.socket_mode_request_listeners.append(ack_once)
    await socket_client.connect()
    await slack_fake.wait_for_connection()
    sent = await slack_fake.inject_message(OWNER, DM, "lost")
    await slack_fake.wait_for(lambda: received == ["lost"])
    await slack_fake.drop_connection()
    await slack_fake.wait_for_connection(hellos=2, within=30)
    await slack_fake.redeliver_unacked()
    ack = await slack_fake.wait_for_ack(sent["envelope_id"])
    assert received == ["lost", "lost"] and acked_after == [["lost", "lost"]]
    assert ack.envelope_id == sent["envelope_id"] and len(slack_fake.acks) == 1
