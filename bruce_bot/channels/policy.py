"""What every chat adapter decides the same way, whatever the platform it speaks to.

Who may talk to Bruce (the allowlist, config.yml's or, when the policy has an `AllowlistPort`, the
one the dashboard saved, asked for each message; then the people the owner approved, which the
policy asks its `PairingPort` about for each message: a change or an approval counts from the next
message, without a restart), what a stranger is told and how often (with pairing on, their one-time
pairing code, at most once per `PAIRING_REPLY_INTERVAL_SECONDS`; without it, once an hour that they
may not talk to Bruce: ten messages get one reply, and nothing of theirs is stored), the chat
commands answered without the model (`/new`, `/reminders`, `/help`...), and what a press on one of
Bruce's buttons gets. An adapter reads its platform's event into the plain values here
(`CommandCall`, `Press`), asks its `ChannelPolicy`, and turns the answer into its platform's calls;
the words are its own (`PolicyTexts`, the `says` of its commands). No SDK import here, so every
adapter, and every channel that follows, shares this one copy.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from bruce_bot.channels.base import InboxPort
from bruce_bot.channels.recent import Recent

log = structlog.get_logger(__name__)

STRANGER_REPLY_INTERVAL_SECONDS = 3600.0
# A stranger with a pairing code may ask for it again (they lost the message) after this long;
# more often, their messages get no reply, so a spammer cannot make Bruce talk.
PAIRING_REPLY_INTERVAL_SECONDS = 600.0
USED_BUTTONS_KEPT = 2000

RESTARTING = "I'm restarting right now. Please try again in a minute."
COMMAND_FAILED = "Sorry, that didn't work on my side. It has been logged; please try again."
# Answers to a button press (a toast or an ephemeral message: short, only the presser sees it).
PRESS_NOT_ALLOWED = "Sorry, only people my owner has allowed can use these buttons."
BUTTON_INACTIVE = "This button is no longer active."
PRESS_FAILED = "Sorry, that didn't work on my side. Please try again, or answer in words."
PAIRING_CODE = (
    "Hi! I'm a private assistant and only talk to people my owner has let in. Your pairing "
    "code is {code} (valid for {minutes} minutes). Send it to my owner: they approve it in my "
    "dashboard (People) or with `bruce pairing approve {code}`, and then I'll answer you."
)
PAIRING_FULL = (
    "Hi! I'm a private assistant and only talk to people my owner has let in. Too many people "
    "are waiting for my owner's approval right now; please try again later."
)
PAIRING_FAILED = (
    "Hi! I'm a private assistant and only talk to people my owner has let in. I couldn't make "
    "you a pairing code just now; please try again in a few minutes."
)

ChatId = str | int | None  # for the logs: whatever id the platform gave the chat
# A sender: a number on Telegram and Discord, text on Matrix ("@alice:example.org"). Pairing
# keeps numeric ids only, so a text id is never offered a code (Matrix does not pair yet).
UserId = int | str


@dataclass(frozen=True, slots=True)
class PolicyTexts:
    """The words of a policy's answers. `stranger` names the platform and where its user ids
    go in config.yml; "{user_id}" in it is replaced by the stranger's id."""

    stranger: str
    pairing_code: str = PAIRING_CODE  # "{code}" and "{minutes}" are filled in
    pairing_full: str = PAIRING_FULL
    pairing_failed: str = PAIRING_FAILED
    restarting: str = RESTARTING
    command_failed: str = COMMAND_FAILED
    press_not_allowed: str = PRESS_NOT_ALLOWED
    button_inactive: str = BUTTON_INACTIVE
    press_failed: str = PRESS_FAILED


# ---- who may talk ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PairingOffer:
    """A stranger's pairing code as they are shown it (`K7QM-3XPA`), and how long it is valid;
    `code` is None when too many strangers of the channel are waiting already."""

    code: str | None
    minutes_left: int = 0


