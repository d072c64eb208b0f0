"""The LLM every part holds, whose provider can be swapped while Bruce runs (live settings).

The turn runner, the brain, the summarizer and the tools are given this one object at start;
`switch` puts another provider behind it (the dashboard changed the provider, model, base URL or
key). A call already running finishes on the provider it started on, which is closed once its
last call has returned; the next call goes to the new one.

The brain and the summarizer ask for the background model by name (`llm.background_model` at
start): a call naming that start-time model is sent to the background model now configured.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from bruce_bot.config import LLMConfig
from bruce_bot.domain import LLMResponse
from bruce_bot.llm.base import LLMRequest, LLMService

log = structlog.get_logger(__name__)


class SwitchableLLM:
    def __init__(self, service: LLMService, config: LLMConfig) -> None:
        self._service = service
        self._config = config
        # The background model the callers were built with (they name it in `complete`).
        self._started_background = config.effective_background_model
        self._calls: dict[int, int] = {}  # id(service) → calls running on it
        self._retired: dict[int, LLMService] = {}  # replaced, closed after their last call

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def config(self) -> LLMConfig:
        """The settings of the provider now in use."""
        return self._config

    @property
    def service(self) -> LLMService:
        return self._service

    def preload(self) -> None:
        preload = getattr(self._service, "preload", None)
        if callable(preload):
            preload()

    async def switch(self, service: LLMService, config: LLMConfig) -> None:
        """From the next call on, `service` (built for `config`) answers."""
        old = self._service
        self._service, self._config = service, config
        log.info("llm_switched", provider=config.provider, model=config.model)
        if self._calls.get(id(old), 0) == 0:
            await _close(old)
        else:
            self._retired[id(old)] = old

    async def complete(self, request: LLMRequest) -> LLMResponse:
        service = self._service
        if request.model is not None and request.model == self._started_background:
            request = replace(request, model=self._config.effective_background_model)
        key = id(service)
        self._calls[key] = self._calls.get(key, 0) + 1
        try:
            return await service.complete(request)
        finally:
            self._calls[key] -= 1
            if self._calls[key] == 0:
                del self._calls[key]
                retired = self._retired.pop(key, None)
                if retired is not None:
                    await _close(retired)

    async def aclose(self) -> None:
        for retired in list(self._retired.values()):
            await _close(retired)
        self._retired.clear()
        await self._service.aclose()


async def _close(service: LLMService) -> None:
    try:
        await service.aclose()
    except Exception as exc:  # a provider that fails to close must not stop the switch
        log.debug("llm_close_failed", error=repr(exc))
