"""Bruce's Markdown as Slack's mrkdwn, and mrkdwn cut to the size Slack takes.

Slack does not read Markdown: bold is `*x*`, italics `_x_`, strike-through `~x~`, links
`<url|text>`, and `&`, `<` and `>` must be written `&amp;`, `&lt;` and `&gt;` (else `<...>` is
read as a link or a mention: a model that writes `<!channel>` must not ping a channel). Code
spans and fenced blocks keep their text as it is (escaped, not formatted; a fence's language
is dropped, Slack shows none); headings become bold lines, `-`/`*` list items bullets, and a
quote's leading `>` stays a quote. No SDK here: pure text.

The outbox splits a reply at the channel's `max_message_chars` (3500, readable in one screen)
before it is converted; `split_mrkdwn` cuts what conversion made longer at Slack's hard limit
(40000 characters of `text`), between lines and never inside an entity (`&amp;`, `<url|x>`).
"""

from __future__ import annotations

import re

from bruce_bot.text import split_text

MAX_TEXT_CHARS = 40_000  # chat.postMessage truncates `text` beyond this

_FENCE = re.compile(r"^```[^\n`]*\n(.*?)(?:\n)?^```[ \t]*$", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"\[([^\]\n]+)\]\((<?)([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", re.DOTALL)
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=\S)\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.MULTILINE)
_QUOTE = re.compile(r"^&gt;[ \t]?", re.MULTILINE)
_RULE = re.compile(r"^[ \t]*([-*_])([ \t]*\1){2,}[ \t]*$", re.MULTILINE)
_BOLD_MARK = "\x01"  # stands for a bold `*` while single-star italics are converted
_SLOT = "\x02{}\x03"  # a piece set aside (code, links) while the rest is converted
_SLOT_BACK = re.compile("\x02(\\d+)\x03")


def escape(text: str) -> str:
    """The three characters Slack reads as markup, as its entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """`markdown` (what the model writes) as Slack mrkdwn."""
    kept: list[str] = []

    def keep(piece: str) -> str:
        kept.append(piece)
        return _SLOT.format(len(kept) - 1)

    text = _FENCE.sub(lambda m: keep(f"```\n{escape(m[1])}\n```"), markdown)
    text = _CODE_SPAN.sub(lambda m: keep(f"`{escape(m[2].strip(' ') or m[2])}`"), text)
    text = _LINK.sub(lambda m: keep(_link(m[3], m[1])), text)
    text = _AUTOLINK.sub(lambda m: keep(f"<{_url(m[1])}>"), text)
    text = _inline(escape(text))
    text = _RULE.sub("──────────", text)
    text = _HEADING.sub(lambda m: f"*{m[1].replace('*', '')}*", text)  # bold inside: one bold
    text = _BULLET.sub(lambda m: f"{m[1]}• ", text)
    text = _QUOTE.sub("> ", text)
    while _SLOT_BACK.search(text):  # a link's text may hold a code span: restore until none
        text = _SLOT_BACK.sub(lambda m: kept[int(m[1])], text)
    return text


def _inline(text: str) -> str:
    """Bold, italics and strike-through in Slack's marks (text already escaped)."""
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m[2]}{_BOLD_MARK}", text)
    text = _ITALIC_STAR.sub(lambda m: f"_{m[1]}_", text)
    text = _STRIKE.sub(lambda m: f"~{m[1]}~", text)
    return text.replace(_BOLD_MARK, "*")


def _url(url: str) -> str:
    # Inside <...> only `|` and `>` would end the link early; `&` is written as an entity.
    return escape(url).replace("|", "%7C")


def _link(url: str, label: str) -> str:
    label = _inline(escape(label)).replace("|", "¦")
    if not re.match(r"(?:https?|mailto):", url, re.IGNORECASE):
        return f"{label} ({escape(url)})"  # a relative or odd link: shown, not linked
    return f"<{_url(url)}|{label}>"


def split_mrkdwn(text: str, limit: int = MAX_TEXT_CHARS) -> list[str]:
    """`text` in parts of at most `limit` characters, cut between paragraphs, lines or words
    (code fences closed and reopened); a hard cut inside a word that broke an entity or a link
    (`&am|p;`, `<http://x|y>` cut in two) moves the broken piece to the next part."""
    parts = split_text(text, limit)
    for index in range(len(parts) - 1):
        broken = _ENTITY_TAIL.search(parts[index])
        if broken is not None and broken.start() > 0:
            parts[index], tail = parts[index][: broken.start()], broken[0]
            parts[index + 1] = tail + parts[index + 1]
    return [part for part in parts if part]


_ENTITY_TAIL = re.compile(r"(?:&[a-z]{0,4}|<[^>\n]{0,2000})$")
