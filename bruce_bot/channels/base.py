"""The contract between Bruce's core and a chat platform.

An adapter normalises platform events into `InboundMessage`s, checks its allowlist, and hands
them to the inbox through `InboxPort.submit`; it sends `OutboundMessage`s back. It never sees an
LLM or a database. The platform SDK is imported only inside the adapter's own module.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from bruce_bot.domain import Attachment, InboundMessage, OutboundMessage, Submission


class InboxPort(Protocol):
    """What a channel may ask of Bruce's core."""

    async def submit(self, message: InboundMessage) -> Submission:
        """Store a message durably; it will be answered through the channel's `send`."""
        ...

    async def new_conversation(self, channel: str, chat_id: str) -> str:
        """`/new`: set the history and summary aside (the session stays); returns the reply."""
        ...

    async def describe_reminders(self, channel: str, chat_id: str) -> str:
        """`/reminders`: the chat's active scheduled tasks as text."""
        ...

    async def migrate_chat(self, channel: str, old_chat_id: str, new_chat_id: str) -> None:
        """The platform gave the chat a new id (a Telegram group upgraded to a supergroup):
        its conversation and scheduled tasks follow it."""
        ...

    async def choose(self, channel: str, chat_id: str, data: str, by: str = "") -> str | None:
        """A button under one of Bruce's messages was pressed (`Choice.data`) by an allowed
        user (`by`: "<channel>:<user id>"): returns the text to show in answer, None when the
        button is unknown or stale."""
        ...


class DeliveryError(Exception):
    """A send failed. `permanent` failures (chat gone, bot blocked) must not be retried.
    `rate_limited`: the platform's "too many requests, retry after `retry_after` s" — not a
    failure of the send, which waits as told (the outbox counts it apart from failed attempts).
    `pieces_sent`: of a part the platform took as several messages, how many it had accepted
    before the failure (the outbox records it, and a later attempt starts after them)."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
        pieces_sent: int = 0,
        rate_limited: bool = False,
    ):
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after
        self.pieces_sent = pieces_sent
        self.rate_limited = rate_limited


class ChannelAdapter(Protocol):
    name: str
    max_message_chars: int

    async def start(self, inbox: InboxPort) -> None:
        """Begin receiving; every message goes to `inbox.submit` before it is acknowledged."""
        ...

    async def stop(self) -> None:
        """Stop receiving (intake); sending may still be used while turns finish."""
        ...

    async def close(self) -> None:
        """Release the connection once the last running turn has delivered its reply."""
        ...

    async def send(self, message: OutboundMessage) -> None:
        """Deliver one message (already split to `max_message_chars`); raise `DeliveryError`."""
        ...

    async def typing(self, chat_id: str) -> None:
        """Show a typing indicator in the chat once (the worker refreshes it)."""
        ...


class AttachmentUnavailableError(Exception):
    """A file could not be fetched. `permanent`: it is gone (expired on the platform, deleted);
    otherwise the platform was away and a later try may work."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@runtime_checkable
class AttachmentSource(Protocol):
    """A channel whose messages carry files: the media step fetches them through it (only the
    adapter knows its platform's SDK)."""

    name: str

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file's bytes; raise `AttachmentUnavailableError` (also when it is larger than
        `max_bytes`, permanent)."""
        ...
