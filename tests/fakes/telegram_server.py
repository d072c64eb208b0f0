"""A local fake of the Telegram Bot API for tests: real python-telegram-bot talks to it over HTTP.

It speaks the wire protocol the way api.telegram.org does (TESTING.md): `POST /bot<token>/<method>`
with form-encoded (or multipart, or JSON) parameters where non-string fields are JSON strings;
answers `{"ok": true, "result": ...}` or `{"ok": false, "error_code": N, "description": ...}` with
the matching HTTP status (a wrong token gets 401). Supported methods: getMe, deleteWebhook,
setWebhook, getWebhookInfo, setMyCommands, getMyCommands, getUpdates (a real long poll: the
request is held until an update is queued or `timeout` runs out; an `offset` confirms every
update below it), sendMessage (refuses texts over 4096 UTF-16 units after entity parsing with
"message is too long", and bad HTML with "can't parse entities" when `parse_mode` is HTML),
sendChatAction. Chats the bot never heard from get "chat not found". Forum supergroups are
checked the way Telegram checks them: a sendMessage with a `message_thread_id` that is not one
of the chat's topics gets "message thread not found" (the General topic included: it has no
thread id to send to); without one it lands in the topic of the message it replies to, else in
General; `SentMessage.thread_id` records where it landed (None: General, or not a forum). A
group upgraded with `upgrade_group` answers sendMessage/sendChatAction with Telegram's 400
"group chat was upgraded to a supergroup chat" and `parameters.migrate_to_chat_id`. Recorded
payloads (tests/fixtures/telegram/) are served as captured with `replay`, ids adapted.

Buttons as Telegram has them: sendMessage checks its `reply_markup` the way the Bot API does
(an InlineKeyboardMarkup: an array of rows of buttons, each with a `text` and 1-64 bytes of
`callback_data`, or 400 with Telegram's words) and keeps it on the message; `press` delivers the
recorded callback query (coffeetalk_callback_query_private.json) for a tap on one of them, ids
adapted and the message as the fake holds it now (an inaccessible one, `date` 0, once the
message was deleted with `delete_message`). answerCallbackQuery answers each query once (a
second answer, or an unknown id, gets "query is too old and response timeout expired or query
ID is invalid"), editMessageReplyMarkup / editMessageText change the bot's own messages ("message
to edit not found", "message is not modified", and "message can't be edited" after
`forbid_edits`; every text a message had is kept in `SentMessage.edits`), deleteMessage takes a
message down ("message to delete not found").

Live replies (Bot API 9.3): sendMessageDraft streams a draft into a private chat, kept in
`drafts` per chat (each `Draft` with its `draft_id` and text), the way the API documents it: a
non-zero `draft_id`, 0-4096 characters after entity parsing (HTML parsed as for sendMessage),
private chats only (a group gets a 400; the wording is this fake's: none was found captured).
`refuse_drafts()` plays a Bot API server older than 9.3 (the method is unknown: 404 Not Found).
`rate_limit_next(method, retry_after)` answers the next calls of any method with 429 and
`parameters.retry_after`, as Telegram answers a bot that edits or drafts too fast.

While a webhook is set, getUpdates answers 409 and queued updates are POSTed to
the webhook URL with the `X-Telegram-Bot-Api-Secret-Token` header, retried until the receiver
answers 200::

    async with FakeTelegramServer() as telegram:
        config = {"token": telegram.token, "base_url": telegram.base_url, ...}
        alice = telegram.user(1001, "Alice")
        telegram.private_text(alice, "hello")                 # queue an update
        telegram.group_text(-500, alice, "hi", mention=True)  # "@bruce_test_bot hi" + entity
        telegram.photo(alice, caption="what is this?")        # also sticker(), edited_text()
        telegram.push_raw({"update_id": 77, "message": {...}})  # malformed updates
        telegram.replay(load_fixture("album_caption_on_first"), ids={521070000: alice.id})
        telegram.upgrade_group(-500, -1001557912345)          # sends to -500 → ChatMigrated
        sent = await telegram.wait_for_messages(alice.id, 1)
        telegram.fail_get_updates(3)                          # next 3 getUpdates → 502
        telegram.fail_next("getMe")                           # the API is down at start-up
        telegram.rate_limit_next_send(retry_after=1)          # next sendMessage → 429
        telegram.reject_markup_next()                         # next HTML sendMessage → 400
        telegram.block_chat(alice.id)                         # sendMessage → 403 from now on
        query_id = telegram.press(sent[0], alice, "Confirm")  # a tap on a button of sent[0]
        await telegram.wait_for(lambda: query_id in telegram.callback_answers)

Everything the bot did is kept: `sent` (per chat; a message's `buttons` follow its edits),
`callback_answers` (query id -> the text shown, "" for none), `chat_actions`, `my_commands`, `calls`
(method and parameters of every request) and `get_updates_offsets`. Wait on conditions with
`wait_for_messages` / `wait_for(predicate)`, never with fixed sleeps.

`FakeTelegramServer(send_delay=0.25)` answers each sendMessage that long after it took the
message, as the real API takes a while: a crash test then has the window where Telegram has a
message and the bot has not heard so yet. Each `SentMessage` keeps when it arrived
(`received_at`) and when the bot was answered (`answered_at`, None until then), in `time.time()`.
`hold_sends(matches)` keeps the sendMessage requests it matches waiting before Telegram takes
them, until the returned `SendHold` is released: then each is taken as usual, or dropped (nothing
reaches the chat) when its sender is gone meanwhile, as a request that never got through.

Several bots at once (processes of one bot sharing a database): each may talk to the API at its
own `base_url_for(name)` (the same API under `/client/<name>/`), and every `SentMessage` then
names the one that sent it (`client`; None at the plain `base_url`). `balance_webhook(urls,
seed=...)` puts a load balancer where the webhook's public URL leads: once a webhook is set (by
any of the bots: they all register the same public URL, which is recorded in `webhook_url` but
no longer decides where updates go, nor does a later setWebhook), each queued update is POSTed
to one of `urls`, picked by a generator seeded with `seed`; a refused connection, a status other
than 200 or no answer within `timeout` seconds sends it to another of them, round after round,
until one answers 200, as Telegram retries. Like Telegram, which "waits for you to end the
request before sending the next update that belongs to that chat" (grammY's guide,
https://grammy.dev/guide/deployment-types), up to `max_connections` updates of different chats
are in flight at once, and a chat's next update goes out once its previous one was answered 200,
to whichever bot the pick names: so one bot may still be answering a chat's message while its
next message reaches another.
`balanced_deliveries` lists each try (a `WebhookPost`: update, url, status, when), `queued`
every update ever queued, by update_id::

    telegram.balance_webhook([f"http://127.0.0.1:{port}/hook" for port in ports], seed=7)
    config = {..., "base_url": telegram.base_url_for("a"), "mode": "webhook", ...}
    assert telegram.sent_to(alice.id)[0].client == "a"
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import math
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import aiohttp
from aiohttp import web
from PIL import Image

from tests.fakes.telegram_html import MarkupError, parse_html

TEXT_LIMIT = 4096  # UTF-16 code units, after entity parsing
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "telegram"
# Keys whose integer values are user or chat ids (adapted by `replay`'s `ids`).
_ID_KEYS = {"id", "chat_id", "user_id", "migrate_to_chat_id", "migrate_from_chat_id"}
# Keys whose values are message ids (renumbered by `replay`, keeping their relations).
_MESSAGE_ID_KEYS = {"message_id", "message_thread_id", "forward_from_message_id"}
BOT_ID = 999_000
BOT_USERNAME = "bruce_test_bot"
# The bot that made the request being served (its `base_url_for` name; None: the plain base_url).
_CLIENT: ContextVar[str | None] = ContextVar("telegram_fake_client", default=None)
# The files of the multipart request being handled: field name -> (file name, bytes).
_FILES: ContextVar[dict[str, tuple[str, bytes]] | None] = ContextVar(
    "telegram_fake_files", default=None
)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True, slots=True)
class SendLimits:
    """How fast Telegram lets a bot send, from the Bot API FAQ ("My bot is hitting limits, how
    do I avoid this?", core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this):
    "In a single chat, avoid sending more than one message per second. We may allow short bursts
    that go over this limit, but eventually you'll begin receiving 429 errors"; "In a group,
    bots are not be able to send more than 20 messages per minute"; "the API will not allow
    bulk notifications to more than ~30 users per second". Each limit is a token bucket: a
    burst of `*_burst` messages goes at once, then the bucket fills at the sustained rate.
    A send over any of them is answered 429 with Telegram's body and `retry_after` (whole
    seconds, at least 1: when the bucket has room again), and is not delivered."""

    per_chat: float = 1.0  # messages a second in one chat, sustained
    chat_burst: int = 3  # how many one chat may get at once (the FAQ's "short bursts")
    per_group_minute: float = 20.0  # messages a minute in one group or supergroup
    overall: float = 30.0  # messages a second over all chats
    overall_burst: int = 30


# Methods that send a message and count toward the limits (chat actions, drafts and edits are
# limited separately by Telegram, and scripted with `rate_limit_next`).
_LIMITED_METHODS = frozenset({"sendMessage", "sendDocument", "sendPhoto", "sendMediaGroup"})
_CONFLICT_POLL = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is "
    "running"
)


@dataclass(slots=True)
class _Bucket:
    capacity: float
    rate: float  # tokens a second
    tokens: float
    at: float

    def wait(self, now: float) -> float:
        """Seconds until a message may go (0: now), after filling up to `now`."""
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate


@dataclass(frozen=True, slots=True)
class FakeUser:
    id: int
    first_name: str
    username: str | None = None

    def as_dict(self) -> dict[str, Any]:
        user: dict[str, Any] = {"id": self.id, "is_bot": False, "first_name": self.first_name}
        if self.username:
            user["username"] = self.username
        return user


@dataclass(slots=True)
class SentMessage:
    """A message the bot sent, as the fake received it."""

    chat_id: int
    message_id: int
    text: str  # exactly as sent (HTML source when parse_mode is HTML)
    plain: str  # what the user sees
    parse_mode: str | None
    reply_to: int | None
    params: dict[str, str] = field(default_factory=dict)
    thread_id: int | None = None  # the forum topic it landed in (None: General / not a forum)
    reply_markup: dict[str, Any] | None = None  # its inline keyboard now (edits change it)
    received_at: float = 0.0  # time.time() when the fake took it (it is delivered from then on)
    answered_at: float | None = None  # time.time() when the bot was told; None: not yet
    client: str | None = None  # which bot sent it (`base_url_for`); None: the plain base_url
    edits: list[str] = field(default_factory=list)  # every text it showed, the first one first

    @property
    def buttons(self) -> list[dict[str, Any]]:
        """The message's inline buttons now, row after row."""
        rows = (self.reply_markup or {}).get("inline_keyboard", [])
        return [button for row in rows for button in row]


