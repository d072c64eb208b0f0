"""Markdown → Telegram HTML, and the 4096 UTF-16 limit a message must fit after conversion."""

from __future__ import annotations

import pytest

from bruce_bot.channels.telegram.markup import (
    TELEGRAM_TEXT_LIMIT,
    fit_plain,
    is_telegram_html,
    render_pieces,
    to_telegram_html,
    utf16_len,
)
from tests.fakes.telegram_html import MarkupError, parse_html


def test_markdown_becomes_escaped_telegram_html() -> None:
    html = to_telegram_html("**Total**: 3 < 4 & `a<b` [docs](https://x.test/?a=1&b=2)")
    assert html == (
        '<b>Total</b>: 3 &lt; 4 &amp; <code>a&lt;b</code> <a href="https://x.test/?a=1&amp;b=2">'
        "docs</a>"
    )
    assert parse_html(html) == "Total: 3 < 4 & a<b docs"


def test_raw_html_from_the_model_is_shown_as_text() -> None:
    html = to_telegram_html("<script>alert(1)</script> <b>not bold</b>")
    assert html is not None
    assert parse_html(html) == "<script>alert(1)</script> <b>not bold</b>"


@pytest.mark.parametrize(
    "markdown",
    [
        "*a **b* c**",  # crossed emphasis: the converter nests tags wrongly
        '[x](https://a.test/"><b>)',  # a quote inside the URL breaks the attribute
    ],
)
def test_conversions_telegram_would_refuse_fall_back_to_plain(markdown: str) -> None:
    assert to_telegram_html(markdown) is None
    [piece] = render_pieces(markdown)
    assert piece.html is None and piece.source == markdown


@pytest.mark.parametrize(
    ("html", "valid"),
    [
        ("<b>x</b> <i>y</i>", True),
        ('<pre><code class="language-py">a &lt; b</code></pre>', True),
        ('<span class="tg-spoiler">s</span> <blockquote expandable>q</blockquote>', True),
        ("<b><i>x</b></i>", False),
        ("<b>x", False),
        ("<div>x</div>", False),
        ("a < b", False),
        ('<span class="x">s</span>', False),  # a span is a spoiler or refused
        ('<tg-emoji emoji-id="thumbs">👍</tg-emoji>', False),  # the id is a number
        ('<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji>', True),
        ("&#128512; &#x1F600;", True),
        ("&#xD83D;", False),  # half a surrogate pair
        # Telegram takes these as they are (tdlib's parse_html; tests/fakes/telegram_html.py):
        ('<a href="u" onclick="x">y</a>', True),  # attributes it has no use for are ignored
        ("a & b", True),  # a & that starts no entity is text
        ("a &nbsp; b", True),  # shown as typed: only lt, gt, amp and quot are named entities
        ("a &lt b", True),  # the ; is optional
        ("2 > 1", True),  # a bare > is text
    ],
)
def test_html_is_checked_against_telegrams_rules(html: str, valid: bool) -> None:
    assert is_telegram_html(html) is valid
    assert _telegram_takes(html) is valid


def _telegram_takes(html: str) -> bool:
    try:
        parse_html(html)
    except MarkupError:
        return False
    return True


def test_pieces_fit_the_limit_in_utf16_units() -> None:
    markdown = "\n".join(["<&> " * 200] * 6)  # 4800 characters, 19,000+ once escaped
    pieces = render_pieces(markdown)
    assert len(pieces) > 1
    for piece in pieces:
        assert utf16_len(piece.html or piece.source) <= TELEGRAM_TEXT_LIMIT
    visible = "".join(parse_html(p.html) if p.html else p.source for p in pieces)
    assert visible.replace("\n", "").replace(" ", "") == markdown.replace("\n", "").replace(" ", "")


def test_emoji_count_twice_toward_the_limit() -> None:
    text = "😀" * 3000  # 3000 characters, 6000 UTF-16 units
    chunks = fit_plain(text)
    assert len(chunks) == 2
    assert all(utf16_len(chunk) <= TELEGRAM_TEXT_LIMIT for chunk in chunks)
    assert "".join(chunks) == text


def test_short_text_is_one_piece() -> None:
    assert [p.source for p in render_pieces("hello")] == ["hello"]
    assert fit_plain("   ") == []
