"""The durable side of Telegram intake: an update is confirmed only once it was handled.

PTB's updater confirms updates to Telegram by the offset of its next getUpdates call, and it
moves that offset as soon as a batch is queued, not when it is handled. This queue (handed to
PTB by telegram_app.py) closes that gap while letting a whole batch be handled at once, so the
inbox can store it in one transaction. No SDK import: it deals in whatever PTB puts in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

SLOW_INTAKE_SECONDS = 60.0


class DurableUpdateQueue(asyncio.Queue):
    """PTB's update queue, which knows which updates were handled and holds back the
    confirmation of those that were not.

    Long polling: PTB's updater puts a fetched batch into this queue, one update after the
    other, and the offset of its next getUpdates call confirms the whole batch to Telegram. So
    `put` of a polled update returns at once (the application then handles the batch's updates
    concurrently, chat by chat in order: see telegram_app.py), and the next getUpdates first
    waits in `all_handled` until every update put so far was handled, i.e. until our handler
    returned, which it does only after `inbox.submit` stored the message. That includes the
    updater's last getUpdates on stop. A crash before that leaves the batch unconfirmed:
    Telegram sends it again and the inbox drops duplicates by platform message id.

    Webhook: PTB's webhook handler awaits `put` before answering 200, and Telegram redelivers
    an update that was not answered 200, so `put` of an update that no getUpdates fetched waits
    until that update was handled, and raises `refusal()` (PTB's server answers 503) when its
    message could not be stored (`not_stored`).

    Storage down (a full disk): a polled update's handler keeps trying to store it, so the next
    getUpdates, which waits for it, confirms nothing meanwhile. Only when Bruce stops before it
    could be stored is it given up (`not_stored`): then no getUpdates confirms anything any more
    (`unconfirmable`), and Telegram sends it, and what came after it, again at the next start.

    The updates of one chat are handled one after the other in the order they were queued:
    the update processor awaits `wait_turn(update)` (the previous update of its chat handled)
    before handling one, and calls `handled(update)` when its handler returned (or failed).
    `chat_of` names an update's chat; `seen` is told of each update as it is queued (album
    parts: see telegram_albums.py). Items without an `update_id` (PTB's stop signal) are not
    tracked.
    """

    def __init__(
        self,
        chat_of: Callable[[Any], Hashable],
        seen: Callable[[Any], None] | None = None,
        refusal: Callable[[], Exception] = lambda: RuntimeError("the update was not stored"),
    ) -> None:
        super().__init__()
        self._pushed: set[int] = set()  # id(update) of webhook posts not yet handled
        self._refused: set[int] = set()  # id(update) of webhook posts that were not stored
        self._refusal = refusal
        # An update fetched by getUpdates was handled without being stored (Bruce is stopping
        # while storage is down): no later getUpdates may confirm it, so Telegram sends it again.
        self.unconfirmable = False
        self._unhandled: dict[int, asyncio.Future[None]] = {}  # id(update) -> handled
        self._after: dict[int, asyncio.Future[None]] = {}  # id(update) -> its chat's previous
        self._last_of_chat: dict[Hashable, asyncio.Future[None]] = {}
        self._polled: set[int] = set()  # update ids fetched by getUpdates, not yet put
        self._chat_of = chat_of
        self._seen = seen

    def polled(self, update_ids: Iterable[int]) -> None:
        """These updates came from getUpdates: the next getUpdates confirms them."""
        self._polled.update(update_ids)

    def put_nowait(self, item: Any) -> None:
        super().put_nowait(item)
        if getattr(item, "update_id", None) is not None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._unhandled[id(item)] = done
            chat = self._chat_of(item)
            previous = self._last_of_chat.get(chat)
            if previous is not None and not previous.done():
                self._after[id(item)] = previous
            self._last_of_chat[chat] = done
        if self._seen is not None:
            try:
                self._seen(item)
            except Exception:  # bookkeeping must never stop intake
                log.exception("telegram_intake_note_failed")

    async def put(self, item: Any) -> None:
        self.put_nowait(item)
        update_id = getattr(item, "update_id", None)
        if update_id is None:
            return
        if update_id in self._polled:
            self._polled.discard(update_id)
            return
        handled = self._unhandled.get(id(item))
        if handled is None:
            return
        self._pushed.add(id(item))
        try:
            await asyncio.shield(handled)
        finally:
            self._pushed.discard(id(item))
        if id(item) in self._refused:
            self._refused.discard(id(item))
            # Not answered 200: Telegram posts the update again later.
            raise self._refusal()

    def not_stored(self, item: Any) -> None:
        """The update's message could not be stored: it must not be confirmed to Telegram. A
        webhook post is answered with `refusal` (a retryable error); a polled update makes
        every later getUpdates of this run unconfirming (`unconfirmable`)."""
        if id(item) in self._pushed:
            self._refused.add(id(item))
        else:
            self.unconfirmable = True

    async def wait_turn(self, item: Any) -> None:
        """Return once the update queued before this one in its chat was handled."""
        previous = self._after.pop(id(item), None)
        if previous is not None:
            await asyncio.shield(previous)

    def handled(self, item: Any) -> None:
        self._after.pop(id(item), None)
        done = self._unhandled.pop(id(item), None)
        if done is None:
            return
        if not done.done():
            done.set_result(None)
        chat = self._chat_of(item)
        if self._last_of_chat.get(chat) is done:
            del self._last_of_chat[chat]

    async def all_handled(self) -> None:
        """Return once every update put so far was handled (new ones are not waited for)."""
        waiting = list(self._unhandled.values())
        if not waiting:
            return
        _, late = await asyncio.wait(waiting, timeout=SLOW_INTAKE_SECONDS)
        if late:
            # A handler that hangs would hold every later update back; say so, keep waiting
            # (confirming it unhandled could lose a message).
            log.warning("telegram_intake_slow", unhandled=len(late))
            await asyncio.wait(late)