@dataclass(frozen=True, slots=True)
class SentDocument:
    """A file the bot sent with sendDocument, as the fake received it (multipart upload)."""

    chat_id: int
    message_id: int
    filename: str
    data: bytes
    thread_id: int | None = None


@dataclass(frozen=True, slots=True)
class Draft:
    """One sendMessageDraft call: the draft's text at that moment."""

    chat_id: int
    draft_id: int
    text: str  # as sent
    plain: str  # what the user sees
    at: float  # time.time()


@dataclass(frozen=True, slots=True)
class WebhookPost:
    """One try of the load balancer (`balance_webhook`) to deliver an update."""

    update_id: int
    url: str
    status: int  # the HTTP status; 0: no answer (refused, reset, timed out)
    at: float  # time.time() when the try ended


@dataclass(slots=True)
class HeldSend:
    """A sendMessage `hold_sends` keeps at the door: Telegram has not taken it yet."""

    client: str | None  # the bot that sent it (`base_url_for`)
    chat_id: int
    text: str
    at: float  # time.time() when it was held
    request: web.Request = field(repr=False)
    outcome: str = "held"  # then "taken" (released, its sender still there) or "dropped"

    @property
    def sender_gone(self) -> bool:
        """Its sender's connection is closed (the bot died while the request was held)."""
        transport = self.request.transport
        return transport is None or transport.is_closing()


@dataclass(slots=True)
class SendHold:
    """Sends that `matches` are held before Telegram takes them until `release()`; then each is
    taken as usual if its sender still waits for the answer, and dropped if the sender is gone
    (a request that never got through: nothing reaches the chat)."""

    matches: Callable[[str | None, dict[str, str]], bool]  # (client, params)
    held: list[HeldSend] = field(default_factory=list)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()


@dataclass(slots=True)
class _Failure:
    status: int
    body: dict[str, Any] | str
    times: int


