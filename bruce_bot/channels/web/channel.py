"""The web chat channel: the dashboard's chat page talks to Bruce through this adapter.

The HTTP routes call `submit` to put a message into the inbox; replies are already stored by the
outbox, so `send` only wakes the browsers waiting on a long poll for that chat. Access is guarded
by the web app's auth (`web.auth_token`), not by a user allowlist. With several processes on one
database, a reply may be delivered by another process than the one a browser waits on: `relay`
gives the channel a way to tell the others, and `changed_elsewhere` is how they hear it.

Live replies (`web.streaming`): a turn's answer as it is written is published to the chat page's
event stream (`listen`, served by web/chat_stream.py) as `live` events, each the whole text so
far (or a tool's status line), at most ten a second; `done` says the live text is over (the
stored reply then arrives the usual way). Only browsers of this process see them: with several
processes, another's browser gets the final reply alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bruce_bot.channels.base import AttachmentUnavailableError, InboxPort, Submission
from bruce_bot.channels.live import PacedLiveReply, Pacing
from bruce_bot.domain import Attachment, AttachmentKind, InboundMessage, OutboundMessage
from bruce_bot.private_files import write_private

WEB_CHANNEL = "web"
LIVE_INTERVAL_SECONDS = 0.1  # a browser takes updates often; ten a second reads smoothly
MAX_LISTENER_BACKLOG = 256  # events kept for a browser that reads slowly (older ones dropped)
LiveEvent = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Upload:
    """A file posted with a chat message."""

    name: str
    mime_type: str
    data: bytes


def _write(path: Path, data: bytes) -> None:
    write_private(path, data)  # 0600 in 0700 folders: what people send is theirs


class WebChannel:
    name = WEB_CHANNEL
    max_message_chars = 1_000_000  # a browser needs no splitting

    def __init__(self, uploads_dir: Path | None = None, *, streaming: bool = True) -> None:
        # Files uploaded in the chat page wait here until the turn reads them (media step).
        self._uploads = uploads_dir
        self.streaming = streaming
        self._listeners: dict[str, set[asyncio.Queue[LiveEvent]]] = {}
        self.stopping = asyncio.Event()  # ends the event streams, so shutdown never waits on them
        self._inbox: InboxPort | None = None
        self._changed: dict[str, asyncio.Event] = {}
        self._versions: dict[str, int] = {}
        self._typing: set[str] = set()
        self._relay: Callable[[str], Awaitable[None]] | None = None
        self.waiting = 0  # long polls open now

    def relay(self, announce: Callable[[str], Awaitable[None]]) -> None:
        """Call `announce(chat_id)` after each reply, for the browsers of other processes."""
        self._relay = announce

    def changed_elsewhere(self, chat_id: str) -> None:
        """Another process delivered a reply in this chat (`*`: in any chat, as far as we know:
        notices may have been missed)."""
        for chat in list(self._changed) if chat_id == "*" else [chat_id]:
            self._typing.discard(chat)
            self._notify(chat)

    async def start(self, inbox: InboxPort) -> None:
        self._inbox = inbox
        self.stopping.clear()

    async def stop(self) -> None:
        self._inbox = None
        self.stopping.set()

    def live_reply(self, chat_id: str, metadata: Mapping[str, object]) -> WebLive | None:
        """The turn's answer shown in the chat page as it is written (`web.streaming`)."""
        return WebLive(self, chat_id) if self.streaming else None

    @contextlib.contextmanager
    def listen(self, chat_id: str) -> Iterator[asyncio.Queue[LiveEvent]]:
        """The live events of one chat, for one browser's event stream, while in the block."""
        queue: asyncio.Queue[LiveEvent] = asyncio.Queue(MAX_LISTENER_BACKLOG)
        self._listeners.setdefault(chat_id, set()).add(queue)
        try:
            yield queue
        finally:
            listeners = self._listeners.get(chat_id, set())
            listeners.discard(queue)
            if not listeners:
                self._listeners.pop(chat_id, None)

    def publish(self, chat_id: str, event: LiveEvent) -> None:
        for queue in self._listeners.get(chat_id, ()):
            if queue.full():  # a browser that stopped reading: its oldest event goes
                queue.get_nowait()
            queue.put_nowait(event)

    async def close(self) -> None:
        return None

    async def submit(
        self,
        chat_id: str,
        text: str,
        user_name: str = "web",
        files: Sequence[Upload] = (),
    ) -> Submission:
        if self._inbox is None:
            return Submission(False, reason="stopping")
        attachments = tuple([await self._keep(upload) for upload in files])
        message = InboundMessage(
            WEB_CHANNEL, chat_id, text, user_id="web", user_name=user_name, attachments=attachments
        )
        submission = await self._inbox.submit(message)
        if submission.accepted:
            self._typing.add(chat_id)
            self._notify(chat_id)
        return submission

    async def _keep(self, upload: Upload) -> Attachment:
        """The upload written to disk (before the message is stored: nothing sent is lost)."""
        if self._uploads is None:
            raise RuntimeError("the web channel has no uploads folder")
        ref = f"{uuid.uuid4().hex}{Path(upload.name).suffix.lower()[:10]}"
        await asyncio.to_thread(_write, self._uploads / ref, upload.data)
        mime = upload.mime_type.split(";")[0].strip().lower()
        kind: AttachmentKind = "document"
        if mime.startswith("image/"):
            kind = "image"
        elif mime.startswith("audio/"):
            kind = "audio"
        return Attachment(kind, ref, upload.name, mime, len(upload.data))

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An uploaded file's bytes."""
        if self._uploads is None or "/" in attachment.ref or attachment.ref.startswith("."):
            raise AttachmentUnavailableError("no such upload", permanent=True)
        path = self._uploads / attachment.ref
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise AttachmentUnavailableError("the upload was deleted", permanent=True) from None
        if len(data) > max_bytes:
            raise AttachmentUnavailableError(
                f"it is over the {max_bytes / 1_000_000:.0f} MB I can read", permanent=True
            )
        return data

    async def choose(self, chat_id: str, data: str) -> str | None:
        """A button pressed in the chat page; the reply to show (None: unknown button)."""
        if self._inbox is None:
            return None
        # The web chat is the dashboard's owner, signed in.
        return await self._inbox.choose(WEB_CHANNEL, chat_id, data, WEB_CHANNEL)

    async def send(self, message: OutboundMessage) -> None:
        self._typing.discard(message.chat_id)
        self._notify(message.chat_id)
        if self._relay is not None:
            await self._relay(message.chat_id)

    async def typing(self, chat_id: str) -> None:
        self._typing.add(chat_id)

    def is_typing(self, chat_id: str) -> bool:
        return chat_id in self._typing

    def version(self, chat_id: str) -> int:
        """A counter of changes in the chat; pass it to `wait_for_change` as `since`."""
        return self._versions.get(chat_id, 0)

    def _notify(self, chat_id: str) -> None:
        self._versions[chat_id] = self._versions.get(chat_id, 0) + 1
        event = self._changed.pop(chat_id, None)
        if event is not None:
            event.set()

    async def wait_for_change(self, chat_id: str, within: float, since: int | None = None) -> None:
        """Return when something new happens in the chat, or after `within` seconds.

        With `since` (a `version` read before looking at the messages), a change that happened
        in between returns at once instead of being missed.
        """
        if since is not None and self.version(chat_id) != since:
            return
        if self.stopping.is_set():
            return
        event = self._changed.setdefault(chat_id, asyncio.Event())
        # Stopping ends the wait too: a browser's open long poll must not hold shutdown up
        # until the web server's stop timeout (the page polls again once Bruce is back).
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.stopping.wait())]
        self.waiting += 1
        try:
            await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting -= 1
            for waiting in waits:
                waiting.cancel()


class WebLive(PacedLiveReply):
    """One turn's live reply in a chat page (see the module docstring)."""

    def __init__(self, channel: WebChannel, chat_id: str) -> None:
        self._channel = channel
        self._chat_id = chat_id
        super().__init__(Pacing(LIVE_INTERVAL_SECONDS, WebChannel.max_message_chars))

    async def _deliver(self, message: OutboundMessage) -> None:
        await self._channel.send(message)  # stored already: the page reads it as every reply
        self._channel.publish(self._chat_id, {"type": "done"})

    async def _take_down(self) -> None:
        self._channel.publish(self._chat_id, {"type": "done"})

    async def _show(self, text: str) -> None:
        self._channel.publish(self._chat_id, {"type": "live", "text": text})
