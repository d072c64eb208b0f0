"""A local fake of Discord (REST API v10 and the gateway websocket) for driving real discord.py.

Point discord.py at it the way Bruce's config does: `channels.discord.api_base_url` =
`server.api_base_url` (`discord.http.Route.BASE`) and `channels.discord.gateway_url` =
`server.gateway_url` (`DiscordWebSocket.DEFAULT_GATEWAY`). The fake has one bot user, one guild
with a text channel and a thread, and DM channels made on demand. It speaks the wire protocol
discord.py 2.7 expects (TESTING.md): JSON answers with `Content-Type: application/json` exactly,
plain TEXT gateway frames, HELLO → IDENTIFY → READY (with `resume_gateway_url`) → GUILD_CREATE,
heartbeats acknowledged, RESUME replaying what the client missed, then RESUMED::

    async with FakeDiscordServer() as discord_fake:
        ...  # start Bruce with the URLs above and token FakeDiscordServer.TOKEN
        await discord_fake.wait_for_session()
        await discord_fake.send_dm(OWNER, "hello")                    # a MESSAGE_CREATE
        await discord_fake.send_guild_message(OWNER, "hi", mention_bot=True)
        await discord_fake.wait_for_sent(discord_fake.dm_channel_id(OWNER))
        discord_fake.texts(channel_id)                                 # what the bot posted
        discord_fake.fail_sends(429, retry_after=0.05)                 # next send is rate limited
        await discord_fake.drop_connection()                           # server-side close
        FakeDiscordServer(message_content_intent=False)                # IDENTIFY → close 4014
        await discord_fake.replay("dm_poll.json", {CAPTURED_AUTHOR_ID: OWNER_ID, ...})

`replay` dispatches a payload recorded from real Discord (tests/fixtures/discord/, origins in its
README) as captured, with the captured ids replaced by the fake's (`adapt_ids`); a replayed
MESSAGE_CREATE gets a fresh message id unless the mapping names one. The bot's messages, and every
MESSAGE_CREATE dispatched, can be fetched back (`GET /channels/{id}/messages/{id}`), as on Discord.

Like Discord, the fake refuses a message over 2000 characters (400, code 50035), answers a wrong
token with 401, echoes the bot's own messages back over the gateway as MESSAGE_CREATE, and keeps
events dispatched while no session is connected so that a RESUME replays them.

Buttons as Discord has them: a message's `components` are checked (action rows of at most five
buttons; a non-link button needs a unique `custom_id` of 1-100 characters and a style 1-4, a
label at most 80 characters; otherwise 400, code 50035) and kept; `PATCH` edits the bot's
messages (over 2000 characters refused as a post is; every content a message had is kept in
`edits`, the posted one first; `fail_edits(429, retry_after=...)` rate-limits the next edits the
way Discord does, with `Via` and `retry_after`), and `DELETE` takes one down ("Unknown Message"
once gone). `press` dispatches the recorded button INTERACTION_CREATE
(guild_button_interaction_docs_2021.json) for a tap, ids adapted, the message as the fake holds
it, and the fields Discord has added since 2021 (`channel`, `attachment_size_limit`...); in a DM
the presser is `user` instead of `member`. `POST /interactions/{id}/{token}/callback` (no bot
token, as on Discord) takes one response per interaction: type 4 (a message; flags 64:
ephemeral, seen only by the presser), 6 (deferred update) or 7 (update the message the button is
on); a second one gets 400 code 40060, an unknown id or token, or `fail_interaction_callbacks`,
404 code 10062 "Unknown interaction" (what a response after Discord's 3 seconds gets). With
`with_response` the answer is the interaction callback object (200), else 204::

    interaction = await discord_fake.press(question, OWNER, "Confirm")
    response = await discord_fake.wait_for_response(interaction)   # {"type": 7, "data": ...}
    discord_fake.buttons(question["id"])                            # the buttons it has now
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import itertools
import json
import math
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import aiohttp
from aiohttp import WSMsgType, web
from PIL import Image

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
MESSAGE_CONTENT_INTENT = 1 << 15
PRIVILEGED_INTENTS = {
    1 << 1: "GUILD_MEMBERS",
    1 << 8: "GUILD_PRESENCES",
    1 << 15: "MESSAGE_CONTENT",
}
HEARTBEAT_INTERVAL_MS = 41_250
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "discord"


def load_fixture(name: str) -> dict[str, Any]:
    """A recorded gateway frame (`{"t": event, "d": payload}`) from tests/fixtures/discord/."""
    frame = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    if not isinstance(frame, dict) or "t" not in frame or "d" not in frame:
        raise ValueError(f"{name}: a fixture is a gateway frame with 't' and 'd'")
    return frame


def adapt_ids(payload: Any, ids: Mapping[int | str, int | str]) -> Any:
    """`payload` with each captured id replaced wherever it stands: as a field's value, or inside
    a mention in a text (`<@id>`, `<@&id>`, `<#id>`). Nothing else is changed."""
    text = json.dumps(payload, ensure_ascii=False)
    for captured, ours in ids.items():
        text = re.sub(rf"(?<![0-9]){captured}(?![0-9])", str(ours), text)
    return json.loads(text)


def user_payload(
    user_id: int, username: str, *, bot: bool = False, global_name: str | None = None
) -> dict[str, Any]:
    """A Discord user object."""
    return {
        "id": str(user_id),
        "username": username,
        "discriminator": "0",
        "global_name": global_name,
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
    }


async def _message_body(request: web.Request) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
    """A message create's JSON and its files: discord.py posts plain JSON, or, with files,
    multipart/form-data with a `payload_json` part and one `files[n]` part per file."""
    if not request.content_type.startswith("multipart/"):
        return await request.json(), []
    body: dict[str, Any] = {}
    files: list[tuple[str, bytes]] = []
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, aiohttp.BodyPartReader):
            continue
        if part.name == "payload_json":
            body = json.loads(await part.text())
        elif part.name and part.name.startswith("files["):
            files.append((part.filename or "file", bytes(await part.read())))
    return body, files


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly `application/json`: with a charset discord.py treats the body as text (TESTING.md).
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={**(headers or {}), "Content-Type": "application/json"},
    )


@dataclass
class _SendFailure:
    status: int
    retry_after: float
    channel_id: int | None


@dataclass(frozen=True, slots=True)
class RouteLimits:
    """Discord's REST rate limits, as its docs describe them (discord.com/developers/docs/topics/
    rate-limits): each route (method and path, ids but the major one taken out) is a bucket per
    major parameter (the channel), `per_route` requests per `window` seconds (5 per 5 s is what
    Discord answers for a channel's message posts); over all routes, `global_per_second`
    requests a second (the global limit is 50). Every answer carries `X-RateLimit-Limit`,
    `-Remaining`, `-Reset` (epoch seconds), `-Reset-After` (seconds) and `-Bucket`; a request
    over a limit is answered 429 `{"message": "You are being rate limited.", "retry_after": s,
    "global": false}` (true, with `X-RateLimit-Global`, for the global one), with `Retry-After`,
    `X-RateLimit-Scope` and `Via` (without which discord.py takes the 429 for a Cloudflare ban)."""

    per_route: int = 5
    window: float = 5.0
    global_per_second: int = 50


@dataclass(slots=True)
class _Window:
    remaining: int
    resets_at: float  # on the fake's clock


# Discord's upload limit for a bot's message (all files of one request), and its refusal.
UPLOAD_LIMIT = 10 * 1024 * 1024
CONTENT_LIMIT = 2000


def _too_long(field_name: str, limit: int) -> web.Response:
    """Discord's 400 for a field over its length (code 50035 with the field's `_errors`)."""
    return _json(
        {
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {
                field_name: {
                    "_errors": [
                        {
                            "code": "BASE_TYPE_MAX_LENGTH",
                            "message": f"Must be {limit} or fewer in length.",
                        }
                    ]
                }
            },
        },
        400,
    )


@dataclass
class _Connection:
    ws: web.WebSocketResponse
    path: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, payload: dict[str, Any]) -> None:
        async with self.lock:
            await self.ws.send_str(json.dumps(payload))


class FakeDiscordServer:
    TOKEN = "fake-token"
    BOT_ID = 700_000_000_000_000_001
    APP_ID = BOT_ID
    OWNER_ID = 700_000_000_000_000_002  # the application's owner (not necessarily allowed)
    GUILD_ID = 700_000_000_000_000_100
    TEXT_CHANNEL_ID = 700_000_000_000_000_101
    THREAD_ID = 700_000_000_000_000_102
    BOT_ROLE_ID = 700_000_000_000_000_103

    def __init__(
        self,
        *,
        token: str = TOKEN,
        message_content_intent: bool = True,
        echo_own_messages: bool = True,
        port: int = 0,
        limits: RouteLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token = token
        # Discord's rate limits (None: none, and no rate-limit headers; `RouteLimits()`: the
        # documented ones). Every 429 they caused is kept in `rate_limited`: (method, path,
        # retry_after), and `exhausted` counts answers that said `X-RateLimit-Remaining: 0`.
        self.limits = limits
        self.rate_limited: list[tuple[str, str, float]] = []
        self.exhausted = 0
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._recent: deque[float] = deque()  # when the last requests came, for the global limit
        self.port = port  # 0: any free port (known after `start`)
        self.message_content_intent = message_content_intent
        self.echo_own_messages = echo_own_messages
        self.bot = user_payload(self.BOT_ID, "Bruce", bot=True)
        # What happened, for assertions.
        self.sent: list[dict[str, Any]] = []  # messages the bot posted, in order
        # files the bot attached to its messages: (channel id, file name, bytes), in order
        self.uploads: list[tuple[int, str, bytes]] = []
        self.send_attempts = 0
        self.typing: dict[int, int] = {}
        self.rest_requests: list[tuple[str, str]] = []
        self.identifies = 0
        self.resumes = 0
        self.heartbeats = 0
        self.gateway_paths: list[str] = []  # the path of each websocket connection
        self.close_codes: list[int] = []  # codes the server closed sessions with
        self.interaction_responses: dict[str, dict[str, Any]] = {}  # id -> {"type", "data"}
        self.edits: dict[int, list[str]] = {}  # message id -> every content it had, in order
        self.deleted: list[int] = []  # ids of the bot's messages it deleted
        self.edit_times: list[float] = []  # time.monotonic() of each edit that was accepted
        # Behaviour.
        self._failures: deque[_SendFailure] = deque()
        self._edit_failures: deque[_SendFailure] = deque()
        self._interactions: dict[str, dict[str, Any]] = {}  # id -> the dispatched payload
        self._failing_callbacks = 0
        self._ids = itertools.count(1)
        self._channels: dict[int, dict[str, Any]] = {}
        self._messages: dict[int, dict[str, Any]] = {}  # message id -> payload, for GET
        self._dm_by_user: dict[int, int] = {}
        self._session_id: str | None = None
        self._history: list[dict[str, Any]] = []  # dispatched frames of the current session
        self._seq = 0
        self._live: _Connection | None = None
        self._before_session: list[tuple[str, dict[str, Any]]] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.cdn: dict[str, bytes] = {}  # attachment path -> bytes
        self.cdn_downloads: list[str] = []
        self._add_guild_channels()

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway-resume", self._gateway)
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._rest)
        app.router.add_get("/attachments/{tail:.*}", self._cdn)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        live, self._live = self._live, None
        if live is not None and not live.ws.closed:
            await live.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def _root(self) -> str:
        if not self.port:
            raise RuntimeError("the fake Discord has no port yet: start it, or pass port=")
        return f"127.0.0.1:{self.port}"

    @property
    def api_base_url(self) -> str:
        return f"http://{self._root}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://{self._root}/gateway"

    @property
    def resume_gateway_url(self) -> str:
        return f"ws://{self._root}/gateway-resume"

    def discord_config(self, allowed_user_ids: list[int], **extra: Any) -> dict[str, Any]:
        """The `channels.discord` section that points Bruce at this fake."""
        return {
            "enabled": True,
            "token": self.token,
            "api_base_url": self.api_base_url,
            "gateway_url": self.gateway_url,
            "allowed_user_ids": allowed_user_ids,
            **extra,
        }

    # ---- scripting ---------------------------------------------------------------------------

    def fail_sends(
        self,
        status: int,
        *,
        times: int = 1,
        retry_after: float = 0.05,
        channel_id: int | None = None,
    ) -> None:
        """Answer the next `times` message posts (to `channel_id`, or any) with an error:
        429 (rate limited, with `Via` and `retry_after`), 403, 404, 500, 503..."""
        self._failures.extend(_SendFailure(status, retry_after, channel_id) for _ in range(times))

    def fail_edits(self, status: int, *, times: int = 1, retry_after: float = 0.05) -> None:
        """Answer the next `times` message edits with an error (429: rate limited)."""
        self._edit_failures.extend(_SendFailure(status, retry_after, None) for _ in range(times))

    def fail_interaction_callbacks(self, times: int = 1) -> None:
        """The next `times` interaction responses get 404 "Unknown interaction" (too late)."""
        self._failing_callbacks += times

    def dm_channel_id(self, user_id: int) -> int:
        """The DM channel between the bot and `user_id` (created on first use)."""
        if user_id not in self._dm_by_user:
            channel_id = self._snowflake()
            self._dm_by_user[user_id] = channel_id
            self._channels[channel_id] = {
                "id": str(channel_id),
                "type": 1,
                "last_message_id": None,
                "flags": 0,
                "recipients": [user_payload(user_id, f"user{user_id}")],
            }
        return self._dm_by_user[user_id]

    def attachment(
        self,
        filename: str,
        data: bytes,
        content_type: str | None,
        *,
        voice_seconds: float | None = None,
        size: int | None = None,
    ) -> dict[str, Any]:
        """An attachment as a MESSAGE_CREATE carries it, its bytes served at its CDN URL (signed
        and expiring, as Discord's are since 2024: ex/is/hm parameters). `voice_seconds` makes it
        a voice message (duration and waveform); `size` overrides the size Discord reports."""
        attachment_id = str(self._snowflake())
        path = f"attachments/{self.GUILD_ID}/{attachment_id}/{filename}"
        self.cdn[path] = data
        url = f"http://{self._root}/{path}?ex=6a1b2c3d&is=6a19dabd&hm=0f1e2d3c4b5a"
        payload: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": len(data) if size is None else size,
            "url": url,
            "proxy_url": url,
        }
        if content_type is not None:
            payload["content_type"] = content_type
        if voice_seconds is not None:
            payload.update(duration_secs=voice_seconds, waveform="AAAAAAAAAAAA")
        return payload

    def _serve_attachments(self, message: dict[str, Any]) -> None:
        """A recorded message's attachments point at this fake's CDN instead of Discord's (a
        test never reaches the Internet); a picture with its recorded width and height is
        served as a plain image of that size, other files only once a test gives their bytes
        (`self.cdn`), else 404 as an expired link."""
        for attachment in message.get("attachments") or []:
            if not isinstance(attachment, dict) or "url" not in attachment:
                continue
            path = (
                f"attachments/{self.GUILD_ID}/{attachment.get('id')}/{attachment.get('filename')}"
            )
            attachment["url"] = attachment["proxy_url"] = f"http://{self._root}/{path}"
            kind = str(attachment.get("content_type") or "")
            if kind.startswith("image/") and path not in self.cdn:
                out = io.BytesIO()
                size = (int(attachment.get("width") or 64), int(attachment.get("height") or 64))
                Image.new("RGB", size, (30, 160, 90)).save(out, "PNG" if "png" in kind else "JPEG")
                self.cdn[path] = out.getvalue()

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        data = self.cdn.get(request.path.lstrip("/"))
        self.cdn_downloads.append(request.path)
        if data is None:
            return web.Response(status=404, text="This content is no longer available.")
        return web.Response(body=data, content_type="application/octet-stream")

    def message_payload(
        self,
        author: dict[str, Any],
        content: str,
        *,
        channel_id: int,
        guild: bool,
        mentions: list[dict[str, Any]] | None = None,
        nick: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload as Discord sends it."""
        message: dict[str, Any] = {
            "id": str(self._snowflake()),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions or [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
            "components": [],
        }
        if guild:
            message["guild_id"] = str(self.GUILD_ID)
            message["member"] = {
                "nick": nick,
                "roles": [],
                "joined_at": _now_iso(),
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        message.update(extra)
        return message

    async def send_dm(self, author: dict[str, Any], content: str, **extra: Any) -> dict[str, Any]:
        """A direct message from `author` (a `user_payload`) to the bot."""
        channel_id = self.dm_channel_id(int(author["id"]))
        message = self.message_payload(author, content, channel_id=channel_id, guild=False, **extra)
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def send_guild_message(
        self,
        author: dict[str, Any],
        content: str,
        *,
        channel_id: int | None = None,
        mention_bot: bool = False,
        nick: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A message in the guild's text channel (or `channel_id`, e.g. THREAD_ID); with
        `mention_bot` the content starts with `<@BOT_ID>` and `mentions` lists the bot."""
        if mention_bot:
            content = f"<@{self.BOT_ID}> {content}"
        message = self.message_payload(
            author,
            content,
            channel_id=channel_id or self.TEXT_CHANNEL_ID,
            guild=True,
            mentions=extra.pop("mentions", [self.bot] if mention_bot else []),
            nick=nick,
            **extra,
        )
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def press(
        self,
        message: Mapping[str, Any],
        presser: dict[str, Any],
        label: str | None = None,
        *,
        custom_id: str | None = None,
    ) -> str:
        """`presser` (a `user_payload`) taps the button `label` under the bot's `message` (or
        sends any `custom_id`, as a modified client can). Dispatches the recorded button
        interaction, adapted; returns the interaction id."""
        current = self._messages[int(message["id"])]
        if custom_id is None:
            matching = [b for b in self.buttons(current["id"]) if b.get("label") == label]
            assert matching, f"no button {label!r} on message {current['id']}"
            custom_id = str(matching[0]["custom_id"])
        captured = load_fixture("guild_button_interaction_docs_2021.json")["d"]
        channel_id = int(current["channel_id"])
        channel = self._channels[channel_id]
        interaction = dict(captured)
        interaction.update(
            id=str(self._snowflake()),
            token=f"fake-interaction-token-{uuid.uuid4().hex}",
            application_id=str(self.APP_ID),
            channel_id=str(channel_id),
            message=dict(current),
            data={**captured["data"], "custom_id": custom_id},
            # Sent since 2021 (the capture predates them); discord.py 2.7 needs the last two.
            app_permissions="2248473465835073",
            locale="en-US",
            entitlements=[],
            channel=channel,
            attachment_size_limit=10_485_760,
        )
        if channel["type"] == 1:  # a DM: `user`, no guild
            for key in ("member", "guild_id"):
                interaction.pop(key)
            interaction.update(user=presser, context=1, authorizing_integration_owners={"0": "0"})
        else:
            # A member's `flags` too is newer than the capture (and required by discord.py).
            interaction["member"] = {**captured["member"], "user": presser, "flags": 0}
            interaction.update(
                guild_id=str(self.GUILD_ID),
                guild_locale="en-US",
                context=0,
                authorizing_integration_owners={"0": str(self.GUILD_ID)},
            )
        self._interactions[interaction["id"]] = interaction
        await self.dispatch("INTERACTION_CREATE", interaction)
        return str(interaction["id"])

    def buttons(self, message_id: int | str) -> list[dict[str, Any]]:
        """The buttons of one of the bot's messages now (edits and responses change them)."""
        message = self._messages[int(message_id)]
        return [
            component
            for row in message.get("components", [])
            for component in row.get("components", [])
            if component.get("type") == 2
        ]

    async def wait_for_response(self, interaction_id: str, within: float = 10.0) -> dict[str, Any]:
        """The response Bruce gave to an interaction ({"type": ..., "data": ...})."""
        await self.wait_for(lambda: interaction_id in self.interaction_responses, within)
        return self.interaction_responses[interaction_id]

    def new_id(self) -> int:
        """A fresh snowflake (its timestamp is now)."""
        return self._snowflake()

    def add_channel(self, channel: dict[str, Any]) -> int:
        """Make a channel (e.g. a thread the client was never told about) exist on the REST side."""
        channel_id = int(channel["id"])
        self._channels[channel_id] = channel
        return channel_id

    def remember_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """Keep a message so that `GET /channels/{channel}/messages/{id}` finds it (as if it had
        been posted earlier, e.g. by the bot before a restart)."""
        self._messages[int(message["id"])] = message
        return message

    async def replay(
        self,
        fixture: str | dict[str, Any],
        ids: Mapping[int | str, int | str] | None = None,
        **fields: Any,
    ) -> Any:
        """Dispatch a recorded gateway frame (a fixture's name, or a loaded frame) as captured,
        with the captured ids replaced by `ids`; `fields` overwrite top-level fields of the
        payload. Returns the payload as dispatched."""
        frame = load_fixture(fixture) if isinstance(fixture, str) else fixture
        event, data = frame["t"], adapt_ids(frame["d"], ids or {})
        if isinstance(data, dict):
            self._serve_attachments(data)
            captured_id = frame["d"].get("id") if isinstance(frame["d"], dict) else None
            if event == "MESSAGE_CREATE" and captured_id is not None:
                if not any(str(key) == str(captured_id) for key in ids or {}):
                    data["id"] = str(self._snowflake())
            data.update(fields)
            if event in ("THREAD_CREATE", "CHANNEL_CREATE") and "id" in data:
                self.add_channel(data)
        await self.dispatch(event, data)
        return data

    async def dispatch(self, event: str, data: Any) -> None:
        """Send a DISPATCH (op 0) on the live session; kept for a RESUME if there is none."""
        if event == "MESSAGE_CREATE" and isinstance(data, dict):
            try:
                self._messages[int(data["id"])] = data
            except (KeyError, TypeError, ValueError):
                pass  # a malformed payload, sent on purpose
        if self._session_id is None:
            self._before_session.append((event, data))
            return
        self._seq += 1
        frame = {"op": 0, "t": event, "s": self._seq, "d": data}
        self._history.append(frame)
        live = self._live
        if live is not None:
            try:
                await live.send(frame)
            except (ConnectionError, RuntimeError):
                pass  # the client will RESUME and get it replayed

    async def drop_connection(self, code: int = 4000) -> None:
        """Close the live gateway connection from the server side (the session stays resumable)."""
        live, self._live = self._live, None
        assert live is not None, "no gateway connection to drop"
        self.close_codes.append(code)
        await live.ws.close(code=code, message=b"fake server closed the connection")

    # ---- waiting -----------------------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[], Any], within: float = 10.0) -> Any:
        """Wait until `predicate()` is truthy (checked whenever the fake's state changes);
        AssertionError, with what the fake saw, after `within` seconds."""
        try:
            async with asyncio.timeout(within), self._changed:
                return await self._changed.wait_for(predicate)
        except TimeoutError:
            posted = [(m["channel_id"], m["content"][:80]) for m in self.sent]
            raise AssertionError(
                f"fake Discord: condition not met within {within} s; the bot posted {posted}, "
                f"typing {self.typing}, identifies {self.identifies}, resumes {self.resumes}"
            ) from None

    async def wait_for_session(self, *, resumed: int = 0, within: float = 10.0) -> None:
        """Wait for a live, identified session (and at least `resumed` resumes)."""
        await self.wait_for(lambda: self._live is not None and self.resumes >= resumed, within)

    async def wait_for_sent(
        self, channel_id: int, count: int = 1, within: float = 10.0
    ) -> list[str]:
        """Wait until the bot posted `count` messages in the channel; returns their texts."""
        await self.wait_for(lambda: len(self.texts(channel_id)) >= count, within)
        return self.texts(channel_id)

    def texts(self, channel_id: int) -> list[str]:
        return [m["content"] for m in self.sent if int(m["channel_id"]) == channel_id]

    async def _changed_now(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ---- REST --------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        self.rest_requests.append((request.method, path))
        callback = re.fullmatch(r"/interactions/([0-9]+)/([^/]+)/callback", path)
        if callback is not None and request.method == "POST":  # no bot token: the interaction's
            return await self._interaction_callback(request, *callback.groups())
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, 401)
        limited, headers = self._rate_limit(request.method, path)
        if limited is not None:
            return limited
        response = await self._route(request, path)
        response.headers.update(headers)
        return response

    def _rate_limit(self, method: str, path: str) -> tuple[web.Response | None, dict[str, str]]:
        """A 429 when this request goes over `limits`, else None and the headers to answer
        with (none without limits)."""
        if self.limits is None:
            return None, {}
        limits, now = self.limits, self._clock()
        while self._recent and self._recent[0] <= now - 1.0:
            self._recent.popleft()
        if len(self._recent) >= limits.global_per_second:
            retry_after = round(self._recent[0] + 1.0 - now, 3)
            return self._too_many(method, path, retry_after, {}, scope="global"), {}
        route = _route_key(method, path)
        window = self._windows.get(route)
        if window is None or now >= window.resets_at:
            window = self._windows[route] = _Window(limits.per_route, now + limits.window)
        reset_after = max(0.0, window.resets_at - now)
        bucket = hashlib.sha1(route.rsplit(" ", 1)[0].encode()).hexdigest()[:32]
        headers = {
            "X-RateLimit-Limit": str(limits.per_route),
            "X-RateLimit-Remaining": str(max(0, window.remaining - 1)),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": bucket,
        }
        if window.remaining <= 0:
            headers["X-RateLimit-Remaining"] = "0"
            return self._too_many(method, path, round(reset_after, 3), headers, scope="user"), {}
        window.remaining -= 1
        self._recent.append(now)
        if window.remaining == 0:
            self.exhausted += 1
        return None, headers

    def _too_many(
        self, method: str, path: str, retry_after: float, headers: dict[str, str], *, scope: str
    ) -> web.Response:
        self.rate_limited.append((method, path, retry_after))
        extra = {
            **headers,
            "Retry-After": str(max(1, math.ceil(retry_after))),
            "X-RateLimit-Scope": scope,
            "Via": "1.1 google",
        }
        if scope == "global":
            extra["X-RateLimit-Global"] = "true"
        body = {
            "message": "You are being rate limited.",
            "retry_after": retry_after,
            "global": scope == "global",
        }
        return _json(body, 429, extra)

    async def _route(self, request: web.Request, path: str) -> web.Response:
        parts = path.strip("/").split("/")
        method = request.method
        try:
            if method == "GET" and path == "/users/@me":
                return _json(self.bot)
            if method == "GET" and path == "/oauth2/applications/@me":
                return _json(self._application())
            if method == "GET" and path == "/gateway":
                return _json({"url": f"ws://{self._root}/gateway"})
            if method == "POST" and path == "/users/@me/channels":
                body = await request.json()
                return _json(self._channels[self.dm_channel_id(int(body["recipient_id"]))])
            if parts[0] == "channels" and len(parts) >= 2:
                channel_id = int(parts[1])
                if method == "GET" and len(parts) == 2:
                    return self._get_channel(channel_id)
                if method == "POST" and parts[2:] == ["typing"]:
                    return await self._typing(channel_id)
                if method == "POST" and parts[2:] == ["messages"]:
                    return await self._post_message(channel_id, request)
                if method == "GET" and len(parts) == 4 and parts[2] == "messages":
                    return self._get_message(channel_id, int(parts[3]))
                if method == "PATCH" and len(parts) == 4 and parts[2] == "messages":
                    return await self._edit_message(channel_id, int(parts[3]), request)
                if method == "DELETE" and len(parts) == 4 and parts[2] == "messages":
                    return await self._delete_message(channel_id, int(parts[3]))
        except (ValueError, KeyError) as exc:
            return _json({"message": f"Invalid Form Body ({exc})", "code": 50035}, 400)
        return _json({"message": "404: Not Found", "code": 0}, 404)

    def _get_channel(self, channel_id: int) -> web.Response:
        channel = self._channels.get(channel_id)
        if channel is None:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        return _json(channel)

    def _get_message(self, channel_id: int, message_id: int) -> web.Response:
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        return _json(message)

    async def _typing(self, channel_id: int) -> web.Response:
        if channel_id not in self._channels:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        self.typing[channel_id] = self.typing.get(channel_id, 0) + 1
        await self._changed_now()
        return web.Response(status=204)

    async def _post_message(self, channel_id: int, request: web.Request) -> web.Response:
        self.send_attempts += 1
        failure = self._next_failure(channel_id)
        if failure is not None:
            await self._changed_now()
            return _failure_response(failure)
        if channel_id not in self._channels:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        body, files = await _message_body(request)
        content = body.get("content") or ""
        components = body.get("components") or []
        if not content.strip() and not body.get("embeds") and not files:
            return _json({"message": "Cannot send an empty message", "code": 50006}, 400)
        refusal = _components_refusal(components)
        if refusal is not None:
            return refusal
        if len(content) > CONTENT_LIMIT:
            return _too_long("content", CONTENT_LIMIT)
        if sum(len(data) for _, data in files) > UPLOAD_LIMIT:
            return _json({"message": "Request entity too large", "code": 40005}, 413)
        channel = self._channels[channel_id]
        message = self.message_payload(
            self.bot, content, channel_id=channel_id, guild=channel["type"] != 1
        )
        message.pop("member", None)
        message["components"] = components
        message["attachments"] = [
            {
                "id": str(self._snowflake()),
                "filename": name,
                "size": len(data),
                "url": f"https://cdn.discordapp.com/attachments/{channel_id}/{index}/{name}",
                "proxy_url": f"https://media.discordapp.net/attachments/{channel_id}/{index}/{name}",
            }
            for index, (name, data) in enumerate(files)
        ]
        for name, data in files:
            self.uploads.append((channel_id, name, data))
        self._messages[int(message["id"])] = message
        self.edits[int(message["id"])] = [content]
        self.sent.append({**message, "allowed_mentions": body.get("allowed_mentions")})
        await self._changed_now()
        if self.echo_own_messages:
            # Discord tells every session about every message, the bot's own included.
            await self.dispatch("MESSAGE_CREATE", message)
        return _json(message)

    async def _edit_message(
        self, channel_id: int, message_id: int, request: web.Request
    ) -> web.Response:
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        if message["author"]["id"] != self.bot["id"]:
            return _json(
                {"message": "Cannot edit a message authored by another user", "code": 50005}, 403
            )
        if self._edit_failures:
            return _failure_response(self._edit_failures.popleft())
        body = await request.json()
        if len(body.get("content") or "") > CONTENT_LIMIT:
            return _too_long("content", CONTENT_LIMIT)
        refused = await self._update_message(message, body)
        if refused is None and "content" in body:
            self.edits.setdefault(message_id, []).append(message["content"])
            self.edit_times.append(time.monotonic())
        return _json(refused or message)

    async def _delete_message(self, channel_id: int, message_id: int) -> web.Response:
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        del self._messages[message_id]
        self.deleted.append(message_id)
        await self._changed_now()
        return web.Response(status=204)

    async def _update_message(
        self, message: dict[str, Any], body: Mapping[str, Any]
    ) -> web.Response | None:
        """Apply an edit (`content`, `components`) to a message; a refusal, or None."""
        if "components" in body:
            refusal = _components_refusal(body["components"] or [])
            if refusal is not None:
                return refusal
            message["components"] = body["components"] or []
        if "content" in body:
            message["content"] = body["content"] or ""
        message["edited_timestamp"] = _now_iso()
        await self.dispatch("MESSAGE_UPDATE", message)
        await self._changed_now()
        return None

    async def _interaction_callback(
        self, request: web.Request, interaction_id: str, token: str
    ) -> web.Response:
        interaction = self._interactions.get(interaction_id)
        unknown = _json({"message": "Unknown interaction", "code": 10062}, 404)
        if interaction is None or interaction["token"] != token:
            return unknown
        if self._failing_callbacks > 0:
            self._failing_callbacks -= 1
            await self._changed_now()
            return unknown
        if interaction_id in self.interaction_responses:
            return _json(
                {"message": "Interaction has already been acknowledged.", "code": 40060}, 400
            )
        body = await request.json()
        kind, data = body.get("type"), body.get("data") or {}
        message = self._messages[int(interaction["message"]["id"])]
        if kind == 7:
            refusal = await self._update_message(message, data)
            if refusal is not None:
                return refusal
            resource = message
        elif kind == 4:
            content = data.get("content") or ""
            if not content.strip() or len(content) > 2000:
                return _json({"message": "Invalid Form Body", "code": 50035}, 400)
            channel_id = int(interaction["channel_id"])
            resource = self.message_payload(
                self.bot, content, channel_id=channel_id, guild="guild_id" in interaction
            )
            resource.pop("member", None)
            resource.update(
                flags=int(data.get("flags") or 0),
                type=19,
                application_id=str(self.APP_ID),
                webhook_id=str(self.APP_ID),
            )
        elif kind == 6:
            resource = None
        else:
            return _json({"message": "Invalid interaction response type", "code": 50035}, 400)
        self.interaction_responses[interaction_id] = {"type": kind, "data": data}
        await self._changed_now()
        if request.query.get("with_response", "").lower() not in ("1", "true"):
            return web.Response(status=204)
        answer: dict[str, Any] = {
            "interaction": {
                "id": interaction_id,
                "type": interaction["type"],
                "response_message_loading": False,
                "response_message_ephemeral": bool(
                    resource is not None and int(resource.get("flags") or 0) & 64
                ),
            }
        }
        if resource is not None:
            answer["interaction"]["response_message_id"] = resource["id"]
            answer["resource"] = {"type": kind, "message": resource}
        return _json(answer)

    def _next_failure(self, channel_id: int) -> _SendFailure | None:
        for failure in self._failures:
            if failure.channel_id in (None, channel_id):
                self._failures.remove(failure)
                return failure
        return None

    def _application(self) -> dict[str, Any]:
        return {
            "id": str(self.APP_ID),
            "name": "Bruce",
            "description": "A personal assistant (fake)",
            "icon": None,
            "bot_public": False,
            "bot_require_code_grant": False,
            "owner": user_payload(self.OWNER_ID, "owner"),
            "verify_key": "0" * 64,
            "flags": MESSAGE_CONTENT_INTENT << 4 if self.message_content_intent else 0,
            "bot": self.bot,
        }

    # ---- gateway -----------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        connection = _Connection(ws, request.path)
        self.gateway_paths.append(request.path)
        await connection.send(
            {"op": 10, "d": {"heartbeat_interval": HEARTBEAT_INTERVAL_MS}, "s": None, "t": None}
        )
        try:
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                op, data = payload.get("op"), payload.get("d")
                if op == 1:
                    self.heartbeats += 1
                    await connection.send({"op": 11, "d": None, "s": None, "t": None})
                elif op == 2:
                    await self._identify(connection, data or {})
                elif op == 6:
                    await self._resume(connection, data or {})
        finally:
            if self._live is connection:
                self._live = None
            await self._changed_now()
        return ws

    async def _identify(self, connection: _Connection, data: dict[str, Any]) -> None:
        if data.get("token") != self.token:
            self.close_codes.append(4004)
            await connection.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents", 0))
        if intents & MESSAGE_CONTENT_INTENT and not self.message_content_intent:
            self.close_codes.append(4014)
            await connection.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        self.identifies += 1
        self._session_id = uuid.uuid4().hex
        self._seq = 0
        self._history = []
        self._live = connection
        await self.dispatch("READY", self._ready())
        await self.dispatch("GUILD_CREATE", self._guild())
        waiting, self._before_session = self._before_session, []
        for event, payload in waiting:
            await self.dispatch(event, payload)
        await self._changed_now()

    async def _resume(self, connection: _Connection, data: dict[str, Any]) -> None:
        if data.get("token") != self.token or data.get("session_id") != self._session_id:
            await connection.send({"op": 9, "d": False, "s": None, "t": None})
            return
        seen = data.get("seq") or 0
        for frame in self._history:
            if frame["s"] > seen:
                await connection.send(frame)
        self.resumes += 1
        self._live = connection
        await self.dispatch("RESUMED", {})
        await self._changed_now()

    def _ready(self) -> dict[str, Any]:
        return {
            "v": 10,
            "user": {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": str(self.GUILD_ID), "unavailable": True}],
            "session_id": self._session_id,
            "session_type": "normal",
            "resume_gateway_url": self.resume_gateway_url,
            "application": {"id": str(self.APP_ID), "flags": 0},
            "private_channels": [],
            "relationships": [],
            "user_settings": {},
            "geo_ordered_rtc_regions": [],
        }

    def _guild(self) -> dict[str, Any]:
        everyone = {
            "id": str(self.GUILD_ID),
            "name": "@everyone",
            "permissions": "68608",  # view channel, send messages, read history
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        bot_role = {
            **everyone,
            "id": str(self.BOT_ROLE_ID),
            "name": "Bruce",
            "position": 1,
            "managed": True,
            "tags": {"bot_id": str(self.BOT_ID)},
        }
        return {
            "id": str(self.GUILD_ID),
            "name": "Fake Guild",
            "icon": None,
            "owner_id": str(self.OWNER_ID),
            "unavailable": False,
            "member_count": 3,
            "large": False,
            "joined_at": _now_iso(),
            "features": [],
            "roles": [everyone, bot_role],
            "emojis": [],
            "stickers": [],
            "members": [
                {
                    "user": self.bot,
                    "roles": [str(self.BOT_ROLE_ID)],
                    "joined_at": _now_iso(),
                    "deaf": False,
                    "mute": False,
                    "flags": 0,
                }
            ],
            "channels": [self._channels[self.TEXT_CHANNEL_ID]],
            "threads": [self._channels[self.THREAD_ID]],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "system_channel_flags": 0,
            "nsfw_level": 0,
        }

    def _add_guild_channels(self) -> None:
        self._channels[self.TEXT_CHANNEL_ID] = {
            "id": str(self.TEXT_CHANNEL_ID),
            "type": 0,
            "guild_id": str(self.GUILD_ID),
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        self._channels[self.THREAD_ID] = {
            "id": str(self.THREAD_ID),
            "type": 11,
            "guild_id": str(self.GUILD_ID),
            "parent_id": str(self.TEXT_CHANNEL_ID),
            "owner_id": str(self.OWNER_ID),
            "name": "planning",
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now_iso(),
                "locked": False,
            },
        }

    def _snowflake(self) -> int:
        """An id whose timestamp is now, like Discord's (message.created_at is read from it)."""
        millis = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return (millis << 22) | (next(self._ids) & 0x3FFFFF)


def _components_refusal(components: Any) -> web.Response | None:
    """Discord's 400 for message components it would not take (action rows of buttons only)."""
    problems: list[str] = []
    seen: set[str] = set()
    if not isinstance(components, list) or len(components) > 5:
        problems.append("components: at most 5 action rows")
        components = []
    for row in components:
        buttons = row.get("components") if isinstance(row, dict) else None
        if row.get("type") != 1 or not isinstance(buttons, list) or not 1 <= len(buttons) <= 5:
            problems.append("an action row (type 1) holds 1 to 5 components")
            continue
        for button in buttons:
            if not isinstance(button, dict) or button.get("type") != 2:
                problems.append("the fake only knows buttons (type 2)")
                continue
            label = button.get("label")
            if label is not None and not 1 <= len(str(label)) <= 80:
                problems.append("label: BASE_TYPE_BAD_LENGTH (1-80)")
            if button.get("style") == 5:
                if not button.get("url") or "custom_id" in button:
                    problems.append("a link button has a url and no custom_id")
                continue
            custom_id = button.get("custom_id")
            if button.get("style") not in (1, 2, 3, 4):
                problems.append(f"style: {button.get('style')!r} is not a button style")
            if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100:
                problems.append("custom_id: BASE_TYPE_BAD_LENGTH (1-100)")
            elif custom_id in seen:
                problems.append("custom_id: COMPONENT_CUSTOM_ID_DUPLICATED")
            else:
                seen.add(custom_id)
    if not problems:
        return None
    errors = {"components": {"_errors": [{"code": "INVALID", "message": p} for p in problems]}}
    return _json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)


def _failure_response(failure: _SendFailure) -> web.Response:
    if failure.status == 429:
        # Without `Via`, discord.py takes a 429 for a Cloudflare ban and does not retry.
        return _json(
            {
                "message": "You are being rate limited.",
                "retry_after": failure.retry_after,
                "global": False,
            },
            429,
            {"Via": "1.1 google", "Retry-After": str(failure.retry_after)},
        )
    messages = {
        403: ("Missing Access", 50001),
        404: ("Unknown Channel", 10003),
        400: ("Invalid Form Body", 50035),
    }
    message, code = messages.get(failure.status, ("Internal Server Error", 0))
    return _json({"message": message, "code": code}, failure.status)


def _route_key(method: str, path: str) -> str:
    """A request's rate-limit bucket: its route with the ids taken out, but the major parameter
    (the channel, guild or webhook id) kept, as Discord keys its buckets. The major parameter is
    the last word, so that routes of different channels share a bucket hash."""
    parts = path.strip("/").split("/")
    major = ""
    template: list[str] = []
    for index, part in enumerate(parts):
        if part.isdigit():
            if index == 1 and parts[0] in ("channels", "guilds", "webhooks"):
                major = part
            template.append("{id}")
        else:
            template.append(part)
    return f"{method} /{'/'.join(template)} {major}"
