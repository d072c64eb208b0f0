"""Skills and workflows on disk: the built-ins, the folders of `skills.dirs`, which one wins, and
what happens to a file that cannot be used (skipped, with a log line naming it and the problem)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from bruce_bot.agent.brain.library import MAX_FILE_BYTES, load_library


def write(path: Path, name: str, description: str, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    return path


def skipped(logs: list[dict[str, Any]]) -> dict[str, str]:
    """file -> problem, for every file the loader skipped."""
    return {
        entry["file"]: entry["problem"]
        for entry in logs
        if entry["event"] == "brain_library_file_skipped"
    }


def test_the_built_in_skills_and_workflows_load_with_their_descriptions() -> None:
    with capture_logs() as logs:
        library = load_library()
    assert {"research", "writing-reports", "planning"} <= set(library.skills)
    assert {"research-report", "trip-planning"} <= set(library.workflows)
    for document in [*library.skills.values(), *library.workflows.values()]:
        assert document.description and len(document.content) > 200, document.name
        assert not document.content.startswith("---")  # the front matter is not content
    assert skipped(logs) == {}
    assert library.skills["research"].kind == "skill"
    assert library.workflows["trip-planning"].kind == "workflow"


def test_a_users_folder_adds_skills_and_workflows_in_both_layouts(tmp_path: Path) -> None:
    write(tmp_path / "skills" / "tea.md", "tea-expert", "Brewing tea.", "Oolong first.")
    write(tmp_path / "skills" / "bread" / "SKILL.md", "baking", "Baking bread.", "Knead well.")
    write(tmp_path / "workflows" / "move.md", "moving-house", "Moving house.", "1. Boxes.")
    write(tmp_path / "workflows" / "garden" / "WORKFLOW.md", "garden", "A garden.", "1. Dig.")
    library = load_library([tmp_path])
    assert library.skills["tea-expert"].content == "Oolong first."
    assert library.skills["baking"].source == tmp_path / "skills" / "bread" / "SKILL.md"
    assert library.workflows["moving-house"].content == "1. Boxes."
    assert library.workflows["garden"].description == "A garden."
    assert "research" in library.skills  # the built-ins stay


def test_a_later_folder_overrides_a_built_in_and_an_earlier_folder_of_the_same_name(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write(first / "skills" / "research.md", "research", "My research.", "Only use arXiv.")
    write(first / "skills" / "tea.md", "tea-expert", "Tea, first.", "Green tea.")
    write(second / "skills" / "tea.md", "tea-expert", "Tea, second.", "Black tea.")
    write(second / "workflows" / "trip.md", "trip-planning", "My trips.", "1. Pack light.")
    with capture_logs() as logs:
        library = load_library([first, second])
    assert library.skills["research"].content == "Only use arXiv."
    assert library.skills["tea-expert"].content == "Black tea."
    assert library.workflows["trip-planning"].content == "1. Pack light."
    overridden = {e["name"] for e in logs if e["event"] == "brain_library_overridden"}
    assert overridden == {"research", "tea-expert", "trip-planning"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Just instructions, no front matter.\n", "no front matter"),
        ("---\nname: [unclosed\ndescription: x\n---\nBody\n", "not valid YAML"),
        ("---\n- a\n- list\n---\nBody\n", "must be 'key: value' lines"),
        ("---\ndescription: No name.\n---\nBody\n", "'name' is missing"),
        ("---\nname: Bad Name!\ndescription: x\n---\nBody\n", "name 'Bad Name!' is not allowed"),
        ("---\nname: no-description\n---\nBody\n", "'description' is missing"),
        ("---\nname: empty\ndescription: Nothing below.\n---\n\n  \n", "no instructions"),
        ("---\nname: unterminated\ndescription: x\nBody\n", "no front matter"),
    ],
)
def test_a_malformed_file_is_skipped_with_a_log_line_naming_it_and_the_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    bad = tmp_path / "skills" / "bad.md"
    bad.parent.mkdir(parents=True)
    bad.write_text(text)
    good = write(tmp_path / "skills" / "good.md", "good-one", "Fine.", "Works.")
    with capture_logs() as logs:
        library = load_library([tmp_path], builtin=None)
    assert set(library.skills) == {"good-one"}
    problems = skipped(logs)
    assert list(problems) == [str(bad)]
    assert problem in problems[str(bad)]
    assert str(good) not in problems


def test_oversized_binary_and_duplicate_files_are_skipped_too(tmp_path: Path) -> None:
    big = write(tmp_path / "skills" / "big.md", "big", "Too big.", "x" * (MAX_FILE_BYTES + 1))
    binary = tmp_path / "skills" / "binary.md"
    binary.write_bytes(b"---\nname: bin\ndescription: x\n---\n\xff\xfe\x00")
    write(tmp_path / "workflows" / "a.md", "same", "First.", "1. A.")
    duplicate = write(tmp_path / "workflows" / "b.md", "same", "Second.", "1. B.")
    with capture_logs() as logs:
        library = load_library([tmp_path], builtin=None)
    assert library.skills == {}
    assert library.workflows["same"].content == "1. A."
    problems = skipped(logs)
    assert "bytes; at most" in problems[str(big)]
    assert "not UTF-8" in problems[str(binary)]
    assert "already named 'same'" in problems[str(duplicate)]


def test_a_missing_or_empty_folder_is_reported_and_the_rest_still_loads(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "stray.md").write_text("---\nname: stray\ndescription: x\n---\nBody\n")
    write(tmp_path / "ok" / "skills" / "tea.md", "tea-expert", "Tea.", "Oolong.")
    with capture_logs() as logs:
        library = load_library([tmp_path / "nowhere", tmp_path / "empty", tmp_path / "ok"])
    assert "tea-expert" in library.skills and "research" in library.skills
    assert "stray" not in library.skills  # flat files outside skills/ and workflows/ are not read
    events = {e["event"]: e for e in logs}
    assert events["brain_library_dir_missing"]["dir"] == str(tmp_path / "nowhere")
    assert events["brain_library_dir_empty"]["dir"] == str(tmp_path / "empty")
    assert "skills/ or workflows/" in events["brain_library_dir_empty"]["problem"]
