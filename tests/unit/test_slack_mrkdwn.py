"""Markdown as Slack mrkdwn, and mrkdwn cut at Slack's limit (channels/slack/mrkdwn.py)."""

from __future__ import annotations

import pytest

from bruce_bot.channels.slack.mrkdwn import MAX_TEXT_CHARS, escape, split_mrkdwn, to_mrkdwn


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold**", "*bold*"),
        ("__bold__", "*bold*"),
        ("*italic*", "_italic_"),
        ("_italic_", "_italic_"),
        ("~~gone~~", "~gone~"),
        ("**bold** then *it*", "*bold* then _it_"),
        ("`a < b`", "`a &lt; b`"),
        (
            "[the docs](https://example.org/a?b=1&c=2)",
            "<https://example.org/a?b=1&amp;c=2|the docs>",
        ),
        ("<https://example.org>", "<https://example.org>"),
        ("# Title", "*Title*"),
        ("## Sub **x**", "*Sub x*"),
        ("- one\n* two\n  + three", "• one\n• two\n  • three"),
        ("> quoted\nnot", "> quoted\nnot"),
        ("2*3*4 = 24 and snake_case_name", "2*3*4 = 24 and snake_case_name"),
    ],
)
def test_markdown_becomes_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_the_three_markup_characters_are_escaped() -> None:
    assert escape("a < b & c > d") == "a &lt; b &amp; c &gt; d"
    # A model writing a broadcast mention or a link by hand pings nobody, links nothing.
    assert to_mrkdwn("<!channel> hi <@U123>") == "&lt;!channel&gt; hi &lt;@U123&gt;"


def test_a_fenced_block_keeps_its_text_unformatted_and_escaped() -> None:
    markdown = "```python\nif a < b and c:\n    print('**x**')\n```\nafter"
    assert to_mrkdwn(markdown) == "```\nif a &lt; b and c:\n    print('**x**')\n```\nafter"


def test_markup_inside_a_code_span_is_left_alone() -> None:
    assert to_mrkdwn("run `**not bold**` now") == "run `**not bold**` now"


def test_a_link_that_is_not_a_web_address_is_shown_not_linked() -> None:
    assert to_mrkdwn("[rel](/foo)") == "rel (/foo)"


def test_a_pipe_cannot_end_a_link_early() -> None:
    assert to_mrkdwn("[a|b](https://x.org/c|d)") == "<https://x.org/c%7Cd|a¦b>"


def test_a_short_text_is_one_part() -> None:
    assert split_mrkdwn("hello") == ["hello"]


def test_a_long_text_is_cut_under_the_limit_between_words() -> None:
    text = "word " * 20_000
    parts = split_mrkdwn(text)
    assert len(parts) == 3
    assert all(len(part) <= MAX_TEXT_CHARS for part in parts)
    assert "".join(parts).replace(" ", "") == text.replace(" ", "")


def test_a_code_block_cut_in_two_is_closed_and_reopened() -> None:
    text = "```\n" + "\n".join(f"line {n}" for n in range(100)) + "\n```"
    parts = split_mrkdwn(text, 200)
    assert all(len(part) <= 200 for part in parts)
    assert all(part.count("```") == 2 for part in parts)


def test_a_hard_cut_never_breaks_an_entity() -> None:
    text = "x" * 8 + "&amp;" + "y" * 40
    for part in split_mrkdwn(text, 11):
        assert "&" not in part or "&amp;" in part
