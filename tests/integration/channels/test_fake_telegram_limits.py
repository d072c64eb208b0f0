"""The fake Telegram pushes back as Telegram does: 429 with `retry_after` past its sending limits,
409 for a second poller. Driven with python-telegram-bot's own `Bot` over HTTP, on an injected
clock, so what PTB raises (`RetryAfter`, `Conflict`) is what a bot meets on api.telegram.org."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from telegram import Bot
from telegram.error import Conflict, RetryAfter
from telegram.request import HTTPXRequest

from bruce_bot.channels.telegram.sending import retry_after_seconds
from tests.fakes.telegram_server import FakeTelegramServer, SendLimits

ALICE = FakeTelegramServer.user(1001, "Alice")
BOB = FakeTelegramServer.user(1002, "Bob")
GROUP = -500


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def telegram(clock: Clock) -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(limits=SendLimits(), clock=clock) as server:
        server.private_text(ALICE, "hi")  # the chats are known to the bot
        server.private_text(BOB, "hi")
        server.group_text(GROUP, ALICE, "hi")
        yield server


@pytest.fixture
async def bot(telegram: FakeTelegramServer) -> AsyncIterator[Bot]:
    request = HTTPXRequest(connection_pool_size=8, read_timeout=10)
    async with Bot(telegram.token, base_url=telegram.base_url, request=request) as bot:
        yield bot


async def test_a_chat_takes_a_short_burst_then_one_message_a_second(
    telegram: FakeTelegramServer, bot: Bot, clock: Clock
) -> None:
    for n in range(3):
        await bot.send_message(ALICE.id, f"burst {n}")
    with pytest.raises(RetryAfter) as limited:
        await bot.send_message(ALICE.id, "one too many")
    assert retry_after_seconds(limited.value) == 1
    await bot.send_message(BOB.id, "another chat is not held up")
    clock.now += 1.0
    await bot.send_message(ALICE.id, "a second later")
    with pytest.raises(RetryAfter):
        await bot.send_message(ALICE.id, "and again too soon")
    assert telegram.texts_to(ALICE.id) == ["burst 0", "burst 1", "burst 2", "a second later"]
    assert telegram.rate_limited == [(ALICE.id, 1), (ALICE.id, 1)]


async def test_a_group_gets_twenty_messages_a_minute(
    telegram: FakeTelegramServer, bot: Bot, clock: Clock
) -> None:
    # Two minutes at one message a second (the pace a chat allows): a private chat takes all
    # of them, a group a burst of 20 and then 20 a minute, each refusal saying how long to wait.
    waits: list[float] = []
    for _ in range(120):
        await bot.send_message(ALICE.id, "private")
        try:
            await bot.send_message(GROUP, "group")
        except RetryAfter as exc:
            waits.append(retry_after_seconds(exc))
        clock.now += 1.0
    assert len(telegram.sent_to(ALICE.id)) == 120
    assert 20 + 40 - 2 <= len(telegram.sent_to(GROUP)) <= 20 + 40
    assert waits and all(1 <= wait <= 3 for wait in waits)


async def test_about_thirty_messages_a_second_overall(
    telegram: FakeTelegramServer, bot: Bot, clock: Clock
) -> None:
    users = [FakeTelegramServer.user(2000 + n, f"User {n}") for n in range(31)]
    for user in users:
        telegram.private_text(user, "hi")
    for user in users[:30]:
        await bot.send_message(user.id, "news")
    with pytest.raises(RetryAfter):
        await bot.send_message(users[30].id, "news")
    clock.now += 0.1  # three more a tenth of a second later
    await bot.send_message(users[30].id, "news")
    assert sum(len(telegram.sent_to(user.id)) for user in users) == 31


async def test_without_limits_the_fake_takes_any_pace() -> None:
    async with FakeTelegramServer() as telegram:
        telegram.private_text(ALICE, "hi")
        async with Bot(telegram.token, base_url=telegram.base_url) as bot:
            for n in range(10):
                await bot.send_message(ALICE.id, f"m{n}")
        assert len(telegram.sent_to(ALICE.id)) == 10 and telegram.rate_limited == []


async def test_a_second_poller_ends_the_held_one_with_409(telegram: FakeTelegramServer) -> None:
    await telegram._api_getUpdates({"offset": "4"})  # confirm the chats' first updates
    request = HTTPXRequest(read_timeout=30)
    async with (
        Bot(telegram.token, base_url=telegram.base_url, request=request) as first,
        Bot(
            telegram.token, base_url=telegram.base_url, request=HTTPXRequest(read_timeout=30)
        ) as second,
    ):
        held = asyncio.create_task(first.get_updates(offset=4, timeout=20))
        await telegram.wait_for(lambda: telegram._long_poll is not None)
        newer = asyncio.create_task(second.get_updates(offset=4, timeout=20))
        with pytest.raises(Conflict) as conflict:
            await held
        assert str(conflict.value) == (
            "Conflict: terminated by other getUpdates request; make sure that only one bot "
            "instance is running"
        )
        telegram.private_text(ALICE, "still delivered")
        [update] = await newer
        assert update.message is not None and update.message.text == "still delivered"
        assert telegram.conflicts == 1
