"""How many tokens a model can read at once: `llm.context_window` when the owner says so, else
the window of a model family Bruce knows, else a conservative default."""

from __future__ import annotations

from bruce_bot.config import LLMConfig

# Context windows (tokens) of model families Bruce knows, matched as prefixes of `llm.model`.
# Anything else gets the conservative default: local servers often run with small windows
# (Ollama's default `num_ctx` is 4096-8192), and `llm.context_window` says the real size.
KNOWN_CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),
    ("gpt-4.1", 1_000_000),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
)
UNKNOWN_MODEL_CONTEXT_WINDOW = 8_192


def default_context_window(model: str) -> int:
    """The known window of `model`'s family, or the conservative default."""
    name = model.lower().rsplit("/", 1)[-1]  # "anthropic/claude-..." through gateways
    for prefix, window in KNOWN_CONTEXT_WINDOWS:
        if name.startswith(prefix):
            return window
    return UNKNOWN_MODEL_CONTEXT_WINDOW


def context_window(llm: LLMConfig, model: str | None = None) -> int:
    """Tokens `model` (default: the main model) can take: `llm.context_window`, else known."""
    return llm.context_window or default_context_window(model or llm.model)
