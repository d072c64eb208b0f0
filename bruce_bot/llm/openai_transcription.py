"""Voice notes to text through an OpenAI-compatible `/v1/audio/transcriptions` endpoint.

With the openai SDK (`audio.transcriptions.create`: multipart with the file, `model` and
`language`), which, with llm/openai.py, is the only module that imports it (the architecture
test lets `bruce_bot.llm.openai*` modules do so). The SDK's own retries and timeouts apply; its
errors become `TranscriptionError`s: connection failures, timeouts, 429 and 5xx are transient
(the voice note is kept and tried again), a 4xx means this file or setting is refused.
"""

from __future__ import annotations

import openai
import structlog

from bruce_bot.config import TranscriptionConfig
from bruce_bot.llm.transcription import TranscriptionError

log = structlog.get_logger(__name__)

PLACEHOLDER_API_KEY = "not-needed"


class OpenAITranscriber:
    def __init__(self, config: TranscriptionConfig) -> None:
        self._config = config
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or PLACEHOLDER_API_KEY,
            base_url=config.base_url or None,
            timeout=config.timeout_seconds,
            max_retries=1,
        )

    async def transcribe(self, data: bytes, file_name: str, mime_type: str) -> str:
        config = self._config
        try:
            if config.language:
                answer = await self._client.audio.transcriptions.create(
                    file=(file_name, data, mime_type),
                    model=config.model,
                    language=config.language,
                )
            else:
                answer = await self._client.audio.transcriptions.create(
                    file=(file_name, data, mime_type), model=config.model
                )
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise TranscriptionError(f"the server did not answer ({exc})", transient=True) from None
        except openai.APIStatusError as exc:
            transient = exc.status_code == 429 or exc.status_code >= 500
            log.warning("transcription_refused", status=exc.status_code, transient=transient)
            raise TranscriptionError(
                f"the server answered {exc.status_code}: {_short(exc.message)}", transient=transient
            ) from None
        except openai.OpenAIError as exc:  # an answer the SDK could not read
            raise TranscriptionError(f"unreadable answer ({exc})", transient=True) from None
        # A JSON answer is parsed into `Transcription`; a server that sends plain text (whisper.cpp
        # with response_format=text) comes back as a str.
        text = answer if isinstance(answer, str) else getattr(answer, "text", "")
        return str(text or "").strip()

    async def aclose(self) -> None:
        await self._client.close()


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "…"
