"""What a refused call means to the core: one mapping, for every vendor, from the server's answer
to the errors of `base.py`.

Servers word the same failure differently (Anthropic, OpenAI, vLLM, llama.cpp, Ollama, LM Studio,
OpenRouter, gateways) and some send it with an unexpected status (OpenAI's `insufficient_quota` as
a 429, llama.cpp's context overflow as a 500, LM Studio's missing model as a 400), so the status
is read together with the error's code, type and message. `ErrorReply.from_body` reads every
envelope seen in the wild. No SDK is imported here: a provider hands over the status and the body
its SDK's exception carries (see `call.py`), and the tests feed the recorded bodies directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from bruce_bot.llm.base import (
    LLMAuthenticationError,
    LLMContextOverflowError,
    LLMError,
    LLMModelNotFoundError,
    LLMQuotaExceededError,
    LLMRequestError,
    LLMUnavailableError,
)

# How servers word "the prompt does not fit": Anthropic ("prompt is too long: 201234 tokens >
# 200000 maximum", "input length and `max_tokens` exceed context limit"), OpenAI
# (code context_length_exceeded, "This model's maximum context length is ..."), vLLM (the same
# sentence), llama.cpp server (exceed_context_size_error, "the request exceeds the available
# context size"), Ollama ("input length exceeds the context length"), LM Studio and gateways
# ("context window", "too many tokens").
_CONTEXT_OVERFLOW_WORDS = (
    "context_length_exceeded",
    "exceed_context_size",
    "prompt is too long",
    "maximum context length",
    "context length",
    "context size",
    "context window",
    "context limit",
    "too many tokens",
    "prompt too long",
    "reduce the length of the messages",
)
_QUOTA_WORDS = (
    "insufficient_quota",
    "credit balance is too low",
    "insufficient credits",
    "insufficient balance",
    "exceeded your current quota",
    "billing",
    "payment required",
)
# Anthropic's words for an organisation's monthly spend limit (HTTP 400 invalid_request_error).
_USAGE_LIMIT_WORDS = ("reached your specified api usage limits",)
# LM Studio ("No models loaded"), OpenRouter ("is not a valid model ID") and others say a model
# is missing with a 400; the phrases count only in a message that names a model.
_NO_MODELS_WORDS = ("no models loaded",)
_MISSING_MODEL_WORDS = ("not found", "does not exist", "not a valid model", "not loaded")
MODEL_SETTINGS_HINT = "check llm.model, llm.background_model and llm.base_url in config.yml"


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """A server's refusal in plain values: its HTTP status and its error's message, code, type."""

    status: int
    message: str
    code: str = ""
    kind: str = ""

    @classmethod
    def from_body(cls, status: int, body: object, fallback: str = "") -> ErrorReply:
        """Read an error body in any of its shapes; `fallback` is the message when it has none.

        Anthropic wraps the error (`{"type": "error", "error": {"type", "message"}}`, behind
        Cloudflare without the outer `type`), OpenAI and most servers too (`{"error": {"message",
        "type", "code"}}`, which the openai SDK unwraps), vLLM's older bodies are flat
        (`{"object": "error", "message", "type", "code"}`) and some servers send
        `{"error": "text"}` or plain text.
        """
        if isinstance(body, str):
            return cls(status, body.strip() or fallback)
        if not isinstance(body, dict):
            return cls(status, fallback)
        error = body.get("error")
        if isinstance(error, dict):
            body = error
        message = body.get("message")
        if not isinstance(message, str) and isinstance(error, str):
            message = error
        return cls(
            status,
            message if isinstance(message, str) else fallback,
            code=str(body.get("code") or ""),
            kind=str(body.get("type") or ""),
        )

    def says(self, words: tuple[str, ...]) -> bool:
        haystack = " ".join(text for text in (self.code, self.kind, self.message) if text).lower()
        return any(phrase in haystack for phrase in words)


def is_context_overflow(reply: ErrorReply) -> bool:
    """The prompt did not fit the model (a tokens-per-minute 429 reads alike: a rate limit)."""
    return reply.status == 413 or (reply.status != 429 and reply.says(_CONTEXT_OVERFLOW_WORDS))


def is_quota_exhausted(reply: ErrorReply) -> bool:
    """The account has no credit or quota (HTTP 402 always says so)."""
    return reply.status == 402 or reply.says(_QUOTA_WORDS)


def names_a_missing_model(reply: ErrorReply) -> bool:
    message = reply.message.lower()
    if any(phrase in message for phrase in _NO_MODELS_WORDS):
        return True
    return "model" in message and any(phrase in message for phrase in _MISSING_MODEL_WORDS)


def error_for_reply(reply: ErrorReply, *, model: str = "", secret: str = "") -> LLMError:
    """The core's view of a refusal (after the SDK's own retries). Never leaks `secret`.

    Read in this order: a bad key; no money (before the rate limit: `insufficient_quota` comes as
    a 429 no retry fixes); a prompt too long; an unknown model; then the status alone.
    """
    status = reply.status
    message = scrub(reply.message, secret)
    detail = f"HTTP {status}: {message}"
    if status in (401, 403):
        # The server's words may quote the key (OpenAI's do): say only what to check. Where the
        # key comes from (config.yml or the dashboard) is for the reply to say, not this layer.
        return LLMAuthenticationError(
            "authentication failed",
            f"HTTP {status}: llm.api_key was refused (is it right and still active?)",
        )
    if reply.says(_USAGE_LIMIT_WORDS):
        return LLMQuotaExceededError("usage limit reached", detail)
    if is_quota_exhausted(reply):
        return LLMQuotaExceededError("no credit", detail)
    if is_context_overflow(reply):
        return LLMContextOverflowError("context too long", detail)
    if status == 404 or names_a_missing_model(reply):
        return LLMModelNotFoundError(
            "model not found", f"{detail} (asked for {model!r}); {MODEL_SETTINGS_HINT}", model=model
        )
    if status == 429:
        return LLMUnavailableError("rate limited", message)
    if status == 529:
        return LLMUnavailableError("overloaded", message)
    if status >= 500:
        return LLMUnavailableError("server error", detail)
    return LLMRequestError("request rejected", detail)


def scrub(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text
