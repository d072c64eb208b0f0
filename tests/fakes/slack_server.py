"""A local fake of Slack (Web API, file hosting, Socket Mode) for driving the real slack_sdk.

Point slack_sdk at it: `AsyncWebClient(token=FakeSlackServer.BOT_TOKEN,
base_url=slack_fake.api_base_url)` (the base URL ends with `/`, as slack_sdk wants) and
`SocketModeClient(app_token=FakeSlackServer.APP_TOKEN, web_client=<an AsyncWebClient on the
same base_url>)` (slack_sdk.socket_mode.aiohttp): `apps.connections.open` answers a `ws://` URL
on the fake, whose WebSocket sends `{"type": "hello"}` and then the envelopes a test injects::

    async with FakeSlackServer() as slack_fake:
        ...  # start Bruce with base_url = slack_fake.api_base_url and the two tokens below
        await slack_fake.wait_for_connection()                 # a Socket Mode client said hello
        sent = await slack_fake.inject_message(USER, DM, "hi")  # events_api envelope, message.im
        await slack_fake.inject_message(USER, CHANNEL, "more", thread_ts=root_ts,
                                        channel_type="channel")
        await slack_fake.inject_mention(USER, CHANNEL, "what's up?")   # app_mention
        await slack_fake.inject_block_action(USER, CHANNEL, message_ts, "approve", value="yes")
        await slack_fake.inject_file_message(USER, DM, "look", [("a.png", png, "image/png")])
        ack = await slack_fake.wait_for_ack(sent["envelope_id"])       # what the client acked
        slack_fake.acks                                           # every ack, in order
        slack_fake.on_ack = check                # called (awaited if async) as each ack arrives
        await slack_fake.wait_for_messages(DM, 1)                 # what the bot posted there
        slack_fake.messages(DM)         # [{"ts", "channel", "text", "thread_ts", "blocks",
                                        #   "files", "edits", "reactions", "deleted"}, ...]
        slack_fake.force_429("chat.update", retry_after=1)        # the next chat.update is 429
        await slack_fake.disconnect()                # {"type": "disconnect"}: the client reconnects
        await slack_fake.redeliver(sent["envelope_id"])   # again, retry_attempt + 1
        await slack_fake.redeliver_unacked()              # every envelope not acked yet
        await slack_fake.drop_connection()                # the WebSocket closes without a word

Like Slack, the fake sends the app its own messages back as events (it subscribes to
message.im and message.channels): each post as a `message` with `bot_id` and `bot_profile`,
each edit as a `message_changed` and each delete as a `message_deleted` (both `hidden`), each
in its own events_api envelope that wants an ack like any other;
`FakeSlackServer(echo_own_messages=False)` leaves them out.

Every inject_* returns the envelope it sent (`envelope_id`, `payload`); for the Events API
over HTTP, `message_event(...)` / `mention_event(...)` build the same `event_callback` payload
without sending it, and `post_signed_event(url, payload, signing_secret=...)` POSTs it signed
as Slack signs (X-Slack-Signature `v0=` HMAC-SHA256 of `v0:{ts}:{body}`, the scheme of
slack_sdk.signature.SignatureVerifier), with X-Slack-Retry-Num / -Reason when asked.
Envelopes injected while no client is connected wait and go out after the next hello.

It pushes back as Slack does, with Slack's bodies (recorded ones in tests/fixtures/slack/, see
its README): every answer is HTTP 200 `{"ok": false, "error": ...}` but for rate limits; a
missing token is `not_authed`, a wrong one `invalid_auth`, the bot token on
`apps.connections.open` (or the app token elsewhere) `not_allowed_token_type`; an unknown
channel `channel_not_found`; a text over 40000 characters `msg_too_long`; editing, deleting
or reacting to a message that is not there `message_not_found`, editing a user's message
`cant_update_message`. Rate limits are per method and channel (`RateLimits`: by default five
`chat.postMessage` and five `chat.update` a second in one channel); over them, and on
`force_429`, HTTP 429 with `Retry-After` (whole seconds) and `{"ok": false, "error":
"ratelimited"}`. Files: `files.getUploadURLExternal` gives an upload URL on the fake, the
upload answers `OK - <bytes>` in text/plain as files.slack.com does, and
`files.completeUploadExternal` shares the files into the channel (or thread) as one message.
A file's `url_private` needs the bot token: without it Slack (and the fake) redirects to the
workspace's HTML sign-in page, a 200 that is not the file.

Web API methods: auth.test, apps.connections.open, chat.postMessage, chat.postEphemeral
(kept in `ephemerals`, never echoed), chat.update,
chat.delete, reactions.add, reactions.remove, conversations.info, conversations.open,
conversations.replies, users.info, files.getUploadURLExternal, files.completeUploadExternal
(any other: `unknown_method`). A user id is taken for a channel (the app's DM with that user),
as Slack does. `add_user`, `add_channel(..., is_member=False)` (posts there get
`not_in_channel`) make more of the workspace. `calls` records each Web API call as `(method,
params)`; `uploads` the bytes of each file; `envelopes` every envelope sent, by id.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import itertools
import json
import math
import mimetypes
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import aiohttp
from aiohttp import WSMsgType, web

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slack"
TEXT_LIMIT = 40_000  # chat.postMessage / chat.update refuse longer texts: msg_too_long
BLOCKS_LIMIT = 50  # a message carries at most 50 blocks: invalid_blocks
TS_BASE = 1_700_000_000  # message ts are this plus a counter: ordered, unique, no wall clock


def load_fixture(name: str) -> dict[str, Any]:
    """A recorded payload from tests/fixtures/slack/ (origins in its README)."""
    loaded = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError(f"{name}: a Slack fixture is a JSON object")
    return loaded


def sign(signing_secret: str, timestamp: str, body: str) -> str:
    """Slack's request signature: `v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class EventPost:
    """What the Events API request URL answered."""

    status: int
    headers: Mapping[str, str]
    body: str


