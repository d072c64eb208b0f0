"""The outbox: every reply is stored first, then delivered through its channel.

A reply's row (status `pending`) exists before any send is attempted, claimed by the process
that stored it (storage/leases.py), so a crash between the two is repaired by `redeliver`: at
start-up and then periodically, by any process running the channel, once the claim lapsed.
Long texts are split at the channel's limit on paragraph, line and word boundaries without
breaking code fences. Failed sends are retried with backoff (honouring a platform's
retry-after); a platform's rate limit ("retry after N s") is waited out without counting as a
failed attempt, up to `RATE_LIMIT_PATIENCE_SECONDS` per part: sends racing for one chat's
allowance (a reminder firing beside a reply) would otherwise use up their attempts in seconds
and wait for the next redelivery, a minute later. Every attempt is recorded in `deliveries` as
it happens — a part the platform accepted is committed before the next one is tried, so a crash
resends at most the part in flight — and the last one together with the message's final
status: `sent`, `failed` (permanent) or `undelivered`; the latter are tried again by
`redeliver` too, skipping the parts recorded sent, and resuming a part a platform took as
several messages (Telegram, when the HTML grew past its limit) after the pieces recorded
delivered. The artifacts a turn saved go
after the text as parts of their own, on channels that take files, up to
`tools.artifacts.send_file_max_bytes`; a file that cannot be sent leaves the reply delivered
(its text links to the file).

Messages to one chat go one at a time, whole, in the order they were handed over (each part
recorded before the next send to that chat), so a reminder firing during a long reply waits
for it, and a send waiting out a rate limit keeps its place.

A live reply (channels/live.py: the answer shown while it was written) takes the first part:
`finish` turns what the chat already shows into that part, under the same retries and records
as a send. Redelivery never has one: what a crash left is delivered as plain messages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Set
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import structlog

from bruce_bot.channels.base import ChannelAdapter, DeliveryError
from bruce_bot.channels.live import LiveChannel, LiveReply
from bruce_bot.domain import DeliveryStatus, OutboundFile, OutboundMessage, utcnow
from bruce_bot.storage.deliveries import AttemptStatus, DeliveryAttempt, DeliveryStore
from bruce_bot.storage.messages import MessageStore, StoredMessage, files_of
from bruce_bot.storage.sessions import SessionStore
from bruce_bot.text import split_text

log = structlog.get_logger(__name__)
T = TypeVar("T")

MAX_ATTEMPTS = 4  # failed attempts of one part before it is left `undelivered`
# How long one part waits out a platform's rate limits, in all, before they count as failures.
RATE_LIMIT_PATIENCE_SECONDS = 60.0
BASE_BACKOFF_SECONDS = 0.5
# Replies older than this are not redelivered: a day-old answer would only confuse.
REDELIVERY_WINDOW = timedelta(hours=24)
REDELIVERY_INTERVAL_SECONDS = 60.0
REDELIVERY_CONCURRENCY = 8  # chats redelivered at once
# A part's metadata: how many of the messages a platform split it into were delivered before.
PIECES_SENT = "pieces_sent"


@dataclass(frozen=True, slots=True)
class FileSending:
    """Where the files that go with replies are (`locate(artifact uuid, file name)`: a path
    under `<data_dir>/artifacts`, None for names that lead elsewhere) and the largest one sent
    as a file; bigger ones are reached through the link in the reply only."""

    locate: Callable[[str, str], Path | None]
    max_bytes: int

    def read(self, file: OutboundFile) -> OutboundFile | None:
        """The file with its bytes; None when it is missing, too large or not an artifact
        (blocking: run in a thread)."""
        path = self.locate(file.artifact, file.filename)
        if path is None or not path.is_file() or path.stat().st_size > self.max_bytes:
            return None
        return replace(file, data=path.read_bytes())


@dataclass(slots=True)
class _PartTries:
    """One part's sends so far: the attempts not written yet (shared with the rest of the
    message), how many failed, how long rate limits were waited out, and how many of the
    messages the platform split the part into were delivered."""

    message: OutboundMessage
    part: int
    attempts: list[DeliveryAttempt]
    pieces_sent: int
    attempt: int = 0
    failures: int = 0
    waited: float = 0.0

    def note(self, status: AttemptStatus, error: str | None = None) -> None:
        pieces = self.pieces_sent if status != "sent" and self.pieces_sent else None
        message = self.message
        self.attempts.append(
            DeliveryAttempt(
                message.channel, message.chat_id, self.part, self.attempt, status, error, pieces
            )
        )

    def count_pieces(self, pieces_sent: int) -> None:
        """Some of the part's messages got through: recorded with the attempt, so that the
        next one (here or after a restart) starts after them."""
        if pieces_sent > self.pieces_sent:
            self.pieces_sent = pieces_sent
            metadata = {**self.message.metadata, PIECES_SENT: pieces_sent}
            self.message = replace(self.message, metadata=metadata)


@dataclass(slots=True)
class _ChatTurn:
    """Who is sending to one chat (`lock`, first come first served) and how many wait for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class Outbox:
    def __init__(
        self,
        messages: MessageStore,
        deliveries: DeliveryStore,
        sessions: SessionStore,
        channels: Mapping[str, ChannelAdapter],
        *,
        shared: bool = False,
        files: FileSending | None = None,
    ) -> None:
        self._messages = messages
        self._deliveries = deliveries
        self._sessions = sessions
        self._channels = channels
        self._shared = shared  # other processes deliver from the same database (PostgreSQL)
        self._files = files  # None: replies go without their files
        self._chat_turns: dict[tuple[str, str], _ChatTurn] = {}  # (channel, chat) being sent to

    def max_message_chars(self, channel_name: str) -> int | None:
        """How long one message of the channel may be (None: the channel is not enabled)."""
        channel = self._channels.get(channel_name)
        return channel.max_message_chars if channel is not None else None

    def live(
        self, channel_name: str, chat_id: str, metadata: Mapping[str, object]
    ) -> LiveReply | None:
        """A live reply for a turn in this chat, when its channel shows replies as they are
        written (None: it does not, or not here)."""
        channel = self._channels.get(channel_name)
        if not isinstance(channel, LiveChannel):
            return None
        try:
            return channel.live_reply(chat_id, metadata)
        except Exception as exc:  # a reply is still delivered the plain way
            log.warning("live_reply_unavailable", channel=channel_name, error=repr(exc))
            return None

    async def deliver(
        self,
        message: OutboundMessage,
        skip_parts: Set[int] | None = frozenset(),
        *,
        live: LiveReply | None = None,
        resume: Mapping[int, int] | None = None,
    ) -> DeliveryStatus:
        """Send a stored message part by part; returns its delivery status (`sent` when every
        part was delivered). `resume`: part -> its pieces delivered by an earlier attempt.

        Each attempt is recorded as it happens (a part sent is on disk before the next part is
        tried); the last one goes with the outcome: `sent`, `failed` (permanent: the chat is gone
        or refuses the bot) or `undelivered` (still failing after retries: tried again later).
        """
        channel = self._channels.get(message.channel)
        if channel is None:
            return await self._no_channel(message)
        with_files = self._files is not None and getattr(channel, "sends_files", False)
        # One message at a time per chat, each part sent and recorded before the next send to
        # that chat: a chat's messages arrive whole and in order, a send waiting out a rate
        # limit keeps its place in the line, and a later send to a chat means the earlier ones
        # are on disk. Meanwhile the reply stays this process's (its claim kept).
        async with (
            self._claim_kept(message.message_id),
            self._chat_turn(message.channel, message.chat_id),
        ):
            if skip_parts is None and message.message_id is not None:
                # A redelivery: what is recorded sent is read now that it is this chat's turn
                # (a delivery of the same reply ahead in the line may have sent parts of it).
                skip_parts = await self._deliveries.sent_parts(message.message_id)
                resume = await self._deliveries.sent_pieces(message.message_id)
            pieces = _parts_of(message, channel.max_message_chars, resume or {}, with_files)
            return await self._deliver_parts(message, pieces, skip_parts or frozenset(), live)

    @contextlib.asynccontextmanager
    async def _claim_kept(self, message_id: int | None) -> AsyncIterator[None]:
        """With other processes on the database: the stored reply's claim extended every third
        of its life while it waits for its chat's turn and is sent. A reply waiting behind a
        chat's rate limit outlived its claim, and a redelivery sweep (another process's, or
        this one's) took it and sent it a second time."""
        if not self._shared or message_id is None:
            yield
            return
        period = self._messages.claim_seconds / 3

        async def keep() -> None:
            while True:
                await asyncio.sleep(period)
                try:
                    await self._messages.extend_claim(message_id)
                except Exception as exc:  # the database is away: the next round tries again
                    log.warning(
                        "delivery_claim_not_extended", message_id=message_id, error=repr(exc)
                    )

        keeper = asyncio.create_task(keep(), name=f"claim-{message_id}")
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _no_channel(self, message: OutboundMessage) -> DeliveryStatus:
        """The message's channel is not enabled here: recorded as failed, never sent."""
        log.warning("delivery_no_channel", channel=message.channel, message_id=message.message_id)
        attempt = DeliveryAttempt(
            message.channel,
            message.chat_id,
            0,
            1,
            "failed",
            f"channel '{message.channel}' is not enabled",
        )
        await self._deliveries.settle(message.message_id, "failed", [attempt])
        return "failed"

    async def _deliver_parts(
        self,
        message: OutboundMessage,
        pieces: list[OutboundMessage],
        skip_parts: Set[int],
        live: LiveReply | None,
    ) -> DeliveryStatus:
        attempts: list[DeliveryAttempt] = []  # not written yet: they go with the status
        try:
            status, finished_live = await self._send_parts(
                message, pieces, skip_parts, live, attempts
            )
        except asyncio.CancelledError:
            # Stopped mid-delivery: a part the chat has is on disk before we go (it would be
            # sent twice otherwise); the rest is the redelivery's.
            await _to_the_end(self._record(message.message_id, attempts))
            raise
        await _to_the_end(self._settle(message.message_id, status, attempts))
        if live is not None and not finished_live:
            await live.abandon()  # redelivery sends it whole: the half-written one goes
        return status

    async def _send_parts(
        self,
        message: OutboundMessage,
        pieces: list[OutboundMessage],
        skip_parts: Set[int],
        live: LiveReply | None,
        attempts: list[DeliveryAttempt],
    ) -> tuple[DeliveryStatus, bool]:
        """The parts sent in order until one fails: the status, and whether `live` was
        finished by the first part."""
        channel = self._channels[message.channel]
        last = len(pieces) - 1
        finished_live = False
        for index, piece in enumerate(pieces):
            if index in skip_parts:
                continue
            if piece.file is not None:
                assert self._files is not None
                loaded = await asyncio.to_thread(self._files.read, piece.file)
                if loaded is None:
                    log.info(
                        "delivery_file_skipped",
                        message_id=message.message_id,
                        artifact=piece.file.artifact,
                        reason="missing or over tools.artifacts.send_file_max_bytes",
                    )
                    continue
                piece = replace(piece, file=loaded)
            via_live = live is not None and index == 0
            send = live.finish if live is not None and via_live else channel.send
            outcome = await self._send_with_retry(send, piece, index, attempts)
            finished_live = finished_live or (via_live and outcome == "sent")
            if outcome != "sent" and piece.file is not None:
                # The reply's link still leads to the file: a file the platform refuses does
                # not make the reply undelivered.
                log.warning("delivery_file_failed", message_id=message.message_id, part=index)
            elif outcome != "sent":
                return outcome, finished_live
            if index < last:  # the platform has it: on disk before the next part is tried
                await _to_the_end(self._record(message.message_id, attempts))
        return "sent", finished_live

    async def _record(self, message_id: int | None, attempts: list[DeliveryAttempt]) -> None:
        """The attempts so far written, and forgotten (written once, however we stop)."""
        await self._deliveries.record(message_id, list(attempts))
        attempts.clear()

    async def _settle(
        self, message_id: int | None, status: DeliveryStatus, attempts: list[DeliveryAttempt]
    ) -> None:
        await self._deliveries.settle(message_id, status, list(attempts))
        attempts.clear()

    @contextlib.asynccontextmanager
    async def _chat_turn(self, channel: str, chat_id: str) -> AsyncIterator[None]:
        """This chat's turn to be sent to (first come, first served); forgotten once no one
        waits for it."""
        key = (channel, chat_id)
        turn = self._chat_turns.get(key) or self._chat_turns.setdefault(key, _ChatTurn())
        turn.users += 1
        try:
            async with turn.lock:
                yield
        finally:
            turn.users -= 1
            if turn.users == 0:
                del self._chat_turns[key]

    async def _send_with_retry(
        self,
        send: Callable[[OutboundMessage], Awaitable[None]],
        message: OutboundMessage,
        part: int,
        attempts: list[DeliveryAttempt],
    ) -> DeliveryStatus:
        tries = _PartTries(message, part, attempts, _pieces_sent(message))
        while tries.failures < MAX_ATTEMPTS:
            tries.attempt += 1
            try:
                await _to_the_end(_attempt(send, tries))
            except DeliveryError as exc:
                outcome = await self._after_failure(tries, exc)
                if outcome is not None:
                    return outcome
            except Exception as exc:  # an adapter bug must not kill the worker
                log.exception(
                    "delivery_crashed",
                    channel=message.channel,
                    message_id=message.message_id,
                    error=repr(exc),
                )
                tries.note("failed", repr(exc))
                return "undelivered"
            else:
                return "sent"
        return "undelivered"

    async def _after_failure(self, tries: _PartTries, exc: DeliveryError) -> DeliveryStatus | None:
        """A send of the part failed: its final status, or None once it waited to try again
        (the attempts so far written first, the message's claim extended)."""
        tries.count_pieces(exc.pieces_sent)
        message = tries.message
        log.warning(
            "delivery_failed",
            channel=message.channel,
            chat_id=message.chat_id,
            message_id=message.message_id,
            part=tries.part,
            attempt=tries.attempt,
            permanent=exc.permanent,
            error=str(exc),
        )
        if exc.permanent:
            tries.note("failed", str(exc))
            return "failed"
        limited = exc.rate_limited and exc.retry_after is not None
        limited = limited and tries.waited + (exc.retry_after or 0) <= RATE_LIMIT_PATIENCE_SECONDS
        tries.failures += 0 if limited else 1
        if tries.failures == MAX_ATTEMPTS:
            tries.note("failed", str(exc))
            return "undelivered"
        tries.note("retrying", str(exc))
        await _to_the_end(self._record(message.message_id, tries.attempts))
        if message.message_id is not None:  # still ours while we wait to retry
            await self._messages.extend_claim(message.message_id)
        delay = exc.retry_after or BASE_BACKOFF_SECONDS * 2 ** (tries.failures - 1)
        tries.waited += delay if limited else 0.0
        await asyncio.sleep(delay)
        return None

    async def redeliver(self, *, max_age: timedelta = REDELIVERY_WINDOW) -> int:
        """Deliver stored replies that never went out and that no live process has in hand: a
        channel that was down (`undelivered`), or a reply a crash left unsent (`pending`, its
        claim lapsed or, alone on SQLite, made by an earlier run). Parts recorded sent are
        skipped. The chats go side by side (up to `REDELIVERY_CONCURRENCY` at once: what a dead
        process left for thirty chats is not sent one after the other), each chat's replies in
        the order they were stored. Returns how many were delivered."""
        rows = await self._messages.claim_undelivered(
            utcnow() - max_age, list(self._channels), shared=self._shared
        )
        by_session: dict[int, list[StoredMessage]] = {}
        for row in rows:
            by_session.setdefault(row.session_id, []).append(row)
        slots = asyncio.Semaphore(REDELIVERY_CONCURRENCY)

        async def chat(replies: list[StoredMessage]) -> int:
            async with slots:
                return sum([await self._redeliver_one(row) for row in replies])

        async with asyncio.TaskGroup() as group:
            done = [group.create_task(chat(replies)) for replies in by_session.values()]
        return sum(task.result() for task in done)

    async def _redeliver_one(self, row: StoredMessage) -> bool:
        session = await self._sessions.get(row.session_id)
        if session is None:
            return False
        log.info("redelivering", message_id=row.id, channel=session.channel)
        message = OutboundMessage(
            session.channel,
            session.chat_id,
            row.content,
            row.id,
            row.kind,
            files=files_of(row),
        )
        # The parts recorded sent are read under the chat's turn (skip_parts None).
        return await self.deliver(message, skip_parts=None) == "sent"

    async def show_typing(self, channel_name: str, chat_id: str) -> None:
        """A best-effort typing indicator; failures are logged at debug and ignored."""
        channel = self._channels.get(channel_name)
        if channel is None:
            return
        try:
            await channel.typing(chat_id)
        except Exception as exc:
            log.debug("typing_failed", channel=channel_name, chat_id=chat_id, error=repr(exc))


