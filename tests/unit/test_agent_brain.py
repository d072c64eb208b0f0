"""The brain as data (agent/brain/responsibilities.py: responsibilities per session kind, the
state each needs) and what it reads of a conversation (agent/brain/runner.py: who said what).
Its layers in the agent's prompt are tested with the prompt (test_agent_context.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from bruce_bot.agent.brain.library import Document, Library
from bruce_bot.agent.brain.responsibilities import (
    BrainState,
    Speaker,
    render_state,
    responsibilities_for,
    system_prompt_for,
)
from bruce_bot.agent.brain.runner import briefing, speaker_labels, speaking
from bruce_bot.storage.goals import Goal
from bruce_bot.storage.memories import Memory
from bruce_bot.storage.messages import StoredMessage
from bruce_bot.storage.sessions import SessionRecord

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def goal(goal_id: int, text: str, status: str = "active", parent: int | None = None) -> Goal:
    return Goal(goal_id, 1, text, status, parent, NOW, NOW if status == "completed" else None)


def document(kind: str, name: str, content: str) -> Document:
    return Document(kind, name, f"About {name}.", content, Path(f"{name}.md"))  # type: ignore[arg-type]


def test_each_session_kind_gets_its_own_responsibilities() -> None:
    parent = [r.name for r in responsibilities_for("parent")]
    child = [r.name for r in responsibilities_for("child")]
    assert parent == ["session_naming", "skill_management", "workflow_management", "goal_tracking"]
    assert child == ["sub_agent_naming", "skill_management", "workflow_management", "goal_tracking"]
    system = system_prompt_for(responsibilities_for("child"))
    assert system.startswith("You are the analytical brain")
    assert "You act ONLY through tool calls" in system
    assert "SUB-AGENT NAMING" in system and "SESSION NAMING" not in system
    assert system.rstrip().endswith("at once as your only tool call.")  # completion comes last


def test_the_brain_sees_the_state_its_responsibilities_need() -> None:
    session = SessionRecord(
        1, "web", "x", "parent", None, 0, title="🍵 Tea", active_skills=["gone"]
    )
    library = Library(skills={"research": document("skill", "research", "Search.")})
    goals = [goal(1, "Plan trip"), goal(2, "Pick dates", "completed", 1), goal(3, "Other")]
    text = render_state(responsibilities_for("parent"), BrainState(session, goals, library))
    assert "Session kind: main conversation" in text
    assert "Title: 🍵 Tea" in text
    assert "- research: About research." in text
    assert "- gone: (no longer available; deactivate it)" in text
    assert "Active workflow: none" in text
    assert "- #1 [active] Plan trip\n  - #2 [completed] Pick dates\n- #3 [active] Other" in text
    assert "Nickname" not in text


def test_with_memory_on_a_main_conversation_curates_the_memories_of_each_speaker() -> None:
    assert [r.name for r in responsibilities_for("parent", memory=True)][-1] == "memory_curation"
    assert "memory_curation" not in [r.name for r in responsibilities_for("child", memory=True)]
    session = SessionRecord(1, "telegram", "-5", "parent", None, 0)
    vegetarian = Memory(7, "telegram:1", "Is vegetarian", [], 1, NOW, NOW)
    people = [Speaker("Alice", "telegram:1", [vegetarian]), Speaker("Bob", "telegram:2")]
    state = render_state(
        responsibilities_for("parent", memory=True), BrainState(session, [], Library(), people)
    )
    assert "Person 1 (Alice):\n- #7 Is vegetarian\nPerson 2 (Bob):\n- (nothing yet)" in state


def test_in_a_group_the_brain_reads_who_said_what_by_their_numbers() -> None:
    def said(n: int, user: str | None, author: str, text: str, role: str = "user") -> StoredMessage:
        return StoredMessage(n, 1, role, "chat", text, author, "done", NOW, None, user)  # type: ignore[arg-type]

    new = [
        said(1, "1", "Alice", "I'm vegetarian"),
        said(2, None, "Bruce", "Noted", role="assistant"),
        said(3, "2", "Bob", "I eat everything"),
        said(4, "1", "Alice", "and I hate olives"),
    ]
    assert speaking(new) == {"1": "Alice", "2": "Bob"}
    labels = speaker_labels(speaking(new))
    text = briefing("state", [], new, labels)
    assert "Person 1 (Alice): I'm vegetarian\nBruce: Noted\nPerson 2 (Bob): I eat everything" in (
        text
    )
    assert speaker_labels({"1": "Alice"}) == {"1": "User"}  # one person: as before
