"""The Matrix channel: a matrix-nio client that turns DMs and mentions into inbox messages.

This package is the only one that imports `nio`. A supervised background task logs in
(session.py) and runs the sync loop; `start` waits a bounded time for the first sync, so an
unreachable homeserver never blocks Bruce (nio retries timeouts itself; the loop retries other
failures with a growing delay). Credentials the homeserver refuses are logged once with what to
fix, and the channel stays off.

The sync token (`next_batch`) is kept across restarts in a 0600 file of the data dir
(sync_state.py; parts.py hands the folder over with `use_data_dir`, channels never see the
database). It is saved after a sync's messages were handed to the inbox; when the inbox cannot
take one (storage away), the token is not saved and the same sync is asked for again later, so
the homeserver is where waiting messages wait (the inbox stores each event id once). The first
sync of an account without a saved token skips the rooms' history: Bruce answers what is written
from then on, not old messages. In a room it has just joined, it answers what follows its join.

Invites from allowed users are accepted; others are declined (the room is left). Bruce answers
direct chats (a room of two) and, in other rooms, messages that mention it (its user id or
display name in the body, or `m.mentions`) or reply to one of its messages. Each room is one
session, and each thread in it one of its own (threads.py); a thread Bruce answered is followed
without a mention. Its own events, state events, redactions, edits, notices and unknown msgtypes are
ignored; pictures, files and audio are read through the media path (media.py), a video or
location gets one short "text only" notice where Bruce is addressed.

End-to-end encryption is not supported: olm is not installed, so Bruce can neither read nor
write in an encrypted room. It says so once per room (ENCRYPTED_REFUSAL, in plain text), and
delivery into such a room fails as permanent rather than leak plain text into it.

Who may talk (`allowed_user_ids`, Matrix ids as text), the stranger throttle and the commands
are the channel policy's (policy.py), pairing too: with it on, a stranger's direct-chat invite is
accepted so that their first message there gets the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from nio import AsyncClient, MatrixRoom, RoomGetEventResponse, RoomSendResponse, SyncResponse

from bruce_bot.channels.base import AttachmentUnavailableError, DeliveryError, InboxPort
from bruce_bot.channels.connecting import wait_connected
from bruce_bot.channels.held import unavailable
from bruce_bot.channels.matrix.events import (
    ANSWERED_MSGTYPES,
    NOT_READ_MSGTYPES,
    Me,
    content_of,
    is_message,
    mentions,
    replied_to,
    text_of,
)
from bruce_bot.channels.matrix.formatting import message_content
from bruce_bot.channels.matrix.live import EDIT_INTERVAL_SECONDS, MatrixLive
from bruce_bot.channels.matrix.media import attachment_of, caption_of, fetch, upload
from bruce_bot.channels.matrix.reactions import NO, YES, Offers, reaction_content, reaction_of
from bruce_bot.channels.matrix.session import LoginRefused, Session, log_in
from bruce_bot.channels.matrix.sync_state import SyncState, SyncStateFile
from bruce_bot.channels.matrix.texts import (
    COMMANDS,
    EMPTY_MENTION_REPLY,
    ENCRYPTED_REFUSAL,
    LOGIN_FIX,
    NOT_STORED_REPLY,
    ONLY_TEXT_REPLY,
    TEXTS,
)
from bruce_bot.channels.matrix.threads import chat_id, in_thread, split, thread_root
from bruce_bot.channels.policy import (
    AllowlistPort,
    ChannelPolicy,
    CommandCall,
    PairingPort,
    Press,
)
from bruce_bot.channels.recent import Recent
from bruce_bot.config.matrix import MatrixConfig
from bruce_bot.domain import Attachment, Choice, InboundMessage, OutboundMessage

log = structlog.get_logger(__name__)

MATRIX_CHANNEL = "matrix"
# Far below the 64 KiB event limit with the HTML copy and 4-byte characters.
MAX_MESSAGE_CHARS = 4000
READY_TIMEOUT_SECONDS = 10.0
SYNC_TIMEOUT_MS = 30_000  # the long poll: the homeserver answers at once when something comes
FIRST_RETRY_DELAY_SECONDS = 1.0
MAX_RETRY_DELAY_SECONDS = 60.0
# The first sync of a fresh login: no timeline (history is not answered), the state only.
FIRST_SYNC_FILTER = {"room": {"timeline": {"limit": 0}}}


STOP_WAIT_SECONDS = 5.0  # at stop, how long the batch being taken in may take to end


class _Stopping(Exception):
    """Intake stopped in the middle of a batch: its sync token is not saved."""


class MatrixChannel:
    name = MATRIX_CHANNEL
    max_message_chars = MAX_MESSAGE_CHARS
    sends_files = True  # the outbox sends a reply's artifacts as m.file / m.image (media.py)

    def __init__(
        self,
        config: MatrixConfig,
        *,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._policy = ChannelPolicy(
            MATRIX_CHANNEL, config.allowed_user_ids, COMMANDS, TEXTS, clock=clock
        )
        self._ready_timeout = ready_timeout
        self._state = SyncStateFile(None)
        self._inbox: InboxPort | None = None
        self._client: AsyncClient | None = None
        self._me = Me(config.user_id)
        self._runner: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._stopping = asyncio.Event()
        self._sent: Recent[str] = Recent()  # Bruce's own event ids: replies to them address it
        self._handled: Recent[str] = Recent()  # event ids taken in (a sync asked for again)
        self._told_encrypted: set[str] = set()  # rooms told, once each per run
        self._offers = Offers()  # questions with choices, answered by a reaction
        self._threads: Recent[str] = Recent()  # thread chat ids Bruce answers in
        self._joining: set[str] = set()  # rooms joined whose join event was not seen yet
        self._polling = False  # waiting in the long poll (nothing being taken in)
        self._outage = False  # the homeserver is away, and the log said so once
        self.gave_up: str | None = None
        self.live_interval = EDIT_INTERVAL_SECONDS  # between two edits of a live reply

    def use_data_dir(self, data_dir: Path) -> None:
        """Keep the sync token in `<data_dir>/matrix/sync.json` (else in memory only)."""
        self._state = SyncStateFile(data_dir / "matrix" / "sync.json")

    def use_pairing(self, pairing: PairingPort) -> None:
        """Strangers get a one-time code the owner approves (`channels.matrix.pairing`)."""
        self._policy.pair_with(pairing)

    def use_allowlist(self, allowlist: AllowlistPort) -> None:
        self._policy.allow_from(allowlist)

    # ---- life cycle ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def accepting(self) -> bool:
        return self._inbox is not None

    async def start(self, inbox: InboxPort) -> None:
        self._inbox = inbox
        self._stopping.clear()
        self._policy.warn_if_nobody_allowed()
        self._runner = asyncio.create_task(self._run(), name="matrix-sync")
        await wait_connected(self._runner, self._connected, self._ready_timeout, "matrix")

    async def stop(self) -> None:
        """Stop intake: events from now on are left on the homeserver (the sync token is not
        moved past them), to be read after the restart. Sending works until `close`."""
        self._stopping.set()
        self._inbox = None  # the batch being read stops at its next message (`_Stopping`)
        runner, self._runner = self._runner, None
        if runner is None:
            return
        if not self._polling:  # a batch is being taken in: let it end, its token unsaved
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(runner), STOP_WAIT_SECONDS)
        runner.cancel()  # the long poll: nothing taken in yet
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner

    async def close(self) -> None:
        await self.stop()
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        self._connected.clear()

    async def _run(self) -> None:
        """Log in and sync until stopped or refused; never raises."""
        delay = FIRST_RETRY_DELAY_SECONDS
        while not self._stopping.is_set():
            try:
                if self._client is None:
                    await self._log_in()
                await self._sync_loop()
            except _Stopping:
                return  # the sync token stays before the messages not taken in
            except LoginRefused as exc:
                self.gave_up = LOGIN_FIX
                log.error("matrix_login_refused", answer=str(exc), fix=LOGIN_FIX)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping.is_set():
                    return
                if self._connected.is_set():
                    delay = FIRST_RETRY_DELAY_SECONDS  # it worked for a while: try again soon
                self._connected.clear()
                self._report_outage(exc, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay = min(delay * 2, MAX_RETRY_DELAY_SECONDS)

    def _report_outage(self, exc: Exception, delay: float) -> None:
        """Once per outage in the log (a warning), the retries after it at debug level."""
        if self._outage:
            log.debug("matrix_retrying", outcome=repr(exc), retry_in_seconds=delay)
            return
        self._outage = True
        log.warning(
            "matrix_unreachable",
            outcome=repr(exc),
            retry_in_seconds=delay,
            hint="Bruce keeps trying with a growing delay; messages wait on the homeserver",
        )

    async def _log_in(self) -> None:
        stored = self._state.load(self._config.user_id)
        session: Session = await log_in(self._config, stored)
        client = session.client
        self._client = client
        self._me = Me(client.user_id, await self._display_name(client))
        next_batch = stored.next_batch if stored is not None else ""
        self._save(next_batch, session.access_token)
        log.info("matrix_connected", user_id=client.user_id, device_id=client.device_id)

    async def _display_name(self, client: AsyncClient) -> str:
        with contextlib.suppress(Exception):
            answer = await client.get_displayname()
            name = getattr(answer, "displayname", None)
            if isinstance(name, str) and name != client.user_id:
                return name
        return ""

    def _save(self, next_batch: str, access_token: str | None = None) -> None:
        client = self._client
        assert client is not None
        previous = self._state.load(client.user_id)
        token = access_token if access_token is not None else (previous and previous.access_token)
        self._state.save(SyncState(client.user_id, client.device_id or "", next_batch, token or ""))

    async def _sync_loop(self) -> None:
        client = self._client
        assert client is not None
        state = self._state.load(client.user_id)
        since = state.next_batch if state is not None else ""
        if not since:  # a fresh login: skip the history, keep the state (invites included)
            first = await self._sync(client, None, FIRST_SYNC_FILTER, wait_ms=0)
            await self._invites(client, first)
            since = first.next_batch
            self._save(since)
            log.info("matrix_history_skipped")
        while not self._stopping.is_set():
            answer = await self._sync(client, since, None, wait_ms=SYNC_TIMEOUT_MS)
            self._connected.set()
            await self._invites(client, answer)
            await self._joined(client, answer)
            since = answer.next_batch
            self._save(since)  # after the inbox took the messages (see the docstring)

    async def _sync(
        self, client: AsyncClient, since: str | None, sync_filter: Any, *, wait_ms: int
    ) -> SyncResponse:
        self._polling = True
        try:
            answer = await client.sync(timeout=wait_ms, since=since, sync_filter=sync_filter)
        finally:
            self._polling = False
        if isinstance(answer, SyncResponse):
            self._connected.set()
            if self._outage:
                self._outage = False
                log.info("matrix_reachable_again")
            return answer
        if getattr(answer, "status_code", "") in ("M_UNKNOWN_TOKEN", "M_FORBIDDEN"):
            raise LoginRefused(f"{answer.status_code} {answer.message}")
        raise RuntimeError(f"sync failed: {getattr(answer, 'status_code', '')} {answer.message}")

    # ---- invites ------------------------------------------------------------------------------

    async def _invites(self, client: AsyncClient, answer: SyncResponse) -> None:
        for room_id, info in answer.rooms.invite.items():
            inviter = _inviter(info.invite_state, client.user_id)
            # With pairing on, a stranger's direct chat is joined too: its first message gets
            # the code (and nothing of theirs is kept); a room of theirs is still declined.
            stranger_dm = self._policy.pairs and _invited_direct(info.invite_state, client.user_id)
            if await self._policy.allows(inviter) or (inviter is not None and stranger_dm):
                joined = await client.join(room_id)
                log.info("matrix_invite_accepted", room_id=room_id, inviter=inviter)
                if getattr(joined, "room_id", None):
                    self._joining.add(room_id)
            else:
                await client.room_leave(room_id)
                log.warning("matrix_invite_declined", room_id=room_id, inviter=inviter)

    # ---- intake -------------------------------------------------------------------------------

    async def _joined(self, client: AsyncClient, answer: SyncResponse) -> None:
        for room_id, info in answer.rooms.join.items():
            room = client.rooms.get(room_id)
            if room is None:
                continue
            events = [getattr(event, "source", None) for event in info.timeline.events]
            for event in self._after_join(room_id, [e for e in events if isinstance(e, dict)]):
                try:
                    await self._event(client, room, event)
                except Exception as exc:
                    if isinstance(exc, _Stopping) or unavailable(exc) is not None:
                        raise  # the same sync is asked for again (see the docstring)
                    log.exception(
                        "matrix_event_failed", room_id=room_id, event_id=event.get("event_id")
                    )
            if room.encrypted:
                await self._refuse_encrypted(room_id)

    def _after_join(self, room_id: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """In a room Bruce has just joined, the events after its join (not the history)."""
        if room_id not in self._joining:
            return events
        for index, event in enumerate(events):
            if (
                event.get("type") == "m.room.member"
                and event.get("state_key") == self._me.user_id
                and content_of(event).get("membership") == "join"
            ):
                self._joining.discard(room_id)
                return events[index + 1 :]
        return []

    async def _event(self, client: AsyncClient, room: MatrixRoom, event: dict[str, Any]) -> None:
        sender, event_id = event.get("sender"), event.get("event_id")
        if not isinstance(sender, str) or not isinstance(event_id, str):
            return
        if sender == self._me.user_id:
            self._sent.add(event_id)
            return
        if event.get("type") == "m.room.encrypted":
            if await self._policy.allows(sender):
                await self._refuse_encrypted(room.room_id)
            return
        reaction = reaction_of(event)
        if reaction is not None:
            await self._reacted(sender, *reaction)
            return
        if not is_message(event) or not await self._addressed(client, room, event):
            return
        if event_id in self._handled:
            return
        msgtype = content_of(event).get("msgtype")
        if msgtype not in ANSWERED_MSGTYPES and msgtype not in NOT_READ_MSGTYPES:
            return  # m.notice (bots), m.emote, unknown msgtypes: not for Bruce
        await self._take_in(room, event, sender, event_id)

    async def _addressed(
        self, client: AsyncClient, room: MatrixRoom, event: dict[str, Any]
    ) -> bool:
        if _is_direct(room) or mentions(event, self._me):
            return True
        if chat_id(room.room_id, thread_root(content_of(event))) in self._threads:
            return True
        parent = replied_to(event)
        if parent is None:
            return False
        if parent in self._sent:
            return True
        answer = await client.room_get_event(room.room_id, parent)
        return (
            isinstance(answer, RoomGetEventResponse)
            and getattr(answer.event, "sender", None) == self._me.user_id
        )

    async def _take_in(
        self, room: MatrixRoom, event: dict[str, Any], sender: str, event_id: str
    ) -> None:
        name = room.user_name(sender) or sender
        room_id = chat_id(room.room_id, thread_root(content_of(event)))  # a thread: its own
        admission = await self._policy.admit(sender, chat_id=room_id, user_name=name)
        if admission.refusal is not None:
            await self._say(room_id, admission.refusal)
        if not admission.allowed:
            return
        inbox = self._inbox
        if inbox is None:
            raise _Stopping  # left on the homeserver: read again after the restart
        attachment = attachment_of(content_of(event))
        if attachment is None and content_of(event).get("msgtype") in NOT_READ_MSGTYPES:
            await self._say(room_id, ONLY_TEXT_REPLY)  # a video, a location
            return
        in_room = not _is_direct(room)
        text = caption_of(content_of(event)) if attachment else text_of(event, self._me)
        command = None if attachment else self._policy.commands.named_by(text)
        if command is not None:
            call = CommandCall(command, room_id, sender, name, in_room)
            await self._say(room_id, await self._policy.commands.handle(call, inbox))
            return
        if not text and attachment is None:
            await self._say(room_id, EMPTY_MENTION_REPLY)
            return
        inbound = InboundMessage(
            MATRIX_CHANNEL,
            room_id,
            text,
            user_id=sender,
            user_name=name,
            platform_message_id=event_id,
            metadata={"group": True} if in_room else {},
            attachments=(attachment,) if attachment else (),
        )
        if room_id != room.room_id:
            self._threads.add(room_id)  # a thread Bruce answers: followed without a mention
        await self._submit(inbox, inbound)

    async def _submit(self, inbox: InboxPort, inbound: InboundMessage) -> None:
        try:
            submission = await inbox.submit(inbound)
        except Exception as exc:
            if unavailable(exc) is not None:
                raise
            log.exception("matrix_submit_failed", room_id=inbound.chat_id, error=repr(exc))
            await self._say(inbound.chat_id, NOT_STORED_REPLY)
            return
        assert inbound.platform_message_id is not None
        self._handled.add(inbound.platform_message_id)
        if not submission.accepted:
            log.info(
                "matrix_message_not_accepted",
                room_id=inbound.chat_id,
                event_id=inbound.platform_message_id,
                reason=submission.reason,
            )

    async def _refuse_encrypted(self, room_id: str) -> None:
        if room_id in self._told_encrypted:
            return
        self._told_encrypted.add(room_id)
        log.warning("matrix_encrypted_room_refused", room_id=room_id)
        await self._say(room_id, ENCRYPTED_REFUSAL)

    # ---- delivery -----------------------------------------------------------------------------

    async def _say(self, chat: str, text: str) -> None:
        """The adapter's own words, as an `m.notice` (bots do not answer notices)."""
        client = self._client
        if client is None:
            return
        room_id, root = split(chat)
        try:
            answer = await client.room_send(
                room_id, "m.room.message", in_thread(message_content(text, "m.notice"), root)
            )
        except Exception as exc:
            log.warning("matrix_notice_failed", room_id=room_id, error=repr(exc))
            return
        if isinstance(answer, RoomSendResponse):
            self._sent.add(answer.event_id)

    async def send(self, message: OutboundMessage) -> None:
        if message.file is not None:  # an artifact sent with its reply (media.py)
            client = self._client
            if client is None:
                raise DeliveryError("Matrix is not connected right now")
            tx_id = _transaction_id(message)
            tx_id = f"{tx_id}-{message.file.artifact}" if tx_id else None
            await self.post(message.chat_id, await upload(client, message.file), tx_id)
            return
        content = message_content(message.text)
        event_id = await self.post(message.chat_id, content, _transaction_id(message))
        if message.choices:
            await self.offer(message.chat_id, event_id, message.choices)

    async def offer(self, chat: str, event_id: str, choices: tuple[Choice, ...]) -> None:
        """Remember a question's choices and put ✅ / ❌ under it (reactions.py)."""
        self._offers.add(event_id, chat, choices)
        client = self._client
        if client is None:
            return
        for key in (YES, NO)[: len(choices)]:
            with contextlib.suppress(Exception):  # best effort: a reaction typed works as well
                content = reaction_content(event_id, key)
                await client.room_send(split(chat)[0], "m.reaction", content)

    async def _reacted(self, sender: str, target: str, key: str) -> None:
        pressed = self._offers.pressed(target, key)
        if pressed is None or not await self._policy.allows(sender):
            return  # not a question's choice, or a stranger's reaction: ignored
        number, chat, data = pressed
        answer = await self._policy.presses.answer(Press(sender, chat, number, data), self._inbox)
        for text in (answer.notice, answer.reply):
            if text:
                await self._say(chat, text)

    async def post(self, chat: str, content: dict[str, Any], tx_id: str | None) -> str:
        """Send `content` into `chat` (its thread, unless it is an edit); its event id."""
        client = self._client
        if client is None:
            raise DeliveryError("Matrix is not connected right now")
        room_id, root = split(chat)
        room = client.rooms.get(room_id)
        if room is not None and room.encrypted:
            raise DeliveryError("the room is end-to-end encrypted", permanent=True)
        if "m.relates_to" not in content:
            content = in_thread(content, root)
        answer = await client.room_send(room_id, "m.room.message", content, tx_id=tx_id)
        if isinstance(answer, RoomSendResponse):
            self._sent.add(answer.event_id)
            return str(answer.event_id)
        raise _delivery_error(answer)

    async def redact(self, chat: str, event_id: str) -> None:
        client = self._client
        if client is not None:
            with contextlib.suppress(Exception):
                await client.room_redact(split(chat)[0], event_id)

    def live_reply(self, chat_id: str, metadata: Mapping[str, object]) -> MatrixLive | None:
        """The turn's answer shown while it is written (live.py), unless
        `channels.matrix.streaming` is off or Matrix is not connected."""
        if not self._config.streaming or not self.connected:
            return None
        return MatrixLive(chat_id, self, interval=self.live_interval)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file's bytes from the homeserver's media API (media.py)."""
        client = self._client
        if client is None:
            raise AttachmentUnavailableError("Matrix is not connected right now")
        return await fetch(client, attachment, max_bytes)

    async def typing(self, chat_id: str) -> None:
        client = self._client
        if client is not None:
            with contextlib.suppress(Exception):
                await client.room_typing(split(chat_id)[0], True, timeout=10_000)


def _inviter(invite_state: list[Any], me: str) -> str | None:
    for event in invite_state:
        source = getattr(event, "source", None)
        if not isinstance(source, dict):
            continue
        if source.get("type") == "m.room.member" and source.get("state_key") == me:
            sender = source.get("sender")
            return sender if isinstance(sender, str) else None
    return None


def _invited_direct(invite_state: list[Any], me: str) -> bool:
    """The invite says it is to a direct chat (`is_direct` of Bruce's membership event)."""
    for event in invite_state:
        # nio keeps the member event's content as an attribute (its `source` may lack it).
        content = getattr(event, "content", None)
        if getattr(event, "state_key", None) == me and isinstance(content, dict):
            return bool(content.get("is_direct"))
    return False


def _is_direct(room: MatrixRoom) -> bool:
    """A direct chat: Bruce and one person (joined or invited)."""
    return room.member_count <= 2


def _transaction_id(message: OutboundMessage) -> str | None:
    """The same part sent again (a retry, a redelivery after a crash) has the same transaction
    id, and the homeserver keeps one event for it."""
    if message.message_id is None:
        return None
    digest = hashlib.sha256(message.text.encode()).hexdigest()[:16]
    return f"bruce-{message.message_id}-{digest}"


def _delivery_error(answer: Any) -> DeliveryError:
    code = getattr(answer, "status_code", "") or ""
    text = f"Matrix refused the message: {code} {getattr(answer, 'message', '')}".strip()
    if code == "M_LIMIT_EXCEEDED":
        retry_ms = getattr(answer, "retry_after_ms", None) or 1000
        return DeliveryError(text, retry_after=retry_ms / 1000, rate_limited=True)
    return DeliveryError(text, permanent=code in ("M_FORBIDDEN", "M_NOT_FOUND", "M_TOO_LARGE"))
