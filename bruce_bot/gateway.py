"""The gateway: the single port through which channel adapters reach Bruce's core.

Adapters see only `InboxPort` (channels/base.py): submit a message, start a new conversation,
list reminders. This class implements it by composing the inbox and the stores, so adapters
never depend on storage or the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from bruce_bot.channels.base import Submission
from bruce_bot.domain import InboundMessage, SessionKey
from bruce_bot.inbox import Inbox
from bruce_bot.storage.stores import Stores

log = structlog.get_logger(__name__)

RemindersDescriber = Callable[[int], Awaitable[str]]


class Gateway:
    def __init__(self, inbox: Inbox, stores: Stores, reminders: RemindersDescriber) -> None:
        self._inbox = inbox
        self._stores = stores
        self._reminders = reminders

    async def submit(self, message: InboundMessage) -> Submission:
        return await self._inbox.submit(message)

    async def new_conversation(self, channel: str, chat_id: str) -> str:
        session = await self._stores.sessions.get_or_create(SessionKey(channel, chat_id))
        start = await self._stores.messages.last_settled_id(session.id)
        await self._stores.sessions.set_context_start(session.id, start)
        log.info("conversation_reset", session_id=session.id, context_start_message_id=start)
        return "Started a new conversation: I've set the earlier messages aside. What's next?"

    async def describe_reminders(self, channel: str, chat_id: str) -> str:
        session = await self._stores.sessions.get_or_create(SessionKey(channel, chat_id))
        return await self._reminders(session.id)
