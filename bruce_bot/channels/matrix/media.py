"""The files of a Matrix message (m.image, m.file, m.audio): what they are, and their bytes.

The event's `url` (an `mxc://server/media-id` URI) is the reference; `info` gives the type, the
size and an audio's duration (milliseconds). The bytes come through the homeserver's media API
with nio's `download`, which uses the authenticated endpoint (`/_matrix/client/v1/media`) with
Bruce's access token, as homeservers now require. Encrypted files (`file` instead of `url`) never
arrive: encrypted rooms are refused (channel.py). Files out (a reply's artifacts) are uploaded
with nio's `upload` and sent as m.image (image/*) or m.file with the `mxc://` URI it returns.
"""

from __future__ import annotations

from typing import Any

from nio import AsyncClient, MemoryDownloadResponse, UploadResponse

from bruce_bot.channels.base import AttachmentUnavailableError, DeliveryError
from bruce_bot.domain import Attachment, AttachmentKind, OutboundFile

KINDS: dict[str, AttachmentKind] = {"m.image": "image", "m.audio": "audio", "m.file": "document"}


def attachment_of(content: dict[str, Any]) -> Attachment | None:
    """The file of an m.image / m.audio / m.file content, None for anything else."""
    kind, url = KINDS.get(str(content.get("msgtype"))), content.get("url")
    if kind is None or not isinstance(url, str) or not url.startswith("mxc://"):
        return None
    info = content.get("info") if isinstance(content.get("info"), dict) else {}
    assert isinstance(info, dict)
    name = content.get("filename") or content.get("body") or ""
    size, duration = info.get("size"), info.get("duration")
    return Attachment(
        kind,
        url,
        str(name),
        str(info.get("mimetype") or ""),
        size if isinstance(size, int) else None,
        duration / 1000 if isinstance(duration, int | float) else None,
        voice="org.matrix.msc3245.voice" in content,
    )


def caption_of(content: dict[str, Any]) -> str:
    """A caption written with the file (a `filename` apart from the body makes the body one)."""
    filename, body = content.get("filename"), content.get("body")
    if isinstance(filename, str) and isinstance(body, str) and body != filename:
        return body
    return ""


async def fetch(client: AsyncClient, attachment: Attachment, max_bytes: int) -> bytes:
    too_big = f"it is over the {max_bytes / 1_000_000:.0f} MB I can read"
    if attachment.size is not None and attachment.size > max_bytes:
        raise AttachmentUnavailableError(too_big, permanent=True)
    try:
        answer = await client.download(mxc=attachment.ref)
    except Exception as exc:
        raise AttachmentUnavailableError(f"the homeserver did not answer ({exc!r})") from None
    if not isinstance(answer, MemoryDownloadResponse):
        code = getattr(answer, "status_code", "") or ""
        permanent = code in ("M_NOT_FOUND", "M_FORBIDDEN", "M_TOO_LARGE")
        message = f"the homeserver refused it: {code} {getattr(answer, 'message', '')}".strip()
        raise AttachmentUnavailableError(message, permanent=permanent)
    if len(answer.body) > max_bytes:
        raise AttachmentUnavailableError(too_big, permanent=True)
    return bytes(answer.body)


async def upload(client: AsyncClient, file: OutboundFile) -> dict[str, Any]:
    """Upload `file`; the content of the m.image / m.file message that shows it."""
    data = file.data
    try:
        answer, _ = await client.upload(
            lambda *_: data,
            content_type=file.content_type,
            filename=file.filename,
            filesize=len(data),
        )
    except Exception as exc:
        raise DeliveryError(f"the homeserver did not take the file ({exc!r})") from None
    if not isinstance(answer, UploadResponse):
        code = getattr(answer, "status_code", "") or ""
        text = f"the homeserver refused the file: {code} {getattr(answer, 'message', '')}"
        raise DeliveryError(text.strip(), permanent=code in ("M_TOO_LARGE", "M_FORBIDDEN"))
    image = file.content_type.startswith("image/")
    return {
        "msgtype": "m.image" if image else "m.file",
        "body": file.filename,
        "filename": file.filename,
        "url": answer.content_uri,
        "info": {"mimetype": file.content_type, "size": len(data)},
        "m.mentions": {},
    }
