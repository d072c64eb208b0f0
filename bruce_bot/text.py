"""Splitting long texts for channels with a message size limit (no dependency on the rest of
Bruce, so that any channel adapter can use it without loading storage or the outbox)."""

from __future__ import annotations


def split_text(text: str, limit: int) -> list[str]:
    """Split `text` into parts of at most `limit` characters on natural boundaries.

    Paragraphs first, then lines, then words; a code fence cut in two is closed at the end of
    one part and reopened (with its language) at the start of the next.
    """
    if len(text) <= limit:
        return [text]
    parts: list[str] = []
    remaining = text
    fence_reopen = ""
    while remaining:
        remaining = fence_reopen + remaining
        if len(remaining) <= limit:
            parts.append(remaining)
            break
        budget = limit - 4  # room to close a fence ("\n```")
        window = remaining[:budget]
        cut = -1
        for separator in ("\n\n", "\n", " "):
            cut = window.rfind(separator)
            if cut > budget // 3:
                break
        if cut <= 0:
            cut = budget
        part, remaining = remaining[:cut].rstrip(), remaining[cut:].lstrip("\n ")
        fence_reopen = ""
        open_fence = _open_fence(part)
        if open_fence is not None:
            part += "\n```"
            fence_reopen = f"```{open_fence}\n"
        parts.append(part)
    return [part for part in parts if part.strip()]


def _open_fence(text: str) -> str | None:
    """The language of a code fence left open at the end of `text`, or None if all are closed."""
    language: str | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            language = None if language is not None else stripped[3:].strip()
    return language
