"""How a turn ends, written once: its messages settled and its reply stored in one commit, then
the reply delivered through the outbox to the chat the batch came from.

The agent's turns (agent/turn.py) and the typed answers to what waits for the user
(scheduler/confirmations.py) both end this way; storing before sending is what lets the
outbox's redelivery send a reply a crash left unsent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bruce_bot.channels.live import LiveReply
from bruce_bot.domain import (
    DeliveryStatus,
    LLMCallRecord,
    MessageKind,
    MessageStatus,
    OutboundFile,
    OutboundMessage,
)
from bruce_bot.messaging.inbox import QueuedMessage
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.stores import Stores


@dataclass(frozen=True, slots=True)
class Ending:
    """What a turn ended with: the batch's status, the reply (None: nothing to send, the chat
    was told already) and what is stored with it."""

    status: MessageStatus
    reply: str | None
    kind: MessageKind
    llm_calls: Sequence[LLMCallRecord] = ()
    files: tuple[OutboundFile, ...] = ()
    untrusted: bool = False  # the turn read outside content (kept in the reply's extra)


class TurnEnd:
    """Stores a turn's ending and delivers its reply."""

    def __init__(self, stores: Stores, outbox: Outbox) -> None:
        self._stores = stores
        self._outbox = outbox

    async def end(
        self,
        session: SessionRecord,
        batch: Sequence[QueuedMessage],
        ending: Ending,
        live: LiveReply | None = None,
    ) -> DeliveryStatus:
        """The reply's delivery status ("sent" when there was none to send); `live`: the
        reply shown as it was written, finished by the delivery or taken down without one."""
        message_id, at = await self._stores.messages.finish_turn(
            session.id,
            [item.id for item in batch],
            ending.status,
            ending.reply,
            ending.kind,
            ending.llm_calls,
            files=ending.files,
            untrusted=ending.untrusted,
        )
        self._stores.sessions.touch(session.id, at)
        if ending.reply is not None and message_id is not None:
            reply = OutboundMessage(
                session.channel,
                session.chat_id,
                ending.reply,
                message_id,
                ending.kind,
                batch[-1].metadata,
                files=ending.files,
            )
            return await self._outbox.deliver(reply, live=live)
        if live is not None:
            await live.abandon()  # nothing to tell: what was shown goes
        return "sent"
