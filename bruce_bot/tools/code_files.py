"""run_code's files: what the user sent goes into /workspace/in, what the code wrote to
/workspace/out comes back as artifacts (sent with the reply through the files-back path).

In: the session's pictures (the stored copy) and documents (the original, kept by the media
step when run_code is on), read from `<data_dir>/media/<session id>/` only. Out: the regular
files directly in out/ created or changed by the run, read without following links
(sandbox/workspace.py), each saved as an artifact of its own under a safe name.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from bruce_bot.domain import OutboundFile
from bruce_bot.sandbox.workspace import OutFile
from bruce_bot.storage.artifacts import ArtifactStore
from bruce_bot.storage.messages import ATTACHMENTS, MessageStore, StoredMessage
from bruce_bot.tools.artifacts import (
    CONTENT_TYPES,
    artifact_file,
    content_type_of,
    sanitise_filename,
    write_new,
)

log = structlog.get_logger(__name__)

MAX_INPUT_MESSAGES = 500
# As the media step records them (media/preparation.py, media/view.py; tools may not import it).
MEDIA_DIR = "media"
READY = "ready"


def _attachments(row: StoredMessage) -> list[dict[str, Any]]:
    found = (row.extra or {}).get(ATTACHMENTS) if row.role == "user" else None
    return [a for a in found if isinstance(a, dict)] if isinstance(found, list) else []


async def session_inputs(
    messages: MessageStore, data_dir: Path, session_id: int, max_bytes: int
) -> list[tuple[str, bytes]]:
    """(name, bytes) of the files the user sent in the session that Bruce keeps."""
    folder = (data_dir / MEDIA_DIR / str(session_id)).resolve()
    found: list[tuple[str, Path]] = []
    for row in await messages.recent(session_id, limit=MAX_INPUT_MESSAGES):
        for index, attachment in enumerate(_attachments(row)):
            if attachment.get("state") != READY:
                continue
            kind = attachment.get("kind")
            stored = attachment.get("original") if kind == "document" else attachment.get("file")
            if kind not in ("document", "image") or not stored:
                continue
            path = (data_dir / str(stored)).resolve()
            if not path.is_relative_to(folder):
                continue  # a record pointing elsewhere is never followed
            name = str(attachment.get("name") or "")
            if kind == "image" and not name:
                name = f"photo-{row.id}-{index}{path.suffix}"
            found.append((name or f"file-{row.id}-{index}", path))

    def read() -> list[tuple[str, bytes]]:
        files = []
        for name, path in found:
            try:
                if path.is_file() and not path.is_symlink() and path.stat().st_size <= max_bytes:
                    files.append((name, path.read_bytes()))
            except OSError:
                continue
        return files

    return await asyncio.to_thread(read)


def artifact_name(name: str) -> str:
    """`name` as an artifact's file name, its extension kept when a known one (else .bin)."""
    suffix = Path(name).suffix.lower()
    if suffix not in CONTENT_TYPES:
        name = f"{name}.bin"
    return sanitise_filename(name)


@dataclass(slots=True)
class OutputSaver:
    """Saves out/ files as artifacts of the session."""

    store: ArtifactStore
    root: Path  # <data_dir>/artifacts

    async def save(self, session_id: int, file: OutFile) -> OutboundFile | None:
        if file.data is None:
            return None
        filename = artifact_name(file.name)
        artifact_uuid = str(uuid.uuid4())
        path = artifact_file(self.root, artifact_uuid, filename)
        if path is None:
            return None
        content_type = content_type_of(filename)
        await asyncio.to_thread(write_new, path, file.data)
        await self.store.add(
            uuid=artifact_uuid,
            session_id=session_id,
            title=f"{file.name} (run_code)",
            filename=filename,
            content_type=content_type,
            size_bytes=len(file.data),
        )
        log.info("code_file_saved", uuid=artifact_uuid, filename=filename, bytes=len(file.data))
        return OutboundFile(artifact_uuid, filename, content_type)