class PairingPort(Protocol):
    """Who the owner let in besides config.yml, and the codes strangers are given (the core's
    pairing service, injected by parts.py: a channel never sees the database)."""

    async def is_approved(self, channel: str, user_id: UserId) -> bool:
        """Whether the owner approved `user_id` on `channel` (and did not revoke them)."""
        ...

    async def offer(
        self, channel: str, user_id: UserId, user_name: str, chat_id: str, username: str = ""
    ) -> PairingOffer:
        """The stranger's pairing code: their still-valid one, else a new one; `chat_id` is the
        conversation they are told in when approved, `user_name` the name they chose,
        `username` the platform's @username ("" when none)."""
        ...


class AllowlistPort(Protocol):
    """The allowlist in use (the dashboard's over config.yml's: settings/allowlists.py, injected by
    parts.py), read for each message."""

    async def allowed_user_ids(self, channel: str) -> frozenset[UserId]: ...


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a sender may go on; when not, `refusal` is what to tell them now (None: they
    were told within the hour, so say nothing)."""

    allowed: bool
    refusal: str | None = None


class StrangerThrottle:
    """When to tell a sender, once more, that Bruce will not answer them: once an interval,
    on the adapter's clock. Senders are forgotten once their interval is over, so it stays as
    small as the number of recent strangers."""

    def __init__(
        self, clock: Callable[[], float], interval: float = STRANGER_REPLY_INTERVAL_SECONDS
    ) -> None:
        self._clock = clock
        self._interval = interval
        self._told_at: dict[UserId, float] = {}

    def due(self, sender_id: UserId) -> bool:
        """True (and noted) when `sender_id` was not told within the interval."""
        now = self._clock()
        last = self._told_at.get(sender_id)
        if last is not None and now - last < self._interval:
            return False
        self._told_at = {sid: at for sid, at in self._told_at.items() if now - at < self._interval}
        self._told_at[sender_id] = now
        return True


class ChannelPolicy:
    """One adapter's allowlist, stranger throttle, chat commands and button presses."""

    def __init__(
        self,
        channel: str,
        allowed_user_ids: Iterable[UserId],
        commands: Sequence[Command],
        texts: PolicyTexts,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel
        self._allowed = frozenset(allowed_user_ids)
        self._texts = texts
        self._clock = clock
        self._throttle = StrangerThrottle(clock)
        self._pairing: PairingPort | None = None
        self._allowlist: AllowlistPort | None = None
        self.commands = ChatCommands(channel, commands, texts)
        self.presses = Presses(self, texts)

    def pair_with(self, pairing: PairingPort) -> None:
        """Strangers get a pairing code, and the people it let in are heard (parts.py calls
        this when `channels.<name>.pairing` is on)."""
        self._pairing = pairing
        self._throttle = StrangerThrottle(self._clock, PAIRING_REPLY_INTERVAL_SECONDS)

    @property
    def pairs(self) -> bool:
        """Whether strangers are offered a pairing code (rather than only refused)."""
        return self._pairing is not None

    def allow_from(self, allowlist: AllowlistPort) -> None:
        """Read the allowlist from `allowlist` for each message, not config.yml's once."""
        self._allowlist = allowlist

    async def _allowed_ids(self) -> frozenset[UserId]:
        if self._allowlist is None:
            return self._allowed
        try:
            return await self._allowlist.allowed_user_ids(self.channel)
        except Exception:
            # The database is away: config.yml's list meanwhile (the approved ones are not
            # heard either, see `allows`).
            log.exception("allowlist_read_failed", channel=self.channel)
            return self._allowed

    @property
    def allowed_users(self) -> int:
        """How many config.yml lets in (the approved ones are in the database)."""
        return len(self._allowed)

    async def allows(self, user_id: UserId | None) -> bool:
        """Whether `user_id` may talk: on the allowlist, or approved by the owner."""
        if user_id is None:
            return False
        if user_id in await self._allowed_ids():
            return True
        if self._pairing is None:
            return False
        try:
            return await self._pairing.is_approved(self.channel, user_id)
        except Exception:
            # The database is away: nobody new is let in meanwhile (config.yml's still are).
            log.exception("pairing_check_failed", channel=self.channel, user_id=user_id)
            return False

    async def admit(
        self, user_id: UserId, *, chat_id: ChatId = None, user_name: str = "", username: str = ""
    ) -> Admission:
        """Whether the sender of a message may be heard; a stranger is refused (with pairing
        on, given their pairing code)."""
        if await self.allows(user_id):
            return Admission(True)
        if self._pairing is None:
            reply = self._texts.stranger.format(user_id=user_id)
            return self.refuse(user_id, reply, chat_id=chat_id)
        if not self._throttle.due(user_id):
            log.debug("stranger_ignored", channel=self.channel, sender_id=user_id, chat_id=chat_id)
            return Admission(False)
        try:
            offer = await self._pairing.offer(
                self.channel,
                user_id,
                user_name,
                "" if chat_id is None else str(chat_id),
                username=username,
            )
        except Exception:
            log.exception("pairing_offer_failed", channel=self.channel, sender_id=user_id)
            return Admission(False, self._texts.pairing_failed)
        log.warning(
            "stranger_offered_pairing",
            channel=self.channel,
            sender_id=user_id,
            chat_id=chat_id,
            full=offer.code is None,
        )
        if offer.code is None:
            return Admission(False, self._texts.pairing_full)
        text = self._texts.pairing_code.format(code=offer.code, minutes=offer.minutes_left)
        return Admission(False, text)

    def refuse(self, sender_id: UserId, reply: str, *, chat_id: ChatId = None) -> Admission:
        """A sender Bruce may not answer (a stranger, or someone it cannot tell apart, such as
        a group speaking anonymously) gets `reply` once an interval, and nothing otherwise."""
        if not self._throttle.due(sender_id):
            log.debug(
                "stranger_ignored", channel=self.channel, sender_id=sender_id, chat_id=chat_id
            )
            return Admission(False)
        log.warning("stranger_refused", channel=self.channel, sender_id=sender_id, chat_id=chat_id)
        return Admission(False, reply)

    def warn_if_nobody_allowed(self) -> None:
        # config.yml's list: a list saved in Settings may let people in all the same (the hint
        # names it), and it may change at any message.
        if not self._allowed and self._pairing is None:
            log.warning(
                "allowlist_empty",
                channel=self.channel,
                hint=f"nobody can talk to Bruce on {self.channel} unless the dashboard's list "
                f"(Settings) names them: add user ids to channels.{self.channel}.allowed_user_ids"
                f" there or in config.yml, or turn on channels.{self.channel}.pairing",
            )


# ---- chat commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandCall:
    """A command someone sent: its name, the conversation, and what its answer may name."""

    name: str
    chat_id: str
    user_id: UserId
    user_name: str = ""
    in_group: bool = False
    bot_name: str = ""  # the bot's own @name on the platform


Says = Callable[[CommandCall], str]
Asks = Callable[[InboxPort, str, str], Awaitable[str]]  # (inbox, channel, chat_id) -> reply


@dataclass(frozen=True, slots=True)
class Command:
    """A chat command answered without the model: in the adapter's own words (`says`), or by
    the inbox (`asks`). `description` is what a platform's command menu shows."""

    name: str
    description: str
    says: Says | None = None
    asks: Asks | None = None

    def __post_init__(self) -> None:
        if (self.says is None) == (self.asks is None):
            raise ValueError(f"command {self.name!r} needs either `says` or `asks`")


async def _new_conversation(inbox: InboxPort, channel: str, chat_id: str) -> str:
    return await inbox.new_conversation(channel, chat_id)


async def _describe_reminders(inbox: InboxPort, channel: str, chat_id: str) -> str:
    return await inbox.describe_reminders(channel, chat_id)


NEW_CONVERSATION = Command(
    "new", "Start a new conversation (earlier messages are set aside)", asks=_new_conversation
)
REMINDERS = Command(
    "reminders", "List your scheduled reminders and briefings", asks=_describe_reminders
)
COMMAND_PREFIXES = ("/", "!")


class ChatCommands:
    """The commands of one channel, in the order its menu shows them."""

    def __init__(self, channel: str, commands: Sequence[Command], texts: PolicyTexts) -> None:
        self._channel = channel
        self._texts = texts
        self._commands = {command.name: command for command in commands}
        self.menu: tuple[Command, ...] = tuple(commands)
        self.names = frozenset(self._commands)

    def named_by(self, text: str) -> str | None:
        """`new` for a message that is only "/new" or "!new" (any case); None otherwise."""
        words = text.split()
        if len(words) != 1 or words[0][:1] not in COMMAND_PREFIXES:
            return None
        name = words[0][1:].lower()
        return name if name in self._commands else None

    async def handle(self, call: CommandCall, inbox: InboxPort | None) -> str:
        """The answer to `call` (a command of this channel); a failure is logged and answered
        with an apology, never raised."""
        command = self._commands[call.name]
        log.info(
            "chat_command",
            channel=self._channel,
            command=call.name,
            chat_id=call.chat_id,
            user_id=call.user_id,
        )
        try:
            if command.says is not None:
                return command.says(call)
            if inbox is None:
                return self._texts.restarting
            assert command.asks is not None
            return await command.asks(inbox, self._channel, call.chat_id)
        except Exception:
            log.exception(
                "chat_command_failed",
                channel=self._channel,
                command=call.name,
                chat_id=call.chat_id,
            )
            return self._texts.command_failed


# ---- button presses --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Press:
    """A tap on a button under one of Bruce's messages. `chat_id` is the conversation the
    message is in ("" when the platform did not say); `message_id` and `data` are None when the
    platform sent none."""

    user_id: UserId | None
    chat_id: str
    message_id: int | None
    data: str | None


@dataclass(frozen=True, slots=True)
class PressAnswer:
    """What a press gets: `notice` shown to the presser alone (None: nothing, the press is
    just acknowledged); `reply`, when there is one, is the outcome: the buttons go and it is
    sent in answer."""

    notice: str | None
    reply: str | None = None


class Presses:
    """Decides what a press gets. A message whose buttons were answered once is remembered:
    a second tap (a double tap, a client that has not redrawn yet, the platform sending the
    press again, a press answered concurrently) is told the button is no longer active."""

    def __init__(self, policy: ChannelPolicy, texts: PolicyTexts) -> None:
        self._policy = policy
        self._texts = texts
        self._used: Recent[tuple[str, int]] = Recent(USED_BUTTONS_KEPT)

    async def answer(self, press: Press, inbox: InboxPort | None) -> PressAnswer:
        channel, texts = self._policy.channel, self._texts
        if not await self._policy.allows(press.user_id):
            log.info(
                "stranger_press_refused",
                channel=channel,
                sender_id=press.user_id,
                chat_id=press.chat_id,
            )
            return PressAnswer(texts.press_not_allowed)
        if inbox is None:
            return PressAnswer(texts.restarting)
        if not press.chat_id or press.message_id is None or not press.data:
            return PressAnswer(texts.button_inactive)
        used = (press.chat_id, press.message_id)
        if used in self._used:
            return PressAnswer(texts.button_inactive)
        self._used.add(used)  # before asking: a second tap meanwhile finds it used
        try:
            by = f"{channel}:{press.user_id}"
            reply = await inbox.choose(channel, press.chat_id, press.data, by)
        except Exception:
            self._used.discard(used)  # may be tried again
            log.exception("press_failed", channel=channel, chat_id=press.chat_id, data=press.data)
            return PressAnswer(texts.press_failed)
        log.info(
            "button_pressed",
            channel=channel,
            chat_id=press.chat_id,
            data=press.data,
            known=reply is not None,
        )
        if reply is None:
            self._used.discard(used)
            return PressAnswer(texts.button_inactive)
        return PressAnswer(None, reply)
