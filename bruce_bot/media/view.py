"""What the model is shown of a message with files, from what `preparation.py` recorded.

The message's own words (a caption; for a voice note, its transcript) come first. Then each
file: a picture of the messages being answered goes as an image block (not text); a picture of
an earlier turn becomes a short note, so that the prompt does not carry every image again on
every turn (the model described it when it saw it); a document, or the transcript of an audio
file someone else recorded, is fenced as untrusted content with its file name; a file that
could not be read is named with the reason, which the user was told.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bruce_bot.storage.messages import ATTACHMENTS, StoredMessage
from bruce_bot.tools.registry import as_untrusted

READY = "ready"
BLIND = "blind"  # a picture the model could not see (vision off): not fetched
RETRY = "retry"  # fetching or transcribing failed for now: tried again on a later turn
FAILED = "failed"
_KIND_LABELS = {"image": "a picture", "audio": "an audio file", "document": "a document"}


def attachments_of(row: StoredMessage) -> list[dict[str, Any]]:
    found = (row.extra or {}).get(ATTACHMENTS) if row.role == "user" else None
    return [a for a in found if isinstance(a, dict)] if isinstance(found, list) else []


def label_of(attachment: dict[str, Any]) -> str:
    """How to name the file to the user: "your voice note", "report.pdf", "your picture"."""
    if attachment.get("kind") == "audio" and attachment.get("voice"):
        return "your voice note"
    name = str(attachment.get("name") or "")
    if name:
        return name
    return {"image": "your picture", "audio": "your audio file"}.get(
        str(attachment.get("kind")), "your file"
    )


def is_voice_note(attachment: dict[str, Any]) -> bool:
    return attachment.get("kind") == "audio" and bool(attachment.get("voice"))


def shown_as_image(attachment: dict[str, Any], data_dir: Path) -> Path | None:
    """The stored picture's file, when there is one to show."""
    if attachment.get("kind") != "image" or attachment.get("state") != READY:
        return None
    path = data_dir / str(attachment.get("file", ""))
    return path if attachment.get("file") and path.is_file() else None


def model_text(row: StoredMessage, data_dir: Path, *, images_shown: bool) -> str:
    """The message's text for the model (see the module); `images_shown`: its pictures go as
    image blocks beside it."""
    attachments = attachments_of(row)
    text = row.content
    if any(is_voice_note(a) and a.get("state") == READY for a in attachments):
        text = f"[Voice message, transcribed]\n{text}"
    parts = [text] if text.strip() else []
    for attachment in attachments:
        note = _note(attachment, data_dir, images_shown=images_shown)
        if note:
            parts.append(note)
    return "\n\n".join(parts)


def _note(attachment: dict[str, Any], data_dir: Path, *, images_shown: bool) -> str:
    kind, state = attachment.get("kind"), attachment.get("state")
    name = str(attachment.get("name") or "")
    called = f' "{name}"' if name else ""
    if state in (FAILED, RETRY):
        problem = str(attachment.get("problem") or "it could not be read")
        return (
            f"[The user sent {_KIND_LABELS.get(str(kind), 'a file')}{called}, which could not be "
            f"read: {problem}. The user was told.]"
        )
    if state is None:
        return f"[The user sent {_KIND_LABELS.get(str(kind), 'a file')}{called}, not read yet.]"
    if kind == "image":
        if state == BLIND:
            return (
                f"[The user sent a picture{called}; the current model cannot see pictures, and "
                "the user was told.]"
            )
        if shown_as_image(attachment, data_dir) is None:
            return f"[A picture{called} the user sent; it was deleted after the retention period.]"
        return (
            "" if images_shown else f"[A picture{called} the user sent earlier; you saw it then.]"
        )
    if kind == "document":
        body = f"Document{called} sent by the user:\n{attachment.get('text', '')}"
        return as_untrusted(body, f"document {name or 'attachment'}")
    if kind == "audio" and not is_voice_note(attachment):
        body = f"Transcript of the audio file{called}:\n{attachment.get('transcript', '')}"
        return as_untrusted(body, f"audio {name or 'attachment'}")
    return ""
