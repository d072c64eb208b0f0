"""The messages store: the durable inbox, the conversation history and delivery status.

Every per-message query of the hot path lives here. They are prepared Core statements with bound
parameters (compiled once, no ORM unit of work), so a message costs a handful of short
transactions: insert it, mark its batch processing, read the history, finish the turn (reply,
statuses and usage in one commit), and record the delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bruce_bot.domain import (
    InboundMessage,
    LLMCallRecord,
    MessageKind,
    MessageStatus,
    OutboundFile,
    Role,
    utcnow,
)
from bruce_bot.storage.group_commit import GroupCommit
from bruce_bot.storage.leases import Claimant, default_claimant
from bruce_bot.storage.models import (
    LLMCallRow,
    MessageRow,
    SessionRow,
    SettingRow,
    inserted_id,
    table_of,
)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    session_id: int
    role: Role
    kind: MessageKind
    content: str
    author: str | None
    status: MessageStatus
    created_at: datetime
    extra: dict[str, Any] | None = None
    user_id: str | None = None  # the platform's id of the person who wrote it (user messages)


ANSWERS = "answers"  # key of a reply's `extra`: the ids of the user messages it answers
FILES = "files"  # key of a reply's `extra`: the artifacts sent with it (`OutboundFile`s)
UNTRUSTED = "untrusted"  # key of a reply's `extra`: its turn read outside content


def file_ref(file: OutboundFile) -> dict[str, str]:
    return {"artifact": file.artifact, "filename": file.filename, "type": file.content_type}


def _reply_extra(
    inbound_ids: Sequence[int], files: Sequence[OutboundFile], untrusted: bool
) -> dict[str, Any] | None:
    """A reply's `extra`: the messages it answers, the files sent with it, whether its turn
    read outside content (None: nothing of these)."""
    extra: dict[str, Any] = {}
    if inbound_ids:
        extra[ANSWERS] = list(inbound_ids)
    if files:
        extra[FILES] = [file_ref(file) for file in files]
    if untrusted:
        extra[UNTRUSTED] = True
    return extra or None


def files_of(message: StoredMessage) -> tuple[OutboundFile, ...]:
    """The files a stored reply goes with (see `finish_turn`); malformed entries are skipped."""
    refs = (message.extra or {}).get(FILES)
    if not isinstance(refs, list):
        return ()
    return tuple(
        OutboundFile(str(ref["artifact"]), str(ref["filename"]), str(ref["type"]))
        for ref in refs
        if isinstance(ref, dict) and {"artifact", "filename", "type"} <= ref.keys()
    )


ATTACHMENTS = "attachments"  # key of a user message's `extra`: its files (bruce_bot/media/)


def _extra_of(message: InboundMessage) -> dict[str, Any] | None:
    extra = dict(message.metadata)
    if message.attachments:
        extra[ATTACHMENTS] = [attachment.as_dict() for attachment in message.attachments]
    return extra or None


# Told of the LLM calls just recorded (the monthly budget's watch); no I/O in it.
UsageListener = Callable[[Sequence[LLMCallRecord]], None]


def usage_row(session_id: int | None, record: LLMCallRecord, at: datetime) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "purpose": record.purpose,
        "model": record.model,
        "input_tokens": record.usage.input_tokens,
        "output_tokens": record.usage.output_tokens,
        "cache_read_tokens": record.usage.cache_read_tokens,
        "cache_write_tokens": record.usage.cache_write_tokens,
        "duration_ms": record.duration_ms,
        "error": record.error,
        "created_at": at,
    }


_messages = table_of(MessageRow)
_sessions = table_of(SessionRow)
_settings = table_of(SettingRow)  # the marks of messages stored once (add_outbound_once)
# The statuses of a user message no turn has finished.
UNANSWERED: tuple[MessageStatus, ...] = ("pending", "processing")
_COLUMNS = (
    _messages.c.id,
    _messages.c.session_id,
    _messages.c.role,
    _messages.c.kind,
    _messages.c.content,
    _messages.c.author,
    _messages.c.status,
    _messages.c.created_at,
    _messages.c.extra,
    _messages.c.user_id,
)
INSERT_MESSAGE = _messages.insert()
INSERT_LLM_CALLS = table_of(LLMCallRow).insert()
SET_STATUS = (
    _messages.update()
    .where(_messages.c.id.in_(bindparam("ids", expanding=True)))
    .values(status=bindparam("new_status"))
)
# Only rows still in `old_status`: a turn stopped after its ending was stored has its batch
# settled already, and must not be taken back to `pending` (answered twice) or `failed`.
SET_STATUS_FROM = SET_STATUS.where(_messages.c.status == bindparam("old_status"))
TOUCH_SESSION = (
    _sessions.update()
    .where(_sessions.c.id == bindparam("sid"))
    .values(last_message_at=bindparam("at"))
)
_unanswered = _messages.alias("unanswered")
# The oldest user message of the session no turn has finished (NULL: none).
_FIRST_UNANSWERED = (
    select(func.min(_unanswered.c.id))
    .where(
        _unanswered.c.session_id == bindparam("sid"),
        _unanswered.c.role == "user",
        _unanswered.c.status.in_(UNANSWERED),
    )
    .scalar_subquery()
)
# The settled history: what came before the oldest message still waiting for (or in) a turn, so
# that folding it into the summary never swallows a message before a turn has shown it.
HISTORY = (
    select(*_COLUMNS)
    .where(
        _messages.c.session_id == bindparam("sid"),
        _messages.c.id > bindparam("after"),
        _messages.c.kind != "notice",
        _messages.c.id < func.coalesce(_FIRST_UNANSWERED, _messages.c.id + 1),
    )
    .order_by(_messages.c.id.desc())
    .limit(bindparam("limit"))
)
# What a turn shows the model: the history without the user messages still waiting for a later
# turn (stored while this one was being taken, or queued behind it). Their replies would be
# recorded as answering nothing, and the next turn would answer them again.
TURN_HISTORY = (
    select(*_COLUMNS)
    .where(
        _messages.c.session_id == bindparam("sid"),
        _messages.c.id > bindparam("after"),
        _messages.c.kind != "notice",
        or_(
            _messages.c.role != "user",
            _messages.c.status.not_in(UNANSWERED),
            _messages.c.id.in_(bindparam("batch", expanding=True)),
        ),
    )
    .order_by(_messages.c.id.desc())
    .limit(bindparam("limit"))
)
# Messages by id (a turn's batch messages the newest-first history left out).
BY_IDS = select(*_COLUMNS).where(_messages.c.id.in_(bindparam("ids", expanding=True)))
RECENT = (
    select(*_COLUMNS)
    .where(_messages.c.session_id == bindparam("sid"), _messages.c.id > bindparam("after"))
    .order_by(_messages.c.id)
    .limit(bindparam("limit"))
)
# A session's user messages no turn has finished, in arrival order: what its next turns answer.
SESSION_UNANSWERED = (
    select(*_COLUMNS)
    .where(
        _messages.c.session_id == bindparam("sid"),
        _messages.c.role == "user",
        _messages.c.status.in_(UNANSWERED),
    )
    .order_by(_messages.c.id)
)
HAS_UNANSWERED = (
    select(_messages.c.id)
    .where(
        _messages.c.session_id == bindparam("sid"),
        _messages.c.role == "user",
        _messages.c.status.in_(UNANSWERED),
    )
    .limit(1)
)
EXTEND_CLAIM = (
    _messages.update()
    .where(_messages.c.id == bindparam("mid"), _messages.c.lease_owner == bindparam("me"))
    .values(lease_until=bindparam("until"))
)
BATCH_SIZE_FOR_REDELIVERY = 100
# A batch's messages claimed for this process's turn (the claim is the turn's fencing token).
CLAIM_BATCH = (
    _messages.update()
    .where(_messages.c.id.in_(bindparam("ids", expanding=True)))
    .values(status="processing", lease_owner=bindparam("me"))
)
# Settle a turn's messages only while they are still this process's: another process that
# took the session over (this one stalled past its lease) claimed them for itself.
SETTLE_OWN = (
    _messages.update()
    .where(
        _messages.c.id.in_(bindparam("ids", expanding=True)),
        or_(_messages.c.lease_owner == bindparam("me"), _messages.c.lease_owner.is_(None)),
    )
    .values(status=bindparam("new_status"))
)


class LeaseLostError(Exception):
    """The turn's messages were taken over by another process: its result must not be kept."""


