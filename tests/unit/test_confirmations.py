"""scheduler/confirmations.py on its own: how a typed answer to what waits for the user is read."""

from __future__ import annotations

import pytest

from bruce_bot.scheduler.confirmations import Answer, answer_of


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("yes", Answer(True, "yes")),
        ("No.", Answer(False, "no")),
        ("yes t12", Answer(True, "yes", "t12")),
        ("ok #a3", Answer(True, "ok", "a3")),
        ("no 7", Answer(False, "no", "t7")),
        ("yes please do it", None),
        ("maybe a3", None),
        ("", None),
    ],
)
def test_typed_answers_are_read_strictly(text: str, answer: Answer | None) -> None:
    assert answer_of(text) == answer
