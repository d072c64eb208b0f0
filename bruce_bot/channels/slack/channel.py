"""The Slack channel: a Slack app that turns DMs and mentions into inbox messages.

This package is the only one that imports `slack_sdk`. A supervised background task asks
`auth.test` who Bruce is (its bot user, whose mentions address it and whose messages it skips),
then, in Socket Mode (`mode: socket`, the default), opens the WebSocket (socket.py); in Events
API mode (`mode: events`) Slack posts to `/slack/events` on Bruce's web server (webhook.py;
the route is the web part's, web/webhooks.py, which hands the request to `receive_webhook`).
`start` waits a bounded time for that, so an unreachable Slack never blocks Bruce; failures
are retried with a growing delay, and a token Slack refuses is logged once with what to fix,
and the channel stays off.

Either way, every event goes through the intake (intake.py): direct messages, mentions in
channels (answered in a thread on the message; each thread is its own session, chat id
`<channel>/<thread_ts>`: address.py), and the messages that follow in a thread Bruce is in,
without a mention. An event is acknowledged to Slack only once its message is stored. Who may
talk (`allowed_user_ids`, Slack member ids as text), the stranger throttle and the commands
(`!new`, `!reminders`, `!help`) are the channel policy's (policy.py), and so is pairing.

Replies are mrkdwn (mrkdwn.py), posted in the thread or DM they belong to (sending.py), live
while they are written (live.py), with buttons as Block Kit (blocks.py) and artifacts as files;
files people send are fetched with the bot token (files.py). Slack shows no typing indicator
for a bot: while a turn runs, the message it answers gets an 👀 reaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import Clock

from bruce_bot.channels.base import AttachmentUnavailableError, InboxPort
from bruce_bot.channels.connecting import wait_connected
from bruce_bot.channels.policy import AllowlistPort, ChannelPolicy, PairingPort
from bruce_bot.channels.slack.address import SlackAddress
from bruce_bot.channels.slack.events import Me
from bruce_bot.channels.slack.files import fetch
from bruce_bot.channels.slack.intake import SLACK_CHANNEL, Intake
from bruce_bot.channels.slack.live import EDIT_INTERVAL_SECONDS, SlackLive
from bruce_bot.channels.slack.probe import TOKEN_ERRORS, web_client
from bruce_bot.channels.slack.sending import SlackSender
from bruce_bot.channels.slack.socket import SocketIntake
from bruce_bot.channels.slack.texts import APP_TOKEN_FIX, BOT_TOKEN_FIX, COMMANDS, TEXTS
from bruce_bot.channels.slack.webhook import EVENTS_PATH, Answer, EventsEndpoint
from bruce_bot.config.slack import SlackConfig
from bruce_bot.domain import Attachment, OutboundMessage

log = structlog.get_logger(__name__)

MAX_MESSAGE_CHARS = 3500  # a part the outbox sends: one screen (Slack takes up to 40000)
READY_TIMEOUT_SECONDS = 10.0
FIRST_RETRY_DELAY_SECONDS = 1.0
MAX_RETRY_DELAY_SECONDS = 60.0
SEEN_REACTION = "eyes"


class _Refused(Exception):
    """Slack refused a token: what to fix."""


class SlackChannel:
    name = SLACK_CHANNEL
    max_message_chars = MAX_MESSAGE_CHARS
    sends_files = True  # the outbox sends a reply's artifacts as files (see outbox.py)

    def __init__(
        self,
        config: SlackConfig,
        *,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        signature_clock: Clock | None = None,
    ) -> None:
        self._config = config
        self._policy = ChannelPolicy(
            SLACK_CHANNEL, config.allowed_user_ids, COMMANDS, TEXTS, clock=clock
        )
        self._ready_timeout = ready_timeout
        self._out = SlackSender()
        self._intake = Intake(self._policy, self._out)
        self._endpoint = (
            EventsEndpoint(config.signing_secret, self._intake, signature_clock)
            if config.mode == "events"
            else None
        )
        self._session: aiohttp.ClientSession | None = None
        self._socket: SocketIntake | None = None
        self._runner: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._stopping = asyncio.Event()
        self.live_interval = EDIT_INTERVAL_SECONDS
        self.gave_up: str | None = None

    def use_pairing(self, pairing: PairingPort) -> None:
        """Strangers get a one-time code the owner approves (`channels.slack.pairing`)."""
        self._policy.pair_with(pairing)

    def use_allowlist(self, allowlist: AllowlistPort) -> None:
        self._policy.allow_from(allowlist)

    # ---- life cycle ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def accepting(self) -> bool:
        return self._intake.inbox is not None

    async def start(self, inbox: InboxPort) -> None:
        self._intake.inbox = inbox
        self._stopping.clear()
        self._policy.warn_if_nobody_allowed()
        self._runner = asyncio.create_task(self._run(), name="slack-client")
        await wait_connected(self._runner, self._connected, self._ready_timeout, "slack")

    async def stop(self) -> None:
        """Stop intake: events from now on are not acknowledged (Slack sends them again, to
        the next start). Sending keeps working until `close`."""
        self._stopping.set()
        self._intake.inbox = None
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()
        if self._endpoint is not None:
            self._endpoint.close()

    async def close(self) -> None:
        await self.stop()
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
        self._out.use(None)
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        self._connected.clear()

    async def _run(self) -> None:
        """Connect until stopped or refused; never raises."""
        delay = FIRST_RETRY_DELAY_SECONDS
        while not self._stopping.is_set():
            try:
                await self._connect()
                return
            except _Refused as exc:
                self.gave_up = str(exc)
                log.error("slack_token_refused", fix=str(exc))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping.is_set():
                    return
                log.warning("slack_unreachable", outcome=repr(exc), retry_in_seconds=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay = min(delay * 2, MAX_RETRY_DELAY_SECONDS)

    async def _connect(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        client = web_client(self._config, self._session)
        try:
            who = await client.auth_test()
        except SlackApiError as exc:
            if str(exc.response.get("error", "")) in TOKEN_ERRORS:
                raise _Refused(BOT_TOKEN_FIX) from exc
            raise
        self._intake.me = Me(str(who.get("user_id") or ""), str(who.get("bot_id") or ""))
        self._out.use(client)
        if self._endpoint is None:
            socket = SocketIntake(self._config.app_token, client, self._intake)
            try:
                await socket.connect()
            except SlackApiError as exc:
                if str(exc.response.get("error", "")) in TOKEN_ERRORS:
                    raise _Refused(APP_TOKEN_FIX) from exc
                raise
            self._socket = socket
        self._connected.set()
        log.info(
            "slack_connected",
            mode=self._config.mode,
            bot_user_id=self._intake.me.user_id,
            team=who.get("team"),
        )

    # ---- the Events API (web/webhooks.py routes it here) --------------------------------------

    @property
    def webhook_path(self) -> str | None:
        return EVENTS_PATH if self._endpoint is not None else None

    async def receive_webhook(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        if self._endpoint is None:
            return 404, "text/plain", b"the Events API is off (channels.slack.mode: socket)"
        return await self._endpoint.receive(body, headers)

    # ---- delivery -----------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        await self._out.send(message)

    def live_reply(self, chat_id: str, metadata: Mapping[str, object]) -> SlackLive | None:
        """The turn's answer shown while it is written (live.py), unless
        `channels.slack.streaming` is off or Slack is not connected."""
        if not self._config.streaming or not self.connected:
            return None
        try:
            address = SlackAddress.parse(chat_id)
        except ValueError:
            return None
        return SlackLive(self._out, address, interval=self.live_interval)

    async def typing(self, chat_id: str) -> None:
        """Slack shows no typing indicator for a bot: the message being answered gets an 👀
        reaction instead, once (scope reactions:write)."""
        ts = self._intake.unseen.pop(chat_id, None)
        if ts is not None:
            await self._out.react(SlackAddress.parse(chat_id), ts, SEEN_REACTION)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file's bytes from Slack, with the bot token (files.py)."""
        session = self._session
        if session is None or session.closed:
            raise AttachmentUnavailableError("Slack is not connected right now")
        return await fetch(session, self._config.bot_token, attachment, max_bytes)
