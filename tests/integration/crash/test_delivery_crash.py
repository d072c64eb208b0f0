"""Crash tests of the message path through the real daemon (`bruce run` in its own process group,
killed with SIGKILL), the fake Bot API answering `sendMessage` after Telegram's round trip and
the fake Messages API as the model. Counted at the fakes: what the user received, and which
messages each prompt showed the model as unanswered.

The fake Bot API keeps Telegram's sending limits (about one message a second per chat, 429
with `retry_after` past them). A part sent twice is excused only by crash_judge.py's rules (in
flight at the kill by the commit window measured in the run, not recorded in `deliveries`).
The kill moments that are not pinned to a condition are drawn from a seeded generator; the seed
is printed (and named in every assertion) so that a failing run can be repeated with
BRUCE_CRASH_SEED=<seed>.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, is_temporal_context
from tests.fakes.telegram_server import FakeTelegramServer, SendLimits, SentMessage
from tests.integration.crash.test_restart import Daemon
from tests.integration.crash_judge import CommitWindow, in_flight_excuse, sent_rows
from tests.integration.support import db_rows

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
BOB = FakeTelegramServer.user(1002, "Bob")
ROUND_TRIP = 0.25  # seconds between Telegram having a message and Bruce hearing that it does
WITHIN = 30.0
SEEDS = (
    [int(os.environ["BRUCE_CRASH_SEED"])] if os.environ.get("BRUCE_CRASH_SEED") else [7, 19, 2024]
)


class TelegramWithRoundTrip(FakeTelegramServer):
    """The fake Bot API with Telegram's latency and sending limits: a `sendMessage` is accepted
    (the user sees it) when it arrives and answered `ROUND_TRIP` seconds later. While `hold`
    matches a text, such a send is kept waiting before it is accepted; `release` lets held sends
    fail unaccepted (502), as a request does whose client was killed."""

    def __init__(self) -> None:
        super().__init__(send_delay=ROUND_TRIP, limits=SendLimits())
        self.hold: Callable[[str], bool] | None = None
        self.held = 0
        self._released = asyncio.Event()

    def release(self) -> None:
        self.hold = None
        self._released.set()

    async def _api_sendMessage(self, params: dict[str, str]) -> Any:
        if self.hold is not None and self.hold(params.get("text", "")):
            self.held += 1
            self._notify()
            await self._released.wait()
            raise web.HTTPBadGateway()
        return await super()._api_sendMessage(params)


@pytest.fixture
async def telegram() -> AsyncIterator[TelegramWithRoundTrip]:
    server = TelegramWithRoundTrip()
    async with server:
        try:
            yield server
        finally:
            server.release()


@pytest.fixture
async def daemon(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, telegram: TelegramWithRoundTrip
) -> AsyncIterator[Daemon]:
    channel = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id, BOB.id],
    }
    bruce = Daemon(
        tmp_path,
        anthropic_fake.base_url,
        channels={"telegram": channel},
        agent={"history_max_messages": 200},  # no folding: the whole chat stays in the prompt
    )
    try:
        yield bruce
    finally:
        await bruce.kill()


def rows(daemon: Daemon, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in db_rows(daemon.data_dir, sql)]


async def stop_cleanly(daemon: Daemon) -> None:
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGTERM)
    assert await daemon.exit_code(within=20) == 0


# ---- a reply in several parts -------------------------------------------------------------

LONG_REPLY = "\n\n".join(f"Part {i}: " + "x" * 3000 for i in range(3))  # three Telegram messages


def parts_received(telegram: FakeTelegramServer) -> list[int]:
    return [int(text.split(":")[0].removeprefix("Part ")) for text in telegram.texts_to(ALICE.id)]


def copies_of_parts(telegram: FakeTelegramServer) -> dict[int, list[SentMessage]]:
    copies: dict[int, list[SentMessage]] = {}
    for sent in telegram.sent.get(ALICE.id, []):
        copies.setdefault(int(sent.plain.split(":")[0].removeprefix("Part ")), []).append(sent)
    return copies


async def reply_settled(daemon: Daemon) -> bool:
    return rows(daemon, "SELECT status FROM messages WHERE role = 'assistant'") == [("sent",)]


async def test_parts_accepted_before_a_kill_are_not_sent_again_after_restart(
    daemon: Daemon, anthropic_fake: FakeAnthropicServer, telegram: TelegramWithRoundTrip
) -> None:
    anthropic_fake.responder = lambda body: LONG_REPLY
    telegram.hold = lambda text: text.startswith("Part 1:")
    await daemon.start()
    telegram.private_text(ALICE, "Tell me the whole story")
    # Part 0 was accepted and answered; part 1 is on its way: Bruce dies before it lands.
    await telegram.wait_for(lambda: telegram.held == 1, WITHIN)
    await daemon.kill()
    telegram.release()

    await daemon.start()
    await wait_until(lambda: reply_settled(daemon), WITHIN)
    await stop_cleanly(daemon)

    assert parts_received(telegram) == [0, 1, 2]
    assert len(anthropic_fake.requests) == 1  # the reply was stored: no second model call
    sent = rows(daemon, "SELECT part FROM deliveries WHERE status = 'sent' ORDER BY part")
    assert sent == [(0,), (1,), (2,)]


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_kill_at_a_random_moment_of_a_delivery_repeats_at_most_the_part_in_flight(
    seed: int,
    daemon: Daemon,
    anthropic_fake: FakeAnthropicServer,
    telegram: TelegramWithRoundTrip,
) -> None:
    print(f"seed={seed} (replay: BRUCE_CRASH_SEED={seed})")
    pause = random.Random(seed).uniform(0, 3 * ROUND_TRIP + 0.2)
    anthropic_fake.responder = lambda body: LONG_REPLY
    await daemon.start()
    telegram.private_text(ALICE, "Tell me the whole story")
    await telegram.wait_for(lambda: telegram.texts_to(ALICE.id), WITHIN)
    await asyncio.sleep(pause)  # the seeded kill moment, somewhere in the three round trips
    await daemon.kill()
    before = parts_received(telegram)

    await daemon.start()
    await wait_until(lambda: reply_settled(daemon), WITHIN)
    await stop_cleanly(daemon)

    received = parts_received(telegram)
    context = f"seed={seed} pause={pause:.3f} before the kill: {before}, in all: {received}"
    assert sorted(set(received)) == [0, 1, 2], context
    repeated = [part for part in set(received) if received.count(part) > 1]
    # Only the part Telegram had when Bruce died, before Bruce heard so, may come twice.
    assert repeated in ([], [before[-1]]), context
    assert all(received.count(part) <= 2 for part in received), context
    assert len(anthropic_fake.requests) == 1, context
    sent = rows(daemon, "SELECT part FROM deliveries WHERE status = 'sent' ORDER BY part")
    assert sent == [(0,), (1,), (2,)], context
    # And that part was in flight by the commit window this run measured, unrecorded.
    recorded = sent_rows(
        dict(row)
        for row in db_rows(
            daemon.data_dir, "SELECT message_id, part, attempt, status, created_at FROM deliveries"
        )
    )
    [mid] = {mid for mid, _ in recorded}
    copies, window = copies_of_parts(telegram), CommitWindow()
    kill = daemon.lives[0].signalled_at or 0.0
    window.measure_reply(
        [[(copy, copy.received_at > kill) for copy in copies[part]] for part in range(3)],
        [recorded.get((mid, part), []) for part in range(3)],
    )
    for part in repeated:
        first, again = copies[part]
        later = [c for c in telegram.sent[ALICE.id] if first.received_at < c.received_at <= kill]
        verdict = in_flight_excuse(
            first,
            daemon.lives[0],
            window,
            again_at=again.received_at,
            recorded=recorded.get((mid, part), []),
            moved_on=later[0] if later else None,
        )
        assert verdict.excused, f"{context}: part {part}: {verdict.why}"
        print(f"seed={seed}: part {part} excused: {verdict.why}")


# ---- bursts of messages -------------------------------------------------------------------


@dataclass
class Prompt:
    """One request the model received: the user texts it showed as not answered yet."""

    run: int
    unanswered: list[str]
    conversation: list[tuple[str, list[str]]]  # (role, texts) of every turn
    answered: bool = False  # its answer reached the daemon that asked

    def of(self, chat: str) -> bool:
        return any(
            text.startswith(f"note {chat}") for _, texts in self.conversation for text in texts
        )


@dataclass
class Model:
    """Answers "answer to <each unanswered text>"; a call waits for `gate` when one is set."""

    rng: random.Random
    run: int = 1
    gate: asyncio.Event | None = None
    prompts: list[Prompt] = field(default_factory=list)

    async def __call__(self, body: dict[str, Any]) -> str:
        conversation = [(m["role"], texts_of(m)) for m in body["messages"]]
        replies = [i for i, (role, _) in enumerate(conversation) if role != "user"]
        after = replies[-1] + 1 if replies else 0
        unanswered = [text for _, texts in conversation[after:] for text in texts]
        prompt = Prompt(self.run, unanswered, conversation)
        self.prompts.append(prompt)
        gate = self.gate
        if gate is not None:
            await gate.wait()
        else:
            await asyncio.sleep(self.rng.uniform(0, 0.005))  # the model's seeded thinking time
        if prompt.run != self.run:
            return "lost: the daemon that asked was killed"
        prompt.answered = True
        return "answer to " + " | ".join(unanswered)

    def of(self, chat: str, run: int | None = None) -> list[Prompt]:
        return [p for p in self.prompts if p.of(chat) and run in (None, p.run)]


def texts_of(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    return [
        block["text"]
        for block in content
        if block.get("type") == "text" and not is_temporal_context(block)
    ]


def note(chat: str, number: int) -> str:
    return f"note {chat}{number:02d}"


def user_count(daemon: Daemon) -> int:
    return int(rows(daemon, "SELECT count(*) FROM messages WHERE role = 'user'")[0][0])


def all_settled(daemon: Daemon) -> bool:
    waiting = "SELECT count(*) FROM messages WHERE role = 'user' AND status != 'done'"
    unsent = "SELECT count(*) FROM messages WHERE role = 'assistant' AND status != 'sent'"
    return rows(daemon, waiting) == [(0,)] and rows(daemon, unsent) == [(0,)]


@pytest.mark.parametrize("seed", SEEDS)
async def test_bursts_during_turns_and_across_a_kill_are_answered_once_per_message(
    seed: int,
    daemon: Daemon,
    anthropic_fake: FakeAnthropicServer,
    telegram: TelegramWithRoundTrip,
) -> None:
    print(f"seed={seed} (replay: BRUCE_CRASH_SEED={seed})")
    rng = random.Random(seed)
    model = Model(rng)
    anthropic_fake.responder = model
    first_turn, never, recovered = asyncio.Event(), asyncio.Event(), asyncio.Event()
    alice = [note("m", n) for n in range(1, 26)]
    bob = [note("b", n) for n in range(1, 4)]

    async def stored(count: int) -> None:
        await wait_until(lambda: user_count(daemon) == count, WITHIN)

    try:
        # Run 1: four messages at once to a new chat, three more while its turns run, and a
        # second chat's messages in between; killed while both chats wait for the model.
        model.gate = first_turn
        await daemon.start()
        for text in alice[:4]:
            telegram.private_text(ALICE, text)
        await anthropic_fake.wait_for_requests(1, WITHIN)
        await stored(4)
        model.gate = never
        first_turn.set()
        for mine, theirs in zip(alice[4:7], bob, strict=True):
            telegram.private_text(ALICE, mine)
            telegram.private_text(BOB, theirs)
        await stored(10)
        await wait_until(lambda: len(model.of("m", 1)) == 2 and model.of("b", 1), WITHIN)
        await daemon.kill()
        model.run = 2
        never.set()

        # Run 2: each chat's waiting messages are answered by one recovered turn; three more
        # arrive during it, then bursts of one to five at seeded moments while turns come and go.
        model.gate = recovered
        await daemon.start()
        await wait_until(lambda: model.of("m", 2) and model.of("b", 2), WITHIN)
        answered_first = model.of("m", 1)[0].unanswered
        assert model.of("m", 2)[0].unanswered == [
            text for text in alice[:7] if text not in answered_first
        ], seed
        assert model.of("b", 2)[0].unanswered == bob, seed
        for text in alice[7:10]:
            telegram.private_text(ALICE, text)
        await stored(13)
        model.gate = None
        recovered.set()
        queue = alice[10:]
        while queue:
            size = rng.randint(1, 5)
            burst, queue = queue[:size], queue[size:]
            for text in burst:
                telegram.private_text(ALICE, text)
            await asyncio.sleep(rng.uniform(0, 0.3))  # the seeded arrival moments
        await wait_until(lambda: user_count(daemon) == 28 and all_settled(daemon), WITHIN)

        # One more message: its prompt is the whole chat as the model sees it.
        telegram.private_text(ALICE, "note m99")
        await wait_until(lambda: user_count(daemon) == 29 and all_settled(daemon), WITHIN)
        await stop_cleanly(daemon)
    finally:
        for gate in (first_turn, never, recovered):
            gate.set()  # a held request must not keep the fake from stopping

    answered = [prompt for prompt in model.prompts if prompt.answered]
    for text in alice + bob:
        showing = [p.unanswered for p in answered if text in p.unanswered]
        assert len(showing) == 1, (seed, text, showing)
    for user, texts in ((ALICE, alice), (BOB, bob)):
        replies = telegram.texts_to(user.id)
        for text in texts:
            answering = [reply for reply in replies if text in reply]
            assert len(answering) == 1, (seed, text, replies)
    # In the last prompt every message is followed by the one reply that answered it.
    final = answered[-1]
    assert final.unanswered == ["note m99"], seed
    asked: list[str] = []
    for role, texts in final.conversation[:-1]:
        if role == "user":
            asked += texts
        else:
            assert texts == ["answer to " + " | ".join(asked)], (seed, final.conversation)
            asked = []
    assert asked == [], seed
    seen = [text for role, texts in final.conversation if role == "user" for text in texts]
    assert seen == [*alice, "note m99"], seed
