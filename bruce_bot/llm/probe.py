"""Does a model answer? One call of one output token with given LLM settings, and the words for
how it failed: the server's own when it refused the call.

`bruce doctor` checks the configured model with it (cli/doctor.py), and the dashboard tries new
LLM settings with it before it saves them (settings/llm.py).
"""

from __future__ import annotations

from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, SystemPrompt
from bruce_bot.llm.base import LLMError, LLMRequest
from bruce_bot.llm.errors import ErrorReply
from bruce_bot.llm.factory import create_llm

PROBE_TIMEOUT_SECONDS = 10.0


async def probe_llm(settings: LLMConfig) -> None:
    """One call of one output token to the model `settings` name, without retries and within
    10 s; raises the `LLMError` the call ended with (`llm_failure` words it)."""
    probe = settings.model_copy(
        update={
            "max_retries": 0,
            "timeout_seconds": min(settings.timeout_seconds, PROBE_TIMEOUT_SECONDS),
        }
    )
    llm = create_llm(probe)
    try:
        # `model` given: the plain model, without `llm.thinking` (it needs more than 1 token).
        await llm.complete(
            LLMRequest(
                SystemPrompt(stable=("Answer with one word.",)),
                [ChatMessage(role="user", text="ping")],
                model=settings.model,
                max_tokens=1,
            )
        )
    finally:
        await llm.aclose()


def llm_failure(exc: LLMError) -> str:
    """What went wrong with a call, with the server's own words when it refused it."""
    return f"{exc}{_server_words(exc)}"


def _server_words(exc: LLMError) -> str:
    """The provider's own error, word for word, when the server refused the call: the core's
    error says what it means, this says what the server said (read from the SDK's exception,
    which `call.py` keeps as the cause, without importing the SDK here)."""
    cause = exc.__cause__
    status = getattr(cause, "status_code", None)
    if cause is None or not isinstance(status, int):
        return ""
    fallback = str(getattr(cause, "message", "") or "")
    reply = ErrorReply.from_body(status, getattr(cause, "body", None), fallback)
    kind = f" ({reply.kind})" if reply.kind else ""
    return f" — the server said: {status}{kind} {reply.message}" if reply.message else ""
