"""What a crash test may excuse, and nothing more: the primitives the crash judges share
(chaos_support.py's chaos test, test_delivery_crash.py, test_firing_crash.py; the cluster judge
may use them too).

A message the user gets twice is excused only when both hold:

* its first copy was *in flight* at a SIGKILL of the process that sent it: Telegram took it
  before the process died (or during its dying: any time before the exit was seen), and its
  answer came so late that the process could not have recorded it by the kill. "So late" is
  measured, not guessed: `CommitWindow` is the longest the daemon took, in this very run, from
  Telegram's answer to the `deliveries` row of a part being on disk (the row's `created_at`
  after the fake's `answered_at`, and for the parts of one reply the next part's arrival after
  the previous part's answer, which the outbox sends only once that part's row is committed).
  Telegram's own delay before answering is the one thing no process can shorten;
* `deliveries` does not record it as sent before the second copy went out (a recorded part is
  one the redelivery must skip: a second copy of it is a bug, however the kill fell).

and no later send proves the process had moved on past it: any later send by the same process
to the same chat (the outbox sends to a chat one message at a time, each part recorded before
the next send to that chat: bruce_bot/messaging/outbox.py). Each copy can excuse at most the one
copy that follows it, so one kill excuses at most one copy per send in flight at it.

Lateness: a reminder is late when Bruce was up (ready, not yet stopped) for more than
`LATE_LIMIT` seconds in all between its due time and its delivery (`uptime_between`), not
counting the time its chat's line was busy (`busy_uptime`: a send to that chat Telegram was
answering, or a `retry_after` its sending limits imposed there — a chat's messages go one at a
time, and Telegram takes about one a second): the restart that could deliver it has that
long. A briefing is judged by its firing (its run's `created_at` in `task_runs`): once fired it
is a turn like any message, which must be answered, once, but whose model takes the time it
takes. A chaos run with fewer than `MIN_STOPS` stops has
not tested what it claims (`too_few_stops`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from tests.fakes.telegram_server import SentMessage

LATE_LIMIT = 5.0  # seconds of Bruce being up between a firing's due time and its delivery
MIN_STOPS = 8  # a chaos phase that stops the daemon fewer times than this fails


class Lifetime(Protocol):
    """One process of the daemon, from spawn to exit (chaos_support.Run; `time.time()`)."""

    spawned_at: float
    ready_at: float | None
    signal: str | None
    signalled_at: float | None
    exited_at: float | None

    @property
    def name(self) -> str: ...


@dataclass(slots=True)
class ProcessLife:
    """A `Lifetime` for the crash tests that start and kill one daemon themselves."""

    name: str
    spawned_at: float
    ready_at: float | None = None
    signal: str | None = None
    signalled_at: float | None = None
    exited_at: float | None = None


def utc_seconds(value: Any) -> float | None:
    """A stored timestamp (naive UTC, or aware) as `time.time()` seconds."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True, slots=True)
class Recorded:
    """A `deliveries` row saying that one attempt at one part of a stored message was sent."""

    message_id: int
    part: int  # 0-based, as the outbox numbers parts
    attempt: int
    at: float  # its created_at: stamped once the process had Telegram's answer


def sent_rows(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[int, int], list[Recorded]]:
    """(message id, part) -> the rows recording it sent, oldest first, from
    `SELECT message_id, part, attempt, status, created_at FROM deliveries`."""
    found: dict[tuple[int, int], list[Recorded]] = {}
    for row in rows:
        at = utc_seconds(row.get("created_at"))
        if row.get("status") != "sent" or row.get("message_id") is None or at is None:
            continue
        mid, part = int(row["message_id"]), int(row["part"])
        found.setdefault((mid, part), []).append(Recorded(mid, part, int(row["attempt"]), at))
    for recorded in found.values():
        recorded.sort(key=lambda row: row.at)
    return found


def recorded_before(recorded: Sequence[Recorded], moment: float) -> Recorded | None:
    """The first row recording the part sent before `moment` (a second copy's arrival)."""
    return next((row for row in recorded if row.at < moment), None)