async def post_signed_event(
    url: str,
    payload: Mapping[str, Any],
    *,
    signing_secret: str,
    timestamp: int | None = None,
    retry: tuple[int, str] | None = None,
) -> EventPost:
    """POST an Events API payload to `url` as Slack does: JSON, signed, with the timestamp
    (now unless given: a stale one tests replay protection), and on a redelivery
    `retry=(num, reason)` as X-Slack-Retry-Num / X-Slack-Retry-Reason (e.g. `(1,
    "http_timeout")`)."""
    body = json.dumps(payload)
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(signing_secret, stamp, body),
    }
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry[0])
        headers["X-Slack-Retry-Reason"] = retry[1]
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body.encode(), headers=headers) as response,
    ):
        return EventPost(response.status, dict(response.headers), await response.text())


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Slack's per-method limits in one channel ("1 message per second per channel" for posts,
    with short bursts allowed): `per_channel` calls of a method per `window` seconds in a
    channel. A method not named is not limited."""

    per_channel: Mapping[str, int] = field(
        default_factory=lambda: {"chat.postMessage": 5, "chat.update": 5}
    )
    window: float = 1.0


@dataclass(slots=True)
class Ack:
    """An acknowledgement a Socket Mode client sent: `{"envelope_id": ..., "payload": ...}`."""

    envelope_id: str
    payload: dict[str, Any] | None
    at: float  # the fake's clock (time.monotonic unless given)


@dataclass(slots=True)
class _Connection:
    ws: web.WebSocketResponse
    request: web.Request
    draining: bool = False  # sent a disconnect; envelopes go to the next connection


class SlackApiRefusal(Exception):
    """A Web API call refused with Slack's `{"ok": false, "error": ...}` body."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class FakeSlackServer:
    """One workspace, one bot user, a DM and a public channel; more channels on demand."""

    BOT_TOKEN = "xoxb-1111111111-2222222222-fakebottoken"
    APP_TOKEN = "xapp-1-A0FAKEAPP-3333333333-fakeapptoken"
    SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
    TEAM_ID = "T0FAKETEAM"
    APP_ID = "A0FAKEAPP"
    BOT_ID = "B0FAKEBOT"
    BOT_USER_ID = "U0FAKEBOT"
    USER_ID = "U0OWNER01"
    DM_CHANNEL = "D0OWNERDM"
    CHANNEL = "C0GENERAL"

    def __init__(
        self,
        *,
        limits: RateLimits | None = None,
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
        echo_own_messages: bool = True,
    ) -> None:
        self.limits = RateLimits() if limits is None else limits
        self.echo_own_messages = echo_own_messages
        self._echoes: list[dict[str, Any]] = []  # events the last Web API call caused
        self.port = port
        self._clock = clock
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.acks: list[Ack] = []
        self.on_ack: Callable[[Ack], Awaitable[None] | None] | None = None
        self.envelopes: dict[str, dict[str, Any]] = {}  # every envelope sent, by id
        self.hellos = 0  # Socket Mode connections greeted
        self.ephemerals: list[dict[str, Any]] = []  # chat.postEphemeral: one user saw each
        self.uploads: dict[str, bytes] = {}  # file id -> bytes
        self.rate_limited: list[str] = []  # methods answered 429
        self.channels: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}  # (channel, ts) -> message
        self._files: dict[str, dict[str, Any]] = {}  # file id -> file object
        self._file_paths: dict[str, str] = {}  # url_private path -> file id
        self._pending: deque[dict[str, Any]] = deque()  # envelopes waiting for a connection
        self._forced: dict[str, deque[int]] = {}  # method -> Retry-After of forced 429s
        self._recent: dict[tuple[str, str], deque[float]] = {}
        self._tickets: set[str] = set()
        self._live: list[_Connection] = []
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.add_user(self.USER_ID, "owner", "Ada Owner")
        bot = self.add_user(self.BOT_USER_ID, "bruce", "Bruce")
        bot.update(is_bot=True, profile={**bot["profile"], "bot_id": self.BOT_ID})
        self.add_channel(self.DM_CHANNEL, is_im=True, user=self.USER_ID)
        self.add_channel(self.CHANNEL, name="general")

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._web_api)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_get("/files-pri/{tail:.*}", self._file_download)
        app.router.add_get("/signin", self._signin_page)
        app.router.add_get("/link/", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        for connection in list(self._live):
            await connection.ws.close(code=1001)
        self._live.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def root_url(self) -> str:
        if not self.port:
            raise RuntimeError("the fake Slack has no port yet: start it, or pass port=")
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base_url(self) -> str:
        """slack_sdk's `base_url` (it appends the method name, so the trailing `/` matters)."""
        return f"{self.root_url}/api/"

    # ---- workspace ---------------------------------------------------------------------------

    def add_user(self, user_id: str, name: str, real_name: str = "") -> dict[str, Any]:
        user = {
            "id": user_id,
            "team_id": self.TEAM_ID,
            "name": name,
            "real_name": real_name or name,
            "deleted": False,
            "is_bot": False,
            "tz": "Europe/London",
            "profile": {"display_name": name, "real_name": real_name or name},
        }
        self.users[user_id] = user
        return user

    def add_channel(
        self,
        channel_id: str,
        *,
        name: str = "",
        is_im: bool = False,
        user: str = "",
        is_member: bool = True,
    ) -> dict[str, Any]:
        """A channel the bot is in (`is_member=False`: one it is not, where Slack answers a
        post `not_in_channel`); `is_im` a DM with `user`."""
        channel: dict[str, Any] = {
            "id": channel_id,
            "is_im": is_im,
            "created": TS_BASE,
            "is_member": is_member,
        }
        if is_im:
            channel["user"] = user
        else:
            channel.update(name=name or channel_id.lower(), is_channel=True, is_private=False)
        self.channels[channel_id] = channel
        return channel

    def _next_ts(self) -> str:
        n = next(self._ids)
        return f"{TS_BASE + n}.{n:06d}"

    # ---- what the bot did --------------------------------------------------------------------

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """The bot's messages in `channel` (thread replies included, `thread_ts` set), oldest
        first; deleted ones stay, with `deleted` true."""
        return [m for (ch, _), m in self._messages.items() if ch == channel and m["user"] == "bot"]

    def texts(self, channel: str) -> list[str]:
        return [m["text"] for m in self.messages(channel) if not m["deleted"]]

    def message(self, channel: str, ts: str) -> dict[str, Any]:
        return self._messages[(channel, ts)]

    async def wait_for(self, condition: Callable[[], bool], within: float = 10.0) -> None:
        """Wait until `condition()` holds: checked at each change of the fake's state, and
        every 20 ms for conditions on the test's own state (what a client received)."""
        try:
            async with asyncio.timeout(within):
                while not condition():
                    async with self._changed:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.02):
                                await self._changed.wait()
        except TimeoutError:
            raise AssertionError(
                f"fake Slack: condition not met within {within} s; calls "
                f"{[method for method, _ in self.calls]}, acks {len(self.acks)}"
            ) from None

    async def wait_for_messages(
        self, channel: str, n: int = 1, within: float = 10.0
    ) -> list[dict[str, Any]]:
        """Wait until the bot has posted `n` messages in `channel`; returns them all."""
        await self.wait_for(lambda: len(self.messages(channel)) >= n, within)
        return self.messages(channel)

    async def wait_for_ack(self, envelope_id: str, within: float = 10.0) -> Ack:
        await self.wait_for(lambda: any(a.envelope_id == envelope_id for a in self.acks), within)
        return next(a for a in self.acks if a.envelope_id == envelope_id)

    async def wait_for_connection(self, hellos: int = 1, within: float = 10.0) -> None:
        """Wait until `hellos` Socket Mode connections have been greeted (and one is live)."""
        await self.wait_for(lambda: self.hellos >= hellos and self._current() is not None, within)

    def force_429(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        """The next `times` calls of `method` are answered 429 with this Retry-After."""
        self._forced.setdefault(method, deque()).extend([retry_after] * times)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ---- Web API -----------------------------------------------------------------------------

    async def _web_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _params(request)
        token = _token(request, params)
        params.pop("token", None)
        self.calls.append((method, params))
        try:
            self._check_token(method, token)
            limited = self._rate_limit(method, str(params.get("channel") or ""))
            if limited is not None:
                self.rate_limited.append(method)
                return _ratelimited(limited)
            handler = self._handlers().get(method)
            if handler is None:
                raise SlackApiRefusal("unknown_method")
            body = {"ok": True, **handler(params)}
        except SlackApiRefusal as refusal:
            body = {"ok": False, "error": refusal.error}
        echoes, self._echoes = self._echoes, []
        for event in echoes if self.echo_own_messages else []:
            await self.send_envelope("events_api", self.event_callback(event))
        await self._notify()
        return web.json_response(body)

    def _echo(self, message: dict[str, Any], subtype: str | None = None) -> None:
        """What Slack sends the app back about its own message (it subscribes to message.im
        and message.channels): the post itself (events_message_own_bot_reply_recorded.json),
        a `message_changed` for an edit (events_message_changed_recorded.json), a
        `message_deleted` for a delete (events_message_deleted_recorded.json)."""
        channel = message["channel"]
        is_im = self.channels[channel]["is_im"]
        wire = {**self._wire(message), "bot_profile": self._bot_profile()}
        if message["thread_ts"]:
            wire["parent_user_id"] = self._author(channel, message["thread_ts"])
        event: dict[str, Any] = {"type": "message", "channel": channel}
        if subtype is None:
            event.update(wire)
            event["event_ts"] = message["ts"]
            if message["files"]:
                event.update(subtype="file_share", upload=True)
        else:
            ts = self._next_ts()
            event.update(subtype=subtype, hidden=True, ts=ts, event_ts=ts)
            event["previous_message"] = {
                **wire,
                "text": message["edits"][-2 if subtype == "message_changed" else -1],
            }
            if subtype == "message_changed":
                event["message"] = wire
            else:
                event["deleted_ts"] = message["ts"]
        event["channel_type"] = "im" if is_im else "channel"
        self._echoes.append(event)

    def _author(self, channel: str, ts: str) -> str:
        """Who wrote the message `ts` (a thread's root): a user id, the bot's user id."""
        root = self._messages.get((channel, ts))
        if root is None or root["user"] == "bot":
            return self.BOT_USER_ID if root is not None else self.USER_ID
        return str(root["user"])

    def _bot_profile(self) -> dict[str, Any]:
        return {
            "id": self.BOT_ID,
            "deleted": False,
            "name": "Bruce",
            "updated": TS_BASE,
            "app_id": self.APP_ID,
            "team_id": self.TEAM_ID,
        }

    def _check_token(self, method: str, token: str | None) -> None:
        if not token:
            raise SlackApiRefusal("not_authed")
        if token not in (self.BOT_TOKEN, self.APP_TOKEN):
            raise SlackApiRefusal("invalid_auth")
        wants_app_token = method.startswith("apps.connections.")
        if (token == self.APP_TOKEN) != wants_app_token:
            raise SlackApiRefusal("not_allowed_token_type")

    def _rate_limit(self, method: str, channel: str) -> int | None:
        """The Retry-After (seconds) when this call is over a limit, else None."""
        forced = self._forced.get(method)
        if forced:
            return forced.popleft()
        allowed = self.limits.per_channel.get(method)
        if allowed is None:
            return None
        now, window = self._clock(), self.limits.window
        recent = self._recent.setdefault((method, channel), deque())
        while recent and recent[0] <= now - window:
            recent.popleft()
        if len(recent) >= allowed:
            return max(1, math.ceil(recent[0] + window - now))
        recent.append(now)
        return None

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "auth.test": self._auth_test,
            "apps.connections.open": self._connections_open,
            "chat.postMessage": self._post_message,
            "chat.postEphemeral": self._post_ephemeral,
            "chat.update": self._update_message,
            "chat.delete": self._delete_message,
            "reactions.add": self._add_reaction,
            "reactions.remove": self._remove_reaction,
            "conversations.open": self._open_dm,
            "conversations.replies": self._replies,
            "conversations.info": self._conversation_info,
            "users.info": self._user_info,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }

    def _post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        """Shown to one user only, and never an event: kept in `ephemerals`. Slack refuses a
        user who is not a member of the conversation (`user_not_in_channel`)."""
        channel = self._channel(params)
        user = str(params.get("user") or "")
        if user not in self.users:
            raise SlackApiRefusal("user_not_found")
        text, blocks = _content(params)
        if not text and not blocks:
            raise SlackApiRefusal("no_text")
        ts = self._next_ts()
        thread_ts = params.get("thread_ts") or None
        self.ephemerals.append(
            {"channel": channel, "user": user, "text": text, "thread_ts": thread_ts, "ts": ts}
        )
        return {"message_ts": ts}

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        # The shape of auth.test's documented answer (web_auth_test_docs.json), for a bot token.
        return {
            "url": "https://fake-workspace.slack.com/",
            "team": "Fake Workspace",
            "user": "bruce",
            "team_id": self.TEAM_ID,
            "user_id": self.BOT_USER_ID,
            "bot_id": self.BOT_ID,
            "is_enterprise_install": False,
        }

    def _connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        host = self.root_url.replace("http://", "ws://")
        return {"url": f"{host}/link/?ticket={ticket}&app_id={self.APP_ID}"}

    def _channel(self, params: dict[str, Any], key: str = "channel") -> str:
        channel = str(params.get(key) or "")
        if channel in self.users:  # Slack takes a user id for the app's DM with that user
            channel = self._dm_of(channel)
        if channel not in self.channels:
            raise SlackApiRefusal("channel_not_found")
        if not self.channels[channel].get("is_member", True):
            raise SlackApiRefusal("not_in_channel")
        return channel

    def _dm_of(self, user: str) -> str:
        for channel in self.channels.values():
            if channel["is_im"] and channel.get("user") == user:
                return str(channel["id"])
        return str(self.add_channel(f"D{user[1:]}", is_im=True, user=user)["id"])

    def _open_dm(self, params: dict[str, Any]) -> dict[str, Any]:
        users = str(params.get("users") or "").split(",")
        if len(users) != 1 or users[0] not in self.users:
            raise SlackApiRefusal("user_not_found")
        return {"channel": {"id": self._dm_of(users[0])}}

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """A thread, the root first (a message without replies is a thread of one)."""
        channel, ts = self._channel(params), str(params.get("ts") or "")
        if (channel, ts) not in self._messages:
            raise SlackApiRefusal("thread_not_found")
        thread = [
            m
            for (ch, _), m in self._messages.items()
            if ch == channel and not m["deleted"] and ts in (m["ts"], m["thread_ts"])
        ]
        return {"messages": [self._wire(m) for m in thread], "has_more": False}

    def _bot_message(self, channel: str, ts: str) -> dict[str, Any]:
        message = self._messages.get((channel, ts))
        if message is None or message["deleted"]:
            raise SlackApiRefusal("message_not_found")
        if message["user"] != "bot":
            raise SlackApiRefusal("cant_update_message")
        return message

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        text, blocks = _content(params)
        if not text and not blocks and not params.get("attachments"):
            raise SlackApiRefusal("no_text")
        ts = self._next_ts()
        thread_ts = params.get("thread_ts") or None
        message = self._store(channel, ts, "bot", text, thread_ts=thread_ts, blocks=blocks)
        self._echo(message)
        return {"channel": channel, "ts": ts, "message": self._wire(message)}

    def _update_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        message = self._bot_message(channel, str(params.get("ts") or ""))
        text, blocks = _content(params)
        message["edits"].append(text)
        message["text"] = text
        if blocks is not None:
            message["blocks"] = blocks
        self._echo(message, "message_changed")
        wire = {**self._wire(message), "edited": {"user": self.BOT_ID, "ts": self._next_ts()}}
        return {"channel": channel, "ts": message["ts"], "text": text, "message": wire}

    def _delete_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        message = self._bot_message(channel, str(params.get("ts") or ""))
        message["deleted"] = True
        self._echo(message, "message_deleted")
        return {"channel": channel, "ts": message["ts"]}

    def _add_reaction(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        message = self._messages.get((channel, str(params.get("timestamp") or "")))
        if message is None or message["deleted"]:
            raise SlackApiRefusal("message_not_found")
        name = str(params.get("name") or "")
        if not name:
            raise SlackApiRefusal("invalid_name")
        if name in message["reactions"]:
            raise SlackApiRefusal("already_reacted")
        message["reactions"].append(name)
        return {}

    def _remove_reaction(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        message = self._messages.get((channel, str(params.get("timestamp") or "")))
        if message is None:
            raise SlackApiRefusal("message_not_found")
        name = str(params.get("name") or "")
        if name not in message["reactions"]:
            raise SlackApiRefusal("no_reaction")
        message["reactions"].remove(name)
        return {}

    def _conversation_info(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"channel": self.channels[self._channel(params)]}

    def _user_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(params.get("user") or ""))
        if user is None:
            raise SlackApiRefusal("user_not_found")
        return {"user": user}

    def _wire(self, message: dict[str, Any]) -> dict[str, Any]:
        """A bot message as chat.postMessage answers it (web_chat_postMessage_docs.json)."""
        wire: dict[str, Any] = {
            "type": "message",
            "text": message["text"],
            "user": self.BOT_USER_ID,
            "bot_id": self.BOT_ID,
            "app_id": self.APP_ID,
            "team": self.TEAM_ID,
            "ts": message["ts"],
        }
        if message["user"] != "bot":
            wire = {"type": "message", "text": message["text"], "user": message["user"]}
            wire.update(team=self.TEAM_ID, ts=message["ts"])
        if message["blocks"] is not None:
            wire["blocks"] = message["blocks"]
        if message["thread_ts"]:
            wire["thread_ts"] = message["thread_ts"]
        if message["files"]:
            wire["files"] = message["files"]
        return wire

    def _store(self, channel: str, ts: str, user: str, text: str, **extra: Any) -> dict[str, Any]:
        message: dict[str, Any] = {
            "ts": ts,
            "channel": channel,
            "user": user,  # "bot" for the bot's own, else the Slack user id
            "text": text,
            "thread_ts": extra.get("thread_ts"),
            "blocks": extra.get("blocks"),
            "files": extra.get("files", []),
            "edits": [text],
            "reactions": [],
            "deleted": False,
        }
        self._messages[(channel, ts)] = message
        return message

    # ---- files -------------------------------------------------------------------------------

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename, length = params.get("filename"), params.get("length")
        if not filename or length is None:
            raise SlackApiRefusal("invalid_arguments")
        file_id = f"F{next(self._ids):08d}"
        self._files[file_id] = {"id": file_id, "name": str(filename), "size": int(length)}
        return {"upload_url": f"{self.root_url}/upload/v1/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        if file_id not in self._files:
            return web.Response(status=404, text="Not Found")
        data = await request.read()
        self.uploads[file_id] = data
        await self._notify()
        # What files.slack.com answers an upload (slack_sdk reads it as text/plain).
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        items = _json_param(params.get("files"))
        if not isinstance(items, list) or not items:
            raise SlackApiRefusal("invalid_arguments")
        shared: list[dict[str, Any]] = []
        for item in items:
            file_id = str(item.get("id") or "")
            if file_id not in self.uploads:
                raise SlackApiRefusal("file_not_found")
            name = self._files[file_id]["name"]
            title = item.get("title") or name
            shared.append(self._file_object(file_id, name, title, self.BOT_USER_ID))
        channel = params.get("channel_id") or params.get("channels")
        if channel:
            channel = self._channel({"channel": str(channel).split(",")[0]})
            text = str(params.get("initial_comment") or "")
            thread_ts = params.get("thread_ts") or None
            message = self._store(
                channel, self._next_ts(), "bot", text, thread_ts=thread_ts, files=shared
            )
            self._echo(message)
        return {"files": [{"id": f["id"], "title": f["title"]} for f in shared]}

    def _file_object(self, file_id: str, name: str, title: str, user: str) -> dict[str, Any]:
        """A file as message events carry it (events_message_file_share.json), hosted here."""
        data = self.uploads[file_id]
        path = f"/files-pri/{self.TEAM_ID}-{file_id}/{name}"
        self._file_paths[path] = file_id
        self._file_paths[f"/files-pri/{self.TEAM_ID}-{file_id}/download/{name}"] = file_id
        info = self._files.setdefault(file_id, {"id": file_id})
        info.update(
            id=file_id,
            created=TS_BASE,
            timestamp=TS_BASE,
            name=name,
            title=title,
            mimetype=info.get("mimetype")
            or mimetypes.guess_type(name)[0]
            or "application/octet-stream",
            filetype=name.rsplit(".", 1)[-1] if "." in name else "binary",
            user=user,
            size=len(data),
            mode="hosted",
            is_external=False,
            is_public=False,
            url_private=self.root_url + path,
            url_private_download=f"{self.root_url}/files-pri/{self.TEAM_ID}-{file_id}"
            f"/download/{name}",
            permalink=f"https://fake-workspace.slack.com/files/{user}/{file_id}/{name}",
        )
        return dict(info)

    async def _file_download(self, request: web.Request) -> web.StreamResponse:
        file_id = self._file_paths.get(request.path)
        if request.headers.get("Authorization") != f"Bearer {self.BOT_TOKEN}":
            # Slack sends a request without the bot token to the workspace's sign-in page.
            raise web.HTTPFound(f"/signin?redir={request.path}")
        if file_id is None:
            return web.Response(status=404, text="File not found")
        mimetype = self._files[file_id].get("mimetype", "application/octet-stream")
        return web.Response(body=self.uploads[file_id], content_type=mimetype)

    async def _signin_page(self, request: web.Request) -> web.Response:
        page = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Fake "
        return web.Response(text=page + "Workspace</body></html>", content_type="text/html")

    # ---- Socket Mode -------------------------------------------------------------------------

    def _current(self) -> _Connection | None:
        live = [c for c in self._live if not c.draining and not c.ws.closed]
        return live[-1] if live else None

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)  # a ticket opens one connection
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        connection = _Connection(ws, request)
        for old in self._live:  # Slack closes a connection it asked to refresh
            if old.draining and not old.ws.closed:
                await old.ws.close(code=1000)
        self._live.append(connection)
        hello = load_fixture("socket_hello.json")
        hello["num_connections"] = len([c for c in self._live if not c.ws.closed])
        hello["connection_info"] = {"app_id": self.APP_ID}
        await ws.send_str(json.dumps(hello))
        self.hellos += 1
        await self._flush()
        await self._notify()
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    await self._received(frame.data)
        finally:
            if connection in self._live:
                self._live.remove(connection)
            await self._notify()
        return ws

    async def _received(self, data: str) -> None:
        try:
            frame = json.loads(data)
        except ValueError:
            return
        if isinstance(frame, dict) and "envelope_id" in frame:
            ack = Ack(str(frame["envelope_id"]), frame.get("payload"), self._clock())
            self.acks.append(ack)
            if self.on_ack is not None:
                checked = self.on_ack(ack)
                if inspect.isawaitable(checked):
                    await checked
            await self._notify()

    async def _flush(self) -> None:
        connection = self._current()
        while connection is not None and self._pending:
            envelope = self._pending[0]
            try:
                await connection.ws.send_str(json.dumps(envelope))
            except (ConnectionError, RuntimeError):
                return  # the connection went away: the envelope waits for the next one
            self._pending.popleft()

    async def send_envelope(
        self, kind: str, payload: dict[str, Any], *, accepts_response_payload: bool = False
    ) -> dict[str, Any]:
        """Send (or queue until a connection) an envelope of `kind` (`events_api`,
        `interactive`, `slash_commands`) around `payload`; returns it."""
        envelope: dict[str, Any] = {
            "envelope_id": str(uuid.uuid4()),
            "payload": payload,
            "type": kind,
            "accepts_response_payload": accepts_response_payload,
        }
        if kind == "events_api":
            envelope.update(retry_attempt=0, retry_reason="")
        self.envelopes[envelope["envelope_id"]] = envelope
        self._pending.append(envelope)
        await self._flush()
        return envelope

    async def redeliver(self, envelope_id: str, reason: str = "timeout") -> dict[str, Any]:
        """Send an envelope again, as Slack does when no ack came: same id, retry_attempt + 1."""
        envelope = self.envelopes[envelope_id]
        envelope["retry_attempt"] = int(envelope.get("retry_attempt", 0)) + 1
        envelope["retry_reason"] = reason
        self._pending.append(envelope)
        await self._flush()
        return envelope

    async def redeliver_unacked(self) -> list[dict[str, Any]]:
        acked = {a.envelope_id for a in self.acks}
        pending = {e["envelope_id"] for e in self._pending}
        again = [i for i in self.envelopes if i not in acked and i not in pending]
        return [await self.redeliver(envelope_id) for envelope_id in again]

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Send `{"type": "disconnect"}` (socket_disconnect.json) on the live connection: the
        client opens a new one; the old one is closed when it does."""
        connection = self._current()
        if connection is None:
            raise RuntimeError("fake Slack: no Socket Mode connection to disconnect")
        frame = load_fixture("socket_disconnect.json")
        frame.update(reason=reason, connection_info={"app_id": self.APP_ID})
        connection.draining = True
        await connection.ws.send_str(json.dumps(frame))

    async def drop_connection(self) -> None:
        """Cut the live connection's TCP stream: no disconnect message, no close frame (a
        network cut; slack_sdk notices it and reconnects)."""
        connection = self._current()
        if connection is not None and connection.request.transport is not None:
            connection.draining = True
            connection.request.transport.close()

    # ---- events ------------------------------------------------------------------------------

    def event_callback(self, event: dict[str, Any]) -> dict[str, Any]:
        """The Events API wrapper around `event` (as in events_message_im_docs.json)."""
        n = next(self._ids)
        return {
            "token": "fake-verification-token",
            "team_id": self.TEAM_ID,
            "api_app_id": self.APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{n:08d}",
            "event_time": TS_BASE + n,
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.TEAM_ID,
                    "user_id": self.BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-fake-{n}",
        }

    def _user_event(
        self, kind: str, user: str, channel: str, text: str, thread_ts: str | None
    ) -> dict[str, Any]:
        if channel not in self.channels:
            self.add_channel(channel, is_im=channel.startswith("D"), user=user)
        ts = self._next_ts()
        self._store(channel, ts, user, text, thread_ts=thread_ts)
        event: dict[str, Any] = {
            "client_msg_id": str(uuid.uuid4()),
            "type": kind,
            "text": text,
            "user": user,
            "ts": ts,
            "team": self.TEAM_ID,
            "blocks": [_rich_text(text)],
            "channel": channel,
            "event_ts": ts,
        }
        if thread_ts:
            event.update(thread_ts=thread_ts, parent_user_id=self._author(channel, thread_ts))
        return event

    def message_event(
        self,
        user: str,
        channel: str,
        text: str,
        thread_ts: str | None = None,
        channel_type: str | None = None,
    ) -> dict[str, Any]:
        """The event_callback payload of a user's message (message.im / message.channels);
        `channel_type` is "im" in a DM, "channel" elsewhere, unless given."""
        event = self._user_event("message", user, channel, text, thread_ts)
        is_im = self.channels[channel]["is_im"]
        event["channel_type"] = channel_type or ("im" if is_im else "channel")
        return self.event_callback(event)

    def mention_event(
        self, user: str, channel: str, text: str, thread_ts: str | None = None
    ) -> dict[str, Any]:
        """The event_callback payload of an app_mention (the text starts with the bot's
        mention, as Slack writes it: `<@U...>`)."""
        mention = f"<@{self.BOT_USER_ID}> {text}"
        return self.event_callback(
            self._user_event("app_mention", user, channel, mention, thread_ts)
        )

    async def inject_message(
        self,
        user: str,
        channel: str,
        text: str,
        thread_ts: str | None = None,
        channel_type: str | None = None,
    ) -> dict[str, Any]:
        payload = self.message_event(user, channel, text, thread_ts, channel_type)
        return await self.send_envelope("events_api", payload)

    async def inject_mention(
        self, user: str, channel: str, text: str, thread_ts: str | None = None
    ) -> dict[str, Any]:
        return await self.send_envelope(
            "events_api", self.mention_event(user, channel, text, thread_ts)
        )

    async def inject_file_message(
        self,
        user: str,
        channel: str,
        text: str,
        files: list[tuple[str, bytes, str]],
        thread_ts: str | None = None,
    ) -> dict[str, Any]:
        """A user's message with files `(name, bytes, mimetype)`, subtype `file_share`; each
        file is hosted on the fake at its `url_private` (bot token required)."""
        shared = []
        for name, data, mimetype in files:
            file_id = f"F{next(self._ids):08d}"
            self.uploads[file_id] = data
            self._files[file_id] = {"id": file_id, "mimetype": mimetype}
            shared.append(self._file_object(file_id, name, name, user))
        payload = self.message_event(user, channel, text, thread_ts)
        payload["event"].update(subtype="file_share", files=shared, upload=False)
        self._messages[(channel, payload["event"]["ts"])]["files"] = shared
        return await self.send_envelope("events_api", payload)

    async def inject_block_action(
        self, user: str, channel: str, message_ts: str, action_id: str, value: str = ""
    ) -> dict[str, Any]:
        """A button press on a message (interactive_block_actions_button.json, ids adapted)."""
        payload = load_fixture("interactive_block_actions_button.json")
        payload.pop("token", None)
        payload["user"] = {"id": user, "username": user.lower(), "team_id": self.TEAM_ID}
        payload.update(api_app_id=self.APP_ID, trigger_id=f"{next(self._ids)}.fake.trigger")
        payload["team"] = {"id": self.TEAM_ID, "domain": "fake-workspace"}
        payload["channel"] = {"id": channel, "name": self.channels.get(channel, {}).get("name")}
        payload["container"] = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        stored = self._messages.get((channel, message_ts))
        if stored is not None:
            payload["message"] = {**self._wire(stored), "user": self.BOT_USER_ID}
        action = payload["actions"][0]
        action.update(action_id=action_id, value=value, action_ts=self._next_ts())
        return await self.send_envelope("interactive", payload)

    async def replay(self, name: str, replace: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Send a recorded Socket Mode envelope (socket_events_api_*.json) as captured, but
        with a fresh envelope id and the captured ids in `replace` swapped for ours."""
        text = (FIXTURES / name).read_text(encoding="utf-8")
        for captured, ours in (replace or {}).items():
            text = text.replace(f'"{captured}"', f'"{ours}"').replace(
                f"<@{captured}>", f"<@{ours}>"
            )
        recorded = json.loads(text)
        return await self.send_envelope(
            recorded["type"],
            recorded["payload"],
            accepts_response_payload=bool(recorded.get("accepts_response_payload")),
        )