def _claimable(claimant: Claimant, shared: bool, now: datetime) -> Any:
    """A reply nobody alive has in hand: never claimed, or (with other processes) its claim
    lapsed, or (alone, SQLite) claimed by an earlier run of the daemon."""
    unclaimed = _messages.c.lease_owner.is_(None)
    if shared:
        return or_(unclaimed, _messages.c.lease_until < now)
    return or_(unclaimed, _messages.c.lease_owner != claimant.owner)


def next_batch(rows: Sequence[StoredMessage]) -> list[StoredMessage]:
    """The next turn's messages among a session's unanswered ones (arrival order): a scheduled
    task alone (its turn runs without the scheduling tools, its answer is a titled briefing),
    else the chat messages up to the next task — a turn a crash cut short included, with what
    arrived since (its recorded tool calls are replayed, agent/resume.py). A user's "remind
    me…" is never answered in a briefing's turn."""
    if not rows:
        return []
    if rows[0].kind == "task":
        return [rows[0]]
    end = next((i for i, row in enumerate(rows) if row.kind == "task"), len(rows))
    return list(rows[:end])


def _stored(row: Any) -> StoredMessage:
    return StoredMessage(*row)


def _insert_unless_duplicate(dialect: str) -> Any:
    """INSERT … ON CONFLICT DO NOTHING RETURNING id: a message the platform sent twice (same
    platform id in the session) is not an error that would fail the others of its commit."""
    if dialect == "postgresql":  # (imported here: SQLite never loads PostgreSQL's dialect)
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(_messages).on_conflict_do_nothing().returning(_messages.c.id)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(_messages).on_conflict_do_nothing().returning(_messages.c.id)


