"""Building python-telegram-bot's `Application` for Bruce, and starting its updates.

The updates of a getUpdates batch are handled concurrently, those of one chat one after the
other in arrival order (`ChatOrderedProcessor`), so the inbox stores a batch in one transaction
while each chat's messages keep their order; the batch is confirmed only once it was handled
(telegram_intake.py); getUpdates through a request that steps over an update PTB cannot
parse instead of fetching it again forever; no rate limiter (the outbox is the one retry owner);
long polling, or a webhook whose secret Telegram sends back with each post. A wrong webhook
setting stops start-up with a message that names the key.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import secrets
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog
from telegram import Update
from telegram.error import TelegramError
from telegram.ext import Application, ApplicationBuilder, BaseUpdateProcessor
from telegram.request import HTTPXRequest

from bruce_bot.channels.telegram.intake import DurableUpdateQueue
from bruce_bot.channels.telegram.raw import chat_id_of
from bruce_bot.config import TelegramConfig

log = structlog.get_logger(__name__)

POLL_TIMEOUT = timedelta(seconds=25)
BOOTSTRAP_RETRIES = 3
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")

RawListener = Callable[[Any, Update | None], None]
# Updates handled at once at most: a full getUpdates batch (100) and webhook posts besides.
MAX_CONCURRENT_UPDATES = 256


class UpdateCheckingRequest(HTTPXRequest):
    """The getUpdates connection, with a guard against updates PTB cannot parse.

    PTB parses a whole batch at once; one malformed update makes it log the failure and fetch
    the same batch again, forever, so nobody would be answered any more. Here each update of a
    batch is parsed on its own first, and one that fails is replaced by an empty update with the
    same id, so the offset moves past it and the rest are handled. `seen` is told of every
    update of the batch (the parsed one, or None for one that could not be parsed) before any
    of them is handled.
    """

    def __init__(self, seen: RawListener, queue: DurableUpdateQueue, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._seen = seen
        self._queue = queue

    # PTB marks `post` final; it is the one place that sees a getUpdates batch before PTB parses it.
    async def post(self, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        if not url.endswith("/getUpdates"):
            return await super().post(url, *args, **kwargs)
        # This call's offset confirms every update fetched so far: they must be stored first.
        await self._queue.all_handled()
        if self._queue.unconfirmable:
            # Bruce is stopping and an update was not stored: confirm nothing (this is PTB's
            # last getUpdates on stop), so Telegram sends it again at the next start.
            log.warning("telegram_updates_left_unconfirmed", reason="not stored before stop")
            return []
        result = await super().post(url, *args, **kwargs)
        if not isinstance(result, list):
            return result
        checked: list[dict[str, Any]] = []
        for item in result:
            raw, parsed = _checked_update(item)
            if raw is not None:
                checked.append(raw)
                _tell(self._seen, item, parsed)
        self._queue.polled(raw["update_id"] for raw in checked)
        return checked


class ChatOrderedProcessor(BaseUpdateProcessor):
    """Updates of different chats handled concurrently, those of one chat one after the other.

    Why: a getUpdates batch holds up to a hundred updates; handled one at a time, each stores
    its message in a commit of its own and the batch takes as long as a hundred commits, while
    the turns wait for the same database. Handled together, the inbox stores them in one commit
    (storage/group_commit.py). Within a chat the order of arrival is kept by the queue
    (`wait_turn`), which is also told when an update is done, so its confirmation can go out.
    """

    def __init__(self, queue: DurableUpdateQueue) -> None:
        super().__init__(MAX_CONCURRENT_UPDATES)
        self._queue = queue

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        try:
            await self._queue.wait_turn(update)
            await coroutine
        finally:
            if inspect.iscoroutine(coroutine):
                coroutine.close()  # never started (cancelled while waiting): no warning
            self._queue.handled(update)

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None


def webhook_refusal() -> Exception:
    """What PTB's webhook server answers for an update that could not be stored: 503, which
    Telegram treats as "not delivered" and posts again later."""
    from tornado.web import HTTPError  # PTB's webhook server; only loaded in webhook mode

    return HTTPError(503, reason="Bruce cannot store messages right now; send it again later")


def chat_key(update: object) -> int | None:
    """The chat an update belongs to (None: none, such as an update PTB could not read)."""
    chat = update.effective_chat if isinstance(update, Update) else None
    return chat.id if chat is not None else None


def _checked_update(item: Any) -> tuple[dict[str, Any] | None, Update | None]:
    """(the update to hand to PTB or None to drop it, the parsed update or None)."""
    update_id = item.get("update_id") if isinstance(item, dict) else None
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        log.warning("telegram_update_unreadable", reason="no update_id")
        return None, None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PTB's deprecation notes are not parse errors
            parsed = Update.de_json(item, None)
    except Exception as exc:
        log.warning(
            "telegram_update_malformed",
            update_id=update_id,
            chat_id=chat_id_of(item),
            error=repr(exc),
        )
        return {"update_id": update_id}, None
    return item, parsed


def _tell(listener: Callable[..., None], *args: Any) -> None:
    """Intake bookkeeping must never stop intake."""
    try:
        listener(*args)
    except Exception:
        log.exception("telegram_intake_note_failed")


def tls_options() -> dict[str, Any]:
    """httpx options for both of PTB's connections: one TLS context (with certifi's CA
    bundle) shared by them, instead of one built for each (~36 ms and 2 MB apiece)."""
    return {"verify": httpx.create_ssl_context()}


def build_application(
    config: TelegramConfig,
    updates: UpdateCheckingRequest,
    queue: DurableUpdateQueue,
    http_options: dict[str, Any],
) -> Application:
    """The application, fetching through `updates` into `queue`; its other requests (sends)
    through a pool of PTB's default size with `http_options`."""
    builder = (
        ApplicationBuilder()
        .token(config.token)
        .request(HTTPXRequest(connection_pool_size=256, httpx_kwargs=http_options))
        .concurrent_updates(ChatOrderedProcessor(queue))
        .update_queue(queue)
        .get_updates_request(updates)
        .job_queue(None)
        # No AIORateLimiter: its RetryAfter retries would stack on the outbox's, and its
        # per-group pacing would hold replies behind typing indicators. A 429 becomes a
        # DeliveryError with retry_after, and the outbox (the one retry owner) waits it out.
    )
    if config.base_url:
        base_url = config.base_url.rstrip("/")
        builder = builder.base_url(base_url).base_file_url(_file_url(base_url))
    return builder.build()


