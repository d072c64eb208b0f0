"""A reply stored by a process that dies while sending it is sent once, by the one that lives.

Two real `bruce run` processes on one PostgreSQL database behind the fake Bot API's balancer
(cluster_support.py). Process a answers the user's message; the fake holds a's sendMessage at
the door (`hold_sends`: Telegram has not taken it), a is SIGKILLed while it waits, and the held
request, its sender gone, never reaches the chat. Once a's claim on the stored reply lapsed, b's
redelivery takes it: the user gets the reply exactly once, from b, the message is answered once,
and `deliveries` records that part sent once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.chaos_support import Ask
from tests.integration.postgres.cluster_support import (
    LEASE_SECONDS,
    START_TIMEOUT,
    cluster_of,
    pg_rows,
    until,
)

USER = 4101
SEED = 1  # nothing here is random: the balancer posts to one process at a time


@pytest.mark.timeout(120)
async def test_a_reply_stored_by_a_killed_process_is_sent_once_by_the_surviving_one(
    tmp_path: Path, postgres_url: str
) -> None:
    ask = Ask("msg-c1-001", USER, gap=0.0, think=0.05, parts=1)
    async with cluster_of(tmp_path, postgres_url, SEED, [USER], [ask]) as cluster:
        await cluster.start("a", "b")
        telegram = cluster.telegram
        hold = telegram.hold_sends(
            lambda client, params: client == "a" and ask.label in params.get("text", "")
        )
        cluster.balance("a")
        cluster.say(ask)
        held = await until(lambda: hold.held, START_TIMEOUT)
        assert held, "process a never sent its reply to msg-c1-001"
        [reply] = pg_rows(
            postgres_url,
            "SELECT id, status, lease_owner FROM messages WHERE role = 'assistant'",
        )
        assert reply["status"] == "pending" and reply["lease_owner"], (
            f"while a's send is held its stored reply should be pending and claimed: {reply}"
        )

        run = await cluster.kill("a")
        gone = await until(lambda: held[0].sender_gone, 10)
        assert gone, "the fake never saw process a's connection close after its SIGKILL"
        hold.release()
        await until(lambda: held[0].outcome != "held", 5)
        assert held[0].outcome == "dropped", f"the held send was {held[0].outcome}"
        cluster.balance("b")

        # b's redelivery takes the reply once a's claim lapsed (a lease, then b's next sweep).
        assert run.signalled_at is not None
        arrived = await until(lambda: telegram.sent_to(USER), 4 * LEASE_SECONDS + 10)
        assert arrived, (
            f"the reply a stored never reached the user; in the database: {cluster.unfinished()}"
        )
        await cluster.settle()
        copies = telegram.sent_to(USER)
        assert [(c.client, ask.label in c.plain) for c in copies] == [("b", True)], (
            "the user should get the reply a stored exactly once, from b: got "
            + "; ".join(f"{c.client}: {c.plain[:80]!r}" for c in copies)
        )
        waited = copies[0].received_at - run.signalled_at
        assert waited <= 3 * LEASE_SECONDS + 2, (
            f"b sent it {waited:.1f} s after a died: a lease ({LEASE_SECONDS} s) and one sweep "
            "should do"
        )
        [stored] = pg_rows(postgres_url, "SELECT status FROM messages WHERE id = %s", reply["id"])
        deliveries = pg_rows(
            postgres_url,
            "SELECT part, status FROM deliveries WHERE message_id = %s ORDER BY id",
            reply["id"],
        )
        assert stored["status"] == "sent" and deliveries == [{"part": 0, "status": "sent"}], (
            f"the reply is {stored}, its deliveries {deliveries}: one part, recorded sent once"
        )
        findings = cluster.judge()
        assert not findings.problems and not findings.excused, cluster.report(
            "a reply handed over", findings
        )
