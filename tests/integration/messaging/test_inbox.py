"""The inbox end to end: messages typed into a real channel, held or answered by the fake Messages
API through Bruce's real Anthropic provider, with the SQLite file on disk. Order within a
session, folding of waiting messages, concurrency across sessions, duplicates, limits and the
drain on stop."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bruce_bot.app import Bruce
from bruce_bot.channels.console.channel import CONSOLE_CHANNEL, ConsoleChannel
from bruce_bot.domain import InboundMessage, OutboundMessage, SessionKey
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, is_temporal_context
from tests.integration.support import (
    awaiting,
    config_for,
    messages_of,
    next_reply,
    user_texts,
)


@dataclass
class ModelCall:
    """One request the fake model received: the user texts it carried and when it ran."""

    texts: list[str]
    last_turn: list[str]
    started: float
    ended: float | None = None


@dataclass
class RecordingModel:
    """A responder that answers "answer to <last text>" and records every call. A call whose
    texts contain a key of `holds` waits for that event first (a slow model, held by the test);
    `thinking_seconds` simulates the model's latency on every call."""

    holds: dict[str, asyncio.Event] = field(default_factory=dict)
    thinking_seconds: float = 0.0
    calls: list[ModelCall] = field(default_factory=list)

    async def __call__(self, body: dict[str, Any]) -> str:
        last = body["messages"][-1]
        call = ModelCall(
            texts=user_texts(body),
            last_turn=[
                block["text"]
                for block in last["content"]
                if block["type"] == "text" and not is_temporal_context(block)
            ],
            started=time.monotonic(),
        )
        self.calls.append(call)
        try:
            for key, event in self.holds.items():
                if any(key in text for text in call.last_turn):
                    await event.wait()
            if self.thinking_seconds:
                await asyncio.sleep(self.thinking_seconds)
            return f"answer to {call.last_turn[-1]}"
        finally:
            call.ended = time.monotonic()

    def calls_with(self, prefix: str) -> list[ModelCall]:
        return [c for c in self.calls if any(t.startswith(prefix) for t in c.last_turn)]

    def release_all(self) -> None:
        for event in self.holds.values():
            event.set()


class ChatsConsole(ConsoleChannel):
    """The console channel, speaking in several chats: one queue of delivered replies per chat.
    (Bruce keys channels by name, so two console channels cannot run side by side.)"""

    def __init__(self) -> None:
        super().__init__()
        self.chats: dict[str, asyncio.Queue[str]] = {}

    def replies_in(self, chat_id: str) -> asyncio.Queue[str]:
        return self.chats.setdefault(chat_id, asyncio.Queue())

    async def say_in(self, chat_id: str, text: str) -> bool:
        assert self._inbox is not None
        message = InboundMessage(CONSOLE_CHANNEL, chat_id, text, user_id=chat_id)
        return (await self._inbox.submit(message)).accepted

    async def send(self, message: OutboundMessage) -> None:
        await super().send(message)
        self.replies_in(message.chat_id).put_nowait(message.text)


def assert_no_overlap(calls: list[ModelCall]) -> None:
    for earlier, later in itertools.pairwise(calls):
        assert earlier.ended is not None and earlier.ended <= later.started, (earlier, later)


@pytest.fixture
async def model(anthropic_fake: FakeAnthropicServer) -> Any:
    recorder = RecordingModel()
    anthropic_fake.responder = recorder
    try:
        yield recorder
    finally:
        recorder.release_all()  # a held request must not keep the fake from stopping


def run(
    tmp_path: Path, fake: FakeAnthropicServer, *channels: ConsoleChannel, **overrides: Any
) -> Any:
    config = config_for(tmp_path, fake.base_url, **overrides)
    return running_bruce(config, tools=ToolRegistry([]), channels=list(channels))


async def eventually(predicate: Callable[[], Any | Awaitable[Any]]) -> Any:
    return await wait_until(predicate, timeout=10)


# ---- one session ---------------------------------------------------------------------------


