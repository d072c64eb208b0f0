"""Telegram's HTML parse mode as the Bot API server applies it, for the fake Telegram.

A port of tdlib's `parse_html` (tdlib/td, td/telegram/MessageEntity.cpp, with
`decode_html_entity`; the Bot API server hands `parse_mode=HTML` texts to it), step for step,
so that the fake accepts what Telegram accepts and refuses what it refuses with the same words
("Unsupported start tag "div" at byte offset 0"). It is written from tdlib's source, not from
Bruce's own checker (bruce_bot/channels/telegram_markup.py), so a wrong rule there is caught
here. Its cases are tdlib's own (test/message_entities.cpp, `check_parse_html`), in
tests/unit/test_fake_telegram_html.py. The rules, where they differ from a browser's or a strict
reading of the Bot API page (core.telegram.org/bots/api#html-style):

- Only `&lt; &gt; &amp; &quot;` are named entities; any other (`&nbsp;`, `&laquo;`) is not an
  error but stays in the text as typed. The `;` is optional (`&lt3` is `<3`). Numerical
  entities are decimal `&#NNN;` or hexadecimal `&#xHH;` (a lowercase x only), below U+10FFFF,
  at most 9 characters from `&` to the last digit; anything else, a bare `&` included, is
  plain text.
- `<` always starts a tag (so a bare `<` is an error: "Unsupported start tag "" ..."); a bare
  `>` is plain text.
- Tags: b strong i em u ins s strike del tg-spoiler tg-emoji tg-time span pre code blockquote
  a, case-insensitive. Attributes Telegram has no use for are ignored (`<a href="u"
  onclick="x">` is fine, `<blockquote cite="">` too); values are quoted or a name token
  (letters, digits, `.` and `-`). `<span>` must have `class="tg-spoiler"`; a non-empty
  `<tg-emoji>` needs a non-zero integer `emoji-id`.
- `</>` closes whatever tag is open; a closing tag may carry spaces before `>`.

Byte offsets in the messages are UTF-8 byte offsets, as Telegram reports them.
"""

from __future__ import annotations

from dataclasses import dataclass

TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "tg-time",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)
_SPACES = frozenset(b" \t\r\n\0\v")  # tdlib's is_space: the terminating NUL counts as one


class MarkupError(ValueError):
    """Telegram would answer "Bad Request: can't parse entities: <this message>"."""


@dataclass(frozen=True, slots=True)
class Entity:
    """One formatting entity of the parsed text (offsets in UTF-16 code units)."""

    kind: str  # the tag that made it ("b", "a", ...)
    offset: int
    length: int
    argument: str = ""  # a link's URL, a code block's language, an emoji id


def _is_alpha(byte: int) -> bool:
    return ord("a") <= (byte | 0x20) <= ord("z")


def _is_digit(byte: int) -> bool:
    return ord("0") <= byte <= ord("9")


def _is_hex(byte: int) -> bool:
    return _is_digit(byte) or ord("a") <= (byte | 0x20) <= ord("f")


def _decode_entity(data: bytes, pos: int) -> tuple[int, int]:
    """tdlib's decode_html_entity: (code point, position after it), or (0, pos) when the `&`
    at `pos` starts no entity it knows (the `&` is then plain text)."""
    end = pos + 1
    code = 0
    if data[pos + 1] == ord("#"):
        end += 1
        if data[pos + 2] == ord("x"):
            end += 1
            while _is_hex(data[end]):
                code = code * 16 + int(chr(data[end]), 16)
                end += 1
        else:
            while _is_digit(data[end]):
                code = code * 10 + data[end] - ord("0")
                end += 1
        if code == 0 or code >= 0x10FFFF or end - pos >= 10:
            return 0, pos
    else:
        while _is_alpha(data[end]):
            end += 1
        name = data[pos + 1 : end]
        named = {b"lt": "<", b"gt": ">", b"amp": "&", b"quot": '"'}
        if name not in named:
            return 0, pos  # "unsupported literal entity": kept as typed
        code = ord(named[name])
    if data[end] == ord(";"):
        end += 1
    return code, end


def _utf16_units(code: int) -> int:
    return 2 if code > 0xFFFF else 1


