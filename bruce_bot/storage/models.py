"""SQLAlchemy 2 table definitions (table names are a public contract, docs/design.md).

Only portable column types are used so the same models run on SQLite and PostgreSQL. Timestamps
are stored as naive UTC and read back as aware UTC through `UTCDateTime`, because SQLite has no
time zone type. Strings go through `BoundedString` and `CleanText`, which on PostgreSQL accept
what SQLite accepts (see there). Alembic migrations in `migrations/` are generated from this
metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    CursorResult,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from bruce_bot.domain import utcnow

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R")

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, on every backend."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column; pass an aware datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None else None


class BoundedString(TypeDecorator[str]):
    """A VARCHAR(n) that takes what SQLite takes. SQLite ignores the length and stores NUL
    characters; PostgreSQL refuses both (a user's name one character too long, or a NUL in a
    fetched page, would fail the whole transaction). On PostgreSQL, NULs are dropped and longer
    values cut to the length; on SQLite values pass untouched, without a Python call per value."""

    impl = String
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name == "postgresql":
            return super().bind_processor(dialect)
        return self.impl_instance.bind_processor(dialect)

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if "\x00" in value:
            value = value.replace("\x00", "")
        impl = self.impl_instance
        length = impl.length if isinstance(impl, String) else None
        return value[:length] if length is not None and len(value) > length else value


class PlatformUserId(TypeDecorator[int | str]):
    """A chat platform's user id, kept as text: Telegram's and Discord's are numbers (given
    back as ints), Matrix's and Slack's are text ("@alice:example.org", "U012ABCDEF"; never all
    digits). One column type for every platform of the registry."""

    impl = String(128)
    cache_ok = True

    def process_bind_param(self, value: int | str | None, dialect: Dialect) -> str | None:
        return None if value is None else str(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> int | str | None:
        if value is None:
            return None
        return int(value) if value.isdigit() else value


class CleanText(BoundedString):
    """TEXT without NUL characters on PostgreSQL (which refuses them), as is on SQLite."""

    impl = Text
    cache_ok = True


class WordList(TypeDecorator[list[str]]):
    """A list of words stored as JSON text with its letters as they are ("saúde", not
    "sa\\u00fade", which is what the JSON type writes): full-text search reads this text."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: list[str] | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return json.dumps(list(value), ensure_ascii=False)

    def process_result_value(self, value: str | None, dialect: Dialect) -> list[str] | None:
        return [str(word) for word in json.loads(value)] if value else []


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    # SQLAlchemy reads this class attribute to map annotations to column types.
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[str]: JSON}  # noqa: RUF012


def table_of(model: type[Base]) -> Table:
    """The Core table a model is mapped to (SQLAlchemy types `__table__` as any FROM clause)."""
    table = model.__table__
    assert isinstance(table, Table)
    return table


def columns_for(table: Table, record: type[DataclassInstance]) -> tuple[Column[Any], ...]:
    """The columns of `table` named like the fields of `record`, in the order of its fields
    (so that `from_row(record, row)` builds one from a row selected with them)."""
    return tuple(table.c[field.name] for field in fields(record))


def from_row(record: Callable[..., R], row: Sequence[Any]) -> R:
    """`record(*row)`. Spelled so because mypy cannot spread a row of columns it does not know
    the number of (`Row[*tuple[Any, ...]]`) into a call."""
    return record(*row)


def inserted_id(result: CursorResult[Any]) -> int:
    """The primary key of the one row an INSERT stored."""
    key = result.inserted_primary_key
    assert key is not None, "not the result of a single-row INSERT"
    return int(key[0])


