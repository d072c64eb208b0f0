"""Deleting a conversation for good: the session, its sub-agents' sessions and what hangs on them.

One transaction removes the session rows; the foreign keys cascade to their messages (and those
messages' delivery records), summaries, goals, leases, scheduled tasks and those tasks' runs. Rows
that only point at a session with `SET NULL` are handled here by what they are: the tool
executions (they hold the conversation's content: tool inputs and outputs) and the artifacts'
rows are deleted, while the token counts of LLM calls and the memories learnt in the
conversation stay (usage history; the Memory page manages memories). The caller removes the
files (artifact files, stored pictures: their layout on disk is not the database's business)
and cancels the tasks' scheduler jobs first. The caching stores of this process forget the
sessions at once; other processes hear of it on the change feed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select

from bruce_bot.storage import goals, sessions, summaries
from bruce_bot.storage.models import (
    ArtifactRow,
    MessageRow,
    SessionRow,
    ToolExecutionRow,
    table_of,
)
from bruce_bot.storage.stores import Stores

_sessions = table_of(SessionRow)
_executions = table_of(ToolExecutionRow)
_artifacts = table_of(ArtifactRow)
_messages = table_of(MessageRow)
MAX_DEPTH = 20  # sub-agents of sub-agents: far deeper than Bruce ever nests them


@dataclass(frozen=True, slots=True)
class RemovedSession:
    """What went: the session ids (the one asked for first, then its sub-agents') and the
    (uuid, filename) of each artifact whose file the caller deletes."""

    session_ids: list[int]
    artifacts: list[tuple[str, str]]
    messages: int


async def family_of(stores: Stores, session_id: int) -> list[int]:
    """The session and its descendants (sub-agents, and theirs), the session first."""
    family, layer = [session_id], [session_id]
    async with stores.database.engine.connect() as connection:
        for _ in range(MAX_DEPTH):
            rows = await connection.execute(
                select(_sessions.c.id).where(_sessions.c.parent_id.in_(layer))
            )
            layer = [row[0] for row in rows if row[0] not in family]
            if not layer:
                break
            family += layer
    return family


async def remove_session(stores: Stores, session_ids: list[int]) -> RemovedSession:
    """Delete `session_ids` (a `family_of`) and what belongs to them; see the module."""
    async with stores.database.engine.begin() as connection:
        artifacts = [
            (row.uuid, row.filename)
            for row in await connection.execute(
                select(_artifacts.c.uuid, _artifacts.c.filename).where(
                    _artifacts.c.session_id.in_(session_ids)
                )
            )
        ]
        message_count = (
            await connection.execute(
                select(func.count()).where(_messages.c.session_id.in_(session_ids))
            )
        ).scalar() or 0
        await connection.execute(
            delete(_executions).where(_executions.c.session_id.in_(session_ids))
        )
        await connection.execute(delete(_artifacts).where(_artifacts.c.session_id.in_(session_ids)))
        # Children first would not matter (the keys cascade); one statement takes them all.
        await connection.execute(delete(_sessions).where(_sessions.c.id.in_(session_ids)))
        for session_id in session_ids:
            for topic in (sessions.TOPIC, summaries.TOPIC, goals.TOPIC):
                await stores.feed.publish_with(connection, topic, str(session_id))
    stores.sessions.forget(session_ids)
    for session_id in session_ids:
        stores.summaries.forget(session_id)
        stores.goals.forget(session_id)
    return RemovedSession(session_ids, artifacts, int(message_count))
