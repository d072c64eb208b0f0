"""When the analytical brain runs: the local rules after each exchange, and their config keys."""

from __future__ import annotations

from typing import Any

import pytest

from bruce_bot.agent.brain.triggers import BrainTriggers, TriggerRules, content_words, overlap
from bruce_bot.config import ConfigError, validate

LISBON = (
    "Plan a weekend in Lisbon: hotels near the trams and good food.",
    "Lisbon hotels near the trams, the weekend is in May.",
    "Which Lisbon trams reach the food markets this weekend?",
    "Lisbon weekend again: hotels or apartments near the trams?",
)
FUNDS = "Something else entirely: explain index fund expense ratios for beginners."


def triggers(**rules: Any) -> BrainTriggers:
    return BrainTriggers(TriggerRules(**rules))


def reasons(brain: BrainTriggers, texts: list[str], named: bool = True) -> list[str | None]:
    return [brain.exchange(1, [text, f"ack: {text}"], named) for text in texts]


def test_content_words_leave_out_small_talk_and_fold_word_forms() -> None:
    assert content_words(["Thanks, that's great!"]) == frozenset()
    assert content_words(["ok"]) == frozenset()
    assert content_words(["The trams"]) == content_words(["a tram"])
    assert content_words(["investing"]) == content_words(["investment"])
    assert content_words(["Lisbon 2025"]) == {"lisbo"}
    assert overlap(content_words(["Lisbon trams"]), [content_words(["trams of Porto"])]) == 0.5
    assert overlap(frozenset(), []) == 1.0


def test_an_unnamed_session_runs_for_its_first_exchanges_only() -> None:
    brain = triggers(naming_exchanges=2, every_exchanges=100)
    assert reasons(brain, list(LISBON[:3]), named=False) == ["unnamed", "unnamed", None]
    named = triggers(naming_exchanges=2, every_exchanges=100)
    assert reasons(named, list(LISBON[:2]), named=True) == [None, None]


def test_a_new_topic_is_a_shift_and_the_same_topic_is_not() -> None:
    brain = triggers(every_exchanges=100)
    assert reasons(brain, [*LISBON, FUNDS]) == [None, None, None, None, "topic_shift"]


def test_a_shift_needs_enough_words_and_something_to_compare_with() -> None:
    # Right after the first exchange there is too little to compare with.
    assert reasons(triggers(every_exchanges=100), [LISBON[0], FUNDS]) == [None, None]
    # A short new subject says too little to tell.
    brain = triggers(every_exchanges=100, topic_min_words=4)
    assert brain.exchange(1, ["Porto?"], True) is None
    assert reasons(brain, [*LISBON[:2]]) == [None, None]
    assert brain.exchange(1, ["Porto?", "Porto: port wine"], True) is None
    # With the signal switched off, nothing is a shift.
    assert (
        reasons(triggers(every_exchanges=100, topic_shift_overlap=0.0), [*LISBON, FUNDS])
        == [None] * 5
    )


def test_every_n_counts_the_exchanges_since_the_last_run_started() -> None:
    brain = triggers(every_exchanges=3)
    assert reasons(brain, [LISBON[0]] * 3) == [None, None, "every_exchanges"]
    brain.run_started(1)
    assert reasons(brain, [LISBON[1]] * 3) == [None, None, "every_exchanges"]
    brain.run_started(1)
    assert reasons(brain, [LISBON[2]]) == [None]


def test_what_a_run_read_is_remembered_per_session() -> None:
    brain = triggers()
    assert brain.read_until(7) == 0
    brain.run_read(7, 42)
    brain.run_read(7, 40)  # an older read never moves it back
    assert (brain.read_until(7), brain.read_until(8)) == (42, 0)


def brain_error(**keys: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        validate({"brain": keys})
    return "\n".join(caught.value.problems)


def test_the_brain_keys_have_defaults_and_are_checked() -> None:
    brain = validate({}).brain
    assert (brain.every_exchanges, brain.naming_exchanges, brain.lookback_messages) == (10, 2, 2)
    assert (brain.topic_shift_overlap, brain.topic_min_words, brain.coalesce_seconds) == (
        0.15,
        4,
        2.0,
    )
    assert TriggerRules.of(brain) == TriggerRules()
    assert "brain.every_exchanges" in brain_error(every_exchanges=0)
    assert "brain.topic_shift_overlap" in brain_error(topic_shift_overlap=1.5)
    assert "brain.coalesce_seconds" in brain_error(coalesce_seconds=-1)
    problem = brain_error(context_messages=4, lookback_messages=4)
    assert "brain.lookback_messages (4) must be smaller than brain.context_messages (4)" in problem
