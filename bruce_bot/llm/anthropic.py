"""The Anthropic Messages API behind `LLMService`: the only module that imports the `anthropic` SDK.

It turns Bruce's neutral conversation into Anthropic's shape (alternating user/assistant turns,
`tool_use` and `tool_result` blocks, tool results first in their user turn), marks two prompt-cache
breakpoints (the stable system layers, and the end of the conversation so the agent loop's growing
prefix is reused from one call to the next), and maps the SDK's failures onto `LLMUnavailableError`
and `LLMRequestError`. Retries with exponential backoff and `retry-after` are the SDK's job
(`max_retries` from the config); this module never loops on its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import anthropic
import structlog

from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, LLMResponse, SystemPrompt, ToolCall, ToolSpec, Usage
from bruce_bot.llm.base import LLMError, LLMRequestError, LLMUnavailableError

log = structlog.get_logger(__name__)

_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


class AnthropicLLM:
    """Claude through `anthropic.AsyncAnthropic`, configured from the `llm` section."""

    def __init__(self, config: LLMConfig) -> None:
        self._config = config
        self._client = anthropic.AsyncAnthropic(
            api_key=config.api_key,
            base_url=config.base_url or None,
            timeout=config.timeout_seconds,
            max_retries=config.max_retries,
        )

    @property
    def model(self) -> str:
        return self._config.model

    async def complete(
        self,
        system: SystemPrompt,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        force_text: bool = False,
    ) -> LLMResponse:
        model_name = model or self._config.model
        params: dict[str, Any] = {
            "model": model_name,
            "max_tokens": max_tokens or self._config.max_tokens,
            "messages": to_anthropic_messages(messages),
        }
        system_blocks = to_anthropic_system(system)
        if system_blocks:
            params["system"] = system_blocks
        if tools:
            # Declared even when forcing text: the history may hold tool_use blocks.
            params["tools"] = to_anthropic_tools(tools)
            if force_text:
                params["tool_choice"] = {"type": "none"}

        started = time.monotonic()
        try:
            message = await self._client.messages.create(**params)
        except anthropic.APIError as exc:
            error = self._map_error(exc)
            log.warning(
                "llm_call_failed",
                provider="anthropic",
                model=model_name,
                reason=error.reason,
                status=getattr(exc, "status_code", None),
                request_id=getattr(exc, "request_id", None),
                seconds=round(time.monotonic() - started, 3),
            )
            raise error from exc

        response = from_anthropic_message(message)
        log.debug(
            "llm_call_finished",
            provider="anthropic",
            model=response.model,
            stop_reason=response.stop_reason,
            tool_calls=len(response.tool_calls),
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            cache_read_tokens=response.usage.cache_read_tokens,
            cache_write_tokens=response.usage.cache_write_tokens,
            seconds=round(time.monotonic() - started, 3),
        )
        return response

    async def aclose(self) -> None:
        await self._client.close()

    def _map_error(self, exc: anthropic.APIError) -> LLMError:
        return map_anthropic_error(exc, secret=self._config.api_key)


def to_anthropic_system(system: SystemPrompt) -> list[dict[str, Any]]:
    """Two text blocks: the stable layers (a cache breakpoint), then the volatile ones."""
    blocks: list[dict[str, Any]] = []
    stable = "\n\n".join(part for part in system.stable if part)
    volatile = "\n\n".join(part for part in system.volatile if part)
    if stable.strip():
        blocks.append({"type": "text", "text": stable, "cache_control": dict(_EPHEMERAL)})
    if volatile.strip():
        blocks.append({"type": "text", "text": volatile})
    return blocks


def to_anthropic_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Translate neutral messages into alternating Anthropic turns with block content.

    Consecutive messages of one role are merged into one turn; within a user turn the
    `tool_result` blocks come first, as the API requires. Empty text is dropped. The last block of
    the last turn carries a cache breakpoint.
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        blocks = _blocks_of(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": message.role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # A stable sort: tool results first, the rest keeps its order.
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    if turns:
        last_block = turns[-1]["content"][-1]
        last_block["cache_control"] = dict(_EPHEMERAL)
    return turns


def _blocks_of(message: ChatMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for result in message.tool_results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
        if result.content:
            block["content"] = result.content
        if result.is_error:
            block["is_error"] = True
        blocks.append(block)
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": call.arguments if call.arguments is not None else {},
            }
        )
    return blocks


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in tools
    ]


def from_anthropic_message(message: anthropic.types.Message) -> LLMResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            arguments = dict(block.input) if isinstance(block.input, dict) else None
            calls.append(
                ToolCall(
                    id=block.id,
                    name=block.name,
                    arguments=arguments,
                    raw_arguments=json.dumps(block.input, ensure_ascii=False),
                )
            )
    usage = message.usage
    return LLMResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        stop_reason=message.stop_reason or "",
        usage=Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_input_tokens or 0,
            cache_write_tokens=usage.cache_creation_input_tokens or 0,
        ),
        model=message.model,
    )


def map_anthropic_error(exc: anthropic.APIError, *, secret: str = "") -> LLMError:
    """The core's view of an SDK failure (after the SDK's own retries). Never leaks `secret`."""
    if isinstance(exc, anthropic.APITimeoutError):
        return LLMUnavailableError("timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return LLMUnavailableError("unreachable", _scrub(str(exc.__cause__ or ""), secret))
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        detail = _scrub(_api_message(exc), secret)
        if isinstance(exc, anthropic.RateLimitError):
            return LLMUnavailableError("rate limited", detail)
        if status == 529 or isinstance(exc, anthropic.OverloadedError):
            return LLMUnavailableError("overloaded", detail)
        if isinstance(exc, anthropic.InternalServerError) or status >= 500:
            return LLMUnavailableError("server error", f"HTTP {status}: {detail}")
        if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
            # The server's words may quote the key; say only what to check.
            return LLMRequestError(
                "authentication failed", f"HTTP {status}: check llm.api_key in config.yml"
            )
        if isinstance(exc, anthropic.NotFoundError):
            return LLMRequestError("model not found", detail)
        return LLMRequestError("request rejected", f"HTTP {status}: {detail}")
    return LLMUnavailableError("invalid response", _scrub(str(exc), secret))


def _api_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return exc.message


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text
