"""The inbox port: `Gateway`, the one door through which channel adapters reach the core.

Adapters see only `InboxPort` (channels/base.py): submit a message, start a new conversation,
list reminders, follow a chat that changed its id, answer a pressed button. This class
implements it by composing the inbox and the stores, so adapters never depend on storage or
the agent.

The `InboxPort` protocol itself stays in channels/base.py, next to the rest of the channel
contract: the adapters are its users, and a protocol belongs with the side that needs it.
Moving it here would make every adapter import `bruce_bot.messaging` (which
tests/unit/test_architecture.py forbids) and, through it, storage; kept there, the dependency
points inwards: messaging knows the channels' contract, the channels know nothing of messaging.

A chat that changed its id (a Telegram group upgraded to a supergroup) keeps its conversation:
the session's chat_id becomes the new id, and its scheduled tasks are addressed to the new id.
If the new id already has a session (someone talked to Bruce in the supergroup before the
upgrade was known), that session stays the chat's conversation: the old session is kept, under
the old id, as history, and its tasks move to the new session. Moving twice is harmless (the
second time there is nothing left under the old id).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from bruce_bot.domain import InboundMessage, SessionKey, Submission
from bruce_bot.messaging.inbox import Inbox
from bruce_bot.storage.stores import Stores

log = structlog.get_logger(__name__)

RemindersDescriber = Callable[[int], Awaitable[str]]
# (session id, the pressed button's data, who pressed it: "telegram:42") -> the reply to show,
# None when the data is unknown.
ChoiceAnswerer = Callable[[int, str, str], Awaitable[str | None]]


class Gateway:
    def __init__(
        self,
        inbox: Inbox,
        stores: Stores,
        reminders: RemindersDescriber,
        choices: ChoiceAnswerer | None = None,
    ) -> None:
        self._inbox = inbox
        self._stores = stores
        self._reminders = reminders
        self._choices = choices

    async def submit(self, message: InboundMessage) -> Submission:
        return await self._inbox.submit(message)

    async def new_conversation(self, channel: str, chat_id: str) -> str:
        session = await self._stores.sessions.get_or_create(SessionKey(channel, chat_id))
        start = await self._stores.messages.last_settled_id(session.id)
        await self._stores.sessions.set_context_start(session.id, start)
        log.info("conversation_reset", session_id=session.id, context_start_message_id=start)
        return "Started a new conversation: I've set the earlier messages aside. What's next?"

    async def migrate_chat(self, channel: str, old_chat_id: str, new_chat_id: str) -> None:
        if old_chat_id == new_chat_id:
            return
        sessions = self._stores.sessions
        moved = await sessions.move_chat(SessionKey(channel, old_chat_id), new_chat_id)
        target = None
        if moved is None:
            old = await sessions.find(SessionKey(channel, old_chat_id))
            existing = await sessions.find(SessionKey(channel, new_chat_id))
            target = existing.id if old is not None and existing is not None else None
        tasks = await self._stores.tasks.move_chat(
            channel, old_chat_id, new_chat_id, to_session=target
        )
        log.info(
            "chat_migrated",
            channel=channel,
            old_chat_id=old_chat_id,
            new_chat_id=new_chat_id,
            session_id=moved.id if moved is not None else target,
            kept_apart=target is not None,
            tasks=tasks,
        )

    async def describe_reminders(self, channel: str, chat_id: str) -> str:
        session = await self._stores.sessions.get_or_create(SessionKey(channel, chat_id))
        return await self._reminders(session.id)

    async def choose(self, channel: str, chat_id: str, data: str, by: str = "") -> str | None:
        session = await self._stores.sessions.find(SessionKey(channel, chat_id))
        if session is None or self._choices is None:
            return None
        reply = await self._choices(session.id, data, by)
        log.info("choice_answered", session_id=session.id, data=data, known=reply is not None)
        return reply