async def start_updates(
    app: Application,
    config: TelegramConfig,
    polling_failed: Callable[[TelegramError], None],
) -> None:
    """Start receiving updates, by webhook or long polling, unless that is already running."""
    updater = app.updater
    assert updater is not None
    if updater.running:
        return
    if config.mode != "webhook":
        await updater.start_polling(
            timeout=POLL_TIMEOUT,
            bootstrap_retries=BOOTSTRAP_RETRIES,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=False,
            error_callback=polling_failed,
        )
        return
    webhook = config.webhook
    secret = webhook_secret(config)  # first: it says what to set when the URL is missing
    url = webhook.url or ""
    await updater.start_webhook(
        listen=webhook.listen,
        port=webhook.port,
        url_path=urlsplit(url).path.strip("/"),
        webhook_url=url,
        secret_token=secret,
        allowed_updates=list(ALLOWED_UPDATES),
        drop_pending_updates=False,
        bootstrap_retries=BOOTSTRAP_RETRIES,
    )
    log.info("telegram_webhook_listening", listen=webhook.listen, port=webhook.port)


async def release_connections(
    app: Application,
    updates: HTTPXRequest | None,
) -> None:
    """Close the HTTP clients of an application whose initialisation failed half-way."""
    for request in (app.bot.request, updates):
        if request is None:
            continue
        with contextlib.suppress(Exception):
            await request.shutdown()


def _file_url(base_url: str) -> str:
    """The file URL of a Bot API server from its method URL (…/bot → …/file/bot)."""
    if base_url.endswith("/bot"):
        return base_url[: -len("/bot")] + "/file/bot"
    return base_url


def webhook_secret(config: TelegramConfig) -> str:
    """The secret Telegram will send with each post; a wrong webhook setting stops start-up."""
    webhook = config.webhook
    if not webhook.url:
        raise RuntimeError(
            "channels.telegram.mode is webhook but channels.telegram.webhook.url is empty: "
            "set it to the public https URL that reaches Bruce, or use mode: polling."
        )
    secret = webhook.secret_token
    if not secret:
        # Bruce registers the webhook itself, so it can choose a secret Telegram will send.
        log.info("telegram_webhook_secret_generated")
        return secrets.token_urlsafe(32)
    if not _SECRET_TOKEN.fullmatch(secret):
        raise RuntimeError(
            "channels.telegram.webhook.secret_token may only contain letters, digits, _ and "
            "- (1-256 characters), as Telegram requires."
        )
    return secret