async def test_a_sessions_turns_never_overlap_and_follow_arrival_order(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    model.thinking_seconds = 0.05  # each turn takes a while: a second turn would overlap it
    console = ConsoleChannel()
    texts = [f"note {i}" for i in range(1, 7)]
    async with run(tmp_path, anthropic_fake, console):
        for text in texts:
            assert await console.say(text)
            # The next message arrives while the turn that carries this one is still running.
            await eventually(lambda text=text: any(text in c.texts for c in model.calls))
        replies = [await next_reply(console.replies) for _ in texts]

    assert replies == [f"answer to {text}" for text in texts]
    assert len(model.calls) == len(texts)
    assert_no_overlap(model.calls)
    for index, call in enumerate(model.calls):
        assert call.texts == texts[: index + 1]  # the whole history, in arrival order


async def test_messages_sent_during_a_turn_are_answered_together_in_the_next_turn(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    model.holds["a1"] = asyncio.Event()
    console = ChatsConsole()
    alice, bob = console.replies_in("alice"), console.replies_in("bob")
    async with run(tmp_path, anthropic_fake, console):
        assert await console.say_in("alice", "a1: book a table")
        await eventually(lambda: model.calls_with("a1"))
        assert await console.say_in("alice", "a2: for four people")
        assert await console.say_in("alice", "a3: at eight")
        # Another chat is answered meanwhile; by then a wrongly started turn for a2 would show.
        assert await console.say_in("bob", "b1: hello")
        assert await next_reply(bob) == "answer to b1: hello"
        assert len(model.calls_with("a")) == 1
        model.holds["a1"].set()
        first = await next_reply(alice)
        second = await next_reply(alice)

    assert first == "answer to a1: book a table"
    assert second == "answer to a3: at eight"
    alice_calls = model.calls_with("a")
    assert len(alice_calls) == 2  # one turn for a2 and a3, not two
    assert alice_calls[1].last_turn == ["a2: for four people", "a3: at eight"]
    assert alice_calls[1].texts == ["a1: book a table", "a2: for four people", "a3: at eight"]
    assert_no_overlap(alice_calls)
    assert [m["status"] for m in messages_of(tmp_path, "user")] == ["done"] * 4


async def test_a_batch_longer_than_the_history_is_shown_to_the_model_whole(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    # 45 messages wait while a1's turn is held; a1's reply is stored after them, so it is newer
    # than every one of them. The next turn answers all 45: the model must read all 45 (the
    # cluster chaos test, seed 323318, lost the oldest of a long batch this way: marked
    # answered, never shown to the model).
    model.holds["a1"] = asyncio.Event()
    console = ChatsConsole()
    alice = console.replies_in("alice")
    waiting = [f"a{n}: point {n}" for n in range(2, 47)]
    async with run(tmp_path, anthropic_fake, console):
        assert await console.say_in("alice", "a1: hello")
        await eventually(lambda: model.calls_with("a1"))
        for text in waiting:
            assert await console.say_in("alice", text)
        model.holds["a1"].set()
        assert await next_reply(alice) == "answer to a1: hello"
        assert await next_reply(alice) == f"answer to {waiting[-1]}"

    [second] = [call for call in model.calls if call.last_turn[-1:] == waiting[-1:]]
    assert second.last_turn == waiting, (
        f"the turn answering {len(waiting)} messages showed the model {len(second.last_turn)}"
        f" of them: {[t for t in waiting if t not in second.last_turn]} were marked answered unread"
    )
    assert [m["status"] for m in messages_of(tmp_path, "user")] == ["done"] * 46


# ---- several sessions ----------------------------------------------------------------------


async def test_a_slow_session_does_not_keep_another_waiting(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    model.holds["slow"] = asyncio.Event()
    console = ChatsConsole()
    slow, fast = console.replies_in("slow-chat"), console.replies_in("fast-chat")
    async with run(tmp_path, anthropic_fake, console):
        assert await console.say_in("slow-chat", "slow: write me a novel")
        await eventually(lambda: model.calls_with("slow"))
        assert await console.say_in("fast-chat", "fast: what time is it?")
        assert await next_reply(fast) == "answer to fast: what time is it?"
        (slow_call,) = model.calls_with("slow")
        assert slow_call.ended is None and slow.empty()  # still thinking
        model.holds["slow"].set()
        assert await next_reply(slow) == "answer to slow: write me a novel"


async def test_the_global_cap_runs_one_session_at_a_time(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    model.holds["slow"] = asyncio.Event()
    console = ChatsConsole()
    slow, fast = console.replies_in("slow-chat"), console.replies_in("fast-chat")
    config = {"max_concurrent_sessions": 1}
    async with run(tmp_path, anthropic_fake, console, agent=config) as bruce:
        assert await console.say_in("slow-chat", "slow: write me a novel")
        await anthropic_fake.wait_for_requests(1)
        assert await console.say_in("fast-chat", "fast: what time is it?")
        # Nothing may reach the model for the second session while the first holds the only
        # slot: its worker has started and waits for the slot, and has asked nothing.
        assert bruce.stores is not None
        fast_session = await bruce.stores.sessions.get_or_create(
            SessionKey(CONSOLE_CHANNEL, "fast-chat")
        )
        worker = f"session-{fast_session.id}"
        await eventually(lambda: awaiting(asyncio.Semaphore.acquire, worker))
        assert len(anthropic_fake.requests) == 1
        assert [m["status"] for m in messages_of(tmp_path, "user")] == ["processing", "pending"]
        model.holds["slow"].set()
        assert await next_reply(slow) == "answer to slow: write me a novel"
        assert await next_reply(fast) == "answer to fast: what time is it?"

    assert [c.last_turn for c in model.calls] == [
        ["slow: write me a novel"],
        ["fast: what time is it?"],
    ]
    assert_no_overlap(model.calls)


# ---- what enters the inbox -----------------------------------------------------------------


async def test_a_redelivered_platform_message_is_answered_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    console = ConsoleChannel()
    message = InboundMessage(
        "console", "local", "Remind me to call mum", user_id="u1", platform_message_id="msg-77"
    )
    async with run(tmp_path, anthropic_fake, console) as bruce:
        first = await bruce.inbox.submit(message)
        again = await bruce.inbox.submit(message)
        assert first.accepted and first.message_id is not None
        assert (again.accepted, again.reason) == (False, "duplicate")
        assert await next_reply(console.replies) == "answer to Remind me to call mum"
        await eventually(lambda: bruce.inbox.busy_sessions == 0)

    assert len(anthropic_fake.requests) == 1
    assert len(messages_of(tmp_path, "user")) == 1
    assert console.replies.empty()


async def test_empty_and_blank_messages_are_ignored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    console = ConsoleChannel()
    async with run(tmp_path, anthropic_fake, console) as bruce:
        assert not await console.say("   \n\t  ")
        empty = await bruce.inbox.submit(InboundMessage("console", "local", ""))
        assert (empty.accepted, empty.reason) == (False, "empty")
        assert messages_of(tmp_path) == []
        assert await console.say("a real question")
        assert await next_reply(console.replies) == "answer to a real question"

    assert len(anthropic_fake.requests) == 1
    assert user_texts(anthropic_fake.requests[0]) == ["a real question"]
    assert [m["role"] for m in messages_of(tmp_path)] == ["user", "assistant"]


async def test_an_over_long_message_is_cut_and_the_model_is_told(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    console = ConsoleChannel()
    text = "A" * 100 + "B" * 150
    async with run(tmp_path, anthropic_fake, console, agent={"max_message_chars": 100}):
        assert await console.say(text)
        assert (await next_reply(console.replies)).startswith("answer to ")

    (seen,) = user_texts(anthropic_fake.requests[0])
    assert seen.startswith("A" * 100)
    assert "BBBBB" not in seen
    assert "truncated; it had 250 characters and only the first 100 are shown" in seen
    (stored,) = messages_of(tmp_path, "user")
    assert stored["content"] == seen


# ---- stopping ------------------------------------------------------------------------------


async def test_a_turn_cut_short_by_shutdown_is_answered_after_the_next_start(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, model: RecordingModel
) -> None:
    model.holds["umbrella"] = asyncio.Event()
    config = config_for(tmp_path, anthropic_fake.base_url, agent={"shutdown_timeout_seconds": 0.1})
    console = ConsoleChannel()
    first = Bruce(config, tools=ToolRegistry([]), channels=[console])
    await first.start()
    try:
        assert await console.say("Do I need an umbrella today?")
        await anthropic_fake.wait_for_requests(1)
    finally:
        started = time.monotonic()
        await first.stop()
    assert time.monotonic() - started < 5
    assert [m["status"] for m in messages_of(tmp_path, "user")] == ["pending"]
    assert messages_of(tmp_path, "assistant") == []
    assert console.replies.empty()

    model.holds["umbrella"].set()  # the model answers at once now
    again = ConsoleChannel()
    async with running_bruce(config, tools=ToolRegistry([]), channels=[again]):
        assert await next_reply(again.replies) == "answer to Do I need an umbrella today?"

    assert [m["status"] for m in messages_of(tmp_path, "user")] == ["done"]
    assert len(messages_of(tmp_path, "assistant")) == 1
