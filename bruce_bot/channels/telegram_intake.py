"""The durable side of Telegram intake: an update is confirmed only once it was handled.

PTB's updater confirms updates to Telegram by the offset of its next getUpdates call, and it
moves that offset as soon as a batch is queued, not when it is handled. This queue (handed to
PTB by telegram.py) closes that gap. No SDK import: it deals in whatever PTB puts in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class ProcessedUpdateQueue(asyncio.Queue):
    """PTB's update queue, changed so that `put` returns only after the update was processed.

    Why: PTB's updater puts a fetched batch into this queue and then at once moves its offset
    past the batch; the very next getUpdates call carries that offset, which confirms the
    updates to Telegram, whether or not a handler has run yet. A crash in between would lose
    them. With this queue the updater's `await put(update)` waits until the application called
    `task_done()` for that update, i.e. until our handler returned, and our handler returns only
    after `inbox.submit` stored the message. So an update is confirmed (by the next getUpdates;
    on stop, by the updater's final getUpdates) only once the message is durable. The same holds
    for webhooks: PTB's webhook handler awaits `put` before answering 200, and Telegram
    redelivers an update that was not answered 200.

    It relies on the application processing updates one at a time, in order
    (`concurrent_updates(False)`), so the n-th `task_done` belongs to the n-th update put.
    Updates cut off by a stop before being processed are simply not confirmed: Telegram sends
    them again, and the inbox drops duplicates by platform message id. `seen` is told of each
    update as it is queued (webhook posts that wait their turn: album parts, see
    telegram_albums.py).
    """

    def __init__(self, seen: Callable[[Any], None] | None = None) -> None:
        super().__init__()
        self._processed: list[asyncio.Future[None]] = []
        self._seen = seen

    def put_nowait(self, item: Any) -> None:
        super().put_nowait(item)
        self._processed.append(asyncio.get_running_loop().create_future())
        if self._seen is not None:
            try:
                self._seen(item)
            except Exception:  # bookkeeping must never stop intake
                log.exception("telegram_intake_note_failed")

    async def put(self, item: Any) -> None:
        self.put_nowait(item)
        await self._processed[-1]

    def task_done(self) -> None:
        super().task_done()
        if self._processed:
            done = self._processed.pop(0)
            if not done.done():
                done.set_result(None)
