"""All stores over one database, built together so the rest of Bruce receives a single value."""

from __future__ import annotations

from dataclasses import dataclass

from bruce_bot.storage.artifacts import ArtifactStore
from bruce_bot.storage.audit import AuditStore
from bruce_bot.storage.database import Database
from bruce_bot.storage.deliveries import DeliveryStore
from bruce_bot.storage.goals import GoalStore
from bruce_bot.storage.messages import MessageStore
from bruce_bot.storage.sessions import SessionStore
from bruce_bot.storage.settings import SettingsStore
from bruce_bot.storage.summaries import SummaryStore
from bruce_bot.storage.tasks import TaskStore
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

    @classmethod
    def open(cls, database: Database) -> Stores:
        engine = database.engine
        return cls(
            database=database,
            sessions=SessionStore(engine),
            messages=MessageStore(engine),
            audit=AuditStore(engine),
            summaries=SummaryStore(engine),
            settings=SettingsStore(engine),
            artifacts=ArtifactStore(engine),
            deliveries=DeliveryStore(engine),
            tasks=TaskStore(engine),
            goals=GoalStore(engine),
            web_sessions=WebSessionStore(engine),
        )
