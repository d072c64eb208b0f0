"""The media step of a turn: each file of the conversation fetched, read and recorded once.

Before the model is called, `MediaStep.prepare` looks at the turn's messages. A file not read
yet (or whose reading failed for now: the platform or the transcription server was away) is
fetched through the channel that received it (`channels.base.AttachmentSource`), then read:
pictures downscaled and stored under `app.data_dir/media/` (images.py), documents turned into
text (documents.py), audio transcribed (`llm.transcription.Transcriber`). The outcome goes into
the message's `extra` at once (and a voice note's transcript into its text), so a retried or
resumed turn never does the work twice, and a failure for now is tried again on a later turn:
nothing sent is lost. The user hears, above the reply, what was heard ("🎤 …") and what could
not be read, with the limit or the type; a message with nothing the model can use is answered
with that alone, without calling the model. Stored pictures older than `media.retention_days`
are deleted (at most once an hour, from here); their messages then show a note (view.py).
A turn whose model reads something from outside (a document, someone else's recording, a
picture of the batch it is shown, a forwarded or quoted message: channels/forwards.py) is
untrusted (`PreparedMedia.untrusted`): what it would do waits for the user's confirmation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from bruce_bot.channels.base import AttachmentSource, AttachmentUnavailableError
from bruce_bot.channels.forwards import carries_outside_words
from bruce_bot.config import DocumentsConfig, MediaConfig
from bruce_bot.domain import Attachment, ImagePart
from bruce_bot.llm.transcription import Transcriber, TranscriptionError
from bruce_bot.media.documents import (
    SUPPORTED,
    DocumentProblem,
    describe_type,
    document_type,
    read_document,
)
from bruce_bot.media.images import ImageProblem, fit_image
from bruce_bot.media.pdf_sandbox import PdfLimits
from bruce_bot.media.view import (
    BLIND,
    FAILED,
    READY,
    RETRY,
    attachments_of,
    is_voice_note,
    label_of,
    model_text,
    shown_as_image,
)
from bruce_bot.private_files import write_private
from bruce_bot.storage.messages import ATTACHMENTS, MessageStore, StoredMessage

log = structlog.get_logger(__name__)

MEDIA_DIR = "media"
MAX_TRIES = 3  # a file that failed for now this many times is given up (the user was told)
SWEEP_EVERY_SECONDS = 3600.0
TRANSCRIPT_SHOWN_CHARS = 500
NO_TRANSCRIPTION = (
    "I can't listen to voice messages yet: no transcription service is set up. To switch it "
    "on, add a transcription: section to config.yml with the base_url (and api_key) of an "
    "OpenAI-compatible /v1/audio/transcriptions endpoint (OpenAI's Whisper API, or a local "
    "faster-whisper-server or whisper.cpp server), then restart me. Meanwhile, please write."
)
BLIND_MODEL = (
    "I can't see pictures with the current model ({model}). If it can see images, set "
    "llm.vision: on in config.yml; or switch to a model that can (Claude, gpt-4o, llava, "
    "qwen2.5-vl...). Meanwhile, please describe it in words."
)


@dataclass(frozen=True, slots=True)
class MediaSettings:
    data_dir: Path
    media: MediaConfig
    documents: DocumentsConfig
    vision: bool  # the model sees images (vision.sees_images)
    model: str
    max_duration_seconds: int = 600
    # Documents are kept as sent too (`original` in their record), for run_code's /workspace/in.
    keep_documents: bool = False


@dataclass(slots=True)
class PreparedMedia:
    """The turn's messages as the model sees them, and what to tell the user."""

    stored: list[StoredMessage]
    images: dict[int, tuple[ImagePart, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # shown above the reply
    answerable: bool = True  # False: nothing for the model; the notes are the reply
    # The model reads outside content (a document, someone else's recording, a picture it is
    # shown, a forwarded or quoted message): what it does in this turn waits for the user's
    # yes, as after reading a web page.
    untrusted: bool = False
    sources: tuple[str, ...] = ()  # what that content was, in words the user is shown

    def with_preface(self, reply: str) -> str:
        return "\n\n".join([*self.notes, reply]) if self.notes else reply

    @property
    def notice(self) -> str:
        return "\n\n".join(self.notes)


# The outside content a turn read, as Bruce's question before an action names it.
OUTSIDE_SOURCES = {
    "file": "a document or someone else's recording",
    "forward": "a forwarded or quoted message",
    "picture": "a picture",
}


class MediaStep:
    def __init__(
        self,
        settings: MediaSettings,
        messages: MessageStore,
        sources: Mapping[str, object],
        transcriber: Transcriber | None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,  # POSIX time, compared with the files' mtimes
    ) -> None:
        self._settings = settings
        self._messages = messages
        self._sources = sources  # the channels by name; those with files are AttachmentSources
        self._transcriber = transcriber
        self._monotonic = monotonic
        self._wall = wall
        self._next_sweep = 0.0

    async def prepare(
        self, channel: str, stored: Sequence[StoredMessage], batch_ids: Collection[int]
    ) -> PreparedMedia:
        await self._sweep_if_due()
        prepared = PreparedMedia([])
        data_dir = self._settings.data_dir
        speaking = False
        outside: set[str] = set()  # why the turn is untrusted, for the log
        for row in stored:
            # A forward or a quote of someone else (fenced in its text already) read now.
            if carries_outside_words(row.extra):
                outside.add("forward")
            if not attachments_of(row):
                prepared.stored.append(row)
                continue
            current = row.id in batch_ids
            row = await self._read(channel, row, prepared.notes, current=current)
            images = self._settings.vision and current
            if images:
                prepared.images[row.id] = shown = await self._images_of(row)
                # The text in a picture (a screenshot, a photographed letter) is someone
                # else's words, and the model reads it as it sees the picture.
                if shown:
                    outside.add("picture")
            if current:  # the user's own words, or a file the model can read
                speaking = speaking or bool(row.content.strip()) or _any_read(row)
            text = model_text(row, data_dir, images_shown=images)
            if _outside_content(row):
                outside.add("file")  # a document, someone else's recording
            prepared.stored.append(dataclasses.replace(row, content=text))
        if outside:
            prepared.untrusted = True
            prepared.sources = tuple(OUTSIDE_SOURCES[reason] for reason in sorted(outside))
            log.info("media_outside_content", channel=channel, reasons=sorted(outside))
        has_plain = any(r.id in batch_ids and not attachments_of(r) for r in stored)
        prepared.answerable = speaking or has_plain or not prepared.notes
        return prepared

    # ---- reading files ------------------------------------------------------------------------

    async def _read(
        self, channel: str, row: StoredMessage, notes: list[str], *, current: bool
    ) -> StoredMessage:
        attachments = attachments_of(row)
        todo = [
            i
            for i, a in enumerate(attachments)
            if (a.get("state") is None or a["state"] == RETRY)
            # An earlier voice note waits until a transcription service is set up.
            and (current or a.get("kind") != "audio" or self._transcriber is not None)
        ]
        if not todo:
            return row
        updated = [dict(a) for a in attachments]
        transcripts: list[str] = []
        for index in todo:
            after, note = await self._process(channel, row, index, updated[index])
            updated[index] = after
            if note and note not in notes and (current or after.get("state") == READY):
                notes.append(note)  # once: an album's three pictures fail for one reason
            if is_voice_note(after) and after.get("state") == READY:
                transcripts.append(str(after.get("transcript", "")))
        content = "\n\n".join(part for part in (row.content, *transcripts) if part.strip())
        extra = {**(row.extra or {}), ATTACHMENTS: updated}
        await self._messages.set_media(row.id, extra, content)
        return dataclasses.replace(row, extra=extra, content=content)

    async def _process(
        self, channel: str, row: StoredMessage, index: int, attachment: dict[str, Any]
    ) -> tuple[dict[str, Any], str | None]:
        """The attachment's new record, and what to tell the user (None: nothing)."""
        settings, kind = self._settings, attachment.get("kind")
        label = label_of(attachment)
        limit = settings.media.max_file_bytes
        size = attachment.get("size")
        if isinstance(size, int) and size > limit:
            return _failed(
                attachment, f"{label} is {_mb(size)}; I can read files up to {_mb(limit)}"
            )
        if kind == "image" and not settings.vision:
            return {**attachment, "state": BLIND}, BLIND_MODEL.format(model=settings.model)
        doc_kind: str | None = None
        if kind == "document":
            name, mime = str(attachment.get("name", "")), str(attachment.get("mime_type", ""))
            doc_kind = document_type(name, mime)
            if doc_kind is None:
                return _failed(
                    attachment,
                    f"I can't read {describe_type(name, mime)} files; I can read {SUPPORTED}",
                )
        if kind == "audio":
            if self._transcriber is None:
                waiting = {**attachment, "state": RETRY, "problem": "no transcription service"}
                return waiting, NO_TRANSCRIPTION
            duration = attachment.get("duration")
            most = settings.max_duration_seconds
            if isinstance(duration, int | float) and duration > most:
                return _failed(
                    attachment,
                    f"{label} is {_duration(duration)} long; I can listen to at most "
                    f"{_duration(most)}",
                )
        data = await self._fetch(channel, attachment, label)
        if isinstance(data, tuple):
            return data
        try:
            if kind == "image":
                return await self._store_image(row, index, attachment, data), None
            if kind == "document" and doc_kind is not None:
                text = await asyncio.to_thread(
                    read_document,
                    data,
                    doc_kind,
                    settings.documents.max_chars,
                    settings.documents.max_pdf_pages,
                    PdfLimits.from_config(settings.documents),
                )
                kept = {**attachment, "state": READY, "text": text}
                if settings.keep_documents:
                    kept["original"] = await self._store_original(row, index, data)
                return kept, None
            if kind == "audio":
                return await self._transcribe(attachment, data, label)
        except (ImageProblem, DocumentProblem) as exc:
            return _failed(attachment, f"I couldn't read {label}: {exc}")
        return _failed(attachment, f"I can't read {label}: unknown kind of file")

    async def _fetch(
        self, channel: str, attachment: dict[str, Any], label: str
    ) -> bytes | tuple[dict[str, Any], str]:
        source = self._sources.get(channel)
        if not isinstance(source, AttachmentSource):
            return _failed(attachment, f"I can't download files sent on {channel}")
        try:
            return await source.fetch_attachment(
                _attachment(attachment), self._settings.media.max_file_bytes
            )
        except AttachmentUnavailableError as exc:
            log.warning(
                "attachment_unavailable", channel=channel, error=str(exc), permanent=exc.permanent
            )
            if exc.permanent:
                return _failed(attachment, f"I couldn't download {label}: {exc}")
            return _later(attachment, f"I couldn't download {label} just now ({exc})")

    async def _store_image(
        self, row: StoredMessage, index: int, attachment: dict[str, Any], data: bytes
    ) -> dict[str, Any]:
        media = self._settings.media
        fitted = await asyncio.to_thread(
            fit_image, data, media.image_max_edge, media.image_max_bytes
        )
        suffix = ".png" if fitted.media_type == "image/png" else ".jpg"
        relative = Path(MEDIA_DIR) / str(row.session_id) / f"{row.id}-{index}{suffix}"
        await asyncio.to_thread(_write, self._settings.data_dir / relative, fitted.data)
        log.info(
            "image_stored",
            message_id=row.id,
            bytes_in=len(data),
            bytes_out=len(fitted.data),
            width=fitted.width,
            height=fitted.height,
        )
        return {
            **attachment,
            "state": READY,
            "file": relative.as_posix(),
            "media_type": fitted.media_type,
            "problem": None,
        }

    async def _store_original(self, row: StoredMessage, index: int, data: bytes) -> str:
        """The document as sent, under the session's media folder (swept with the pictures)."""
        relative = Path(MEDIA_DIR) / str(row.session_id) / f"{row.id}-{index}.original"
        await asyncio.to_thread(_write, self._settings.data_dir / relative, data)
        return relative.as_posix()

    async def _transcribe(
        self, attachment: dict[str, Any], data: bytes, label: str
    ) -> tuple[dict[str, Any], str | None]:
        assert self._transcriber is not None
        name = str(attachment.get("name") or "voice.ogg")
        mime = str(attachment.get("mime_type") or "audio/ogg")
        try:
            text = await self._transcriber.transcribe(data, name, mime)
        except TranscriptionError as exc:
            log.warning("transcription_failed", error=str(exc), transient=exc.transient)
            if exc.transient:
                return _later(
                    attachment,
                    f"I couldn't reach the transcription service, so I couldn't listen to "
                    f"{label} ({exc})",
                )
            return _failed(attachment, f"the transcription service refused {label}: {exc}")
        if not text:
            return _failed(attachment, f"I couldn't make out any words in {label}")
        shown = text if len(text) <= TRANSCRIPT_SHOWN_CHARS else text[:TRANSCRIPT_SHOWN_CHARS] + "…"
        note = f"🎤 “{shown}”" if is_voice_note(attachment) else None
        return {**attachment, "state": READY, "transcript": text, "problem": None}, note

    async def _images_of(self, row: StoredMessage) -> tuple[ImagePart, ...]:
        data_dir = self._settings.data_dir
        parts: list[ImagePart] = []
        for attachment in attachments_of(row)[: self._settings.media.max_images_per_message]:
            path = shown_as_image(attachment, data_dir)
            if path is None:
                continue
            data = await asyncio.to_thread(path.read_bytes)
            media_type = str(attachment.get("media_type") or "image/jpeg")
            parts.append(ImagePart(media_type, data, str(attachment.get("name") or "")))
        return tuple(parts)

    # ---- retention ----------------------------------------------------------------------------

    async def _sweep_if_due(self) -> None:
        days = self._settings.media.retention_days
        now = self._monotonic()
        if days <= 0 or now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY_SECONDS
        removed = await asyncio.to_thread(
            sweep, self._settings.data_dir / MEDIA_DIR, self._wall() - days * 86_400
        )
        if removed:
            log.info("media_expired", files=removed, retention_days=days)


def sweep(root: Path, older_than: float) -> int:
    """Delete the stored files last written before `older_than` (a POSIX time); how many."""
    removed = 0
    if not root.is_dir():
        return 0
    for path in root.rglob("*"):
        try:
            if path.is_file() and path.stat().st_mtime < older_than:
                path.unlink()
                removed += 1
        except OSError:  # gone meanwhile, or not ours to delete: the next sweep sees it
            continue
    return removed


def _outside_content(row: StoredMessage) -> bool:
    """A document or someone else's recording the model reads as text (pictures: above)."""
    return any(
        a.get("state") == READY
        and (a.get("kind") == "document" or not is_voice_note(a))
        and a.get("kind") != "image"
        for a in attachments_of(row)
    )


def _any_read(row: StoredMessage) -> bool:
    return any(attachment.get("state") == READY for attachment in attachments_of(row))


def _attachment(record: dict[str, Any]) -> Attachment:
    return Attachment(
        kind=record.get("kind", "document"),
        ref=str(record.get("ref", "")),
        name=str(record.get("name") or ""),
        mime_type=str(record.get("mime_type") or ""),
        size=record.get("size"),
        duration=record.get("duration"),
        voice=bool(record.get("voice")),
    )


def _failed(attachment: dict[str, Any], problem: str) -> tuple[dict[str, Any], str]:
    return {**attachment, "state": FAILED, "problem": problem}, f"⚠️ {_sentence(problem)}"


def _later(attachment: dict[str, Any], problem: str) -> tuple[dict[str, Any], str]:
    tries = int(attachment.get("tries") or 0) + 1
    if tries >= MAX_TRIES:
        return _failed(
            attachment, f"{problem}; I gave up after {tries} tries, please send it again"
        )
    record = {**attachment, "state": RETRY, "problem": problem, "tries": tries}
    return record, f"⚠️ {_sentence(problem)}. I kept it and will try again with your next message."


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _write(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(path.suffix + ".part")
    write_private(temporary, data)  # 0600 in 0700 folders (private_files.py)
    temporary.replace(path)


def _mb(size: float) -> str:
    return f"{size / 1_000_000:.1f} MB"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"
