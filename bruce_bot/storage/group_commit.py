"""Group commit: writes that arrive together share one transaction.

On SQLite every transaction goes through the one connection, and a message's cost is mostly
the transactions' round trips to the driver thread, not the rows. When many callers write at
the same moment (a getUpdates batch of a hundred messages, each handled concurrently), they
queue here and one flusher runs all of them in a single transaction. A caller's result comes
back only after that commit, so "stored" still means durable. If the shared transaction fails,
each piece of work is retried in a transaction of its own, so one bad write fails alone.
Work must only touch the database through the connection it is given (it may run twice: once
in the shared transaction that was rolled back, once alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = structlog.get_logger(__name__)

T = TypeVar("T")
Work = Callable[[AsyncConnection], Awaitable[Any]]


class GroupCommit:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._waiting: list[tuple[Work, asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def run(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run `work` in a transaction shared with the writes queued meanwhile; its result once
        committed. A caller cancelled meanwhile does not cancel the write."""
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((work, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="group-commit")
        return await asyncio.shield(done)

    async def _flush(self) -> None:
        while self._waiting:
            # Let the callers of this moment (the other updates of a batch) queue up too.
            await asyncio.sleep(0)
            batch, self._waiting = self._waiting, []
            try:
                async with self._engine.begin() as connection:
                    results = [await work(connection) for work, _ in batch]
            except Exception as exc:
                if len(batch) == 1:
                    _settle(batch[0][1], error=exc)
                    continue
                log.info("group_commit_split", writes=len(batch), error=repr(exc))
                await self._one_by_one(batch)
                continue
            for (_, done), result in zip(batch, results, strict=True):
                _settle(done, result=result)

    async def _one_by_one(self, batch: list[tuple[Work, asyncio.Future[Any]]]) -> None:
        for work, done in batch:
            try:
                async with self._engine.begin() as connection:
                    result = await work(connection)
            except Exception as exc:
                _settle(done, error=exc)
            else:
                _settle(done, result=result)


def _settle(
    done: asyncio.Future[Any], *, result: Any = None, error: Exception | None = None
) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)