async def _attempt(send: Callable[[OutboundMessage], Awaitable[None]], tries: _PartTries) -> None:
    """One send of the part, noted once the platform has it (a DeliveryError goes on up)."""
    await send(tries.message)
    tries.note("sent")


async def _to_the_end(step: Awaitable[T]) -> T:
    """`step` run to its end even when the delivery is cancelled meanwhile (a stop's grace ran
    out, a sweep stopped): a send that began may have reached the chat, so it is finished and
    recorded (the record is the next step: a cancellation raised at its start waits for it
    too), and only then does the cancellation go on. Sent and not recorded, it would be sent
    again by the next redelivery."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task  # its own failure is the delivery's business no more: we are stopping
        raise


def _part_metadata(
    metadata: Mapping[str, object], part: int, pieces_sent: int
) -> dict[str, object]:
    values: dict[str, object] = {**metadata, "part": part}
    if pieces_sent:
        values[PIECES_SENT] = pieces_sent
    return values


def _parts_of(
    message: OutboundMessage, max_chars: int, resume: Mapping[int, int], with_files: bool
) -> list[OutboundMessage]:
    """The message as the parts it is sent in: its text split at the channel's limit (the
    buttons under the last), then, `with_files`, each file as a part of its own — a
    redelivery skips the ones recorded sent like any part. `resume`: part -> its pieces
    delivered by an earlier attempt."""
    texts = split_text(message.text, max_chars)
    last = len(texts) - 1
    parts = [
        replace(
            message,
            text=text,
            metadata=_part_metadata(message.metadata, index, resume.get(index, 0)),
            choices=message.choices if index == last else (),
            files=(),
        )
        for index, text in enumerate(texts)
    ]
    if with_files:
        for file in message.files:
            metadata = {**message.metadata, "part": len(parts)}
            parts.append(
                replace(message, text="", metadata=metadata, choices=(), files=(), file=file)
            )
    return parts


def _pieces_sent(message: OutboundMessage) -> int:
    value = message.metadata.get(PIECES_SENT, 0)
    return value if isinstance(value, int) else 0
