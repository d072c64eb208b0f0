"""The files of a Slack message: what they are (for the inbox) and their bytes (for a turn).

A file is a picture when Slack says image/*, audio when audio/* (a voice clip Slack recorded is
`subtype: slack_audio`), otherwise a document whose type the media step checks by name and
type. Its `url_private` is the reference; its bytes are fetched with the bot token as a bearer
(scope `files:read`). Without a token Slack does not refuse: it answers 200 with its HTML
sign-in page, so an HTML answer for a file that is not HTML is a refusal, not the file.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from bruce_bot.channels.base import AttachmentUnavailableError
from bruce_bot.domain import Attachment, AttachmentKind

READ_CHUNK_BYTES = 64 * 1024
FETCH_TIMEOUT_SECONDS = 60.0


def attachments_of(files: tuple[dict[str, Any], ...]) -> tuple[Attachment, ...]:
    return tuple(_attachment(item) for item in files if isinstance(item.get("url_private"), str))


def _attachment(item: dict[str, Any]) -> Attachment:
    mime = str(item.get("mimetype") or "").split(";")[0].strip()
    voice = item.get("subtype") == "slack_audio"
    kind: AttachmentKind = "document"
    if mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("audio/") or voice:
        kind = "audio"
    size = item.get("size")
    duration = (item.get("duration_ms") or 0) / 1000 or None
    return Attachment(
        kind,
        str(item["url_private"]),
        str(item.get("name") or item.get("title") or "file"),
        mime,
        size if isinstance(size, int) else None,
        duration,
        voice=voice,
    )


def _too_big(max_bytes: int) -> AttachmentUnavailableError:
    return AttachmentUnavailableError(
        f"it is over the {max_bytes / 1_000_000:.0f} MB I can read", permanent=True
    )


async def fetch(
    session: aiohttp.ClientSession, token: str, attachment: Attachment, max_bytes: int
) -> bytes:
    if attachment.size is not None and attachment.size > max_bytes:
        raise _too_big(max_bytes)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_SECONDS):
            async with session.get(attachment.ref, headers=headers) as answer:
                if answer.status in (401, 403, 404, 410):
                    raise AttachmentUnavailableError(
                        f"Slack refused the file ({answer.status})", permanent=True
                    )
                if answer.status != 200:
                    raise AttachmentUnavailableError(f"Slack answered {answer.status}")
                if _sign_in_page(answer, attachment):
                    raise AttachmentUnavailableError(
                        "Slack sent its sign-in page instead of the file: the bot token needs "
                        "the files:read scope (channels.slack.bot_token)",
                        permanent=True,
                    )
                return await _read(answer, max_bytes)
    except TimeoutError:
        raise AttachmentUnavailableError("Slack did not send the file in time") from None
    except aiohttp.ClientError as exc:
        raise AttachmentUnavailableError(f"Slack did not answer ({exc})") from None


def _sign_in_page(answer: aiohttp.ClientResponse, attachment: Attachment) -> bool:
    return answer.content_type == "text/html" and attachment.mime_type != "text/html"


async def _read(answer: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    data = bytearray()
    async for chunk in answer.content.iter_chunked(READ_CHUNK_BYTES):
        data += chunk
        if len(data) > max_bytes:
            raise _too_big(max_bytes)
    return bytes(data)
