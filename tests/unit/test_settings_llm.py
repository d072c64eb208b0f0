"""settings/llm.py on its own: how a key is shown."""

from __future__ import annotations

from bruce_bot.settings.llm import mask


def test_a_key_is_shown_by_its_ends_only() -> None:
    assert mask("sk-ant-api03-0123456789abcd") == "sk-…abcd"
    assert mask("short-key") == "…ey"
    assert mask("") == ""
