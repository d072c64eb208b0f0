"""Speech to text, SDK-free: the `Transcriber` protocol the media step uses and its errors.

The one implementation (openai_transcription.py) speaks to an OpenAI-compatible
`/v1/audio/transcriptions` endpoint: OpenAI's Whisper API, faster-whisper-server, whisper.cpp's
server, LocalAI...
"""

from __future__ import annotations

from typing import Protocol


class TranscriptionError(Exception):
    """The audio was not transcribed. `transient`: the server was away or busy (try again
    later; the voice note is kept); otherwise it refused this file."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class Transcriber(Protocol):
    async def transcribe(self, data: bytes, file_name: str, mime_type: str) -> str:
        """The text spoken in the audio; raises `TranscriptionError`."""
        ...

    async def aclose(self) -> None: ...
