"""Joining the pieces of a model's answer into the text a person reads.

A model's answer can arrive in pieces: several text blocks in one Anthropic message (around
citations or server tools), or several responses of one turn (a `pause_turn` continued, a cut
answer continued). Pieces that carry their own whitespace are joined as they are; pieces that
would run together ("…the results.Based on…") get the separator they need: a blank line after a
finished sentence, a space between words.
"""

from __future__ import annotations

from collections.abc import Iterable

_SENTENCE_END = ".!?:…"


def join_text_parts(parts: Iterable[str]) -> str:
    joined = ""
    for part in parts:
        if not part:
            continue
        if joined and not joined[-1].isspace() and not part[0].isspace():
            joined += _separator(joined[-1], part[0])
        joined += part
    return joined


def _separator(before: str, after: str) -> str:
    if before in _SENTENCE_END and (after.isalnum() or after in "*#-`["):
        return "\n\n"
    if before.isalnum() and after.isalnum():
        return " "
    if before in ",;" and after.isalnum():
        return " "
    return ""
