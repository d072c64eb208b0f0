"""The one protocol every LLM provider implements, and the errors the core understands.

The agent loop, the summarizer and the analytical brain only ever call `LLMService.complete`,
with one `LLMRequest` that says everything about the call: a wrapper (the lazy, switchable and
background-model services) passes it on as it is, or changed with `dataclasses.replace`.
Providers translate Bruce's neutral `ChatMessage`/`ToolSpec` values into their wire format, and
their SDK's failures reach the core as `LLMUnavailableError` (the model could not be reached: the
user is told briefly and nothing is lost) or `LLMRequestError` (the request itself was refused),
mapped in one place for every vendor (`errors.py`, called from `call.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Protocol, runtime_checkable

from bruce_bot.domain import ChatMessage, LLMResponse, SystemPrompt, ToolSpec

# Receives the answer's visible text as it is generated, a piece (a delta) at a time: never
# reasoning, never tool-call markup. It must return quickly: the provider reads the stream
# between calls (a channel that shows the text throttles and sends on its own).
TextSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call to a model: the conversation, and how it is to be answered.

    With a `stream` sink the answer is requested as a stream (unless `llm.stream` says the
    server cannot) and its text handed to the sink as it arrives; the response returned is the
    same as without one.

    With `force_text` the tools are still declared (Anthropic requires them whenever the history
    holds tool_use/tool_result blocks) but tool use is switched off (`tool_choice: none`), so the
    model must answer in text.

    `model=None` means the main model: only then does `llm.thinking` apply (the background
    model's summaries and brain calls never think at length). `max_tokens=None` means
    `llm.max_tokens`.
    """

    system: SystemPrompt
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] = ()
    _: KW_ONLY
    model: str | None = None
    max_tokens: int | None = None
    force_text: bool = False
    stream: TextSink | None = None


class LLMError(Exception):
    """Base class of failures a provider reports to the core."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class LLMUnavailableError(LLMError):
    """The provider could not answer after retries (overloaded, rate limited, down, timed out)."""


class LLMRequestError(LLMError):
    """The provider refused the request (bad key, unknown model, invalid request)."""


class LLMAuthenticationError(LLMRequestError):
    """401/403: the key is wrong, revoked or lacks permission (fix: `llm.api_key`)."""


class LLMModelNotFoundError(LLMRequestError):
    """404: the server does not know the model asked for (fix: `llm.model`)."""

    def __init__(self, reason: str, detail: str = "", *, model: str = "") -> None:
        super().__init__(reason, detail)
        self.model = model


class LLMQuotaExceededError(LLMRequestError):
    """The account has no credit or quota left (`insufficient_quota`, 402, billing errors)."""


class LLMContextOverflowError(LLMRequestError):
    """The prompt (history plus tools plus `max_tokens`) does not fit the model's context window."""


class LLMNotConfiguredError(LLMError):
    """No provider is configured (no API key): Bruce runs, but cannot think yet."""


@runtime_checkable
class LLMService(Protocol):
    """A chat model that can call tools."""

    @property
    def model(self) -> str: ...

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer the conversation as `request` says (see `LLMRequest`).

        The response's `stop_reason` is one of `StopReason`'s words, and its text never holds
        reasoning or tool-call markup.
        """
        ...

    async def aclose(self) -> None: ...
