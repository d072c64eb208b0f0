"""Messages that could not be stored yet: tried again until the database takes them.

The inbox raises `StorageUnavailableError` when a message cannot be stored for a reason that
passes (the disk is full, the database is away: faults.py). What a channel does then
depends on its platform: Telegram's long polling keeps the update unconfirmed and its handler
tries again (`until_stored`), so Telegram keeps it too; Discord never sends a message again, so
the channel keeps it here (`HeldMessages`), in memory and in arrival order, and takes it in as
soon as it can. A read on the way (the allowlist, on a PostgreSQL server that is down) that
fails with such a fault counts the same. Both try again with a growing pause (0.25 s doubling
up to 5 s): often enough that a message is answered within seconds of the disk having room
again, seldom enough that an outage costs nothing. No SDK import: the channel passes in what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog

from bruce_bot.domain import StorageUnavailableError
from bruce_bot.faults import transient_reason

log = structlog.get_logger(__name__)

T = TypeVar("T")
R = TypeVar("R")
FIRST_RETRY_SECONDS = 0.25
MAX_RETRY_SECONDS = 5.0
# Messages one channel keeps in memory at most while storage is down (the rest are refused
# with a message that asks to send them again, so nothing disappears without a word).
MAX_HELD_MESSAGES = 1000
STOP_WAIT_SECONDS = 5.0


def unavailable(exc: BaseException) -> str | None:
    """Why storage is unavailable, if that is what `exc` says: a message the inbox could not
    store, or a read on the way there (the allowlist, a command) that failed with a fault that
    passes (faults.py). None for anything else, a bug."""
    if isinstance(exc, StorageUnavailableError):
        return exc.reason
    return transient_reason(exc)


async def _pause(seconds: float, stopping: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)


async def until_stored(
    attempt: Callable[[], Awaitable[R]],
    stopping: asyncio.Event,
    *,
    first_delay: float = FIRST_RETRY_SECONDS,
    max_delay: float = MAX_RETRY_SECONDS,
) -> tuple[R] | None:
    """`attempt()` again and again while storage is unavailable (see `unavailable`): its
    result (in a 1-tuple), or None if `stopping` came first (nothing was stored). Other errors
    propagate."""
    delay = first_delay
    while True:
        try:
            return (await attempt(),)
        except Exception as exc:
            if unavailable(exc) is None:
                raise
            if stopping.is_set():
                return None
        await _pause(delay, stopping)
        if stopping.is_set():
            return None
        delay = min(delay * 2, max_delay)


@dataclass(frozen=True, slots=True)
class Held(Generic[T]):
    attempt: Callable[[], Awaitable[None]]  # takes the message in (raises while unavailable)
    reply_to: T  # where the channel answers about it (a Discord channel)
    chat_id: str
    platform_message_id: str


class HeldMessages(Generic[T]):
    """A channel's messages waiting for storage, taken in in arrival order once it works again.

    `keep` queues one's `attempt` (False when the bound is reached: the channel tells the
    sender), and a background task runs the oldest until it goes through, then the next. An
    attempt raises a fault that passes (`unavailable`) while storage is still down; any other
    error drops that one message (`failed` is told, so the channel can say so). `drop` (at stop)
    ends the retries and hands back what was still waiting.
    """

    def __init__(
        self,
        channel: str,
        failed: Callable[[Held[T]], Awaitable[None]],
        *,
        limit: int = MAX_HELD_MESSAGES,
        first_delay: float = FIRST_RETRY_SECONDS,
        max_delay: float = MAX_RETRY_SECONDS,
    ) -> None:
        self._channel = channel
        self._failed = failed
        self._limit = limit
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._waiting: deque[Held[T]] = deque()
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._full_said = False

    @property
    def holding(self) -> bool:
        """Messages are waiting: a new one must queue behind them, to keep the order."""
        return bool(self._waiting)

    def __len__(self) -> int:
        return len(self._waiting)

    def keep(self, held: Held[T]) -> bool:
        if len(self._waiting) >= self._limit:
            if not self._full_said:  # once per outage; each refused sender is told
                self._full_said = True
                log.error(
                    "held_messages_full",
                    channel=self._channel,
                    held=len(self._waiting),
                    hint="storage has been down for long; new messages are refused",
                )
            return False
        self._waiting.append(held)
        log.debug(
            "message_held",
            channel=self._channel,
            chat_id=held.chat_id,
            platform_message_id=held.platform_message_id,
            held=len(self._waiting),
        )
        if self._task is None or self._task.done():
            self._stopping.clear()
            self._task = asyncio.create_task(self._drain(), name=f"{self._channel}-held")
        return True

    async def _drain(self) -> None:
        delay = self._first_delay
        while self._waiting and not self._stopping.is_set():
            head = self._waiting[0]
            try:
                await head.attempt()
            except Exception as exc:
                if unavailable(exc) is not None:
                    await _pause(delay, self._stopping)
                    delay = min(delay * 2, self._max_delay)
                    continue
                log.exception(
                    "held_message_failed",
                    channel=self._channel,
                    chat_id=head.chat_id,
                    platform_message_id=head.platform_message_id,
                )
                self._pop(head)
                with contextlib.suppress(Exception):
                    await self._failed(head)
                continue
            log.info(
                "held_message_taken_in",
                channel=self._channel,
                chat_id=head.chat_id,
                platform_message_id=head.platform_message_id,
            )
            self._pop(head)
            delay = self._first_delay
        if not self._waiting:
            self._full_said = False

    def _pop(self, head: Held[T]) -> None:
        if self._waiting and self._waiting[0] is head:
            self._waiting.popleft()

    async def drop(self) -> list[Held[T]]:
        """Stop trying; the messages still waiting (never stored), oldest first."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            # An attempt under way is let finish (cancelled, it might be stored and yet be
            # reported as lost); one that hangs on a database that does not answer is not.
            await asyncio.wait({task}, timeout=STOP_WAIT_SECONDS)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        left = list(self._waiting)
        self._waiting.clear()
        return left
