"""A reply part that Telegram takes as several messages, whose delivery fails midway, resumes where
it stopped: after a restart, from the piece that failed, the ones before it not sent again.

Real python-telegram-bot against the fake Bot API over HTTP, the real Anthropic SDK against the
fake Messages API, one SQLite file across two runs of Bruce. The failure is Telegram's own 500
body (tests/fixtures/telegram/error_500_restart.json), answered to the third sendMessage and to
every retry of it, until the outbox gives the reply up as undelivered.
"""

from __future__ import annotations

from pathlib import Path

from bruce_bot.channels.telegram.markup import render_pieces
from bruce_bot.messaging.outbox import MAX_ATTEMPTS
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer, load_fixture, utf16_len
from tests.integration.channels.test_telegram import ALICE, WITHIN, telegram_config
from tests.integration.support import db_rows, messages_of

# One outbox part (3,719 characters, under the channel's 3,800) whose escaped HTML ("&" is
# "&amp;") is over Telegram's 4,096: sent as three messages (two halves, and the rest). Each
# line is numbered, so a piece sent twice or skipped shows in the text the chat received.
ANSWER = "\n".join(f"{line:02d} " + "a & b " * 20 for line in range(30))


def reply_status(data_dir: Path) -> str | None:
    rows = messages_of(data_dir, "assistant")
    return rows[0]["status"] if rows else None


async def test_a_part_whose_third_message_failed_resumes_from_it_after_a_restart(
    tmp_path: Path, telegram: FakeTelegramServer, anthropic_fake: FakeAnthropicServer
) -> None:
    pieces = render_pieces(ANSWER)
    assert len(pieces) == 3 and all(piece.html for piece in pieces), pieces
    config = telegram_config(tmp_path, telegram, anthropic_fake.base_url)
    anthropic_fake.script(ANSWER)
    # Telegram fails the third message, and every retry of it.
    telegram.fail_nth("sendMessage", 3, load_fixture("error_500_restart"), times=MAX_ATTEMPTS)

    async with running_bruce(config):
        telegram.private_text(ALICE, "symbols please")
        # Its retries back off (0.5 + 1 + 2 s between four attempts): under load, past WITHIN.
        await wait_until(lambda: reply_status(tmp_path) == "undelivered", 4 * WITHIN)
    before = list(telegram.sent_to(ALICE.id))
    assert len(before) == 2  # the first two pieces reached the chat, once each
    assert len(telegram.calls_of("sendMessage")) == 2 + MAX_ATTEMPTS  # retries: the third only
    attempts = db_rows(tmp_path, "SELECT part, status, error, pieces FROM deliveries ORDER BY id")
    assert [(a["part"], a["status"], a["pieces"]) for a in attempts] == [
        *[(0, "retrying", 2)] * (MAX_ATTEMPTS - 1),
        (0, "failed", 2),
    ]
    assert "Internal Server Error: restart" in attempts[-1]["error"]

    # Telegram is well again; Bruce restarts on the same file and redelivers the reply.
    async with running_bruce(config):
        await wait_until(lambda: reply_status(tmp_path) == "sent", WITHIN)
    after = telegram.sent_to(ALICE.id)[len(before) :]
    assert len(before) + len(after) == len(pieces)
    # Every piece once, in order: the chat's messages read as the answer (the spaces at the
    # cuts aside).
    received = "\n".join(message.plain for message in before + after)
    assert received.split() == ANSWER.split()
    assert after[0].plain.startswith(pieces[2].source.split(" ", 1)[0])  # resumed at the third
    assert all(utf16_len(message.plain) <= 4096 for message in before + after)
    assert after[0].reply_to is None  # the reply's first message was the answer, not this one
    [sent] = db_rows(tmp_path, "SELECT status FROM deliveries ORDER BY id DESC LIMIT 1")
    assert sent["status"] == "sent"