def parse_entities(text: str) -> tuple[str, list[Entity]]:
    """The visible text of Telegram-HTML `text` and its entities; `MarkupError` with Telegram's
    words where the Bot API refuses it."""
    data = text.encode("utf-8", "surrogatepass") + b"\0"  # tdlib reads a NUL-terminated string
    size = len(data) - 1
    out: list[str] = []
    utf16 = 0
    entities: list[Entity] = []
    # open tags: (name, argument, utf16 offset where it began, index in `out` where it began)
    nested: list[tuple[str, str, int, int]] = []
    i = 0
    while i < size:
        c = data[i]
        if c == ord("&"):
            code, after = _decode_entity(data, i)
            if code:
                out.append(chr(code))
                utf16 += _utf16_units(code)
                i = after
                continue
        if c != ord("<"):
            start = i
            i += 1
            while i < size and data[i] not in (ord("<"), ord("&")):
                i += 1
            chunk = data[start:i].decode("utf-8", "surrogatepass")
            out.append(chunk)
            utf16 += len(chunk.encode("utf-16-le", "surrogatepass")) // 2
            continue
        begin = i
        i += 1
        if data[i] != ord("/"):
            while data[i] not in _SPACES and data[i] != ord(">"):
                i += 1
            if data[i] == 0:
                raise MarkupError(f"Unclosed start tag at byte offset {begin}")
            tag = data[begin + 1 : i].decode("utf-8", "replace").lower()
            if tag not in TAGS:
                raise MarkupError(f'Unsupported start tag "{tag}" at byte offset {begin}')
            argument, date, fmt = "", 0, ""
            while data[i] != ord(">"):
                while data[i] != 0 and data[i] in _SPACES:
                    i += 1
                if data[i] == ord(">"):
                    break
                name_start = i
                while data[i] not in _SPACES and data[i] not in b"=>/\"'":
                    i += 1
                name = data[name_start:i].decode("utf-8", "replace")
                if not name:
                    raise MarkupError(
                        f'Empty attribute name in the tag "{tag}" at byte offset {begin}'
                    )
                while data[i] != 0 and data[i] in _SPACES:
                    i += 1
                if data[i] != ord("="):
                    if data[i] == 0:
                        raise MarkupError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                    if tag == "blockquote" and name == "expandable":
                        argument = "1"
                    continue
                i += 1
                while data[i] != 0 and data[i] in _SPACES:
                    i += 1
                if data[i] == 0:
                    raise MarkupError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                if data[i] not in b"'\"":
                    # "A name token (a sequence of letters, digits, periods, or hyphens)."
                    token_start = i
                    while _is_alpha(data[i]) or _is_digit(data[i]) or data[i] in b".-":
                        i += 1
                    value = data[token_start:i].decode("ascii").lower()
                    if data[i] not in _SPACES and data[i] != ord(">"):
                        raise MarkupError(
                            f"Unexpected end of name token at byte offset {token_start}"
                        )
                else:
                    quote = data[i]
                    i += 1
                    chars: list[str] = []
                    raw_start = i
                    while data[i] != quote and data[i] != 0:
                        if data[i] == ord("&"):
                            code, after = _decode_entity(data, i)
                            if code:
                                chars.append(data[raw_start:i].decode("utf-8", "replace"))
                                chars.append(chr(code))
                                i = raw_start = after
                                continue
                        i += 1
                    chars.append(data[raw_start:i].decode("utf-8", "replace"))
                    value = "".join(chars)
                    if data[i] == quote:
                        i += 1
                if data[i] == 0:
                    raise MarkupError(f"Unclosed start tag at byte offset {begin}")
                if tag == "a" and name == "href":
                    argument = value
                elif tag == "code" and name == "class" and value.startswith("language-"):
                    argument = value[len("language-") :]
                elif tag == "span" and name == "class" and value.startswith("tg-"):
                    argument = value[len("tg-") :]
                elif tag == "tg-emoji" and name == "emoji-id":
                    argument = value
                elif tag == "blockquote" and name == "expandable":
                    argument = "1"
                elif tag == "tg-time" and name == "unix":
                    date = int(value) if value.lstrip("-").isdigit() else 0
                elif tag == "tg-time" and name == "format":
                    fmt = value
            if tag == "span" and argument != "spoiler":
                raise MarkupError(f'Tag "span" must have class "tg-spoiler" at byte offset {begin}')
            if tag == "tg-time":
                argument = f"{date}:{fmt}"
            nested.append((tag, argument, utf16, len(out)))
        else:
            if not nested:
                raise MarkupError(f"Unexpected end tag at byte offset {begin}")
            while data[i] not in _SPACES and data[i] != ord(">"):
                i += 1
            end_tag = data[begin + 2 : i].decode("utf-8", "replace").lower()
            while data[i] in _SPACES and data[i] != 0:
                i += 1
            if data[i] != ord(">"):
                raise MarkupError(f"Unclosed end tag at byte offset {begin}")
            tag, argument, offset, _ = nested[-1]
            if end_tag and end_tag != tag:
                raise MarkupError(
                    f'Unmatched end tag at byte offset {begin}, expected "</{tag}>", found '
                    f'"</{end_tag}>"'
                )
            if utf16 > offset:
                entities.extend(_entity(tag, argument, offset, utf16 - offset))
            nested.pop()
        i += 1  # past the `>`
    if nested:
        raise MarkupError(f'Can\'t find end tag corresponding to start tag "{nested[-1][0]}"')
    visible = "".join(out)
    try:
        visible.encode("utf-8")
    except UnicodeEncodeError:
        raise MarkupError(
            "Text contains invalid Unicode characters after decoding HTML entities, check for "
            "unmatched surrogate code units"
        ) from None
    return visible, entities


def _entity(tag: str, argument: str, offset: int, length: int) -> list[Entity]:
    """The entity a closed, non-empty tag makes (tdlib refuses a bad emoji id or date format
    only here, once the tag encloses something)."""
    if tag == "tg-emoji":
        try:
            emoji_id = int(argument, 10)
        except ValueError:
            emoji_id = 0
        if emoji_id == 0 or not -(2**63) <= emoji_id < 2**63:
            raise MarkupError("Invalid custom emoji identifier specified")
    if tag == "tg-time":
        date, fmt = argument.split(":", 1)
        if not _valid_date_format(fmt):
            raise MarkupError("Invalid date format used")
        if int(date) <= 0:
            return []
    if tag == "span":
        tag = "tg-spoiler"
    return [Entity(tag, offset, length, argument)]


def _valid_date_format(fmt: str) -> bool:
    """tdlib's FormattedDate::get_date_flags: "r" or "R" alone (relative), else any letters of
    "tTdDwW" (repeats allowed), the empty format included."""
    return fmt in ("r", "R") or all(letter in "tTdDwW" for letter in fmt)


def parse_html(text: str) -> str:
    """The visible text of Telegram-HTML `text`; `MarkupError` where Telegram refuses it."""
    return parse_entities(text)[0]
