"""Pairing: how a stranger on a chat platform gets in without the owner editing config.yml.

A stranger who writes to Bruce is given a one-time code (8 characters of an alphabet without
look-alikes, shown `K7QM-3XPA`), valid for `CODE_VALID_FOR`; a channel has at most
`MAX_PENDING` strangers waiting, and the same stranger asking again gets the code they have.
(Ten, for half an hour: a few throwaway accounts cannot fill the queue for long, and the owner
has time to approve a code sent by another way.) The owner is shown who asked by what the
platform vouches for first — the numeric user id and the @username, unique there — and the
display name last, marked as the stranger's own choice (`who`): anyone can call themself
"Alice".
The owner approves the code in the dashboard (People) or with `bruce pairing approve CODE`:
the code is taken away (it works once), the person is stored in `approved_users`, the
channels hear them from their next message on (they ask `is_approved` for each message of
someone not in config.yml, so an approval made in another process counts too), and they are
told "You're in" in the chat they wrote from, through the outbox (from the CLI the reply is
stored and the daemon's redelivery sends it within a minute). Codes are read case-insensitively,
with or without the dash. People on the allowlist (config.yml's `allowed_user_ids`, or the
list saved in Settings, which wins) are listed too, but only the allowlist lets them out.

`PairingService` is the channels' `PairingPort` (channels/policy.py) and what the web API and
the CLI call; it has no SDK and no web in it.
"""

from __future__ import annotations

import math
import secrets
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

import structlog

from bruce_bot import platforms
from bruce_bot.channels.policy import AllowlistPort, PairingOffer, UserId
from bruce_bot.domain import OutboundMessage, SessionKey, utcnow
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.storage.pairing import ApprovedUser, PendingCode
from bruce_bot.storage.stores import Stores

log = structlog.get_logger(__name__)

# No 0/O, 1/I/L, 5/S or 8/B: a code read aloud or copied by hand comes out right.
ALPHABET = "ACDEFGHJKMNPQRTUVWXY234679"
CODE_LENGTH = 8
CODE_VALID_FOR = timedelta(minutes=30)
MAX_PENDING = 10
NAME_SHOWN_CHARS = 64
WELCOME = "You're in — my owner approved you. Say hi!"
Source = Literal["config", "dashboard", "cli"]


