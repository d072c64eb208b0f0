"""Pick the LLM provider the `llm` config section names.

The SDK of the chosen provider is imported here, lazily, so a process that talks to one vendor
never pays for the other's import (the anthropic SDK alone costs about a second and ~70 MB).
Without a key (and, for the OpenAI-compatible provider, without a local `base_url`) Bruce still
starts, with an `UnconfiguredLLM` that tells the person how to fix the config.
"""

from __future__ import annotations

from bruce_bot.config import LLMConfig
from bruce_bot.llm.base import LLMService
from bruce_bot.llm.unconfigured import UnconfiguredLLM


def create_llm(config: LLMConfig) -> LLMService:
    if not config.is_configured:
        return UnconfiguredLLM(provider=config.provider, model=config.model)
    if config.provider == "openai":
        from bruce_bot.llm.openai import OpenAICompatibleLLM
        from bruce_bot.llm.text_calls import PROCESS_NATIVE_MODELS

        # One record of the models seen calling tools natively, whatever provider is rebuilt.
        return OpenAICompatibleLLM(config, PROCESS_NATIVE_MODELS)
    from bruce_bot.llm.anthropic import AnthropicLLM

    return AnthropicLLM(config)
