"""Telegram's side of formatting: the model's Markdown as Telegram HTML, in pieces that fit.

The conversion itself is chatgpt-md-converter's `telegram_format` (bold, italic, code blocks,
links, quotes, escaping of `<`, `>` and `&`). This module adds what a bot needs around it: an
HTML check with Telegram's rules (its tag subset, proper nesting), so a conversion that went
wrong is sent as plain text at once instead of being refused; and the 4096 limit, which Telegram
counts in UTF-16 code units: a part whose HTML grew past it is split again (and, when even a
small piece does not fit, sent as plain text). No python-telegram-bot import here: the adapter
(`telegram.py`) is the only module that talks to Telegram.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import structlog
from chatgpt_md_converter import telegram_format

from bruce_bot.text import split_text

log = structlog.get_logger(__name__)

TELEGRAM_TEXT_LIMIT = 4096  # per message, in UTF-16 code units

# Telegram's HTML tags (tdlib's parse_html, which the Bot API server uses for parse_mode HTML),
# but `tg-time`, whose format rules the converter never needs. Attributes Telegram has no use
# for are ignored, so only the tags are listed.
_TAGS = frozenset(
    {
        "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler",
        "a", "tg-emoji", "code", "pre", "blockquote",
    }
)  # fmt: skip
# A tag: its name, then attributes (a name, optionally `=` and a quoted value or a name token).
_TAG = re.compile(
    r"<(/?)([^\s>]*)((?:\s+[^\s=>/\"']+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[a-zA-Z0-9.-]+))?)*)\s*>"
)
_ATTRIBUTE = re.compile(r"""([^\s=>/"']+)(?:\s*=\s*("[^"]*"|'[^']*'|[a-zA-Z0-9.-]+))?""")
# A numerical entity Telegram decodes (`;` optional); one naming a lone surrogate is refused.
_NUMERIC_ENTITY = re.compile(r"&#(?:x([0-9a-fA-F]+)|([0-9]+))")


@dataclass(frozen=True, slots=True)
class Piece:
    """One Telegram message: `html` to send with parse_mode HTML, or None to send `source` as
    plain text. `source` (the Markdown it came from) is also the fallback when Telegram refuses
    the markup."""

    source: str
    html: str | None


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def to_telegram_html(markdown: str) -> str | None:
    """`markdown` as Telegram HTML, or None when the conversion is not something Telegram takes."""
    try:
        converted = telegram_format(markdown)
    except Exception as exc:  # a converter bug must not cost the user their answer
        log.warning("telegram_markup_conversion_failed", error=repr(exc))
        return None
    return converted if is_telegram_html(converted) and converted.strip() else None


def is_telegram_html(text: str) -> bool:
    """True when Telegram takes `text` with parse_mode HTML: only its tags, properly nested,
    `<span>` only as `class="tg-spoiler"`, a `<tg-emoji>` with a numeric id, no bare `<`.

    Telegram's own rules, not a browser's (tdlib's parse_html): a `&` that starts no entity it
    knows (`&nbsp;`, a bare `&`) is shown as typed, `;` is optional, a bare `>` is text, and
    attributes it has no use for are ignored; none of that is refused.
    """
    open_tags: list[tuple[str, str, int]] = []  # (name, argument, where its content starts)
    position = 0
    for match in _TAG.finditer(text):
        if not _plain_text_ok(text[position : match.start()]):
            return False
        position = match.end()
        closing, name, attributes = match.group(1), match.group(2).lower(), match.group(3)
        if closing:
            if attributes.strip() or not open_tags or name not in ("", open_tags[-1][0]):
                return False
            tag, argument, start = open_tags.pop()
            if tag == "tg-emoji" and match.start() > start and not _emoji_id_ok(argument):
                return False
            continue
        if name not in _TAGS:
            return False
        values = {key: value.strip("\"'") for key, value in _ATTRIBUTE.findall(attributes)}
        if name == "span" and values.get("class") != "tg-spoiler":
            return False
        open_tags.append((name, values.get("emoji-id", ""), match.end()))
    return not open_tags and _plain_text_ok(text[position:])


def _emoji_id_ok(value: str) -> bool:
    try:
        return int(value) != 0 and -(2**63) <= int(value) < 2**63
    except ValueError:
        return False


def _plain_text_ok(text: str) -> bool:
    """Text between tags: no `<` (it would start a tag), no entity naming a lone surrogate."""
    if "<" in text:
        return False
    for match in _NUMERIC_ENTITY.finditer(text):
        digits = match.group(1) or match.group(2)
        if (
            len(match.group(0)) < 10
            and 0xD800 <= int(digits, 16 if match.group(1) else 10) <= 0xDFFF
        ):
            return False
    return True


def render_pieces(markdown: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[Piece]:
    """`markdown` as Telegram messages of at most `limit` UTF-16 units each, in order.

    Escaping and tags make HTML longer than its Markdown; a part that no longer fits is split
    again on natural boundaries, and a piece that does not fit even then goes out as plain text.
    """
    html = to_telegram_html(markdown)
    if html is not None and utf16_len(html) <= limit:
        return [Piece(markdown, html)]
    if html is not None and len(markdown) > max(limit // 2, 16):
        pieces: list[Piece] = []
        for half in split_text(markdown, len(markdown) // 2 + 4):  # + room to close a fence
            pieces.extend(render_pieces(half, limit))
        return pieces
    return [Piece(chunk, None) for chunk in fit_plain(markdown, limit)]


def fit_plain(text: str, limit: int = TELEGRAM_TEXT_LIMIT) -> list[str]:
    """`text` in chunks of at most `limit` UTF-16 units (emoji count twice), on natural breaks."""
    if utf16_len(text) <= limit or len(text) <= 16:
        return [text] if text.strip() else []
    chunks: list[str] = []
    for chunk in split_text(text, len(text) // 2 + 4):
        chunks.extend(fit_plain(chunk, limit))
    return chunks


PartKey = tuple[str, int, int]  # (chat, stored message id, part)


class DeliveredPieces:
    """How many pieces of a part that became several messages were already delivered, so
    that the outbox's retry of the part does not send them twice. Bounded: the oldest entries
    go first."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._done: dict[PartKey, int] = {}

    def done(self, key: PartKey | None) -> int:
        return self._done.get(key, 0) if key is not None else 0

    def note(self, key: PartKey | None, count: int) -> None:
        if key is None:
            return
        if key not in self._done and len(self._done) >= self._capacity:
            self._done.pop(next(iter(self._done)))
        self._done[key] = count

    def forget(self, key: PartKey | None) -> None:
        if key is not None:
            self._done.pop(key, None)
