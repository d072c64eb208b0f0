"""The guard flags answers that claim an action no tool performed, and nothing else."""

from __future__ import annotations

import pytest

from bruce_bot.agent.guard import correction_request, find_unbacked_claim
from bruce_bot.domain import ToolCall, ToolExecution, ToolResult

SAVED = ToolExecution(
    1,
    ToolCall("t1", "artifact_save", {"filename": "news.html"}),
    ToolResult("t1", "artifact_save", "Artifact saved at http://h/artifacts/abc-123/news.html"),
    3.0,
)
FAILED_SAVE = ToolExecution(
    1,
    ToolCall("t1", "artifact_save", {}),
    ToolResult("t1", "artifact_save", "Error: too large", is_error=True),
    3.0,
)
SCHEDULED = ToolExecution(
    1, ToolCall("t2", "proactive_create", {}), ToolResult("t2", "proactive_create", "Task 4"), 1.0
)


@pytest.mark.parametrize(
    "text",
    [
        "I've saved the report as news.html.",
        "I have generated your HTML dashboard: View Dashboard.",
        "Here it is: http://127.0.0.1:8080/artifacts/1234-abcd/news.html",
        "Criei o relatório em HTML para você.",
        "He generado el informe. Guardé el archivo.",
    ],
)
def test_artifact_claims_without_a_save_are_caught(text: str) -> None:
    claim = find_unbacked_claim(text, [])
    assert claim is not None and claim.kind == "artifact"


@pytest.mark.parametrize(
    "text",
    [
        "Done! I've scheduled a reminder for 8:00.",
        "I'll remind you in two minutes.",
        "Agendei o lembrete para amanhã.",
        "Reminder set: I have set a reminder for Monday.",
    ],
)
def test_schedule_claims_without_a_task_are_caught(text: str) -> None:
    claim = find_unbacked_claim(text, [])
    assert claim is not None and claim.kind == "schedule"


@pytest.mark.parametrize(
    "text",
    [
        "Here are the top 3 stories: 1) ... 2) ... 3) ...",
        "I can create an HTML report for you if you like.",
        "Python 3.13 was released in October 2024.",
        "Would you like me to set a reminder?",
        "The file format is documented on the project page.",
        "Do you remember the name of the hotel?",
        "I remember reading that the museum closes on Mondays.",
        "Would you like me to remember that for next time?",
    ],
)
def test_ordinary_answers_are_left_alone(text: str) -> None:
    assert find_unbacked_claim(text, []) is None


def test_a_claim_backed_by_a_successful_tool_passes() -> None:
    text = "I've saved your dashboard: http://h/artifacts/abc-123/news.html"
    assert find_unbacked_claim(text, [SAVED]) is None
    assert find_unbacked_claim("I've scheduled the reminder.", [SCHEDULED]) is None


def test_a_failed_tool_does_not_back_a_claim() -> None:
    assert find_unbacked_claim("I've saved the report file.", [FAILED_SAVE]) is not None


def test_a_link_the_tool_did_not_return_is_caught_even_after_a_save() -> None:
    claim = find_unbacked_claim("See http://h/artifacts/made-up/other.html", [SAVED])
    assert claim is not None and "made-up" in claim.evidence


def test_the_correction_request_names_the_tool_and_offers_both_ways_out() -> None:
    claim = find_unbacked_claim("I've saved the report file.", [])
    assert claim is not None
    text = correction_request(claim, ["artifact_save"])
    assert "call 'artifact_save' now" in text and "rewrite your answer" in text
    unavailable = correction_request(claim, [])
    assert "not available" in unavailable


@pytest.mark.parametrize(
    "text",
    [
        "Got it, I'll remember that you're vegetarian.",
        "I will remember your daughter's birthday.",
        "Noted: I've saved that to my memory.",
        "Pode deixar, vou me lembrar disso.",
        "Guardei na memória que você é vegetariana.",
        "Entendido, lo recordaré.",
    ],
)
def test_memory_claims_without_a_save_are_caught(text: str) -> None:
    claim = find_unbacked_claim(text, [])
    assert claim is not None and claim.kind == "memory"
    remembered = ToolExecution(
        1,
        ToolCall("t3", "memory_save", {"text": "Is vegetarian"}),
        ToolResult("t3", "memory_save", "Saved as memory #1: Is vegetarian"),
        2.0,
    )
    assert find_unbacked_claim(text, [remembered]) is None
    request = correction_request(claim, ["memory_save"])
    assert "remembering something for later conversations" in request
    assert "call 'memory_save' now" in request