class FakeTelegramServer:
    def __init__(
        self,
        token: str = "123:ABC",
        *,
        send_delay: float = 0.0,
        limits: SendLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token = token
        self.send_delay = send_delay  # seconds between taking a sendMessage and answering it
        # Telegram's sending limits (None: none; `SendLimits()`: the documented ones). Every
        # 429 they caused is kept in `rate_limited`: (chat id, retry_after), and when it was
        # answered in `rate_limited_at` (time.time(), as `SentMessage.received_at`).
        self.limits = limits
        self.rate_limited: list[tuple[int, int]] = []
        self.rate_limited_at: list[float] = []
        self._clock = clock
        self._buckets: dict[tuple[str, int], _Bucket] = {}
        self._long_poll: asyncio.Future[None] | None = None  # ends the held getUpdates with 409
        self.conflicts = 0  # getUpdates requests ended by a later one (409)
        self.bot = {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Bruce",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.sent: dict[int, list[SentMessage]] = {}
        self.documents: dict[int, list[SentDocument]] = {}  # sendDocument uploads, per chat
        self.drafts: dict[int, list[Draft]] = {}
        self._drafts_known = True
        self.chat_actions: list[tuple[int, str]] = []
        self.my_commands: list[dict[str, str]] | None = None
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.call_times: list[tuple[float, str]] = []  # (time.monotonic(), method) of each call
        self.get_updates_offsets: list[int] = []
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        self.webhook_deliveries: list[tuple[int, int]] = []  # (update_id, HTTP status)
        self.queued: dict[int, dict[str, Any]] = {}  # every update ever queued, by update_id
        self.balanced_deliveries: list[WebhookPost] = []  # with `balance_webhook`: every try
        self._balanced: list[str] | None = None  # where the balancer posts (None: no balancer)
        self._balance_rng = random.Random(0)
        self._balance_connections = 40
        self._balance_timeout = 10.0
        self._balance_wake = asyncio.Event()
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(100)
        self._chats: dict[int, dict[str, Any]] = {}
        self._blocked: set[int] = set()
        self._migrated: dict[int, int] = {}  # old group id -> supergroup id
        self._topics: dict[int, set[int]] = {}  # forum chat id -> its topics' thread ids
        self._threads: dict[tuple[int, int], int] = {}  # (chat, message) -> topic
        self._failures: dict[str, list[_Failure]] = {}
        self._failing_later: dict[str, list[list[Any]]] = {}  # [calls to let through, failure]
        self._reject_markup = 0
        self._holds: list[SendHold] = []
        self.callback_answers: dict[str, str] = {}
        self._queries: set[str] = set()  # callback query ids delivered, not yet answered
        self._query_ids = itertools.count(4_382_000_000_000_000_001)
        self._frozen: set[tuple[int, int]] = set()  # (chat, message) that can't be edited
        self._deleted: set[tuple[int, int]] = set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._root_url = ""
        self._push_task: asyncio.Task[None] | None = None
        self._wakers: set[asyncio.Task[None]] = set()
        # Files users sent, by file_id: (file_path, bytes, size Telegram reports)
        self.files: dict[str, tuple[str, bytes, int]] = {}
        self.downloads: list[str] = []  # file paths downloaded, in order

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_route("*", "/client/{client}/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._root_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.base_url

    async def stop(self) -> None:
        await self._stop_pushing()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def root_url(self) -> str:
        if not self._root_url:
            raise RuntimeError("the fake Bot API server is not started")
        return self._root_url

    @property
    def base_url(self) -> str:
        """What `channels.telegram.base_url` should be (PTB appends the token)."""
        return self.root_url + "/bot"

    def base_url_for(self, client: str) -> str:
        """The `base_url` of one of several bots: its messages are marked `client`."""
        return f"{self.root_url}/client/{client}/bot"

    # ---- scripting ---------------------------------------------------------------------------

    def fail_next(self, method: str, times: int = 1, status: int = 502) -> None:
        """The next `times` calls of `method` fail with an HTML error page, as the proxy in
        front of Telegram answers when the API is down (502) or overloaded."""
        body = f"<html><body><h1>{status} Bad Gateway</h1></body></html>"
        self._failures.setdefault(method, []).append(_Failure(status, body, times))

    def fail_nth(self, method: str, nth: int, body: dict[str, Any], times: int = 1) -> None:
        """The `nth` call of `method` from now on (1: the next one) and the `times - 1` after it
        fail with `body`, a Telegram error as JSON (its `error_code` is the HTTP status)."""
        failure = _Failure(int(body["error_code"]), body, times)
        self._failing_later.setdefault(method, []).append([nth - 1, failure])

    def fail_get_updates(self, times: int = 1, status: int = 502) -> None:
        """The next `times` getUpdates calls fail (see `fail_next`)."""
        self.fail_next("getUpdates", times, status)

    def rate_limit_next_send(self, retry_after: int = 1, times: int = 1) -> None:
        """The next `times` sendMessage calls get 429 with `parameters.retry_after`."""
        self.rate_limit_next("sendMessage", retry_after, times)

    def rate_limit_next(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        """The next `times` calls of `method` get 429 with `parameters.retry_after`."""
        body = {
            "ok": False,
            "error_code": 429,
            "description": f"Too Many Requests: retry after {retry_after}",
            "parameters": {"retry_after": retry_after},
        }
        self._failures.setdefault(method, []).append(_Failure(429, body, times))

    def refuse_drafts(self) -> None:
        """sendMessageDraft is unknown from now on, as on a Bot API server before 9.3."""
        self._drafts_known = False

    def hold_sends(
        self, matches: Callable[[str | None, dict[str, str]], bool] | None = None
    ) -> SendHold:
        """Hold every sendMessage for which `matches(client, params)` is true (default: all)
        before Telegram takes it, until the returned hold is released (see `SendHold`)."""
        hold = SendHold(matches or (lambda client, params: True))
        self._holds.append(hold)
        return hold

    async def _held(self, request: web.Request, params: dict[str, str]) -> bool:
        """Wait at a hold that matches this send, if any; False: its sender went away."""
        client = _CLIENT.get()
        for hold in self._holds:
            if hold.released.is_set() or not hold.matches(client, params):
                continue
            chat_id = int(params.get("chat_id", 0) or 0)
            held = HeldSend(client, chat_id, params.get("text", ""), time.time(), request)
            hold.held.append(held)
            self._notify()
            try:
                await hold.released.wait()
            except asyncio.CancelledError:  # the server let go of a request whose sender left
                held.outcome = "dropped"
                raise
            held.outcome = "dropped" if held.sender_gone else "taken"
            self._notify()
            return held.outcome == "taken"
        return True

    def reject_markup_next(self, times: int = 1) -> None:
        """The next `times` sendMessage calls with a parse_mode get "can't parse entities"."""
        self._reject_markup += times

    def balance_webhook(
        self,
        urls: Sequence[str],
        *,
        seed: int | str | None = None,
        max_connections: int = 40,
        timeout: float = 10.0,
    ) -> None:
        """Post the updates to `urls` through a load balancer (see the module docstring) from
        now on, or from when a webhook is set. Called again, it changes the pool (a bot added
        or taken out); `seed` None keeps the generator that picks."""
        self._balanced = list(urls)
        if seed is not None:
            self._balance_rng = random.Random(seed)
        self._balance_connections = max_connections
        self._balance_timeout = timeout
        self._balance_wake.set()
        if self.webhook_url:
            self._ensure_pushing()

    def forbid_edits(self, sent: SentMessage) -> None:
        """Telegram refuses to edit this message from now on ("message can't be edited")."""
        self._frozen.add((sent.chat_id, sent.message_id))

    def delete_message(self, sent: SentMessage) -> None:
        """The message is gone: a press on it carries an inaccessible message, edits fail."""
        self._deleted.add((sent.chat_id, sent.message_id))

    def block_chat(self, chat_id: int) -> None:
        """The user blocked the bot: sendMessage/sendChatAction answer 403 from now on."""
        self._blocked.add(chat_id)

    def upgrade_group(self, old_chat_id: int, new_chat_id: int) -> None:
        """The group became a supergroup (Telegram announces it with service messages; replay
        teloxide_migrate_to_chat_id / _from_ for those): sends to the old id fail from now on."""
        old = self._chats.get(old_chat_id, {"id": old_chat_id, "title": f"Group {old_chat_id}"})
        self._migrated[old_chat_id] = new_chat_id
        self._chats[new_chat_id] = {
            "id": new_chat_id,
            "title": old.get("title"),
            "type": "supergroup",
        }

    def add_file(
        self, file_id: str, data: bytes, file_path: str, *, reported_size: int | None = None
    ) -> None:
        """A file a user sent, served by getFile and the file URL (`reported_size`: what
        getFile says, for files too big to hold in a test)."""
        size = len(data) if reported_size is None else reported_size
        self.files[file_id] = (file_path, data, size)

    def serve_photos(self, recorded: Any) -> None:
        """Serve every photo size found in recorded payloads (as a plain JPEG of its size), the
        way Telegram holds the files a user sent."""
        for size in _photo_sizes(recorded):
            width, height = int(size.get("width", 90)), int(size.get("height", 90))
            out = io.BytesIO()
            Image.new("RGB", (width, height), (90, 140, 200)).save(out, "JPEG")
            self.add_file(size["file_id"], out.getvalue(), f"photos/{size['file_id'][-12:]}.jpg")

    # ---- building updates --------------------------------------------------------------------

    @staticmethod
    def user(user_id: int, first_name: str, username: str | None = None) -> FakeUser:
        return FakeUser(user_id, first_name, username)

    def private_text(self, user: FakeUser, text: str, **extra: Any) -> dict[str, Any]:
        """A text message from `user` in their private chat with the bot; returns the message."""
        return self.queue_message(user.id, "private", user, text=text, **extra)

    def group_text(
        self,
        chat_id: int,
        user: FakeUser,
        text: str,
        *,
        mention: bool = False,
        text_mention: bool = False,
        reply_to: SentMessage | None = None,
        chat_type: str = "group",
        topic: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A group message; `mention` prefixes "@bruce_test_bot " with a mention entity,
        `text_mention` names the bot by a text_mention entity, `reply_to` replies to a message
        the bot sent, `topic` sends it in that topic of a forum supergroup (`topic=0`: in the
        forum's General topic)."""
        entities: list[dict[str, Any]] = list(extra.pop("entities", []))
        if mention:
            tag = f"@{BOT_USERNAME}"
            text = f"{tag} {text}"
            entities = [{"type": "mention", "offset": 0, "length": utf16_len(tag)}] + [
                {**e, "offset": e["offset"] + utf16_len(tag) + 1} for e in entities
            ]
        if text_mention:
            name = "Bruce"
            text = f"{name}, {text}"
            entities.append(
                {"type": "text_mention", "offset": 0, "length": len(name), "user": self.bot}
            )
        if reply_to is not None:
            extra["reply_to_message"] = self.bot_message(reply_to)
        if entities:
            extra["entities"] = entities
        return self.queue_message(chat_id, chat_type, user, text=text, topic=topic, **extra)

    def command(
        self,
        user: FakeUser,
        command: str,
        *,
        chat_id: int | None = None,
        chat_type: str = "private",
        topic: int | None = None,
    ) -> dict[str, Any]:
        """A command ("/new", "/help@bruce_test_bot ...") with its bot_command entity."""
        name = command.split()[0]
        entity = {"type": "bot_command", "offset": 0, "length": utf16_len(name)}
        return self.queue_message(
            user.id if chat_id is None else chat_id,
            chat_type,
            user,
            text=command,
            entities=[entity],
            topic=topic,
        )

    def photo(
        self,
        user: FakeUser,
        *,
        caption: str | None = None,
        chat_id: int | None = None,
        chat_type: str = "private",
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "photo": [
                {"file_id": "AgAD-photo-small", "file_unique_id": "ph1", "width": 90, "height": 90},
                {"file_id": "AgAD-photo-big", "file_unique_id": "ph2", "width": 800, "height": 800},
            ]
        }
        if caption is not None:
            extra["caption"] = caption
        self.serve_photos(extra)
        return self.queue_message(user.id if chat_id is None else chat_id, chat_type, user, **extra)

    def sticker(self, user: FakeUser) -> dict[str, Any]:
        sticker = {
            "file_id": "CAAD-sticker",
            "file_unique_id": "st1",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": "👍",
        }
        return self.queue_message(user.id, "private", user, sticker=sticker)

    def voice(self, user: FakeUser) -> dict[str, Any]:
        voice = {"file_id": "AwAD-voice", "file_unique_id": "vo1", "duration": 3}
        return self.queue_message(user.id, "private", user, voice=voice)

    def edited_text(self, original: dict[str, Any], new_text: str) -> dict[str, Any]:
        """An `edited_message` update for a message queued earlier."""
        edited = {**original, "text": new_text, "edit_date": int(time.time())}
        edited.pop("entities", None)
        self.push_raw({"edited_message": edited})
        return edited

    def redeliver(self, message: dict[str, Any]) -> None:
        """The same message again in a new update (as after a lost acknowledgement)."""
        self.push_raw({"message": message})

    def press(
        self,
        sent: SentMessage,
        user: FakeUser,
        label: str | None = None,
        *,
        data: str | None = None,
        recorded: Mapping[str, Any] | None = None,
    ) -> str:
        """`user` taps the button `label` under the bot's message `sent` (or sends any `data`,
        as a client may). Queues the recorded callback query (default: the coffeetalk one) with
        its ids adapted: a fresh query id, the presser `user`, the message as the fake holds it
        now. Returns the query id."""
        if data is None:
            matching = [b for b in sent.buttons if b.get("text") == label]
            assert matching, f"no button {label!r} under message {sent.message_id}: {sent.buttons}"
            data = str(matching[0]["callback_data"])
        query = dict(recorded or load_fixture("coffeetalk_callback_query_private"))
        query_id = str(next(self._query_ids))
        query.update(id=query_id, data=data, message=self._pressed_message(sent))
        query["from"] = {**query["from"], **user.as_dict()}
        for key in ("last_name", "username"):
            if key not in user.as_dict():
                query["from"].pop(key, None)
        self._queries.add(query_id)
        self.push_raw({"callback_query": query})
        return query_id

    def _pressed_message(self, sent: SentMessage) -> dict[str, Any]:
        if (sent.chat_id, sent.message_id) in self._deleted:
            # "InaccessibleMessage: ... date: Always 0."
            return {"chat": self._chats[sent.chat_id], "message_id": sent.message_id, "date": 0}
        message = self.bot_message(sent)
        if sent.reply_markup is not None:
            message["reply_markup"] = sent.reply_markup
        return message

    def replay(
        self,
        recorded: Any,
        *,
        ids: Mapping[int, int] | None = None,
        chat: Mapping[str, Any] | None = None,
        renumber: dict[int, int] | None = None,
        **fields: Any,
    ) -> list[dict[str, Any]]:
        """Queue recorded payloads as captured: an update, a bare message (sent as a new
        `message`), a bare callback query (sent as a `callback_query`), or a list of them (one
        getUpdates batch). Adapted: user and chat ids by `ids`; every message id renumbered
        after the fake's own (a topic's thread id and the messages replied to keep pointing at
        the same messages); the update ids are the fake's. `chat` replaces the chat of the
        top-level message(s), `fields` are set on them; pass the same `renumber` dict to
        replays that must share message ids (messages of one topic). Returns the queued
        updates."""
        items = recorded if isinstance(recorded, list) else [recorded]
        renumbered: dict[int, int] = {} if renumber is None else renumber
        updates: list[dict[str, Any]] = []
        for item in items:
            update = _adapted(item, dict(ids or {}), renumbered, self._message_ids)
            update.pop("update_id", None)
            if "update_id" not in item and "message_id" in item:
                update = {"message": update}
            elif "update_id" not in item and "chat_instance" in item:
                update = {"callback_query": update}
            query = update.get("callback_query")
            if isinstance(query, dict) and isinstance(query.get("id"), str):
                self._queries.add(query["id"])
            for message in update.values():
                if isinstance(message, dict) and "message_id" in message:
                    if chat is not None:
                        message["chat"] = dict(chat)
                    message.update(fields)
            updates.append(update)
        return [{"update_id": self.push_raw(update), **update} for update in updates]

    def queue_message(
        self,
        chat_id: int,
        chat_type: str,
        user: FakeUser,
        *,
        topic: int | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = user.first_name
        else:
            chat["title"] = f"Group {chat_id}"
        if topic is not None:
            chat.update(type="supergroup", is_forum=True)
            if topic:
                fields.setdefault("message_thread_id", topic)
                fields.setdefault("is_topic_message", True)
        message = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": user.as_dict(),
            **fields,
        }
        self.push_raw({"message": message})
        return message

    def push_raw(self, update: dict[str, Any]) -> int:
        """Queue any update body (its update_id is added unless given); returns the update_id."""
        update = {"update_id": next(self._update_ids), **update}
        for message in update.values():
            if isinstance(message, dict):
                self._learn(message)
        self._updates.append(update)
        self.queued[int(update["update_id"])] = update
        self._notify()
        if self.webhook_url:
            self._ensure_pushing()
        return int(update["update_id"])

    def _learn(self, message: dict[str, Any]) -> None:
        """Chats, forum topics and which topic each message is in, as Telegram knows them."""
        chat = message.get("chat")
        if not isinstance(chat, dict) or not isinstance(chat.get("id"), int):
            return
        chat_id = chat["id"]
        if chat_id not in self._migrated:
            self._chats[chat_id] = chat
        message_id = message.get("message_id")
        thread = message.get("message_thread_id")
        if chat.get("is_forum") and isinstance(message_id, int):
            topics = self._topics.setdefault(chat_id, set())
            if message.get("forum_topic_created") is not None:
                topics.add(message_id)
                self._threads[(chat_id, message_id)] = message_id
            elif message.get("is_topic_message") and isinstance(thread, int):
                topics.add(thread)
                self._threads[(chat_id, message_id)] = thread
        replied = message.get("reply_to_message")
        if isinstance(replied, dict):
            self._learn(replied)

    # ---- reading what happened ---------------------------------------------------------------

    def sent_to(self, chat_id: int) -> list[SentMessage]:
        return list(self.sent.get(chat_id, []))

    def texts_to(self, chat_id: int) -> list[str]:
        return [message.plain for message in self.sent.get(chat_id, [])]

    @property
    def pending_updates(self) -> int:
        """Updates not yet confirmed by an offset (or, with a webhook, not yet answered 200)."""
        return len(self._updates)

    def calls_of(self, method: str) -> list[dict[str, str]]:
        return [params for name, params in self.calls if name == method]

    async def wait_for(self, predicate: Callable[[], Any], within: float = 10.0) -> Any:
        """Return `predicate()` once it is truthy (re-checked on every request the fake sees)."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(predicate)
        return predicate()

    async def wait_for_messages(
        self, chat_id: int, count: int, within: float = 10.0
    ) -> list[SentMessage]:
        await self.wait_for(lambda: len(self.sent.get(chat_id, [])) >= count, within)
        return self.sent_to(chat_id)

    # ---- serving -----------------------------------------------------------------------------

    def _notify(self) -> None:
        async def wake() -> None:
            async with self._changed:
                self._changed.notify_all()

        with contextlib.suppress(RuntimeError):
            task = asyncio.get_running_loop().create_task(wake())
            self._wakers.add(task)
            task.add_done_callback(self._wakers.discard)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        _CLIENT.set(request.match_info.get("client"))
        params = await _params(request)
        self.calls.append((method, params))
        self.call_times.append((time.monotonic(), method))
        self._notify()
        failure = self._next_failure(method)
        if failure is not None:
            if isinstance(failure.body, str):
                return web.Response(
                    status=failure.status, text=failure.body, content_type="text/html"
                )
            return web.json_response(failure.body, status=failure.status)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(404, "Not Found")
        if method == "sendMessage" and self._holds and not await self._held(request, params):
            return _error(502, "Bad Gateway: the sender went away")  # nobody reads it
        try:
            if method in _LIMITED_METHODS:
                self._within_limits(params)
            result = await handler(params)
        except _APIError as exc:
            return _error(exc.status, exc.description, exc.parameters)
        return web.json_response({"ok": True, "result": result})

    def _within_limits(self, params: dict[str, str]) -> None:
        """429 when a send to this chat now would go over `limits` (nothing is counted then)."""
        if self.limits is None:
            return
        chat_id = self._known_chat(params)
        limits, now = self.limits, self._clock()
        buckets = [
            self._bucket(("chat", chat_id), limits.chat_burst, limits.per_chat, now),
            self._bucket(("all", 0), limits.overall_burst, limits.overall, now),
        ]
        if self._chats[chat_id].get("type") in ("group", "supergroup"):
            per_minute = limits.per_group_minute
            buckets.append(self._bucket(("group", chat_id), per_minute, per_minute / 60, now))
        wait = max(bucket.wait(now) for bucket in buckets)
        if wait > 0:
            retry_after = max(1, math.ceil(wait))
            self.rate_limited.append((chat_id, retry_after))
            self.rate_limited_at.append(time.time())
            self._notify()
            raise _APIError(
                429, f"Too Many Requests: retry after {retry_after}", {"retry_after": retry_after}
            )
        for bucket in buckets:
            bucket.tokens -= 1

    def _bucket(self, key: tuple[str, int], capacity: float, rate: float, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(capacity, rate, capacity, now)
        return bucket

    def _next_failure(self, method: str) -> _Failure | None:
        later = self._failing_later.get(method)
        if later:
            if later[0][0] == 0:
                self._failures.setdefault(method, []).insert(0, later.pop(0)[1])
            else:
                later[0][0] -= 1
        queue = self._failures.get(method)
        if not queue:
            return None
        failure = queue[0]
        failure.times -= 1
        if failure.times <= 0:
            queue.pop(0)
        return failure

    async def _api_getMe(self, params: dict[str, str]) -> Any:
        return self.bot

    async def _api_deleteWebhook(self, params: dict[str, str]) -> Any:
        await self._stop_pushing()
        self.webhook_url = ""
        self.webhook_secret = None
        if _bool(params.get("drop_pending_updates")):
            self._updates.clear()
        return True

    async def _api_setWebhook(self, params: dict[str, str]) -> Any:
        url = params.get("url", "")
        if not url:
            raise _APIError(400, "Bad Request: bad webhook: An HTTPS URL must be provided")
        secret = params.get("secret_token")
        if secret is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            raise _APIError(400, "Bad Request: secret token contains unallowed characters")
        if _bool(params.get("drop_pending_updates")):
            self._updates.clear()
        self.webhook_url = url
        self.webhook_secret = secret
        self._ensure_pushing()
        return True

    async def _api_getWebhookInfo(self, params: dict[str, str]) -> Any:
        return {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }

    async def _api_setMyCommands(self, params: dict[str, str]) -> Any:
        commands = json.loads(params.get("commands", "[]"))
        for command in commands:
            if not re.fullmatch(r"[a-z0-9_]{1,32}", command.get("command", "")):
                raise _APIError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(command.get("description", "")) <= 256:
                raise _APIError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        self.my_commands = commands
        return True

    async def _api_getMyCommands(self, params: dict[str, str]) -> Any:
        return self.my_commands or []

    async def _api_getUpdates(self, params: dict[str, str]) -> Any:
        if self.webhook_url:
            raise _APIError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use "
                "deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        limit = int(params.get("limit") or 100)
        self.get_updates_offsets.append(offset)
        if offset:
            # "An update is considered confirmed as soon as getUpdates is called with an offset
            # higher than its update_id."
            self._updates = [u for u in self._updates if u["update_id"] >= offset]

        def ready() -> list[dict[str, Any]]:
            return [u for u in self._updates if u["update_id"] >= offset][:limit]

        if not ready() and timeout > 0:
            # As the Bot API server does (telegram-bot-api, Client::abort_long_poll): a poll that
            # is about to be held ends the one held before with 409 (another instance polls).
            if self._long_poll is not None and not self._long_poll.done():
                self._long_poll.set_result(None)
            ended = self._long_poll = asyncio.get_running_loop().create_future()
            changed = asyncio.ensure_future(self._wait_changed(ready))
            try:
                await asyncio.wait({ended, changed}, timeout=timeout, return_when="FIRST_COMPLETED")
            finally:
                changed.cancel()
                if self._long_poll is ended:
                    self._long_poll = None
            if ended.done():
                self.conflicts += 1
                self._notify()
                raise _APIError(409, _CONFLICT_POLL)
        return ready()

    async def _wait_changed(self, ready: Callable[[], list[dict[str, Any]]]) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: bool(ready()) or bool(self.webhook_url))

    async def _api_sendMessage(self, params: dict[str, str]) -> Any:
        chat_id = self._known_chat(params)
        text = params.get("text", "")
        if not text.strip():
            raise _APIError(400, "Bad Request: message text is empty")
        parse_mode = params.get("parse_mode") or None
        if parse_mode and self._reject_markup > 0:
            self._reject_markup -= 1
            raise _APIError(
                400,
                "Bad Request: can't parse entities: Can't find end of the entity starting "
                "at byte offset 0",
            )
        plain = text
        if parse_mode and parse_mode.upper() == "HTML":
            try:
                plain = parse_html(text)
            except MarkupError as exc:
                raise _APIError(400, f"Bad Request: can't parse entities: {exc}") from None
        elif parse_mode:
            raise _APIError(400, f"Bad Request: unsupported parse_mode {parse_mode!r} in the fake")
        if not plain.strip():
            raise _APIError(400, "Bad Request: message text is empty")
        if utf16_len(plain) > TEXT_LIMIT:
            raise _APIError(400, "Bad Request: message is too long")
        reply_to: int | None = None
        if params.get("reply_parameters"):
            reply_to = int(json.loads(params["reply_parameters"])["message_id"])
        elif params.get("reply_to_message_id"):
            reply_to = int(params["reply_to_message_id"])
        markup = _inline_keyboard(params.get("reply_markup"))
        thread = self._landing_topic(chat_id, params.get("message_thread_id"), reply_to)
        message_id = next(self._message_ids)
        sent = SentMessage(
            chat_id, message_id, text, plain, parse_mode, reply_to, params, thread, markup
        )
        sent.received_at = time.time()
        sent.client = _CLIENT.get()
        sent.edits.append(plain)
        self.sent.setdefault(chat_id, []).append(sent)
        if thread is not None:
            self._threads[(chat_id, message_id)] = thread
        if self.send_delay > 0:
            self._notify()  # it is delivered already; only the answer is on its way
            await asyncio.sleep(self.send_delay)
        sent.answered_at = time.time()
        return self._pressed_message(sent)

    async def _api_sendDocument(self, params: dict[str, str]) -> Any:
        chat_id = self._known_chat(params)
        document = params.get("document", "")
        # An upload is sent as `attach://<name>` with the file in the part of that name (PTB's
        # InputFile(attach=True)) or as the file part `document` itself.
        name = document.removeprefix("attach://") if document.startswith("attach://") else ""
        upload = (_FILES.get() or {}).get(name or "document")
        if upload is None:
            raise _APIError(400, "Bad Request: there is no document in the request")
        filename, data = upload
        if not data:
            raise _APIError(400, "Bad Request: file must be non-empty")
        thread = params.get("message_thread_id")
        message_id = next(self._message_ids)
        self.documents.setdefault(chat_id, []).append(
            SentDocument(chat_id, message_id, filename, data, int(thread) if thread else None)
        )
        self._notify()
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": self._chats[chat_id],
            "from": self.bot,
            "document": {
                "file_id": f"BQACAgIAAxkBAAI{message_id}",
                "file_unique_id": f"AgAD{message_id}",
                "file_name": filename,
                "file_size": len(data),
            },
        }

    async def _api_answerCallbackQuery(self, params: dict[str, str]) -> Any:
        query_id = params.get("callback_query_id", "")
        if query_id not in self._queries:
            raise _APIError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        text = params.get("text", "")
        if len(text) > 200:
            raise _APIError(400, "Bad Request: MESSAGE_TOO_LONG")
        self._queries.discard(query_id)
        self.callback_answers[query_id] = text
        return True

    async def _api_editMessageReplyMarkup(self, params: dict[str, str]) -> Any:
        sent = self._editable(params)
        markup = _inline_keyboard(params.get("reply_markup"))
        if markup == sent.reply_markup:
            raise _APIError(400, f"Bad Request: {_NOT_MODIFIED}")
        sent.reply_markup = markup
        return self._pressed_message(sent)

    async def _api_editMessageText(self, params: dict[str, str]) -> Any:
        sent = self._editable(params)
        text = params.get("text", "")
        parse_mode = params.get("parse_mode") or None
        try:
            plain = parse_html(text) if parse_mode and parse_mode.upper() == "HTML" else text
        except MarkupError as exc:
            raise _APIError(400, f"Bad Request: can't parse entities: {exc}") from None
        if not plain.strip():
            raise _APIError(400, "Bad Request: message text is empty")
        if utf16_len(plain) > TEXT_LIMIT:
            raise _APIError(400, "Bad Request: MESSAGE_TOO_LONG")
        markup = _inline_keyboard(params.get("reply_markup"))
        if plain == sent.plain and markup == sent.reply_markup:
            raise _APIError(400, f"Bad Request: {_NOT_MODIFIED}")
        sent.text, sent.plain, sent.parse_mode, sent.reply_markup = text, plain, parse_mode, markup
        sent.edits.append(plain)
        self._notify()
        return self._pressed_message(sent)

    async def _api_deleteMessage(self, params: dict[str, str]) -> Any:
        chat_id = self._known_chat(params)
        message_id = int(params.get("message_id") or 0)
        found = any(m.message_id == message_id for m in self.sent.get(chat_id, []))
        if not found or (chat_id, message_id) in self._deleted:
            raise _APIError(400, "Bad Request: message to delete not found")
        self._deleted.add((chat_id, message_id))
        self._notify()
        return True

    async def _api_sendMessageDraft(self, params: dict[str, str]) -> Any:
        if not self._drafts_known:
            raise _APIError(404, "Not Found")
        chat_id = self._known_chat(params)
        if self._chats[chat_id].get("type") != "private":
            raise _APIError(400, "Bad Request: drafts can be sent only to private chats")
        try:
            draft_id = int(params.get("draft_id", ""))
        except ValueError:
            raise _APIError(400, "Bad Request: draft_id is not specified") from None
        if draft_id == 0:
            raise _APIError(400, "Bad Request: draft_id must be non-zero")
        text = params.get("text", "")
        parse_mode = params.get("parse_mode") or None
        try:
            plain = parse_html(text) if parse_mode and parse_mode.upper() == "HTML" else text
        except MarkupError as exc:
            raise _APIError(400, f"Bad Request: can't parse entities: {exc}") from None
        if utf16_len(plain) > TEXT_LIMIT:
            raise _APIError(400, "Bad Request: message is too long")
        draft = Draft(chat_id, draft_id, text, plain, time.time())
        self.drafts.setdefault(chat_id, []).append(draft)
        self._notify()
        return True

    def _editable(self, params: dict[str, str]) -> SentMessage:
        """The bot's own message that an edit names (inline messages are not supported)."""
        if params.get("inline_message_id"):
            raise _APIError(400, "Bad Request: the fake has no inline messages")
        chat_id = self._known_chat(params)
        try:
            message_id = int(params.get("message_id", ""))
        except ValueError:
            raise _APIError(400, "Bad Request: message identifier is not specified") from None
        found = [m for m in self.sent.get(chat_id, []) if m.message_id == message_id]
        if not found or (chat_id, message_id) in self._deleted:
            raise _APIError(400, "Bad Request: message to edit not found")
        if (chat_id, message_id) in self._frozen:
            raise _APIError(400, "Bad Request: message can't be edited")
        return found[0]

    def _landing_topic(self, chat_id: int, thread: str | None, reply_to: int | None) -> int | None:
        """Where a message lands in a forum, or "message thread not found"."""
        if not self._chats[chat_id].get("is_forum"):
            return int(thread) if thread else None
        if thread:
            if int(thread) not in self._topics.get(chat_id, set()):
                raise _APIError(400, "Bad Request: message thread not found")
            return int(thread)
        if reply_to is not None:
            return self._threads.get((chat_id, reply_to))
        return None

    async def _api_getFile(self, params: dict[str, str]) -> Any:
        """As the Bot API: a File with its file_path, valid for an hour; files over 20 MB are
        refused ("file is too big"), unknown ids too."""
        file_id = params.get("file_id", "")
        known = self.files.get(file_id)
        if known is None:
            raise _APIError(
                400, "Bad Request: wrong file_id or the file is temporarily unavailable"
            )
        path, _, size = known
        if size > 20 * 1024 * 1024:
            raise _APIError(400, "Bad Request: file is too big")
        return {
            "file_id": file_id,
            "file_unique_id": f"u-{file_id[-8:]}",
            "file_size": size,
            "file_path": path,
        }

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        path = request.match_info["path"]
        self.downloads.append(path)
        self._notify()
        for known_path, data, _ in self.files.values():
            if known_path == path:
                return web.Response(body=data, content_type="application/octet-stream")
        return _error(404, "Not Found")

    async def _api_sendChatAction(self, params: dict[str, str]) -> Any:
        chat_id = self._known_chat(params)
        self.chat_actions.append((chat_id, params.get("action", "")))
        return True

    def _known_chat(self, params: dict[str, str]) -> int:
        try:
            chat_id = int(params.get("chat_id", ""))
        except ValueError:
            raise _APIError(400, "Bad Request: chat not found") from None
        if chat_id in self._migrated:
            raise _APIError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": self._migrated[chat_id]},
            )
        if chat_id not in self._chats:
            raise _APIError(400, "Bad Request: chat not found")
        if chat_id in self._blocked:
            raise _APIError(403, "Forbidden: bot was blocked by the user")
        return chat_id

    def bot_message(self, sent: SentMessage) -> dict[str, Any]:
        """A message the bot sent, as it appears in a `reply_to_message`."""
        message = {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": self._chats[sent.chat_id],
            "from": self.bot,
            "text": sent.plain,
        }
        if sent.thread_id is not None:
            message.update(message_thread_id=sent.thread_id, is_topic_message=True)
        return message

    # ---- webhook delivery --------------------------------------------------------------------

    def _ensure_pushing(self) -> None:
        if self._push_task is None or self._push_task.done():
            push = self._balance_updates if self._balanced is not None else self._push_updates
            self._push_task = asyncio.get_running_loop().create_task(push())

    async def _stop_pushing(self) -> None:
        task, self._push_task = self._push_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _push_updates(self) -> None:
        """POST queued updates to the webhook one at a time, like Telegram: retry until 200."""
        async with aiohttp.ClientSession() as session:
            while self.webhook_url and self._updates and self._balanced is None:
                update = self._updates[0]
                status = await self._post(session, self.webhook_url, update)
                self.webhook_deliveries.append((int(update["update_id"]), status))
                self._notify()
                if status == 200:
                    if self._updates and self._updates[0] is update:
                        self._updates.pop(0)
                else:
                    await asyncio.sleep(0.1)

    async def _post(self, session: aiohttp.ClientSession, url: str, update: dict[str, Any]) -> int:
        """One POST of an update; its HTTP status, 0 when no answer came."""
        headers = {"Content-Type": "application/json"}
        if self.webhook_secret:
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook_secret
        try:
            async with session.post(url, data=json.dumps(update), headers=headers) as response:
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return 0

    async def _balance_updates(self) -> None:
        """The load balancer: each chat's oldest update in flight (up to the connection limit)
        until answered 200; the next one of a chat only after that."""
        posting: dict[int, asyncio.Task[None]] = {}
        timeout = aiohttp.ClientTimeout(total=self._balance_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                while self.webhook_url and self._balanced is not None:
                    self._balance_wake.clear()
                    if not self._updates and not posting:
                        return  # `push_raw` starts it again
                    chats: set[Any] = set()
                    for update in list(self._updates):
                        chat = _chat_of(update)
                        if chat in chats:
                            continue  # an earlier update of this chat waits for its 200
                        chats.add(chat)
                        update_id = int(update["update_id"])
                        if update_id in posting or len(posting) >= self._balance_connections:
                            continue
                        task = asyncio.create_task(self._post_balanced(session, update))
                        posting[update_id] = task
                        task.add_done_callback(
                            lambda _, update_id=update_id: self._posted(posting, update_id)
                        )
                    await self._balance_wake.wait()
            finally:
                for task in posting.values():
                    task.cancel()
                await asyncio.gather(*posting.values(), return_exceptions=True)

    def _posted(self, posting: dict[int, asyncio.Task[None]], update_id: int) -> None:
        posting.pop(update_id, None)
        self._balance_wake.set()

    async def _post_balanced(self, session: aiohttp.ClientSession, update: dict[str, Any]) -> None:
        """Try the pool in a seeded order, round after round, until one answers 200."""
        update_id = int(update["update_id"])
        while True:
            pool = list(self._balanced or ())
            for url in self._balance_rng.sample(pool, len(pool)):
                status = await self._post(session, url, update)
                self.webhook_deliveries.append((update_id, status))
                self.balanced_deliveries.append(WebhookPost(update_id, url, status, time.time()))
                self._notify()
                if status == 200:
                    self._updates = [u for u in self._updates if u is not update]
                    return
            await asyncio.sleep(0.1)


def _photo_sizes(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [size for item in value for size in _photo_sizes(item)]
    if not isinstance(value, dict):
        return []
    found = [size for size in value.get("photo", []) if isinstance(size, dict)]
    for key, item in value.items():
        if key != "photo" and isinstance(item, dict | list):
            found += _photo_sizes(item)
    return found


def _chat_of(update: dict[str, Any]) -> Any:
    """The chat an update belongs to (Telegram keeps a chat's updates in order), or a key of
    the update's own when it names none."""
    for value in update.values():
        if isinstance(value, dict):
            message = value.get("message") if "chat_instance" in value else value
            chat = message.get("chat") if isinstance(message, dict) else None
            if isinstance(chat, dict) and "id" in chat:
                return chat["id"]
    return ("update", update.get("update_id"))


class _APIError(Exception):
    def __init__(
        self, status: int, description: str, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=status)


def load_fixture(name: str) -> Any:
    """A recorded payload from tests/fixtures/telegram/ (see its README for the origins)."""
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def _adapted(
    value: Any, ids: dict[int, int], renumbered: dict[int, int], fresh: Any, key: str = ""
) -> Any:
    """`value` with ids adapted (see `FakeTelegramServer.replay`)."""
    if isinstance(value, dict):
        return {k: _adapted(v, ids, renumbered, fresh, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_adapted(v, ids, renumbered, fresh, key) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        if key in _MESSAGE_ID_KEYS:
            if value not in renumbered:
                renumbered[value] = next(fresh)
            return renumbered[value]
        if key in _ID_KEYS:
            return ids.get(value, value)
    return value


async def _params(request: web.Request) -> dict[str, str]:
    params: dict[str, str] = {key: value for key, value in request.query.items()}
    if request.content_type == "application/json":
        with contextlib.suppress(ValueError):
            body = await request.json()
            if isinstance(body, dict):
                params.update(
                    {k: v if isinstance(v, str) else json.dumps(v) for k, v in body.items()}
                )
    elif request.can_read_body:
        form = await request.post()
        params.update({key: value for key, value in form.items() if isinstance(value, str)})
        _FILES.set(
            {
                key: (value.filename, value.file.read())
                for key, value in form.items()
                if isinstance(value, web.FileField)
            }
        )
    return params


_NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly the "
    "same as a current content and reply markup of the message"
)


def _inline_keyboard(raw: str | None) -> dict[str, Any] | None:
    """The `reply_markup` of a request as Telegram checks an InlineKeyboardMarkup (the only
    markup the fake accepts); None when there is none."""
    if not raw:
        return None
    try:
        markup = json.loads(raw)
    except ValueError:
        raise _APIError(400, "Bad Request: can't parse reply keyboard markup JSON object") from None
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise _APIError(
            400,
            'Bad Request: field "inline_keyboard" of the InlineKeyboardMarkup must be an Array '
            "of Arrays",
        )
    for button in (button for row in rows for button in row):
        if not isinstance(button, dict) or not isinstance(button.get("text"), str):
            raise _APIError(400, "Bad Request: can't parse inline keyboard button: Text is empty")
        data = button.get("callback_data")
        if data is None:
            raise _APIError(
                400,
                "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in "
                "the inline keyboard",
            )
        if not isinstance(data, str) or not 1 <= len(data.encode("utf-8")) <= 64:
            raise _APIError(400, "Bad Request: BUTTON_DATA_INVALID")
    return {"inline_keyboard": rows} if rows else None


def _bool(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")
