"""The channel policy on its own: the allowlist, the stranger throttle, the chat commands and
button presses, as every adapter (Telegram, Discord, those to come) gets them."""

from __future__ import annotations

import asyncio

import grimp
import pytest
from structlog.testing import capture_logs

from bruce_bot.channels.policy import (
    BUTTON_INACTIVE,
    COMMAND_FAILED,
    NEW_CONVERSATION,
    PAIRING_FULL,
    PAIRING_REPLY_INTERVAL_SECONDS,
    PRESS_FAILED,
    PRESS_NOT_ALLOWED,
    REMINDERS,
    RESTARTING,
    Admission,
    ChannelPolicy,
    Command,
    CommandCall,
    PairingOffer,
    PolicyTexts,
    Press,
    PressAnswer,
)
from bruce_bot.channels.recent import Recent
from bruce_bot.domain import InboundMessage, Submission

OWNER, FRIEND, STRANGER = 1001, 1002, 6666
STRANGER_TEXT = "Sorry, only my owner's people. Your id is {user_id}."
HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeInbox:
    """The InboxPort calls a policy makes, recorded; `choose` may be held or made to fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.choices: dict[str, str] = {"confirm:7": "Confirmed."}
        self.fail = False
        self.hold: asyncio.Event | None = None

    async def submit(self, message: InboundMessage) -> Submission:
        raise AssertionError("the policy never submits")

    async def new_conversation(self, channel: str, chat_id: str) -> str:
        self.calls.append(("new", channel, chat_id))
        if self.fail:
            raise RuntimeError("database gone")
        return "Started a new conversation."

    async def describe_reminders(self, channel: str, chat_id: str) -> str:
        self.calls.append(("reminders", channel, chat_id))
        return "No reminders."

    async def migrate_chat(self, channel: str, old_chat_id: str, new_chat_id: str) -> None:
        raise AssertionError("the policy never migrates chats")

    async def choose(self, channel: str, chat_id: str, data: str, by: str = "") -> str | None:
        self.calls.append(("choose", channel, chat_id, data))
        if self.hold is not None:
            await self.hold.wait()
        if self.fail:
            raise RuntimeError("database gone")
        return self.choices.get(data)


def greeting(call: CommandCall) -> str:
    where = "group" if call.in_group else "chat"
    return f"Hi {call.user_name}, this is @{call.bot_name} in a {where}."


HELLO = Command("hello", "Say hello", says=greeting)


def policy(allowed: tuple[int, ...] = (OWNER, FRIEND), clock: Clock | None = None) -> ChannelPolicy:
    return ChannelPolicy(
        "chatland",
        allowed,
        (HELLO, NEW_CONVERSATION, REMINDERS),
        PolicyTexts(stranger=STRANGER_TEXT),
        clock=clock or Clock(),
    )


def call(name: str, **fields: object) -> CommandCall:
    return CommandCall(name, "chat-9", OWNER, **fields)  # type: ignore[arg-type]


# ---- who may talk ----------------------------------------------------------------------------


async def test_an_allowed_user_is_admitted_and_nothing_is_said() -> None:
    admission = await policy().admit(OWNER, chat_id="chat-9")
    assert admission.allowed and admission.refusal is None


async def test_a_stranger_is_told_once_an_hour_naming_their_id() -> None:
    clock = Clock()
    chatland = policy(clock=clock)
    first = await chatland.admit(STRANGER)
    assert not first.allowed and first.refusal == STRANGER_TEXT.format(user_id=STRANGER)
    clock.now += HOUR - 1
    assert (await chatland.admit(STRANGER)).refusal is None  # still refused, in silence
    assert not (await chatland.admit(STRANGER)).allowed
    clock.now += 1
    assert (await chatland.admit(STRANGER)).refusal is not None


async def test_each_stranger_has_their_own_hour() -> None:
    chatland = policy()
    assert (await chatland.admit(STRANGER)).refusal is not None
    assert (await chatland.admit(STRANGER + 1)).refusal is not None
    assert (await chatland.admit(STRANGER)).refusal is None


async def test_a_sender_refused_for_another_reason_counts_against_the_same_hour() -> None:
    chatland = policy()
    anonymous = chatland.refuse(STRANGER, "I can't tell who you are.")
    assert anonymous == Admission(False, "I can't tell who you are.")
    assert (await chatland.admit(STRANGER)).refusal is None


async def test_an_empty_allowlist_admits_nobody_and_says_so_at_start() -> None:
    chatland = policy(allowed=())
    with capture_logs() as logs:
        chatland.warn_if_nobody_allowed()
    assert not (await chatland.admit(OWNER)).allowed
    assert not await chatland.allows(None)
    (warning,) = [entry for entry in logs if entry["event"] == "allowlist_empty"]
    assert warning["log_level"] == "warning" and warning["channel"] == "chatland"
    assert "channels.chatland.allowed_user_ids" in warning["hint"]


class FakePairing:
    """The PairingPort a policy asks (the real one, over the database:
    test_bruce_bot_pairing.py)."""

    def __init__(self) -> None:
        self.approved: set[int] = set()
        self.offers: list[tuple[str, int, str, str]] = []
        self.full = False
        self.fail = False

    async def is_approved(self, channel: str, user_id: int) -> bool:
        if self.fail:
            raise RuntimeError("database gone")
        return user_id in self.approved

    async def offer(
        self, channel: str, user_id: int, user_name: str, chat_id: str, username: str = ""
    ) -> PairingOffer:
        self.offers.append((channel, user_id, user_name, chat_id, username))
        return PairingOffer(None) if self.full else PairingOffer("K7QM-X3PA", 60)


async def test_with_pairing_a_stranger_gets_a_code_at_most_every_ten_minutes() -> None:
    clock, pairing = Clock(), FakePairing()
    chatland = policy(clock=clock)
    chatland.pair_with(pairing)
    first = await chatland.admit(STRANGER, chat_id=42, user_name="Mallory", username="mal")
    assert not first.allowed
    assert (
        first.refusal is not None and "K7QM-X3PA" in first.refusal and "60 minutes" in first.refusal
    )
    assert "bruce pairing approve K7QM-X3PA" in first.refusal
    assert pairing.offers == [("chatland", STRANGER, "Mallory", "42", "mal")]
    assert (await chatland.admit(STRANGER)).refusal is None  # a flood gets no more replies
    clock.now += PAIRING_REPLY_INTERVAL_SECONDS
    assert (await chatland.admit(STRANGER)).refusal is not None
    assert len(pairing.offers) == 2


async def test_with_pairing_an_approved_person_is_heard_and_may_press_buttons() -> None:
    pairing = FakePairing()
    chatland = policy(allowed=())
    chatland.pair_with(pairing)
    assert not await chatland.allows(STRANGER)
    pairing.approved.add(STRANGER)
    assert (await chatland.admit(STRANGER)) == Admission(True)
    press = Press(STRANGER, "chat-9", 5, "confirm:7")
    assert (await chatland.presses.answer(press, FakeInbox())).reply == "Confirmed."
    pairing.approved.clear()  # revoked: shut out from the next message on
    assert not (await chatland.admit(STRANGER)).allowed


async def test_with_pairing_a_full_channel_says_later_and_a_broken_store_admits_no_one_new() -> (
    None
):
    pairing = FakePairing()
    chatland = policy()
    chatland.pair_with(pairing)
    pairing.full = True
    assert (await chatland.admit(STRANGER)).refusal == PAIRING_FULL
    pairing.fail = True
    with capture_logs() as logs:
        assert (await chatland.admit(STRANGER + 1)).allowed is False
        assert await chatland.allows(OWNER)  # config.yml's people still are
    assert any(entry["event"] == "pairing_check_failed" for entry in logs)


class FakeAllowlist:
    """The AllowlistPort a policy asks (the real one, over `settings`:
    integration/dashboard/test_live_allowlists.py)."""

    def __init__(self, ids: set[int]) -> None:
        self.ids = ids
        self.fail = False

    async def allowed_user_ids(self, channel: str) -> frozenset[int]:
        if self.fail:
            raise RuntimeError("database gone")
        return frozenset(self.ids)


async def test_a_live_allowlist_is_read_for_each_message_beside_the_approved_people() -> None:
    allowlist, pairing = FakeAllowlist({FRIEND}), FakePairing()
    chatland = policy(allowed=(OWNER,))
    chatland.allow_from(allowlist)
    chatland.pair_with(pairing)
    assert not await chatland.allows(OWNER)  # the saved list wins over config.yml's
    assert await chatland.allows(FRIEND)
    allowlist.ids.add(STRANGER)  # added in the dashboard: heard from the next message
    assert (await chatland.admit(STRANGER)) == Admission(True)
    pairing.approved.add(OWNER)  # approved by pairing: heard whatever the list says
    assert await chatland.allows(OWNER)
    allowlist.fail = True
    pairing.approved.clear()
    with capture_logs() as logs:
        assert await chatland.allows(OWNER)  # the list unreadable: config.yml's meanwhile
        assert not await chatland.allows(FRIEND)
    assert any(entry["event"] == "allowlist_read_failed" for entry in logs)


def test_with_pairing_an_empty_allowlist_does_not_warn() -> None:
    chatland = policy(allowed=())
    chatland.pair_with(FakePairing())
    with capture_logs() as logs:
        chatland.warn_if_nobody_allowed()
    assert not [entry for entry in logs if entry["event"] == "allowlist_empty"]


def test_a_filled_allowlist_does_not_warn() -> None:
    with capture_logs() as logs:
        policy().warn_if_nobody_allowed()
    assert logs == []


# ---- chat commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("/new", "new"),
        ("!new", "new"),
        ("  /REMINDERS ", "reminders"),
        ("/hello", "hello"),
        ("/new please", None),
        ("new", None),
        ("/start", None),  # not a command of this channel
        ("", None),
    ],
)
def test_a_command_is_a_whole_message_naming_a_known_command(text: str, name: str | None) -> None:
    assert policy().commands.named_by(text) == name


def test_the_menu_keeps_the_order_the_adapter_gave() -> None:
    commands = policy().commands
    assert [command.name for command in commands.menu] == ["hello", "new", "reminders"]
    assert commands.names == {"hello", "new", "reminders"}


async def test_a_command_in_the_adapters_words_needs_no_inbox() -> None:
    answer = await policy().commands.handle(
        call("hello", user_name="Ada", in_group=True, bot_name="bruce_bot"), None
    )
    assert answer == "Hi Ada, this is @bruce_bot in a group."


async def test_inbox_commands_ask_the_inbox_for_this_channel_and_chat() -> None:
    inbox = FakeInbox()
    commands = policy().commands
    assert await commands.handle(call("new"), inbox) == "Started a new conversation."
    assert await commands.handle(call("reminders"), inbox) == "No reminders."
    assert inbox.calls == [("new", "chatland", "chat-9"), ("reminders", "chatland", "chat-9")]


async def test_an_inbox_command_while_restarting_says_so() -> None:
    assert await policy().commands.handle(call("new"), None) == RESTARTING


async def test_a_failing_command_is_logged_and_answered_with_an_apology() -> None:
    inbox = FakeInbox()
    inbox.fail = True
    with capture_logs() as logs:
        answer = await policy().commands.handle(call("new"), inbox)
    assert answer == COMMAND_FAILED
    (failed,) = [entry for entry in logs if entry["event"] == "chat_command_failed"]
    assert failed["command"] == "new" and failed["chat_id"] == "chat-9"


def test_a_command_answers_in_words_or_through_the_inbox_not_both() -> None:
    with pytest.raises(ValueError, match="says"):
        Command("odd", "Neither")
    with pytest.raises(ValueError, match="says"):
        Command("odd", "Both", says=greeting, asks=NEW_CONVERSATION.asks)


# ---- button presses --------------------------------------------------------------------------


def press(user_id: int | None = OWNER, data: str | None = "confirm:7", message: int = 55) -> Press:
    return Press(user_id, "chat-9", message, data)


async def test_a_known_press_gets_its_outcome_and_a_second_tap_finds_it_used() -> None:
    inbox = FakeInbox()
    presses = policy().presses
    assert await presses.answer(press(), inbox) == PressAnswer(None, "Confirmed.")
    assert await presses.answer(press(), inbox) == PressAnswer(BUTTON_INACTIVE)
    assert inbox.calls == [("choose", "chatland", "chat-9", "confirm:7")]


async def test_a_strangers_press_changes_nothing() -> None:
    inbox = FakeInbox()
    presses = policy().presses
    assert await presses.answer(press(STRANGER), inbox) == PressAnswer(PRESS_NOT_ALLOWED)
    assert await presses.answer(press(None), inbox) == PressAnswer(PRESS_NOT_ALLOWED)
    assert inbox.calls == []


async def test_a_press_while_restarting_says_so() -> None:
    assert await policy().presses.answer(press(), None) == PressAnswer(RESTARTING)


@pytest.mark.parametrize(
    "unusable",
    [
        Press(OWNER, "chat-9", None, "confirm:7"),  # no message (inline mode)
        Press(OWNER, "chat-9", 55, None),  # no data (a game button)
        Press(OWNER, "", 55, "confirm:7"),  # no chat
        Press(OWNER, "chat-9", 55, "confirm:8"),  # not Bruce's any more
    ],
)
async def test_a_press_bruce_cannot_use_is_no_longer_active(unusable: Press) -> None:
    assert await policy().presses.answer(unusable, FakeInbox()) == PressAnswer(BUTTON_INACTIVE)


async def test_a_tap_that_comes_while_the_first_is_answered_finds_the_buttons_used() -> None:
    inbox = FakeInbox()
    inbox.hold = asyncio.Event()
    presses = policy().presses
    first = asyncio.create_task(presses.answer(press(), inbox))
    await asyncio.sleep(0)
    second = await presses.answer(press(data="cancel:7"), inbox)
    inbox.hold.set()
    assert second == PressAnswer(BUTTON_INACTIVE)
    assert await first == PressAnswer(None, "Confirmed.")
    assert len(inbox.calls) == 1


async def test_a_failed_press_is_apologised_for_and_may_be_tried_again() -> None:
    inbox = FakeInbox()
    inbox.fail = True
    presses = policy().presses
    assert await presses.answer(press(), inbox) == PressAnswer(PRESS_FAILED)
    inbox.fail = False
    assert await presses.answer(press(), inbox) == PressAnswer(None, "Confirmed.")


async def test_buttons_of_other_messages_stay_usable() -> None:
    inbox = FakeInbox()
    presses = policy().presses
    await presses.answer(press(message=55), inbox)
    assert await presses.answer(press(message=56), inbox) == PressAnswer(None, "Confirmed.")


def test_recent_forgets_the_oldest_first() -> None:
    recent: Recent[int] = Recent(size=2)
    for key in (1, 2, 1, 3):  # adding 1 again makes it the newest
        recent.add(key)
    assert 2 not in recent and 1 in recent and 3 in recent and len(recent) == 2


def test_the_policy_imports_no_platform_sdk() -> None:
    # Every adapter shares it, so it must know none of them, not even through another module.
    graph = grimp.build_graph("bruce_bot", include_external_packages=True)
    for sdk in ("telegram", "discord"):
        chain = graph.find_shortest_chain("bruce_bot.channels.policy", sdk)
        assert chain is None, " -> ".join(chain or ())
