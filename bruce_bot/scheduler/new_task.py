"""The value of a task asked for, before it is stored: what the scheduling tools hand over.

A plain value with no dependencies, so that the tools (below the scheduler) can build it and
the task service's planner can take it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class NewTask:
    """A task asked for, before it is stored: what to do, where, and when (as written)."""

    session_id: int
    channel: str
    chat_id: str
    title: str
    mode: Literal["message", "agent"]
    content: str
    run_at: str | None = None  # once: ISO-8601 (naive: in `timezone`) or relative, like +2m
    cron: str | None = None  # recurring: 5 fields; exactly one of run_at and cron
    timezone: str | None = None  # IANA name; None: the user's
    # False: asked for after the turn read untrusted content; stored, fires once confirmed.
    confirmed: bool = True
    # The tool call that asks: the same call again (a turn resumed) gets the same task.
    origin: str | None = None
    # The person who asks ("<channel>:<user id>"): a briefing runs with their memories.
    created_by: str | None = None


@dataclass(frozen=True)
class NewWatch:
    """A watch asked for, before it is stored: what to read, what to look for, how often."""

    session_id: int
    channel: str
    chat_id: str
    title: str
    condition: str
    interval: str | float  # minutes as a number, or words: '30 minutes', 'every 2 hours'
    url: str | None = None  # exactly one of url and query
    query: str | None = None
    confirmed: bool = True  # False: asked for after the turn read untrusted content
    origin: str | None = None
    created_by: str | None = None
