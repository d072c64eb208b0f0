"""Live replies: the contract between the core and a channel that shows an answer as it is written.

For one turn the core asks the channel (through the outbox) for a `LiveReply`. The agent loop
hands it the model's text as it streams (`text`), says when a new model call begins (`restart`:
the text so far was a preamble to tool calls, or an answer the guard is having corrected) and
shows a short status line while a tool runs (`status`). The answer itself still goes through the
outbox as every reply does: stored first, then delivered, its first part through the live
reply's `finish` (which turns what was shown into the final message) and the rest as usual; a
turn that ends without a reply `abandon`s what was shown. Nothing here is a platform's SDK.
`PacedLiveReply` is what every adapter's live reply shares (Telegram drafts or edits, Discord
edits, the web chat's event stream): the protocol, with `LiveText` deciding what is shown and
when (throttled, never the same text twice, a platform's retry-after waited out, by the
platform's `Pacing`); a platform's subclass keeps only its platform calls (show a text, deliver
the final message, take down what was shown).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import structlog

from bruce_bot.channels.base import DeliveryError
from bruce_bot.domain import OutboundMessage

log = structlog.get_logger(__name__)

CUT_SUFFIX = " …"
MAX_REFRESH_SECONDS = 900.0  # a preview is kept alive this long without a change, no longer


class LiveReply(Protocol):
    """One turn's reply as the chat sees it while it is being written."""

    async def text(self, delta: str) -> None:
        """More of the answer being written. Returns at once: showing it is the channel's
        business (throttled, in the background)."""
        ...

    async def restart(self) -> None:
        """A new model call begins: the next text replaces what was written (which stays shown
        until then)."""
        ...

    async def status(self, line: str) -> None:
        """A tool runs: show `line` in place of the text."""
        ...

    async def finish(self, message: OutboundMessage) -> None:
        """Deliver the stored reply's first part in place of what was shown (the outbox calls
        it as it would call `send`, retries included); raise `DeliveryError` as `send` does."""
        ...

    async def abandon(self) -> None:
        """The turn ends without this reply (no answer, or it was delivered otherwise): take
        down what was shown, best effort."""
        ...


@runtime_checkable
class LiveChannel(Protocol):
    """A channel adapter that can show replies live (`channels.<name>.streaming`)."""

    def live_reply(self, chat_id: str, metadata: Mapping[str, object]) -> LiveReply | None:
        """A live reply for a turn in `chat_id` (None: not in this chat, or streaming is off)."""
        ...


Show = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Pacing:
    """How a platform takes a live text: at most one change per `interval` seconds, texts of at
    most `limit` as the platform counts them (`length`: Telegram counts UTF-16 units), and with
    `refresh` (seconds) the same text shown again after that long without a change, for a
    preview that expires on its own (a Telegram draft lasts 30 seconds). `name` is for logs."""

    interval: float
    limit: int
    name: str = ""
    refresh: float | None = None
    length: Callable[[str], int] = len


