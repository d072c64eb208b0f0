"""The stand-in provider when no LLM is configured: Bruce starts, but every call explains the fix.

Channels, the dashboard and the scheduler keep working without an API key; the agent loop gets an
`LLMNotConfiguredError` whose detail says how to connect one: the dashboard first (its setup card
and Settings apply at once), config.yml second (read at start). The chat's reply, which knows the
dashboard's address, is `agent/failures.py`'s.
"""

from __future__ import annotations

from bruce_bot.domain import LLMResponse
from bruce_bot.llm.base import LLMNotConfiguredError, LLMRequest

_DASHBOARD = "connect a model on the web dashboard's setup card (chat page), no restart needed; "
_HOW_TO_FIX = {
    "anthropic": (
        _DASHBOARD + "or set llm.api_key in config.yml, e.g. ${ANTHROPIC_API_KEY}, and restart"
    ),
    "openai": (
        _DASHBOARD + "or set llm.api_key in config.yml, e.g. ${OPENAI_API_KEY}, or llm.base_url "
        "for a local OpenAI-compatible server (Ollama, vLLM), and restart"
    ),
}


class UnconfiguredLLM:
    """An `LLMService` whose `complete` always raises `LLMNotConfiguredError`."""

    def __init__(self, provider: str = "anthropic", model: str = "") -> None:
        self._provider = provider
        self._model = model

    @property
    def model(self) -> str:
        return self._model

    @property
    def how_to_fix(self) -> str:
        return _HOW_TO_FIX.get(self._provider, _HOW_TO_FIX["anthropic"])

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise LLMNotConfiguredError("not configured", self.how_to_fix)

    async def aclose(self) -> None:
        return None
