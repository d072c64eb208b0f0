"""Long replies are split at the platform limit on natural boundaries, code fences intact."""

from __future__ import annotations

from bruce_bot.text import split_text


def test_short_text_is_one_part() -> None:
    assert split_text("hello", 4096) == ["hello"]


def test_split_prefers_paragraphs_and_keeps_order() -> None:
    paragraphs = [f"Paragraph {i}: " + "word " * 150 for i in range(12)]
    text = "\n\n".join(paragraphs)
    parts = split_text(text, 2000)
    assert all(len(part) <= 2000 for part in parts)
    assert len(parts) > 1
    joined = " ".join(parts)
    positions = [joined.index(f"Paragraph {i}:") for i in range(12)]
    assert positions == sorted(positions)
    assert all(part.split()[0] == "Paragraph" for part in parts)  # no paragraph cut mid-way


def test_a_single_huge_word_is_hard_cut() -> None:
    parts = split_text("x" * 9000, 4096)
    assert all(len(part) <= 4096 for part in parts)
    assert "".join(parts) == "x" * 9000


def test_a_code_fence_split_across_parts_is_closed_and_reopened() -> None:
    code = "\n".join(f"print({i})" for i in range(600))
    text = "Here is the script:\n\n```python\n" + code + "\n```\nDone."
    parts = split_text(text, 2000)
    assert len(parts) > 2
    for part in parts:
        assert len(part) <= 2000
        assert part.count("```") % 2 == 0, part[:80]
    assert parts[1].startswith("```python\n")
    restored = "".join(p.removeprefix("```python\n").removesuffix("\n```") for p in parts)
    for i in (0, 299, 599):
        assert f"print({i})" in restored