class PairingError(Exception):
    """A request the owner can fix (a code that is malformed or no longer valid, a person who
    is in config.yml); the message says what to do. `not_found` tells the API a 404 apart."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def shown(code: str) -> str:
    """`K7QMX3PA` as people see it: `K7QM-X3PA`."""
    half = len(code) // 2
    return f"{code[:half]}-{code[half:]}"


def normalised(text: str) -> str:
    """A code as typed (any case, a dash or spaces anywhere) in the form it is stored in;
    raises PairingError naming what is wrong."""
    code = "".join(text.split()).replace("-", "").upper()
    wrong = sorted({char for char in code if char not in ALPHABET})
    if len(code) != CODE_LENGTH or wrong:
        what = f"it has {len(code)} letters and digits" if len(code) != CODE_LENGTH else ""
        if wrong:
            what = f"{what}{' and ' if what else ''}'{''.join(wrong)[:20]}' never appear in codes"
        raise PairingError(
            f"'{text.strip()[:40]}' is not a pairing code: {what}. A code has {CODE_LENGTH} "
            f"letters and digits, like {shown('K7QMX3PA')}; copy it from the stranger's message."
        )
    return code


def _printable(text: str) -> str:
    """`text` without control and formatting characters (newlines, right-to-left overrides,
    zero-width joiners) and cut: a name is shown, never obeyed or laid out."""
    kept = "".join(
        " " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c
        for c in text
        if unicodedata.category(c) != "Cf"
    )
    kept = " ".join(kept.split())
    return kept if len(kept) <= NAME_SHOWN_CHARS else kept[: NAME_SHOWN_CHARS - 1] + "…"


def _ids(ids: Iterable[UserId]) -> frozenset[UserId]:
    return frozenset(ids)


def platform_user_id(text: str) -> UserId:
    """A user id as typed or sent in a URL: Telegram's and Discord's numbers as numbers, a
    Matrix or Slack id (never all digits) as it is; ValueError for an empty one."""
    text = text.strip()
    if not text:
        raise ValueError("an empty user id")
    return int(text) if text.isdigit() else text


def who(user_id: int | str, username: str = "", name: str = "") -> str:
    """Someone as the owner should read them: `6666 @mallory — name they chose: “Mallory”`. The
    id and @username (the platform's, unique there) come first; the display name, which anyone
    can set to anything, last and marked as theirs (left out when it only repeats the others)."""
    handle = _printable(username).lstrip("@")
    parts = [str(user_id), *([f"@{handle}"] if handle else [])]
    chosen = _printable(name)
    if chosen and chosen not in (str(user_id), handle, f"@{handle}"):
        return f"{' '.join(parts)} — name they chose: “{chosen}”"
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Person:
    """Someone allowed on a channel: from config.yml (`source` "config", `since` None) or
    approved here (`source` "dashboard" or "cli")."""

    channel: str
    user_id: UserId  # a number on Telegram and Discord, text on Matrix and Slack
    name: str
    source: Source
    since: datetime | None
    username: str = ""

    @property
    def revocable(self) -> bool:
        return self.source != "config"

    @property
    def label(self) -> str:
        return who(self.user_id, self.username, self.name)


@dataclass(frozen=True, slots=True)
class Sender:
    """How this process sends a welcome: its outbox, through the channels it runs. A channel
    another process runs (or none, in the CLI) gets the welcome stored, and a redelivery sends
    it."""

    outbox: Outbox
    channels: frozenset[str]

    def sends(self, channel: str) -> bool:
        return channel in self.channels


class PairingService:
    def __init__(
        self,
        stores: Stores,
        allowlists: Mapping[str, Sequence[int | str]],
        *,
        sender: Sender | None = None,
        clock: Callable[[], datetime] = utcnow,
        enabled: Sequence[str] | None = None,
        allowlist: AllowlistPort | None = None,
    ) -> None:
        """`allowlists`: config.yml's `allowed_user_ids` per channel; `sender`: how this process
        sends the welcome (None in the CLI: it is stored, and the daemon's redelivery sends it);
        `enabled`: the channels with pairing on (default: every platform); `allowlist`: the
        allowlists in use (the dashboard's over `allowlists`)."""
        self._stores = stores
        self._allowlists = {name: _ids(ids) for name, ids in allowlists.items()}
        self._sender = sender
        self._clock = clock
        self.enabled = tuple(platforms.names() if enabled is None else enabled)
        self._allowlist = allowlist

    async def _allowed(self, channel: str) -> frozenset[UserId]:
        if self._allowlist is None:
            return self._allowlists.get(channel, frozenset())
        return _ids(await self._allowlist.allowed_user_ids(channel))

    # ---- the channels' port ----------------------------------------------------------------

    async def is_approved(self, channel: str, user_id: UserId) -> bool:
        return await self._stores.pairing.is_approved(channel, user_id)

    async def offer(
        self, channel: str, user_id: UserId, user_name: str, chat_id: str, username: str = ""
    ) -> PairingOffer:
        now = self._clock()
        offered = await self._stores.pairing.offer(
            channel,
            user_id,
            user_name,
            chat_id,
            now=now,
            valid_for=CODE_VALID_FOR,
            max_pending=MAX_PENDING,
            new_code=new_code,
            username=username,
        )
        code = offered.code
        if code is None:
            log.warning("pairing_full", channel=channel, sender_id=user_id, max=MAX_PENDING)
            return PairingOffer(None)
        if offered.fresh:
            log.info("pairing_code_made", channel=channel, sender_id=user_id, chat_id=chat_id)
        minutes = max(1, math.ceil((code.expires_at - now).total_seconds() / 60))
        return PairingOffer(shown(code.code), minutes)

    # ---- the owner's side ------------------------------------------------------------------

    async def pending(self) -> list[PendingCode]:
        return await self._stores.pairing.pending(self._clock())

    async def people(self) -> list[Person]:
        """Everyone allowed: config.yml's first, then those approved, per channel."""
        allowed = {channel: await self._allowed(channel) for channel in sorted(self._allowlists)}
        people = [
            Person(channel, user_id, "", "config", None)
            for channel, ids in allowed.items()
            for user_id in sorted(ids)
        ]
        for approved in await self._stores.pairing.approved():
            if approved.user_id not in allowed.get(approved.channel, ()):
                people.append(
                    Person(
                        approved.channel,
                        approved.user_id,
                        approved.name,
                        cast(Source, approved.approved_by),
                        approved.approved_at,
                        approved.username,
                    )
                )
        return people

    async def approve(self, text: str, *, by: str) -> ApprovedUser:
        """Let the holder of the code in and tell them; raises PairingError when the code is
        malformed or not valid (any more)."""
        code = normalised(text)
        result = await self._stores.pairing.approve(code, now=self._clock(), by=by)
        if result is None:
            raise _no_such(code)
        pending, person = result
        log.info("pairing_approved", channel=person.channel, user_id=person.user_id, by=by)
        await self._welcome(pending)
        return person

    async def deny(self, text: str) -> PendingCode:
        code = normalised(text)
        pending = await self._stores.pairing.deny(code, now=self._clock())
        if pending is None:
            raise _no_such(code)
        log.info("pairing_denied", channel=pending.channel, user_id=pending.user_id)
        return pending

    async def revoke(self, channel: str, user_id: UserId) -> ApprovedUser:
        if user_id in await self._allowed(channel):
            raise PairingError(
                f"{channel} user {user_id} is on the allowlist: channels.{channel}."
                "allowed_user_ids in config.yml, or the list saved in Settings (Chat platforms) "
                "which wins over it. Remove the id there to shut them out."
            )
        person = await self._stores.pairing.revoke(channel, user_id)
        if person is None:
            raise PairingError(
                f"{channel} user {user_id} was not approved, so there is nothing to revoke "
                "(`bruce pairing list` shows who is).",
                not_found=True,
            )
        log.info("pairing_revoked", channel=channel, user_id=user_id)
        return person

    async def _welcome(self, pending: PendingCode) -> None:
        """ "You're in", in the chat the stranger wrote from; a failure is logged (they are
        approved all the same, and hear from Bruce when they write)."""
        if not pending.chat_id:
            return
        try:
            session = await self._stores.sessions.get_or_create(
                SessionKey(pending.channel, pending.chat_id)
            )
            message_id = await self._stores.messages.add_outbound(session.id, WELCOME, "notice")
            if self._sender is not None and self._sender.sends(pending.channel):
                await self._sender.outbox.deliver(
                    OutboundMessage(pending.channel, pending.chat_id, WELCOME, message_id, "notice")
                )
        except Exception:
            log.exception("pairing_welcome_failed", channel=pending.channel)


def _no_such(code: str) -> PairingError:
    return PairingError(
        f"no pending pairing code {shown(code)}: it was used, denied or has expired (codes "
        f"last {int(CODE_VALID_FOR.total_seconds() // 60)} minutes). Ask the person to write "
        "to Bruce again for a new one.",
        not_found=True,
    )
