"""What Slack sends Bruce, taken in: events to the inbox, button presses to the policy.

The same for Socket Mode (socket.py) and the Events API (webhook.py): each hands one event
callback (`event`) or one interaction (`press`) here and acknowledges it to Slack only once
this returned. `event` returns when the message is stored (or was not for Bruce, or was
refused); it raises `NotTaken` while intake is stopping and the storage fault while the
database cannot take it (faults.py): then Slack must not get its acknowledgement, and sends the
event again. A message in a thread without a mention is for Bruce when Bruce is in that thread:
it posted there (`SlackSender.threads`), was mentioned there since the start, or, after a
restart, `conversations.replies` shows one of its messages there.
"""

from __future__ import annotations

from typing import Any

import structlog

from bruce_bot.channels.base import InboxPort
from bruce_bot.channels.held import unavailable
from bruce_bot.channels.policy import BUTTON_INACTIVE, ChannelPolicy, CommandCall, Press
from bruce_bot.channels.recent import Recent
from bruce_bot.channels.slack.address import SlackAddress, ts_number
from bruce_bot.channels.slack.blocks import read_press
from bruce_bot.channels.slack.events import Incoming, Me, read
from bruce_bot.channels.slack.files import attachments_of
from bruce_bot.channels.slack.sending import SlackSender
from bruce_bot.channels.slack.texts import EMPTY_MENTION_REPLY, NOT_STORED_REPLY, ONLY_TEXT_REPLY
from bruce_bot.domain import InboundMessage

log = structlog.get_logger(__name__)

SLACK_CHANNEL = "slack"
REPLIES_LOOKED_AT = 200


class NotTaken(Exception):
    """Intake is stopping (or not ready): the event is not stored; Slack must send it again."""


class Intake:
    def __init__(self, policy: ChannelPolicy, sender: SlackSender) -> None:
        self._policy = policy
        self._out = sender
        self.me: Me | None = None  # known once `auth.test` answered
        self.inbox: InboxPort | None = None  # None: stopping
        self._not_in: Recent[str] = Recent()  # threads looked up where Bruce was not
        # chat id -> the ts of its newest message taken in, not yet marked as seen (typing)
        self.unseen: dict[str, str] = {}

    async def event(self, body: dict[str, Any]) -> None:
        """One `event_callback` (see the module docstring)."""
        event, me = body.get("event"), self.me
        if not isinstance(event, dict):
            return
        if me is None or self.inbox is None:
            raise NotTaken("Slack intake is not running")
        incoming = read(event, me)
        if incoming is None:
            return
        if incoming.needs_thread and not await self._bruce_in(incoming.address, me):
            return
        await self._take_in(incoming)

    async def _take_in(self, incoming: Incoming) -> None:
        address, chat_id = incoming.address, str(incoming.address)
        admission = await self._policy.admit(
            incoming.user_id, chat_id=chat_id, user_name=incoming.user_name
        )
        if admission.refusal is not None:
            await self._out.say(address, admission.refusal)
        if not admission.allowed:
            return
        inbox = self.inbox
        if inbox is None:
            raise NotTaken("Slack intake stopped")
        command = self._policy.commands.named_by(incoming.text)
        if command is not None:
            call = CommandCall(
                command, chat_id, incoming.user_id, incoming.user_name, not incoming.direct
            )
            await self._out.say(address, await self._policy.commands.handle(call, inbox))
            return
        attachments = attachments_of(incoming.files)
        if not incoming.text and not attachments:
            reply = ONLY_TEXT_REPLY if incoming.files or incoming.direct else EMPTY_MENTION_REPLY
            await self._out.say(address, reply)
            return
        inbound = InboundMessage(
            SLACK_CHANNEL,
            chat_id,
            incoming.text,
            user_id=incoming.user_id,
            user_name=incoming.user_name,
            platform_message_id=incoming.ts,
            metadata={} if incoming.direct else {"group": True},
            attachments=attachments,
        )
        await self._submit(inbox, inbound, address)

    async def _submit(
        self, inbox: InboxPort, inbound: InboundMessage, address: SlackAddress
    ) -> None:
        try:
            submission = await inbox.submit(inbound)
        except Exception as exc:
            if unavailable(exc) is not None:
                raise  # not acknowledged: Slack sends it again
            log.exception("slack_submit_failed", chat_id=inbound.chat_id, error=repr(exc))
            await self._out.say(address, NOT_STORED_REPLY)
            return
        if address.thread_ts:
            self._out.threads.add(inbound.chat_id)  # Bruce answers there: it is in the thread
        if submission.accepted and inbound.platform_message_id:
            self.unseen[inbound.chat_id] = inbound.platform_message_id
        if not submission.accepted:
            log.info(
                "slack_message_not_accepted",
                chat_id=inbound.chat_id,
                ts=inbound.platform_message_id,
                reason=submission.reason,
            )
            if submission.reason == "stopping":
                raise NotTaken("the inbox is stopping")

    async def _bruce_in(self, address: SlackAddress, me: Me) -> bool:
        chat_id = str(address)
        if chat_id in self._out.threads:
            return True
        if chat_id in self._not_in or self._out.client is None or not address.thread_ts:
            return False
        try:
            answer = await self._out.client.conversations_replies(
                channel=address.channel, ts=address.thread_ts, limit=REPLIES_LOOKED_AT
            )
        except Exception as exc:
            log.info("slack_thread_not_read", chat_id=chat_id, error=repr(exc))
            return False
        messages = answer.get("messages") or []
        mine = any(
            isinstance(m, dict)
            and (m.get("user") == me.user_id or (me.bot_id and m.get("bot_id") == me.bot_id))
            for m in messages
        )
        (self._out.threads if mine else self._not_in).add(chat_id)
        return mine

    async def press(self, payload: dict[str, Any]) -> None:
        """A `block_actions` interaction: the policy decides; the buttons go and the outcome
        is posted in the thread, or the presser alone is told why not."""
        pressed = read_press(payload)
        if pressed is None:
            return
        address, message_ts = pressed.address, pressed.message_ts
        press = Press(
            pressed.user_id,
            str(address) if address is not None else "",
            ts_number(message_ts) if message_ts else None,
            pressed.data,
        )
        answer = await self._policy.presses.answer(press, self.inbox)
        if answer.reply is None or address is None or message_ts is None:
            if address is not None and pressed.user_id:
                await self._out.whisper(address, pressed.user_id, answer.notice or BUTTON_INACTIVE)
            return
        try:
            await self._out.update(address, message_ts, pressed.text, pressed.blocks)
        except Exception as exc:
            log.info("slack_buttons_not_removed", chat_id=str(address), error=repr(exc))
        await self._out.say(address, answer.reply)
