"""How much a model can read: the owner's `llm.context_window`, else its family's, else small."""

from __future__ import annotations

from bruce_bot.config import LLMConfig
from bruce_bot.llm.context_windows import UNKNOWN_MODEL_CONTEXT_WINDOW, context_window


def test_known_families_through_gateways_and_unknown_models_get_the_small_default() -> None:
    assert context_window(LLMConfig(model="claude-sonnet-4-6")) == 200_000
    assert context_window(LLMConfig(model="anthropic/claude-haiku-4-5")) == 200_000
    assert context_window(LLMConfig(model="GPT-4o-mini")) == 128_000
    assert context_window(LLMConfig(model="llama3.1:8b")) == UNKNOWN_MODEL_CONTEXT_WINDOW


def test_the_owners_window_wins_and_another_model_is_looked_up_by_its_own_name() -> None:
    llm = LLMConfig(model="llama3.1:8b", context_window=32_768)
    assert context_window(llm) == 32_768
    assert context_window(LLMConfig(model="llama3.1:8b"), "gpt-5-mini") == 400_000