@dataclass(slots=True)
class CommitWindow:
    """The longest the daemon took from Telegram's answer to having a part on disk, as
    measured in this run (`seconds`; 0 until something was measured)."""

    samples: list[float] = field(default_factory=list)

    def add(self, answered_at: float | None, on_disk_at: float) -> None:
        if answered_at is not None and on_disk_at >= answered_at:
            self.samples.append(on_disk_at - answered_at)

    def measure(self, copies: Sequence[SentMessage], recorded: Sequence[Recorded]) -> None:
        """Samples from one part's copies and the rows recording it: each row belongs to the
        last copy that arrived before it."""
        for row in recorded:
            before = [copy for copy in copies if copy.received_at <= row.at]
            if before:
                self.add(before[-1].answered_at, row.at)

    def measure_next_part(self, previous: SentMessage, following: SentMessage) -> None:
        """The next part of a reply, sent at its first attempt by the same process: it left
        only once the previous part's row was committed."""
        if previous.answered_at is not None and following.received_at > previous.answered_at:
            self.add(previous.answered_at, following.received_at)

    def measure_reply(
        self,
        parts: Sequence[Sequence[tuple[SentMessage, object]]],
        recorded: Sequence[Sequence[Recorded]],
    ) -> None:
        """Samples from one stored reply: `parts[i]` are the copies of its part i, each with
        the process that sent it, `recorded[i]` the rows recording part i sent. Every row
        against its copy, and every next part a process sent at its first attempt (no 429, no
        retry in between) against its previous part's answer."""
        for index, copies in enumerate(parts):
            rows = recorded[index] if index < len(recorded) else ()
            self.measure([copy for copy, _ in copies], rows)
            if index + 1 >= len(parts):
                continue
            next_rows = recorded[index + 1] if index + 1 < len(recorded) else ()
            for copy, process in copies:
                following = [
                    other
                    for other, sender in parts[index + 1]
                    if sender == process and other.received_at > copy.received_at
                ]
                if not following:
                    continue
                row = next((r for r in next_rows if r.at >= following[0].received_at), None)
                if row is not None and row.attempt == 1:
                    self.measure_next_part(copy, following[0])

    @property
    def seconds(self) -> float:
        return max(self.samples, default=0.0)

    def describe(self) -> str:
        if not self.samples:
            return "nothing measured"
        ordered = sorted(self.samples)
        median = ordered[len(ordered) // 2]
        return f"{self.seconds:.3f} s (median {median:.3f} s over {len(ordered)} sends)"


@dataclass(frozen=True, slots=True)
class Verdict:
    excused: bool
    why: str


def in_flight_excuse(
    first: SentMessage,
    sender: Lifetime | None,
    window: CommitWindow,
    *,
    again_at: float,
    recorded: Sequence[Recorded] = (),
    moved_on: SentMessage | None = None,
) -> Verdict:
    """Whether a second copy (arriving at `again_at`) of `first` is fair. `sender`: the process
    that sent `first`, stopped before the second copy (None: none was, the same process or a
    live one sent it twice); `recorded`: the rows recording that part sent; `moved_on`: the
    first later send by the same process to the same chat (see the module docstring)."""
    if sender is None or sender.signalled_at is None:
        return Verdict(False, "not stopped in between: a process that kept running sent it twice")
    stopped, exited = sender.signalled_at, sender.exited_at or again_at
    if not sender.spawned_at <= first.received_at <= exited:
        return Verdict(False, f"not in flight: {sender.name} was not running when it came")
    row = recorded_before(recorded, again_at)
    if row is not None:
        return Verdict(
            False,
            f"not unrecorded: deliveries recorded part {row.part} of message {row.message_id} "
            f"sent ({row.at - stopped:+.2f} s from the {sender.signal} of {sender.name}), and "
            "it was sent again",
        )
    if sender.signal != "SIGKILL":
        return Verdict(False, f"not excused: in flight at the {sender.signal} of {sender.name}")
    if moved_on is not None and moved_on.received_at <= stopped:
        return Verdict(
            False,
            f"not in flight only: {sender.name} went on to send {moved_on.plain[:40]!r} to the "
            f"chat {moved_on.received_at - first.received_at:.2f} s later without recording it",
        )
    if first.answered_at is not None and first.answered_at + window.seconds < stopped:
        return Verdict(
            False,
            f"not in flight: Telegram answered {stopped - first.answered_at:.3f} s before the "
            f"SIGKILL of {sender.name}, longer than the commit window measured in this run "
            f"({window.seconds:.3f} s)",
        )
    answered = (
        "unanswered"
        if first.answered_at is None or first.answered_at > stopped
        else f"answered {stopped - first.answered_at:.3f} s before it (window "
        f"{window.seconds:.3f} s)"
    )
    return Verdict(True, f"in flight at the SIGKILL of {sender.name}: {answered}, unrecorded")


def uptime_between(runs: Iterable[Lifetime], start: float, end: float, now: float) -> float:
    """Seconds of `start`..`end` when one of `runs` was ready and not yet stopped."""
    up = 0.0
    for run in runs:
        if run.ready_at is None:
            continue
        stopped = run.signalled_at or run.exited_at or now
        up += max(0.0, min(end, stopped) - max(start, run.ready_at))
    return up


def busy_uptime(
    busy: Iterable[tuple[float, float]],
    start: float,
    end: float,
    uptime: Callable[[float, float], float],
) -> float:
    """Seconds of `start`..`end` when Bruce was up (`uptime(a, b)`: its seconds up in a..b) and
    a chat's line was `busy` (intervals: a send Telegram was answering, a wait its
    `retry_after` imposed)."""
    spans = list(busy)
    edges = sorted({start, end, *(t for span in spans for t in span if start < t < end)})
    return sum(
        uptime(left, right)
        for left, right in itertools.pairwise(edges)
        if any(a <= (left + right) / 2 < b for a, b in spans)
    )


def lateness_problem(what: str, late: float, limit: float = LATE_LIMIT) -> str | None:
    """The problem of a firing `late` seconds of uptime late, if that is over `limit`."""
    if late <= limit:
        return None
    return f"LATE {what}: {late:.1f} s late while Bruce was up (limit {limit:.0f} s)"


def too_few_stops(stops: int, minimum: int = MIN_STOPS) -> str | None:
    if stops >= minimum:
        return None
    return (
        f"TOO FEW STOPS: the chaos phase stopped the daemon {stops} times, fewer than "
        f"{minimum}: it did not test what it claims (a slow machine, or starts that hang)"
    )
