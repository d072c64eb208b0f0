"""The approver's edges, on a real SQLite file, the real outbox and a manual clock: a question
whose time ran out while Bruce was down is asked again; a question too long for one message is
refused saying so; an answer taken in another process (its change-feed notice) wakes the waiting
run at once; a press in another chat changes nothing; a run without a chat is refused; the
expiry follows the injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bruce_bot.agent.asking import EXPIRED, GONE, NOBODY, ChatApprover
from bruce_bot.domain import OutboundMessage, SessionKey
from bruce_bot.messaging.outbox import Outbox
from bruce_bot.storage.approvals import ASKING
from bruce_bot.storage.changes import EVERYTHING, Subscriber
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.approval import ApprovalRequest
from bruce_bot.tools.registry import ToolContext
from tests.integration.support import ManualClock

START = datetime(2026, 5, 1, 9, tzinfo=UTC)
WITHIN = 5.0  # well under the approver's own re-check (10 s): a wake must come from the notice


class Chat:
    name = "chat"

    def __init__(self, max_message_chars: int = 4096) -> None:
        self.max_message_chars = max_message_chars
        self.sent: list[OutboundMessage] = []
        self.changed = asyncio.Event()

    async def start(self, inbox: object) -> None: ...

    async def stop(self) -> None: ...

    async def close(self) -> None: ...

    async def typing(self, chat_id: str) -> None: ...

    async def send(self, message: OutboundMessage) -> None:
        self.sent.append(message)
        self.changed.set()


class Feed:
    """The change feed as another process's notice reaches this one."""

    def __init__(self) -> None:
        self.subscribers: dict[str, Subscriber] = {}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def subscribe(self, topic: str, callback: Subscriber) -> None:
        self.subscribers[topic] = callback

    async def publish(self, topic: str, key: str = "") -> None: ...

    async def publish_with(self, connection: object, topic: str, key: str = "") -> None: ...


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}"
    await upgrade_schema(url)
    database = Database(url)
    try:
        yield Stores.open(database)
    finally:
        await database.dispose()


def approver(stores: Stores, chat: Chat, feed: Feed, clock: ManualClock) -> ChatApprover:
    outbox = Outbox(stores.messages, stores.deliveries, stores.sessions, {"chat": chat})
    return ChatApprover(stores, outbox, feed, 300, clock)


async def context(stores: Stores, chat_id: str = "alice") -> ToolContext:
    session = await stores.sessions.get_or_create(SessionKey("chat", chat_id))
    return ToolContext(session_id=session.id, channel="chat", chat_id=chat_id, turn_key="m1")


REQUEST = ApprovalRequest("run_code", "print(42)", "this turn read web_fetch", "m1:abc")


async def test_a_question_whose_time_ran_out_while_bruce_was_down_is_asked_again(
    stores: Stores,
) -> None:
    clock, chat, feed = ManualClock(START), Chat(), Feed()
    asking = approver(stores, chat, feed, clock)
    where = await context(stores)
    assert where.session_id is not None
    old, _ = await stores.approvals.hold(
        where.session_id,
        "run_code",
        "print(42)",
        reason="this turn read web_fetch",
        origin=REQUEST.origin,
        person="",
        task_run=False,
        status=ASKING,
        at=clock(),
    )
    await stores.approvals.ask(where.session_id, "asked before the crash", {}, action=old.id)
    clock.advance(timedelta(seconds=400))  # Bruce was down past the question's expiry

    run = asyncio.create_task(asking.ask(where, REQUEST))
    await asyncio.wait_for(chat.changed.wait(), WITHIN)
    (question,) = chat.sent
    assert "print(42)" in question.text and [c.label for c in question.choices] == ["Run", "Deny"]
    assert await asking.answer(old.id, True, "chat:alice") == "▶️ Approved: it runs now."
    verdict = await asyncio.wait_for(run, WITHIN)
    assert verdict.approved and verdict.by == "chat:alice" and verdict.at == clock()


async def test_a_question_too_long_for_one_message_is_refused_saying_so(stores: Stores) -> None:
    clock, chat, feed = ManualClock(START), Chat(max_message_chars=300), Feed()
    request = ApprovalRequest("run_code", "x = 1\n" * 100, "it asks for the network", "m1:long")
    verdict = await approver(stores, chat, feed, clock).ask(await context(stores), request)
    assert not verdict.approved and "too long" in verdict.why and "at most 300" in verdict.why
    assert chat.sent == []
    assert await stores.approvals.asking() == []


async def test_an_answer_in_another_process_wakes_the_waiting_run(stores: Stores) -> None:
    clock, chat, feed = ManualClock(START), Chat(), Feed()
    asking = approver(stores, chat, feed, clock)
    run = asyncio.create_task(asking.ask(await context(stores), REQUEST))
    await asyncio.wait_for(chat.changed.wait(), WITHIN)
    (question,) = await stores.approvals.asking()
    assert await stores.approvals.decide(question.id, "denied", "telegram:7", clock())
    feed.subscribers["approvals"](str(question.id))  # that process's notice
    verdict = await asyncio.wait_for(run, WITHIN)
    assert not verdict.approved and verdict.why == "denied by telegram:7"


async def test_a_press_in_another_chat_changes_nothing(stores: Stores) -> None:
    clock, chat, feed = ManualClock(START), Chat(), Feed()
    asking = approver(stores, chat, feed, clock)
    run = asyncio.create_task(asking.ask(await context(stores), REQUEST))
    await asyncio.wait_for(chat.changed.wait(), WITHIN)
    (question,) = await stores.approvals.asking()
    bob = await context(stores, "bob")
    assert await asking.choose(bob.session_id or 0, f"code-run:{question.id}", "chat:bob") == GONE
    assert [q.status for q in await stores.approvals.asking()] == [ASKING]
    await asking.answer(question.id, False, "chat:alice")
    assert not (await asyncio.wait_for(run, WITHIN)).approved


async def test_a_run_without_a_chat_is_refused(stores: Stores) -> None:
    verdict = await approver(stores, Chat(), Feed(), ManualClock(START)).ask(ToolContext(), REQUEST)
    assert not verdict.approved and verdict.why == NOBODY


async def test_the_expiry_follows_the_injected_clock(stores: Stores) -> None:
    clock, chat, feed = ManualClock(START), Chat(), Feed()
    asking = approver(stores, chat, feed, clock)
    run = asyncio.create_task(asking.ask(await context(stores), REQUEST))
    await asyncio.wait_for(chat.changed.wait(), WITHIN)
    (question,) = await stores.approvals.asking()
    clock.advance(timedelta(seconds=301))
    feed.subscribers["approvals"](EVERYTHING)  # a feed that reconnected: everything re-read
    verdict = await asyncio.wait_for(run, WITHIN)
    assert not verdict.approved and verdict.why == "no answer within 300 s"
    assert [q.status for q in await stores.approvals.asking()] == []
    expired = await stores.approvals.get(question.id)
    assert expired is not None and expired.status == "expired"
    assert await asking.answer(question.id, True, "chat:alice") == EXPIRED.format(
        timeout="5 minutes"
    )
