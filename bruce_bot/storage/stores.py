"""All stores over one database, built together so the rest of Bruce receives a single value.

The stores that cache rows (sessions, summaries, settings, goals) share one change feed: it tells
the other processes on the same database what they wrote and tells them what the others wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bruce_bot.storage.approvals import ApprovalStore
from bruce_bot.storage.artifacts import ArtifactStore
from bruce_bot.storage.audit import AuditStore
from bruce_bot.storage.changes import ChangeFeed, LocalFeed
from bruce_bot.storage.database import Database
from bruce_bot.storage.deliveries import DeliveryStore
from bruce_bot.storage.goals import GoalStore
from bruce_bot.storage.leases import Claimant
from bruce_bot.storage.memories import MemoryStore
from bruce_bot.storage.messages import MessageStore, UsageListener
from bruce_bot.storage.pairing import PairingStore
from bruce_bot.storage.sessions import SessionStore
from bruce_bot.storage.settings import SettingsStore
from bruce_bot.storage.summaries import SummaryStore
from bruce_bot.storage.tasks import TaskStore
from bruce_bot.storage.watches import WatchStore
from bruce_bot.storage.web_sessions import WebSessionStore


@dataclass(frozen=True, slots=True)
class Stores:
    database: Database
    sessions: SessionStore
    messages: MessageStore
    audit: AuditStore
    summaries: SummaryStore
    settings: SettingsStore
    artifacts: ArtifactStore
    deliveries: DeliveryStore
    tasks: TaskStore
    goals: GoalStore
    web_sessions: WebSessionStore
    memories: MemoryStore
    pairing: PairingStore
    watches: WatchStore
    approvals: ApprovalStore
    feed: ChangeFeed = field(default_factory=LocalFeed)

    @classmethod
    def open(
        cls,
        database: Database,
        feed: ChangeFeed | None = None,
        *,
        claimant: Claimant | None = None,
        usage_recorded: UsageListener | None = None,
    ) -> Stores:
        """`feed` (started and stopped by the caller) tells the other processes on the database
        what the caching stores write, and them what the others wrote; the default tells nobody,
        right for SQLite's one process. `claimant`: this process, as it claims the replies it
        stores (storage/leases.py). `usage_recorded`: told of every LLM call recorded."""
        engine = database.engine
        feed = feed or LocalFeed()
        return cls(
            database=database,
            sessions=SessionStore(engine, feed),
            messages=MessageStore(engine, claimant, usage_recorded),
            audit=AuditStore(engine, usage_recorded),
            summaries=SummaryStore(engine, feed),
            settings=SettingsStore(engine, feed),
            artifacts=ArtifactStore(engine),
            deliveries=DeliveryStore(engine),
            tasks=TaskStore(engine, claimant),
            goals=GoalStore(engine, feed),
            web_sessions=WebSessionStore(engine),
            memories=MemoryStore(engine),
            pairing=PairingStore(engine),
            watches=WatchStore(engine, claimant),
            approvals=ApprovalStore(engine, claimant),
            feed=feed,
        )
