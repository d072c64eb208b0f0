"""When the analytical brain runs: cheap local rules, applied after each finished exchange.

A brain run is an LLM call carrying the whole brain prompt, so it is made only when it can
change something: while a session has no name yet (a main conversation's title, a sub-agent's
nickname), for its first `naming_exchanges` exchanges; every `every_exchanges` exchanges (goals
and skills drift slowly); and when the topic may have shifted. The shift signal is word overlap,
never a model call: the share of the new exchange's content words (user and reply, stop words
dropped, crude stems) found in the few exchanges before it; under `topic_shift_overlap` it is a
shift. An exchange with fewer than `topic_min_words` content words carries no signal, nor does
one with too little before it to compare with. A sub-agent's spawn asks for a run directly
(`AnalyticalBrain.observe`). What is known per session lives in memory only, for a bounded
number of sessions: after a restart a session starts afresh, which costs at most an early run
or a late one.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from bruce_bot.config import BrainConfig

Reason = Literal["unnamed", "every_exchanges", "topic_shift"]

MAX_WATCHED_SESSIONS = 2_000  # the least recently active sessions are forgotten beyond this
RECENT_EXCHANGES = 4  # "the recent ones" a new exchange is compared with
MIN_RECENT_EXCHANGES = 2  # fewer than this before it: too little to call anything a shift
STEM_CHARS = 5
_WORD = re.compile(r"[^\W\d_]{3,}")
# Function words and the small talk of any topic: they say nothing about what is discussed.
STOP_WORDS = frozenset(
    """
    about above after again against all also and any are aren because been before being below
    between both but can cannot could couldn did didn does doesn doing don down during each few
    for from further had hadn has hasn have haven having her here hers herself him himself his how
    into isn its itself just let lets more most mustn myself nor not now off once only other ought
    our ours ourselves out over own same shan she should shouldn some such than that thats the
    their theirs them themselves then there these they this those through too under until very
    was wasn were weren what when where which while who whom why will with won would wouldn you
    your yours yourself yourselves yes yeah okay thanks thank please sure great good nice cool
    fine well really maybe like want need know think tell help make get got going use used way
    thing things something anything much many lot lots one two first last next new old today
    tomorrow still even ever bruce hello hey bye right kind sort quite glad welcome happy
    """.split()
)


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word[:STEM_CHARS]


def content_words(texts: Iterable[str]) -> frozenset[str]:
    """The stems of the words that say what `texts` are about."""
    return frozenset(
        _stem(word)
        for text in texts
        for word in _WORD.findall(text.lower())
        if word not in STOP_WORDS
    )


def overlap(words: frozenset[str], recent: Iterable[frozenset[str]]) -> float:
    """The share of `words` that occur in `recent` (1.0 for no words)."""
    if not words:
        return 1.0
    seen = frozenset().union(*recent)
    return len(words & seen) / len(words)


@dataclass(frozen=True, slots=True)
class TriggerRules:
    every_exchanges: int = 10
    naming_exchanges: int = 2
    topic_shift_overlap: float = 0.15
    topic_min_words: int = 4

    @classmethod
    def of(cls, config: BrainConfig) -> TriggerRules:
        return cls(
            every_exchanges=config.every_exchanges,
            naming_exchanges=config.naming_exchanges,
            topic_shift_overlap=config.topic_shift_overlap,
            topic_min_words=config.topic_min_words,
        )


@dataclass(slots=True)
class SessionWatch:
    """What the triggers know of one session."""

    exchanges: int = 0  # finished exchanges seen by this process
    unread: int = 0  # exchanges since the last run started (it did not read them)
    read_until: int = 0  # the newest message id the last run read (0: none yet)
    recent: deque[frozenset[str]] = field(
        default_factory=lambda: deque(maxlen=RECENT_EXCHANGES)
    )  # content words of the latest exchanges, newest last


class BrainTriggers:
    """Decides, per finished exchange, whether the brain should look at the session."""

    def __init__(self, rules: TriggerRules) -> None:
        self._rules = rules
        self._watches: OrderedDict[int, SessionWatch] = OrderedDict()

    def _watch(self, session_id: int) -> SessionWatch:
        watch = self._watches.get(session_id)
        if watch is None:
            watch = self._watches[session_id] = SessionWatch()
            if len(self._watches) > MAX_WATCHED_SESSIONS:
                self._watches.popitem(last=False)
        else:
            self._watches.move_to_end(session_id)
        return watch

    def exchange(self, session_id: int, texts: Iterable[str], named: bool) -> Reason | None:
        """An exchange finished (`texts`: what the user said and the reply): the reason to
        look at the session now, if there is one."""
        rules = self._rules
        watch = self._watch(session_id)
        watch.exchanges += 1
        watch.unread += 1
        words = content_words(texts)
        shifted = (
            len(watch.recent) >= MIN_RECENT_EXCHANGES
            and len(words) >= rules.topic_min_words
            and overlap(words, watch.recent) < rules.topic_shift_overlap
        )
        watch.recent.append(words)
        if not named and watch.exchanges <= rules.naming_exchanges:
            return "unnamed"
        if shifted:
            return "topic_shift"
        if watch.unread >= rules.every_exchanges:
            return "every_exchanges"
        return None

    def read_until(self, session_id: int) -> int:
        """The newest message id the last run of the session read (0: unknown)."""
        watch = self._watches.get(session_id)
        return watch.read_until if watch is not None else 0

    def run_started(self, session_id: int) -> None:
        """A run is about to read the conversation: nothing before now is unread."""
        self._watch(session_id).unread = 0

    def run_read(self, session_id: int, until_message_id: int) -> None:
        watch = self._watch(session_id)
        watch.read_until = max(watch.read_until, until_message_id)
