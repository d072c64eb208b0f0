"""storage/memories.py's small rules: whose a memory is, and its tags normalised."""

from __future__ import annotations

from bruce_bot.storage.memories import clean_tags, owner_key


def test_owners_and_tags_are_normalised() -> None:
    assert owner_key("telegram", "42") == "telegram:42"
    assert owner_key("telegram", "") == "" and owner_key("", "42") == ""
    assert clean_tags(["Diet", "diet", "  Family  Names ", "#work", ""]) == [
        "diet",
        "family-names",
        "work",
    ]
