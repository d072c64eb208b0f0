"""A crash while a live reply is being written: `bruce run` killed (SIGKILL) in the middle of the
model's stream, then started again. The user must end up with the whole answer, once, and what
is stored must be what was sent. Real PTB against the fake Bot API, the fake Messages API
streaming slowly enough to be caught mid-answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer
from tests.integration.crash.test_restart import Daemon
from tests.integration.support import db_rows

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
WITHIN = 30.0
SENT_STATUS = "SELECT status FROM messages WHERE role = 'assistant'"
ANSWER = " ".join(f"Sentence {n} of a long answer about the rain in Lisbon." for n in range(30))


@pytest.fixture
async def daemon(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, telegram: FakeTelegramServer
) -> AsyncIterator[Daemon]:
    channel = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id],
    }
    bruce = Daemon(tmp_path, anthropic_fake.base_url, channels={"telegram": channel})
    try:
        yield bruce
    finally:
        await bruce.kill()


async def test_a_kill_mid_stream_still_leaves_the_whole_answer_delivered_once(
    daemon: Daemon, anthropic_fake: FakeAnthropicServer, telegram: FakeTelegramServer
) -> None:
    anthropic_fake.responder = lambda body: ANSWER
    anthropic_fake.stream_pause_seconds = 0.05  # about six seconds of writing
    await daemon.start()
    telegram.private_text(ALICE, "tell me about the rain in Lisbon")
    await telegram.wait_for(lambda: len(telegram.drafts.get(ALICE.id, [])) >= 2, WITHIN)
    await daemon.kill()  # mid-answer: drafts shown, nothing stored, nothing sent
    assert ALICE.id not in telegram.sent
    assert db_rows(daemon.data_dir, "SELECT id FROM messages WHERE role = 'assistant'") == []

    anthropic_fake.stream_pause_seconds = 0.0
    await daemon.start()
    [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
    await wait_until(
        lambda: [tuple(row) for row in db_rows(daemon.data_dir, SENT_STATUS)] == [("sent",)],
        WITHIN,
    )
    await daemon.kill()

    assert reply.plain == ANSWER  # the whole answer, in one message
    [stored] = db_rows(daemon.data_dir, "SELECT content FROM messages WHERE role = 'assistant'")
    assert stored["content"] == reply.plain  # what was stored is what was sent
    assert telegram.sent[ALICE.id] == [reply]
    assert len(anthropic_fake.requests) == 2  # the cut turn was answered again after the restart