def _rich_text(text: str) -> dict[str, Any]:
    """The rich_text block Slack adds to a typed message (as in the recorded events)."""
    return {
        "type": "rich_text",
        "block_id": uuid.uuid4().hex[:4],
        "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}],
    }


async def _params(request: web.Request) -> dict[str, Any]:
    """A Web API call's arguments: slack_sdk sends them as a query string, a form
    (urlencoded or multipart) or a JSON body, and Slack reads them all."""
    params: dict[str, Any] = dict(request.query)
    if request.method != "POST" or not request.body_exists:  # (read before: cached)
        return params
    if request.content_type == "application/json":
        body = await request.json()
        if isinstance(body, dict):
            params.update(body)
    else:
        form = await request.post()
        params.update({k: v for k, v in form.items() if isinstance(v, str)})
    return params


def _token(request: web.Request, params: Mapping[str, Any]) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip() or None
    token = params.get("token")
    return str(token) if token else None


def _json_param(value: Any) -> Any:
    """A structured argument: a list as JSON sends it, or a JSON string as a form sends it."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            raise SlackApiRefusal("invalid_arguments") from None
    return value


def _content(params: Mapping[str, Any]) -> tuple[str, list[Any] | None]:
    text = str(params.get("text") or "")
    if len(text) > TEXT_LIMIT:
        raise SlackApiRefusal("msg_too_long")
    blocks = _json_param(params.get("blocks")) if params.get("blocks") is not None else None
    if blocks is not None and (not isinstance(blocks, list) or len(blocks) > BLOCKS_LIMIT):
        raise SlackApiRefusal("invalid_blocks")
    return text, blocks


def _ratelimited(retry_after: int) -> web.Response:
    # Slack's 429: the error body, and Retry-After in whole seconds.
    return web.json_response(
        {"ok": False, "error": "ratelimited"},
        status=429,
        headers={"Retry-After": str(retry_after)},
    )