class LiveText:
    """What a live reply shows, and when: the text, or the status line that replaced it.

    `show` puts a text on screen (sends or edits); it raises `DeliveryError`, with `retry_after`
    when the platform says to wait. It is called from one background task, never twice at once,
    at most once per `pacing.interval` seconds, never with the text already shown, and never
    cancelled midway (httpcore does not give a pool slot back when a request is cancelled: see
    `TurnRunner._typing`). Texts beyond `pacing.limit` are cut with " …"; the final message shows
    all of it. A permanent failure stops the showing; the final message still goes out.
    """

    def __init__(
        self, show: Show, pacing: Pacing, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._show = show
        self._refresh = pacing.refresh
        self._length = pacing.length
        self._changed_at = clock()
        self._changed = asyncio.Event()
        self._interval = pacing.interval
        self._limit = pacing.limit
        self._clock = clock
        self._name = pacing.name
        self._written = ""  # the answer being written
        self._fresh = False  # restart() was called: the next text begins a new answer
        self._wanted = ""
        self.shown = ""  # what the platform shows now
        self._not_before = 0.0
        self._held_until = 0.0  # the platform's retry-after, which the final message waits out
        self._closed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failed = False

    @property
    def written(self) -> str:
        return "" if self._fresh else self._written

    def text(self, delta: str) -> None:
        if self._fresh:
            self._written, self._fresh = "", False
        self._written += delta
        self._want(self._written)

    def restart(self) -> None:
        self._fresh = True

    def status(self, line: str) -> None:
        self._written, self._fresh = "", False
        self._want(line)

    async def close(self) -> None:
        """Stop showing; returns once a request in flight has finished and a wait the platform
        asked for (retry-after) is over, so that the final message does not break it."""
        self._closed.set()
        self._changed.set()
        if self._task is not None:
            await self._task
        wait = self._held_until - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)

    def _want(self, text: str) -> None:
        text = text.rstrip()  # platforms trim it: an edit that only adds spaces changes nothing
        if self._length(text) > self._limit:
            room = self._limit - self._length(CUT_SUFFIX)
            cut = text[:room]
            while self._length(cut) > room:  # characters that count double (UTF-16 pairs)
                cut = cut[: -max(1, (self._length(cut) - room) // 2)]
            text = cut.rstrip() + CUT_SUFFIX
        if not text.strip() or self._closed.is_set() or self.failed:
            return
        self._wanted = text
        self._changed_at = self._clock()
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        again = False  # the preview is about to expire: the same text is shown once more
        while not self._closed.is_set():
            if self._wanted == self.shown and not again:
                if self._refresh is None or self._clock() - self._changed_at > MAX_REFRESH_SECONDS:
                    return  # nothing new to show (a preview left unchanged that long is stale)
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self._refresh)
                again = self._wanted == self.shown
                continue
            wait = self._not_before - self._clock()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), wait)
                continue
            text = self._wanted
            try:
                await self._show(text)
            except DeliveryError as exc:
                if exc.permanent:
                    log.info("live_reply_stopped", channel=self._name, error=str(exc))
                    self.failed = True
                    return
                self._not_before = self._clock() + (exc.retry_after or self._interval)
                if exc.retry_after:
                    self._held_until = self._not_before
                log.info("live_reply_waiting", channel=self._name, seconds=exc.retry_after)
                continue
            except Exception as exc:  # an adapter bug must not end the turn
                log.warning("live_reply_crashed", channel=self._name, error=repr(exc))
                self.failed = True
                return
            self.shown, again = text, False
            self._not_before = self._clock() + self._interval


class PacedLiveReply(ABC):
    """A `LiveReply` shown through `LiveText`: a platform's subclass says only how a text is put
    on screen (`_show`, called as `LiveText`'s `show`), how the stored reply's first part takes
    its place (`_deliver`) and how what was shown is taken down when no reply comes
    (`_take_down`). Both run once the showing has stopped and a retry-after is waited out."""

    def __init__(self, pacing: Pacing) -> None:
        self._display = LiveText(self._show, pacing)

    @property
    def shown(self) -> str:
        """What the platform shows now (the last text `_show` put there)."""
        return self._display.shown

    async def text(self, delta: str) -> None:
        self._display.text(delta)

    async def restart(self) -> None:
        self._display.restart()

    async def status(self, line: str) -> None:
        self._display.status(line)

    async def finish(self, message: OutboundMessage) -> None:
        await self._display.close()
        await self._deliver(message)

    async def abandon(self) -> None:
        await self._display.close()
        await self._take_down()

    @abstractmethod
    async def _show(self, text: str) -> None:
        """Put `text` on screen; raise `DeliveryError` as `LiveText` expects."""

    @abstractmethod
    async def _deliver(self, message: OutboundMessage) -> None:
        """Deliver the stored reply's first part in place of what was shown."""

    @abstractmethod
    async def _take_down(self) -> None:
        """Remove what was shown, best effort (the turn ends without this reply)."""
