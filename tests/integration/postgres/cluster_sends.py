"""The cluster judges' rule for a part of a reply (or a reminder) that reached a user twice.

A second copy is excused only when all of this holds for the copy before it, `first`, sent by
run R of a process:
- R was SIGKILLed after Telegram took `first` (within `SIGNAL_SLACK`: a send written just before
  the signal lands a moment after the harness noted it), and the second copy came after that
  kill from another run (a live process sending what a live process sent is never excused);
- `first` was in flight at the kill: Telegram had not answered it, or answered it less than the
  commit slack before the kill. The slack is measured in the same test, not assumed: the
  longest time from Telegram's answer to the commit of the `deliveries` row recording that send
  (PostgreSQL's commit timestamps, `track_commit_timestamp`; without them, when the row was
  made), over every send that was recorded;
- `deliveries` does not record `first` as sent (no `sent` row for its message and part was
  committed between `first` and the second copy): a send recorded and repeated anyway is a bug;
- R sent nothing later on the same path to the same chat before the kill: a later part of the
  same reply, or (when `first` was its turn's own send) a later turn's answer, is only sent
  after `first` was recorded. A reminder and a turn's reply, or a redelivery sweep and a turn,
  are independent paths: a later send on another one proves nothing.
Each copy excuses at most the one after it, and only by the kill of its own run: one excused
copy per in-flight send per kill.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.fakes.telegram_server import SentMessage
from tests.integration.chaos_support import HEADER, REMINDER_TEXT, Run

SIGNAL_SLACK = 0.1
# Rows of a query on the cluster's PostgreSQL database (`%s` parameters).
Rows = Callable[..., list[dict[str, Any]]]
PART_KEY = re.compile(r"\[(r\d+) part 1/")


def _moment(value: Any) -> float | None:
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True, slots=True)
class Verdict:
    excused: bool
    why: str


class SendBook:
    """What PostgreSQL recorded of the sends: for each stored reply and part, when each
    `deliveries` row saying `sent` was committed; and the commit slack measured from them."""

    def __init__(self, rows: Rows, sent: Iterable[SentMessage]) -> None:
        found = rows(
            "SELECT d.message_id, d.part, d.created_at, pg_xact_commit_timestamp(d.xmin) AS "
            "committed FROM deliveries d WHERE d.status = 'sent'"
        )
        self.source = "commit timestamps"
        if found and "error" in found[0]:
            self.source = "row times (track_commit_timestamp is off)"
            found = rows(
                "SELECT message_id, part, created_at, NULL AS committed FROM deliveries "
                "WHERE status = 'sent'"
            )
        self.commits: dict[tuple[int, int], list[float]] = {}
        for row in found:
            if "error" in row:
                continue
            at = _moment(row["committed"]) or _moment(row["created_at"])
            if at is not None:
                self.commits.setdefault((row["message_id"], row["part"]), []).append(at)
        self._ids: dict[str, int] = {}
        for row in rows("SELECT id, kind, content FROM messages WHERE role = 'assistant'"):
            content = str(row.get("content", ""))
            answer, reminder = PART_KEY.search(content), REMINDER_TEXT.match(content)
            if answer:
                self._ids[answer.group(1)] = row["id"]
            elif reminder and row.get("kind") == "reminder":
                self._ids[reminder.group(1)] = row["id"]
        self.slack, self.measured = self._measure(list(sent))

    def key(self, sent: SentMessage) -> tuple[int, int] | None:
        """The stored reply and part (from 0) a message at Telegram is a copy of."""
        header = HEADER.search(sent.plain)
        if header:
            found = self._ids.get(header.group(1))
            return None if found is None else (found, int(header.group(2)) - 1)
        reminder = REMINDER_TEXT.search(sent.plain)
        found = self._ids.get(reminder.group(1)) if reminder else None
        return None if found is None else (found, 0)

    def recorded_between(self, key: tuple[int, int] | None, start: float, end: float) -> float:
        """When a `sent` row for `key` was committed within `start`..`end` (0: none)."""
        return next((at for at in self.commits.get(key or (0, 0), ()) if start <= at < end), 0.0)

    def _measure(self, sent: Sequence[SentMessage]) -> tuple[float, int]:
        """The longest time from Telegram's answer to the commit of its record, and how many
        recorded sends it is measured over. Each recorded row is matched with the copy of its
        part that Telegram took last before the commit."""
        copies: dict[tuple[int, int], list[SentMessage]] = {}
        for message in sent:
            key = self.key(message)
            if key is not None:
                copies.setdefault(key, []).append(message)
        delays = []
        for key, commits in self.commits.items():
            for at in commits:
                before = [c for c in copies.get(key, ()) if c.received_at <= at]
                answered = max(before, key=lambda c: c.received_at).answered_at if before else None
                if answered is not None and at >= answered:
                    delays.append(at - answered)
        return max(delays, default=0.0), len(delays)

    def describe(self) -> str:
        return (
            f"commit slack {self.slack:.3f} s, the longest of {self.measured} recorded sends "
            f"({self.source})"
        )


class RepeatJudge:
    """Judges the copies of one part (or reminder) by the rule of the module docstring."""

    def __init__(
        self,
        book: SendBook,
        run_of: Callable[[SentMessage], Run | None],
        producer_of: Callable[[str], Run | None],
        sent: Mapping[int, Sequence[SentMessage]],
        t: Callable[[float | None], str],
    ) -> None:
        self.book = book
        self.run_of = run_of  # the run that sent a copy
        self.producer_of = producer_of  # the run whose turn made answer r7
        self.sent = sent  # per chat, as the fake has them
        self.t = t

    def verdict(self, first: SentMessage, later: SentMessage) -> Verdict:
        run, again = self.run_of(first), self.run_of(later)
        if run is None:
            return Verdict(False, "its first copy is traced to no process run")
        if again is run:
            return Verdict(False, f"not stopped in between: {run.name} sent it twice")
        kill = run.signalled_at
        if run.signal != "SIGKILL" or kill is None:
            how = run.signal or "still running"
            return Verdict(False, f"not excused: {run.name} was not SIGKILLed ({how})")
        if first.received_at > kill + SIGNAL_SLACK:
            return Verdict(False, f"not in flight: sent after the SIGKILL of {run.name}")
        if later.received_at < kill:
            return Verdict(
                False,
                f"not excused: sent again at {self.t(later.received_at)} while {run.name}, "
                "which had sent it, was alive",
            )
        key = self.book.key(first)
        recorded = self.book.recorded_between(key, first.received_at, later.received_at)
        if recorded:
            return Verdict(
                False,
                f"not excused: deliveries recorded it sent (committed {self.t(recorded)}), and it "
                "was sent again",
            )
        if first.answered_at is not None and kill - first.answered_at >= self.book.slack:
            return Verdict(
                False,
                f"not in flight: Telegram answered {kill - first.answered_at:.3f} s before the "
                f"SIGKILL of {run.name}, longer than the measured {self.book.describe()}, and "
                "it was not recorded",
            )
        proof = self._later_on_the_same_path(first, run, kill)
        if proof:
            return Verdict(False, f"not in flight only: {proof}")
        if first.answered_at is None or first.answered_at >= kill:
            answered = "Telegram answered it after the kill"
        else:
            answered = (
                f"Telegram answered it {kill - first.answered_at:.3f} s before, within the "
                f"{self.book.slack:.3f} s measured"
            )
        return Verdict(
            True, f"in flight at the SIGKILL of {run.name} ({self.t(kill)}; {answered}), unrecorded"
        )

    def _later_on_the_same_path(self, first: SentMessage, run: Run, kill: float) -> str:
        header = HEADER.search(first.plain)
        if header is None:
            return ""  # a reminder: other reminders and replies go their own ways
        tag, part = header.group(1), int(header.group(2))
        own = self.producer_of(tag) is run  # the send of the turn that made it
        for other in self.sent.get(first.chat_id, ()):
            if not first.received_at < other.received_at <= kill or self.run_of(other) is not run:
                continue
            found = HEADER.search(other.plain)
            if found is None:
                continue
            if found.group(1) == tag and int(found.group(2)) > part:
                return (
                    f"{run.name} went on to send part {found.group(2)} of {tag} before its "
                    "SIGKILL, so it had recorded this part"
                )
            if own and found.group(1) != tag and self.producer_of(found.group(1)) is run:
                return (
                    f"{run.name} went on to send its next turn's answer {found.group(1)} to this "
                    f"chat at {self.t(other.received_at)}, before its SIGKILL: the turn that sent "
                    f"{tag} had recorded it"
                )
        return ""

    def judge(self, what: str, copies: Sequence[SentMessage]) -> tuple[list[str], list[str]]:
        """(problems, excused) for the copies of one part, oldest first."""
        problems, excused = [], []
        ordered = sorted(copies, key=lambda c: c.received_at)
        for first, later in itertools.pairwise(ordered):
            run, again = self.run_of(first), self.run_of(later)
            verdict = self.verdict(first, later)
            story = (
                f"DOUBLED {what}: the user got it at {self.t(first.received_at)} from "
                f"{run.name if run else '?'} (Telegram answered {self.t(first.answered_at)}) and "
                f"again at {self.t(later.received_at)} from {again.name if again else '?'}: "
                f"{verdict.why}"
            )
            (excused if verdict.excused else problems).append(story)
        return problems, excused

    def unrecorded(self, what: str, copies: Sequence[SentMessage]) -> str | None:
        """A part the user got, of which `deliveries` records no send at all."""
        key = self.book.key(copies[0]) if copies else None
        if key is None or self.book.commits.get(key):
            return None
        return (
            f"UNRECORDED {what}: the user got it {len(copies)} time(s), deliveries never recorded "
            f"it sent (stored reply {key[0]}, part {key[1]})"
        )
