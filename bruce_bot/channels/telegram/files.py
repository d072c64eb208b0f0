"""The files of a Telegram message: what they are (for the inbox) and their bytes (for a turn).

A photo arrives as several `PhotoSize`s of one picture; the largest is taken (Telegram's
largest is at most 2560 px on its long edge, which the media step scales down anyway). A
document is a picture when its MIME type says image/*, audio when audio/*, otherwise a
document whose type the media step checks. Voice notes and audio files are audio. Videos,
video notes, stickers and the rest are not read (the channel says so). Bytes are fetched with
`getFile` and the file URL (the Bot API serves files up to 20 MB to bots).
"""

from __future__ import annotations

import warnings

from telegram import Bot, Message
from telegram.error import BadRequest, NetworkError, TelegramError

from bruce_bot.channels.base import AttachmentUnavailableError
from bruce_bot.domain import Attachment, AttachmentKind

# What Telegram lets a bot download (getFile refuses larger files with "file is too big").
BOT_API_DOWNLOAD_LIMIT = 20 * 1024 * 1024


def attachments_of(message: Message) -> tuple[Attachment, ...]:
    """The files Bruce can read in `message` (empty: none, or only kinds it cannot read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB's int-or-timedelta transition warnings (duration)
        return _attachments_of(message)


def _attachments_of(message: Message) -> tuple[Attachment, ...]:
    if message.photo:
        best = max(message.photo, key=lambda size: size.width * size.height)
        return (Attachment("image", best.file_id, "", "image/jpeg", best.file_size),)
    if message.voice is not None:
        voice = message.voice
        return (
            Attachment(
                "audio",
                voice.file_id,
                "",
                voice.mime_type or "audio/ogg",
                voice.file_size,
                _seconds(voice.duration),
                voice=True,
            ),
        )
    if message.audio is not None:
        audio = message.audio
        return (
            Attachment(
                "audio",
                audio.file_id,
                audio.file_name or "audio.mp3",
                audio.mime_type or "audio/mpeg",
                audio.file_size,
                _seconds(audio.duration),
            ),
        )
    if message.document is not None:
        document = message.document
        mime = document.mime_type or ""
        kind: AttachmentKind = "document"
        if mime.startswith("image/"):
            kind = "image"
        elif mime.startswith("audio/"):
            kind = "audio"
        return (
            Attachment(kind, document.file_id, document.file_name or "", mime, document.file_size),
        )
    return ()


async def fetch(bot: Bot, attachment: Attachment, max_bytes: int) -> bytes:
    """The file's bytes through the Bot API; `AttachmentUnavailableError` when it cannot be."""
    limit = min(max_bytes, BOT_API_DOWNLOAD_LIMIT)
    try:
        file = await bot.get_file(attachment.ref)
        if file.file_size is not None and file.file_size > limit:
            raise AttachmentUnavailableError(
                f"it is {file.file_size / 1_000_000:.1f} MB, over the {limit / 1_000_000:.0f} MB "
                "a bot may download",
                permanent=True,
            )
        data = bytes(await file.download_as_bytearray())
    except BadRequest as exc:  # "file is too big", "wrong file_id or the file is temporarily..."
        raise AttachmentUnavailableError(
            f"Telegram refused it ({exc.message})", permanent=True
        ) from None
    except NetworkError as exc:  # also TimedOut: Telegram was away
        raise AttachmentUnavailableError(f"Telegram did not answer ({exc.message})") from None
    except TelegramError as exc:
        raise AttachmentUnavailableError(f"Telegram refused it ({exc.message})") from None
    if len(data) > limit:
        raise AttachmentUnavailableError(
            f"it is over the {limit / 1_000_000:.0f} MB I can read", permanent=True
        )
    return data


def _seconds(duration: object) -> float | None:
    """PTB gives durations as int or timedelta depending on its version and settings."""
    total = getattr(duration, "total_seconds", None)
    if callable(total):
        return float(total())
    return float(duration) if isinstance(duration, int | float) else None