class SessionRow(Base):
    """A conversation: one per (channel, chat id); child sessions belong to a parent."""

    __tablename__ = "sessions"
    __table_args__ = (
        UniqueConstraint("channel", "chat_id", name="uq_sessions_channel_chat"),
        # Sub-agents are addressed by nickname: unique among sessions (NULLs do not collide).
        Index("uq_sessions_nickname", "nickname", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel: Mapped[str] = mapped_column(BoundedString(32))
    chat_id: Mapped[str] = mapped_column(BoundedString(128))
    title: Mapped[str | None] = mapped_column(BoundedString(200))
    kind: Mapped[str] = mapped_column(BoundedString(16), default="parent")
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    nickname: Mapped[str | None] = mapped_column(BoundedString(64))
    active_skills: Mapped[list[str]] = mapped_column(default=list)
    active_workflow: Mapped[str | None] = mapped_column(BoundedString(128))
    # Messages with an id at or below this are set aside (`/new`): not shown to the model.
    context_start_message_id: Mapped[int] = mapped_column(Integer, default=0)
    last_message_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MessageRow(Base):
    """A user message (pending → processing → done|failed) or an assistant reply (pending →
    sent|failed, its delivery status)."""

    __tablename__ = "messages"
    __table_args__ = (
        # Telegram message ids are unique per chat, Discord's globally: per session covers both.
        UniqueConstraint("session_id", "platform_message_id", name="uq_messages_platform_id"),
        Index("ix_messages_session_id_id", "session_id", "id"),
        Index("ix_messages_status", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(BoundedString(16))
    kind: Mapped[str] = mapped_column(BoundedString(16), default="chat")
    content: Mapped[str] = mapped_column(CleanText)
    user_id: Mapped[str | None] = mapped_column(BoundedString(64))
    author: Mapped[str | None] = mapped_column(BoundedString(128))
    platform_message_id: Mapped[str | None] = mapped_column(BoundedString(128))
    status: Mapped[str] = mapped_column(BoundedString(16), default="pending")
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A reply being delivered: the process that has it in hand, and until when (see
    # storage/leases.py); another process redelivers it only once that claim has lapsed.
    lease_owner: Mapped[str | None] = mapped_column(BoundedString(128))
    lease_until: Mapped[datetime | None]


class SessionLeaseRow(Base):
    """Which process works on a session's inbox, until when (PostgreSQL with several processes;
    see storage/leases.py): one process at a time, so a chat's messages are answered in order."""

    __tablename__ = "session_leases"

    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    owner: Mapped[str] = mapped_column(BoundedString(128))
    expires_at: Mapped[datetime]


class ToolExecutionRow(Base):
    """Audit log: one row per tool execution, successful or not."""

    __tablename__ = "tool_executions"
    __table_args__ = (
        Index("ix_tool_executions_session_id", "session_id"),
        Index("ix_tool_executions_answers_message_id", "answers_message_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int | None] = mapped_column(ForeignKey("sessions.id", ondelete="SET NULL"))
    turn: Mapped[int] = mapped_column(Integer)
    tool_name: Mapped[str] = mapped_column(BoundedString(64))
    input: Mapped[str] = mapped_column(CleanText)
    output: Mapped[str | None] = mapped_column(CleanText)
    error: Mapped[str | None] = mapped_column(CleanText)
    duration_ms: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The model's id of the call and the newest inbound message of the turn it ran in: a turn
    # cut by a crash resumes from these rows instead of running its tools again.
    call_id: Mapped[str | None] = mapped_column(BoundedString(128))
    answers_message_id: Mapped[int | None] = mapped_column(Integer)
    # JSON text a tool adds to its row (run_code: exit code, output size, files, approval).
    details: Mapped[str | None] = mapped_column(CleanText)


class SessionSummaryRow(Base):
    """A rolling summary of a session's older messages (up to `covers_until_message_id`)."""

    __tablename__ = "session_summaries"
    __table_args__ = (Index("ix_session_summaries_session_id", "session_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    content: Mapped[str] = mapped_column(CleanText)
    covers_until_message_id: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SettingRow(Base):
    """Key/value settings edited at run time (the dashboard); they win over the YAML file."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(BoundedString(128), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class LLMCallRow(Base):
    """Token usage and outcome of every LLM call (agent turns, summaries, the brain)."""

    __tablename__ = "llm_calls"
    __table_args__ = (Index("ix_llm_calls_created_at", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int | None] = mapped_column(ForeignKey("sessions.id", ondelete="SET NULL"))
    purpose: Mapped[str] = mapped_column(BoundedString(32))
    model: Mapped[str] = mapped_column(BoundedString(128))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str | None] = mapped_column(CleanText)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class DeliveryRow(Base):
    """One attempt to deliver one part of a stored outgoing message, and how it ended."""

    __tablename__ = "deliveries"
    __table_args__ = (Index("ix_deliveries_message_id", "message_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"))
    channel: Mapped[str] = mapped_column(BoundedString(32))
    chat_id: Mapped[str] = mapped_column(BoundedString(128))
    part: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(BoundedString(16))  # sent | failed | retrying
    error: Mapped[str | None] = mapped_column(CleanText)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A part the platform took as several messages (Telegram, past its length limit) that
    # failed midway: how many of them it had accepted; a redelivery starts after them.
    pieces: Mapped[int | None] = mapped_column(Integer)


class ArtifactRow(Base):
    """A file the agent saved (artifact_save), served at /artifacts/<uuid>/<filename>."""

    __tablename__ = "artifacts"
    __table_args__ = (
        UniqueConstraint("uuid", name="uq_artifacts_uuid"),
        Index("ix_artifacts_session_id", "session_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(BoundedString(36))
    session_id: Mapped[int | None] = mapped_column(ForeignKey("sessions.id", ondelete="SET NULL"))
    title: Mapped[str] = mapped_column(BoundedString(300))
    filename: Mapped[str] = mapped_column(BoundedString(200))
    content_type: Mapped[str] = mapped_column(BoundedString(100))
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProactiveTaskRow(Base):
    """A reminder or briefing: the source of truth; APScheduler's job only says when to fire."""

    __tablename__ = "proactive_tasks"
    __table_args__ = (
        Index("ix_proactive_tasks_session_id", "session_id"),
        Index("ix_proactive_tasks_status", "status"),
        Index("uq_proactive_tasks_origin", "session_id", "origin", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    channel: Mapped[str] = mapped_column(BoundedString(32))
    chat_id: Mapped[str] = mapped_column(BoundedString(128))
    title: Mapped[str] = mapped_column(BoundedString(200))
    mode: Mapped[str] = mapped_column(BoundedString(16))  # message | agent | watch
    content: Mapped[str] = mapped_column(CleanText)
    run_at: Mapped[datetime | None]  # one-shot
    cron: Mapped[str | None] = mapped_column(BoundedString(120))  # recurring, 5 fields
    timezone: Mapped[str] = mapped_column(BoundedString(64))
    status: Mapped[str] = mapped_column(BoundedString(16), default="active")
    next_run_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The turn and arguments of the tool call that created it: the same call made again (a turn
    # resumed after a crash that hit before the call was recorded) finds it instead.
    origin: Mapped[str | None] = mapped_column(BoundedString(64))
    # The person who asked for it ("<channel>:<user id>"): a briefing runs with their memories.
    created_by: Mapped[str | None] = mapped_column(BoundedString(160))
    # An unconfirmed task: Bruce's question about it, once asked (after the turn's reply).
    question_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL")
    )


class TaskRunRow(Base):
    """One firing of a task. Unique per (task, scheduled time): a firing happens at most once.

    The run is claimed in the same commit as the message it stores (`message_id`): a reminder
    for the outbox, or a briefing's task message for the inbox. `running` and `undelivered`
    runs are open: they are closed from that message's fate (delivered, failed).
    """

    __tablename__ = "task_runs"
    __table_args__ = (
        UniqueConstraint("task_id", "scheduled_for", name="uq_task_runs_task_scheduled"),
        Index("ix_task_runs_status", "status"),
        Index("ix_task_runs_message_id", "message_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("proactive_tasks.id", ondelete="CASCADE"))
    scheduled_for: Mapped[datetime]
    # running | undelivered (open) · delivered | failed | missed (closed)
    status: Mapped[str] = mapped_column(BoundedString(16))
    late_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    delivered_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(CleanText)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"))
    # Times the firing was handed over: 1, or more when a crash cut it and it ran again.
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # A watch's check: the model's answer (MATCH | NO_MATCH | UNSURE) and its one-line reason.
    verdict: Mapped[str | None] = mapped_column(BoundedString(16))
    reason: Mapped[str | None] = mapped_column(CleanText)


class WatchRow(Base):
    """What a watch (a `proactive_tasks` row of mode `watch`) checks, and what it saw last.

    The task row keeps the schedule (`next_run_at`) and the chat; this side table the target
    (a URL or a search query), the condition, the interval and the state its checks carry from
    one to the next: the hash of the content that last matched (an alert is due when a match's
    content differs), the last verdict, and the failures in a row with whether the user heard.
    """

    __tablename__ = "watches"

    task_id: Mapped[int] = mapped_column(
        ForeignKey("proactive_tasks.id", ondelete="CASCADE"), primary_key=True
    )
    url: Mapped[str | None] = mapped_column(BoundedString(2000))
    query: Mapped[str | None] = mapped_column(BoundedString(500))
    condition: Mapped[str] = mapped_column(CleanText)
    interval_seconds: Mapped[float] = mapped_column(Float)
    content_hash: Mapped[str | None] = mapped_column(BoundedString(64))  # of the last read
    matched_hash: Mapped[str | None] = mapped_column(BoundedString(64))  # None: no match now
    verdict: Mapped[str | None] = mapped_column(BoundedString(16))
    reason: Mapped[str | None] = mapped_column(CleanText)
    checked_at: Mapped[datetime | None]
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    failures_told: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    unsure_told: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")


class GoalRow(Base):
    """A goal of a session, set by the analytical brain: a root goal or a sub-goal under one."""

    __tablename__ = "goals"
    __table_args__ = (Index("ix_goals_session_id_status", "session_id", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    description: Mapped[str] = mapped_column(CleanText)
    status: Mapped[str] = mapped_column(BoundedString(16), default="active")  # active | completed
    parent_goal_id: Mapped[int | None] = mapped_column(ForeignKey("goals.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None]


class MemoryRow(Base):
    """A fact a person told Bruce about themselves, kept across conversations (tools/memory.py).

    `owner` is the person: "<channel>:<user id>" (each person of a group chat has their own).
    The full-text index is not a model: SQLite's FTS5 table `memories_fts` with its triggers and
    PostgreSQL's GIN index are made by migration 0010 and `fresh_schema` (storage/fulltext.py).
    """

    __tablename__ = "memories"
    __table_args__ = (Index("ix_memories_owner_updated_at", "owner", "updated_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(BoundedString(160))
    content: Mapped[str] = mapped_column(CleanText)
    tags: Mapped[list[str]] = mapped_column(WordList, default=list)
    source_session_id: Mapped[int | None] = mapped_column(
        ForeignKey("sessions.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryLinkRow(Base):
    """Owners the dashboard linked as one person across channels: each linked owner names the
    person's key (the owner it was first linked to). An owner without a row is its own person."""

    __tablename__ = "memory_links"
    __table_args__ = (Index("ix_memory_links_person", "person"),)

    owner: Mapped[str] = mapped_column(BoundedString(160), primary_key=True)
    person: Mapped[str] = mapped_column(BoundedString(160))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebSessionRow(Base):
    """A browser signed in to the dashboard. `id` is the SHA-256 of the cookie (never the cookie
    itself); `public_id` names it in the API; `token_fingerprint` ties it to the `web.auth_token`
    it was made with, so that changing the token signs every browser out."""

    __tablename__ = "web_sessions"
    __table_args__ = (UniqueConstraint("public_id", name="uq_web_sessions_public_id"),)

    id: Mapped[str] = mapped_column(BoundedString(64), primary_key=True)
    public_id: Mapped[str] = mapped_column(BoundedString(32))
    token_fingerprint: Mapped[str] = mapped_column(BoundedString(64))
    user_agent: Mapped[str] = mapped_column(BoundedString(300), default="")
    client_address: Mapped[str] = mapped_column(BoundedString(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]


class ApprovedUserRow(Base):
    """Someone the owner let in on a chat platform (a pairing code approved in the dashboard or
    with `bruce pairing approve`), besides the `allowed_user_ids` of config.yml. Platform user
    ids are numbers (Telegram, Discord) or text (Matrix, Slack): `PlatformUserId`."""

    __tablename__ = "approved_users"

    channel: Mapped[str] = mapped_column(BoundedString(32), primary_key=True)
    user_id: Mapped[int | str] = mapped_column(PlatformUserId, primary_key=True)
    name: Mapped[str] = mapped_column(BoundedString(200), default="")
    chat_id: Mapped[str] = mapped_column(BoundedString(128), default="")
    approved_by: Mapped[str] = mapped_column(BoundedString(32), default="dashboard")
    approved_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The platform's @username (unique there), shown before `name`, which the person chose.
    username: Mapped[str] = mapped_column(BoundedString(200), default="", server_default="")


class PairingCodeRow(Base):
    """A one-time code a stranger was given, waiting for the owner's approval until
    `expires_at`. One per stranger and channel: asking again gives the same code."""

    __tablename__ = "pairing_codes"
    __table_args__ = (
        UniqueConstraint("channel", "user_id", name="uq_pairing_codes_channel_user"),
        Index("ix_pairing_codes_expires_at", "expires_at"),
    )

    code: Mapped[str] = mapped_column(BoundedString(16), primary_key=True)
    channel: Mapped[str] = mapped_column(BoundedString(32))
    user_id: Mapped[int | str] = mapped_column(PlatformUserId)
    name: Mapped[str] = mapped_column(BoundedString(200), default="")
    chat_id: Mapped[str] = mapped_column(BoundedString(128), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    # The platform's @username (unique there), shown before `name`, which the stranger chose.
    username: Mapped[str] = mapped_column(BoundedString(200), default="", server_default="")


class PendingActionRow(Base):
    """A tool call held for the user's yes: the model asked for it in a turn that had read
    outside content (agent/approvals.py). It runs only once confirmed, in the chat it was asked
    in, and is never run twice: `status` moves waiting → running → done | failed, or waiting →
    cancelled, each step a conditional update."""

    __tablename__ = "pending_actions"
    __table_args__ = (
        Index("ix_pending_actions_session_id", "session_id"),
        Index("uq_pending_actions_origin", "session_id", "origin", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    tool: Mapped[str] = mapped_column(BoundedString(64))
    arguments: Mapped[str] = mapped_column(CleanText)  # JSON, as the model sent it
    # Why it was held: the outside content the turn read, in Bruce's words.
    reason: Mapped[str] = mapped_column(CleanText)
    # The turn and arguments that asked for it: the same call in a turn resumed after a crash
    # finds it instead of asking again.
    origin: Mapped[str] = mapped_column(BoundedString(64))
    person: Mapped[str] = mapped_column(BoundedString(160), default="")
    task_run: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # waiting | running | done | failed | cancelled
    status: Mapped[str] = mapped_column(BoundedString(16), default="waiting")
    question_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL")
    )
    result: Mapped[str | None] = mapped_column(CleanText)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    resolved_at: Mapped[datetime | None]
