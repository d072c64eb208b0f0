"""The files of a Discord message: what they are (for the inbox) and their bytes (for a turn).

An attachment is a picture when Discord says image/*, audio when audio/* (a voice message is
one with a waveform and a duration), otherwise a document whose type the media step checks by
name and type. Its URL is the reference; the bytes come from Discord's CDN through discord.py's
own HTTP session (`HTTPClient.get_from_cdn`, what `Attachment.read` uses). Attachment URLs are
signed and expire after about a day: a file fetched later than that is gone (the user is asked
to send it again).
"""

from __future__ import annotations

import aiohttp
import discord

from bruce_bot.channels.base import AttachmentUnavailableError
from bruce_bot.domain import Attachment, AttachmentKind


def attachments_of(message: discord.Message) -> tuple[Attachment, ...]:
    return tuple(_attachment(item) for item in message.attachments)


def _attachment(item: discord.Attachment) -> Attachment:
    mime = (item.content_type or "").split(";")[0].strip()
    kind: AttachmentKind = "document"
    if mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("audio/") or item.is_voice_message():
        kind = "audio"
    return Attachment(
        kind,
        item.url,
        item.filename,
        mime,
        item.size,
        item.duration,
        voice=item.is_voice_message(),
    )


async def fetch(client: discord.Client, attachment: Attachment, max_bytes: int) -> bytes:
    if attachment.size is not None and attachment.size > max_bytes:
        raise AttachmentUnavailableError(
            f"it is over the {max_bytes / 1_000_000:.0f} MB I can read", permanent=True
        )
    try:
        data = await client.http.get_from_cdn(attachment.ref)
    except (discord.NotFound, discord.Forbidden):
        raise AttachmentUnavailableError(
            "Discord no longer has it (attachment links expire after a day)", permanent=True
        ) from None
    except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
        raise AttachmentUnavailableError(f"Discord did not answer ({exc})") from None
    if len(data) > max_bytes:
        raise AttachmentUnavailableError(
            f"it is over the {max_bytes / 1_000_000:.0f} MB I can read", permanent=True
        )
    return data
