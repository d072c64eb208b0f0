"""OpenAI-compatible chat completions behind `LLMService`: the only module that imports `openai`.

One provider serves OpenAI itself and every server that speaks its `/v1/chat/completions` dialect
(Ollama, vLLM, LM Studio, gateways): `llm.base_url` picks the server, and a local one needs no key.
The system prompt becomes one `system` message, tool calls travel as `tool_calls` with JSON-string
arguments, and tool results as one `tool` message each. Arguments the model garbled arrive as a
`ToolCall` with `arguments=None` and the raw text kept, so the agent loop can tell the model.
Retries are the SDK's job (`max_retries`); failures map onto the errors of `base.py`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import openai
import structlog

from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, LLMResponse, SystemPrompt, ToolCall, ToolSpec, Usage
from bruce_bot.llm.base import LLMError, LLMRequestError, LLMUnavailableError

log = structlog.get_logger(__name__)

# Without llm.api_key (Ollama, vLLM) the SDK still insists on a non-empty key.
PLACEHOLDER_API_KEY = "not-needed"


class OpenAICompatibleLLM:
    """A chat model behind an OpenAI-compatible API, configured from the `llm` section."""

    def __init__(self, config: LLMConfig) -> None:
        self._config = config
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or PLACEHOLDER_API_KEY,
            base_url=config.base_url or None,
            timeout=config.timeout_seconds,
            max_retries=config.max_retries,
        )
        # OpenAI's own API rejects `max_tokens` for its reasoning models and wants
        # `max_completion_tokens`; local servers (Ollama, vLLM) have long accepted `max_tokens`.
        self._max_tokens_param = (
            "max_completion_tokens" if _is_openai_platform(config.base_url) else "max_tokens"
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
            "messages": to_openai_messages(system, messages),
            self._max_tokens_param: max_tokens or self._config.max_tokens,
        }
        if tools:
            params["tools"] = to_openai_tools(tools)
            if force_text:
                params["tool_choice"] = "none"

        started = time.monotonic()
        try:
            completion = await self._client.chat.completions.create(**params)
            response = from_openai_completion(completion)
        except openai.APIError as exc:
            error = map_openai_error(exc, secret=self._config.api_key)
            log.warning(
                "llm_call_failed",
                provider="openai",
                model=model_name,
                reason=error.reason,
                status=getattr(exc, "status_code", None),
                request_id=getattr(exc, "request_id", None),
                seconds=round(time.monotonic() - started, 3),
            )
            raise error from exc
        except LLMError as error:
            log.warning("llm_call_failed", provider="openai", model=model_name, reason=error.reason)
            raise

        log.debug(
            "llm_call_finished",
            provider="openai",
            model=response.model,
            stop_reason=response.stop_reason,
            tool_calls=len(response.tool_calls),
            malformed_tool_calls=sum(call.arguments is None for call in response.tool_calls),
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            cache_read_tokens=response.usage.cache_read_tokens,
            seconds=round(time.monotonic() - started, 3),
        )
        return response

    async def aclose(self) -> None:
        await self._client.close()


def _is_openai_platform(base_url: str | None) -> bool:
    if not base_url:
        return True
    host = urlparse(base_url).hostname or ""
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


def to_openai_messages(
    system: SystemPrompt, messages: Sequence[ChatMessage]
) -> list[dict[str, Any]]:
    """The system message, then each entry: tool results become `tool` messages (before any
    user text, since they must directly follow the assistant's `tool_calls`)."""
    out: list[dict[str, Any]] = []
    if system.text.strip():
        out.append({"role": "system", "content": system.text})
    for message in messages:
        if message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                entry["tool_calls"] = [_tool_call_param(call) for call in message.tool_calls]
            elif not message.text.strip():
                continue
            out.append(entry)
            continue
        for result in message.tool_results:
            content = f"Error: {result.content}" if result.is_error else result.content
            out.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
        if message.text.strip():
            out.append({"role": "user", "content": message.text})
    return out


def _tool_call_param(call: ToolCall) -> dict[str, Any]:
    arguments = call.raw_arguments or json.dumps(
        call.arguments if call.arguments is not None else {}, ensure_ascii=False
    )
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def from_openai_completion(completion: openai.types.chat.ChatCompletion) -> LLMResponse:
    if not completion.choices:
        raise LLMUnavailableError("invalid response", "the server returned no choices")
    choice = completion.choices[0]
    message = choice.message
    calls: list[ToolCall] = []
    for tool_call in message.tool_calls or []:
        if tool_call.type != "function":
            continue
        raw = tool_call.function.arguments or ""
        calls.append(
            ToolCall(
                # Some local servers omit the id; the next request must still pair results.
                id=tool_call.id or f"call_{uuid.uuid4().hex[:24]}",
                name=tool_call.function.name,
                arguments=parse_arguments(raw),
                raw_arguments=raw,
            )
        )
    usage = Usage()
    if completion.usage is not None:
        details = completion.usage.prompt_tokens_details
        usage = Usage(
            input_tokens=completion.usage.prompt_tokens,
            output_tokens=completion.usage.completion_tokens,
            cache_read_tokens=(details.cached_tokens or 0) if details is not None else 0,
        )
    return LLMResponse(
        text=message.content or "",
        tool_calls=tuple(calls),
        stop_reason=choice.finish_reason or "",
        usage=usage,
        model=completion.model,
    )


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """A tool call's JSON arguments, `{}` when empty, None when they are not a JSON object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def map_openai_error(exc: openai.APIError, *, secret: str = "") -> LLMError:
    """The core's view of an SDK failure (after the SDK's own retries). Never leaks `secret`."""
    if isinstance(exc, openai.APITimeoutError):
        return LLMUnavailableError("timed out")
    if isinstance(exc, openai.APIConnectionError):
        return LLMUnavailableError("unreachable", _scrub(str(exc.__cause__ or ""), secret))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = _scrub(_api_message(exc), secret)
        if isinstance(exc, openai.RateLimitError):
            return LLMUnavailableError("rate limited", detail)
        if status == 529:
            return LLMUnavailableError("overloaded", detail)
        if isinstance(exc, openai.InternalServerError) or status >= 500:
            return LLMUnavailableError("server error", f"HTTP {status}: {detail}")
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            # OpenAI quotes (part of) the key in its 401 message: say only what to check.
            return LLMRequestError(
                "authentication failed", f"HTTP {status}: check llm.api_key in config.yml"
            )
        if isinstance(exc, openai.NotFoundError):
            return LLMRequestError("model not found", detail)
        return LLMRequestError("request rejected", f"HTTP {status}: {detail}")
    return LLMUnavailableError("invalid response", _scrub(str(exc), secret))


def _api_message(exc: openai.APIStatusError) -> str:
    # The SDK unwraps `{"error": {...}}`, so `body` is the inner error object.
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return exc.message


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text
