"""An LLM whose SDK loads in a background thread, so start-up does not wait for it.

Importing a vendor SDK can take about a second (the anthropic SDK ~0.9 s). `LazyLLM` starts that
import in a thread as soon as Bruce starts and becomes the real provider when it is done; the
first turn waits only if it arrives before the import has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bruce_bot.domain import LLMResponse
from bruce_bot.llm.base import LLMRequest, LLMService


class LazyLLM:
    def __init__(self, build: Callable[[], LLMService], model: str) -> None:
        self._build = build
        self._model = model
        self._task: asyncio.Task[LLMService] | None = None

    @property
    def model(self) -> str:
        return self._model

    def preload(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(asyncio.to_thread(self._build))

    async def _service(self) -> LLMService:
        self.preload()
        assert self._task is not None
        return await self._task

    async def complete(self, request: LLMRequest) -> LLMResponse:
        service = await self._service()
        return await service.complete(request)

    async def aclose(self) -> None:
        if self._task is None:
            return
        service = await self._task
        await service.aclose()