class MessageStore:
    def __init__(
        self,
        engine: AsyncEngine,
        claimant: Claimant | None = None,
        usage_recorded: UsageListener | None = None,
    ) -> None:
        self._engine = engine
        # Replies are stored claimed by this process, which delivers them right after.
        self._claimant = claimant or default_claimant()
        # Messages arriving together (a getUpdates batch) are stored in one commit.
        self._group = GroupCommit(engine)
        self._insert_new_inbound = _insert_unless_duplicate(engine.dialect.name)
        # Told of the usage a turn's commit recorded (the monthly budget's watch).
        self._usage_recorded = usage_recorded

    async def add_inbound(self, session_id: int, message: InboundMessage, text: str) -> int | None:
        """Persist a user message as `pending`; None when its platform id was already stored."""
        values = {
            "session_id": session_id,
            "role": "user",
            "kind": message.kind,
            "content": text,
            "user_id": message.user_id or None,
            "author": message.user_name or None,
            "platform_message_id": message.platform_message_id,
            "status": "pending",
            "extra": _extra_of(message),
            "created_at": message.received_at,
        }

        async def insert(connection: AsyncConnection) -> int | None:
            # A duplicate (the platform sent it again) inserts nothing and returns no id.
            return (await connection.execute(self._insert_new_inbound, values)).scalar()

        return await self._group.run(insert)

    async def set_media(self, message_id: int, extra: dict[str, Any], content: str) -> None:
        """Record what was made of a message's attachments (bruce_bot/media/): its `extra`, and
        its text (a voice note's transcript becomes what the user said)."""
        statement = (
            _messages.update()
            .where(_messages.c.id == message_id)
            .values(extra=extra, content=content)
        )
        async with self._engine.begin() as connection:
            await connection.execute(statement)

    async def set_status(
        self,
        message_ids: Sequence[int],
        status: MessageStatus,
        *,
        only_from: MessageStatus | None = None,
    ) -> None:
        """`status` for these messages; with `only_from`, for those still in that status."""
        if not message_ids:
            return
        params: dict[str, Any] = {"ids": list(message_ids), "new_status": status}
        statement = SET_STATUS
        if only_from is not None:
            statement, params["old_status"] = SET_STATUS_FROM, only_from
        async with self._engine.begin() as connection:
            await connection.execute(statement, params)

    async def _select(
        self, statement: Any, params: dict[str, Any] | None = None
    ) -> list[StoredMessage]:
        async with self._engine.connect() as connection:
            result = await connection.execute(statement, params or {})
            return [_stored(row) for row in result]

    async def claim_undelivered(
        self, since: datetime, channels: Collection[str], *, shared: bool
    ) -> list[StoredMessage]:
        """Claim, for this process, replies of `channels` stored since `since` that nobody alive
        has in hand and that were not delivered: a crash between store and send (`pending`) or
        a channel that stayed unreachable through every retry (`undelivered`). Oldest first, at
        most a hundred; processes sweeping at once skip each other's rows (SKIP LOCKED)."""
        now = utcnow()
        wanted = (
            select(_messages.c.id)
            .join(_sessions, _sessions.c.id == _messages.c.session_id)
            .where(
                _messages.c.role == "assistant",
                _messages.c.status.in_(("pending", "undelivered")),
                _messages.c.created_at >= since,
                _sessions.c.channel.in_(list(channels)),
                _claimable(self._claimant, shared, now),
            )
            .order_by(_messages.c.id)
            .limit(BATCH_SIZE_FOR_REDELIVERY)
            .with_for_update(of=_messages, skip_locked=True)
        )
        claim = (
            update(_messages)
            .where(_messages.c.id.in_(wanted.scalar_subquery()))
            .values(lease_owner=self._claimant.owner, lease_until=self._claimant.until(now))
            .returning(*_COLUMNS)
        )
        async with self._engine.begin() as connection:
            rows = [_stored(row) for row in await connection.execute(claim)]
        return sorted(rows, key=lambda row: row.id)

    @property
    def claim_seconds(self) -> float:
        """How long this process's claim on a reply lasts without being extended."""
        return self._claimant.seconds

    async def extend_claim(self, message_id: int) -> None:
        """Keep a reply this process is still delivering (retries that take a while) its own."""
        params = {"mid": message_id, "me": self._claimant.owner, "until": self._claimant.until()}
        async with self._engine.begin() as connection:
            await connection.execute(EXTEND_CLAIM, params)

    async def claim_batch(self, session_id: int) -> list[StoredMessage]:
        """Take the session's next turn (`next_batch`) and mark it `processing`, in one commit.
        Call it only while holding the session (its lease): nobody else takes its messages."""
        async with self._engine.begin() as connection:
            rows = [
                _stored(row)
                for row in await connection.execute(SESSION_UNANSWERED, {"sid": session_id})
            ]
            batch = next_batch(rows)
            if batch:
                params = {"ids": [row.id for row in batch], "me": self._claimant.owner}
                await connection.execute(CLAIM_BATCH, params)
        return batch

    async def has_unanswered(self, session_id: int) -> bool:
        async with self._engine.connect() as connection:
            return (
                await connection.execute(HAS_UNANSWERED, {"sid": session_id})
            ).first() is not None

    async def start_turn(
        self, session_id: int, batch_ids: Sequence[int], after_id: int, limit: int
    ) -> list[StoredMessage]:
        """The history a claimed batch (`claim_batch`) is answered with.

        It holds exactly the batch of the session's unanswered user messages: those stored
        since the batch was taken wait for the next turn, which claims them.
        """
        params = {"sid": session_id, "after": after_id, "limit": limit, "batch": list(batch_ids)}
        rows = await self._select(TURN_HISTORY, params)
        # The newest `limit` rows can leave out the batch's oldest messages, however large the
        # limit: rows newer than them (the previous turn's reply, stored after they arrived;
        # reminders fired meanwhile) take places too. Every one the turn marks answered must be
        # one the model reads, so the missing ones are read by id.
        missing = set(batch_ids) - {row.id for row in rows}
        if missing:
            rows += await self._select(BY_IDS, {"ids": sorted(missing)})
            rows.sort(key=lambda row: row.id, reverse=True)
        rows.reverse()
        return rows

    async def history(self, session_id: int, after_id: int, limit: int) -> list[StoredMessage]:
        """The newest `limit` settled messages after `after_id`, oldest first (notices
        excluded): the history stops before the oldest user message no turn has finished."""
        rows = await self._select(HISTORY, {"sid": session_id, "after": after_id, "limit": limit})
        rows.reverse()
        return rows

    async def recent(
        self, session_id: int, after_id: int = 0, limit: int = 200
    ) -> list[StoredMessage]:
        """Messages of a session for display (notices included), oldest first."""
        return await self._select(RECENT, {"sid": session_id, "after": after_id, "limit": limit})

    async def newest_id_before(self, session_id: int, before_id: int) -> int:
        """The id of the session's newest message older than `before_id` (0: none)."""
        query = select(func.max(_messages.c.id)).where(
            _messages.c.session_id == session_id, _messages.c.id < before_id
        )
        async with self._engine.connect() as connection:
            return int((await connection.execute(query)).scalar() or 0)

    async def counts_by_channel(self, start: datetime) -> dict[str, tuple[int, int]]:
        """Messages from `start` on per session channel (the platform): (from people, Bruce's
        replies). The dashboard's usage per platform."""
        channel = _sessions.c.channel
        query = (
            select(channel, _messages.c.role, func.count())
            .select_from(_messages.join(_sessions, _sessions.c.id == _messages.c.session_id))
            .where(_messages.c.created_at >= start, _messages.c.role.in_(("user", "assistant")))
            .group_by(channel, _messages.c.role)
        )
        async with self._engine.connect() as connection:
            rows: list[Any] = list(await connection.execute(query))
        counts: dict[str, tuple[int, int]] = {}
        for name, role, count in rows:
            inbound, outbound = counts.get(name, (0, 0))
            counts[name] = (
                (inbound + int(count), outbound)
                if role == "user"
                else (
                    inbound,
                    outbound + int(count),
                )
            )
        return counts

    async def last_settled_id(self, session_id: int) -> int:
        """The newest message id of the session that is not waiting for or in a turn.

        `/new` starts the context after it: messages still queued stay in the new context.
        """
        query = select(func.max(_messages.c.id)).where(
            _messages.c.session_id == session_id,
            _messages.c.status.not_in(UNANSWERED) | (_messages.c.role != "user"),
        )
        async with self._engine.connect() as connection:
            return int((await connection.execute(query)).scalar() or 0)

    async def finish_turn(
        self,
        session_id: int,
        inbound_ids: Sequence[int],
        inbound_status: MessageStatus,
        reply: str | None,
        reply_kind: MessageKind,
        usage: Sequence[LLMCallRecord] = (),
        *,
        files: Sequence[OutboundFile] = (),
        untrusted: bool = False,
    ) -> tuple[int | None, datetime]:
        """Store the reply, settle the inbound messages and record usage, in one commit.

        The reply remembers the messages it answers (`extra["answers"]`): messages that arrived
        during the turn have lower ids than the reply, yet come after it in the conversation,
        and the files that go with it (`extra["files"]`), so a redelivery sends them too.
        `untrusted`: the turn read outside content (`extra["untrusted"]`, which the analytical
        brain reads: what such an exchange says is no memory). Without a reply (a failure the
        chat was already told about) only the rest is stored.
        """
        now = utcnow()
        reply_row = {
            "session_id": session_id,
            "role": "assistant",
            "kind": reply_kind,
            "content": reply,
            "status": "pending",
            "extra": _reply_extra(inbound_ids, files, untrusted),
            "created_at": now,
            **self._claimant.stamp(),
        }
        reply_id: int | None = None
        settle = {
            "ids": list(inbound_ids),
            "new_status": inbound_status,
            "me": self._claimant.owner,
        }
        async with self._engine.begin() as connection:
            if inbound_ids:
                settled = await connection.execute(SETTLE_OWN, settle)
                if settled.rowcount != len(set(inbound_ids)):
                    # Rolled back with the transaction: the process that has them answers.
                    raise LeaseLostError(f"messages {list(inbound_ids)} were taken over")
            if reply is not None:
                result = await connection.execute(INSERT_MESSAGE, reply_row)
                reply_id = inserted_id(result)
            await connection.execute(TOUCH_SESSION, {"sid": session_id, "at": now})
            if usage:
                await connection.execute(
                    INSERT_LLM_CALLS, [usage_row(session_id, record, now) for record in usage]
                )
        if usage and self._usage_recorded is not None:
            self._usage_recorded(usage)
        return reply_id, now

    async def add_outbound_once(
        self, session_id: int, text: str, kind: MessageKind, once_key: str
    ) -> int | None:
        """Store a message Bruce sends on its own, unless one was stored under `once_key`
        before: the key goes into `settings` in the same commit, so the message is stored once,
        also across restarts and processes. Its id, or None when it was stored before."""
        now = utcnow()
        row = {
            "session_id": session_id,
            "role": "assistant",
            "kind": kind,
            "content": text,
            "status": "pending",
            "created_at": now,
            **self._claimant.stamp(),
        }
        mark = {"key": once_key, "value": now.isoformat(), "updated_at": now}
        try:
            async with self._engine.begin() as connection:
                seen = await connection.execute(
                    select(_settings.c.key).where(_settings.c.key == once_key)
                )
                if seen.first() is not None:
                    return None
                await connection.execute(_settings.insert(), mark)
                result = await connection.execute(INSERT_MESSAGE, row)
        except IntegrityError:  # another process stored it at the same moment
            return None
        return inserted_id(result)

    async def add_settled(
        self, session_id: int, role: Role, content: str, status: MessageStatus
    ) -> tuple[int, datetime]:
        """Store a message that never passes through the inbox or outbox (a sub-agent's task and
        its answer) with its final status, so recovery and redelivery leave it alone."""
        now = utcnow()
        row = {
            "session_id": session_id,
            "role": role,
            "kind": "chat",
            "content": content,
            "status": status,
            "created_at": now,
        }
        async with self._engine.begin() as connection:
            result = await connection.execute(INSERT_MESSAGE, row)
            await connection.execute(TOUCH_SESSION, {"sid": session_id, "at": now})
        return inserted_id(result), now

    async def add_outbound(
        self, session_id: int, text: str, kind: MessageKind, extra: dict[str, Any] | None = None
    ) -> int:
        """Store a message Bruce sends on its own (reminders): pending until delivered."""
        row = {
            "session_id": session_id,
            "role": "assistant",
            "kind": kind,
            "content": text,
            "status": "pending",
            "extra": extra,
            "created_at": utcnow(),
            **self._claimant.stamp(),
        }
        async with self._engine.begin() as connection:
            result = await connection.execute(INSERT_MESSAGE, row)
        return inserted_id(result)
