"""The price table: a model is priced by its own entry or the longest prefix ending at a
boundary, `usage.prices` overrides and extends the built-in table (what an entry leaves out comes
from the built-in entry of its key), a local OpenAI-compatible server prices what has no price at
zero, an unknown model has no price, and bad price entries are refused with a message naming
them."""

from __future__ import annotations

from typing import Any

import pytest

from bruce_bot.config import ConfigError, LLMConfig, UsageConfig, validate
from bruce_bot.usage.prices import PriceTable, is_local_url


def table(prices: dict[str, Any] | None = None, **llm: Any) -> PriceTable:
    usage = UsageConfig.model_validate({"prices": prices or {}})
    return PriceTable.from_config(usage, LLMConfig.model_validate(llm) if llm else None)


@pytest.mark.parametrize(
    ("model", "key", "input_price"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4", 3.0),
        ("claude-opus-4-5-20251101", "claude-opus-4-5", 5.0),  # the longer prefix wins
        ("claude-opus-4-20250514", "claude-opus-4", 15.0),
        ("claude-opus-4-1", "claude-opus-4-1", 15.0),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku", 0.80),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini", 0.15),  # not gpt-4o's price
        ("gpt-4o-2024-08-06", "gpt-4o", 2.50),
        ("GPT-4.1-Nano", "gpt-4.1-nano", 0.10),  # names are compared without case
        ("anthropic/claude-haiku-4-5", "claude-haiku-4", 1.0),  # a provider/ in front
    ],
)
def test_a_model_is_priced_by_the_longest_matching_prefix(
    model: str, key: str, input_price: float
) -> None:
    entry = table().lookup(model)
    assert entry is not None and entry.key == key and entry.source == "built-in"
    assert entry.price.input == input_price


@pytest.mark.parametrize("model", ["gpt-4os", "claude-sonnet-40", "gpt-5.5", "llama3:8b", ""])
def test_a_prefix_matches_only_at_a_boundary_and_unknown_models_have_no_price(model: str) -> None:
    prices = table()
    assert prices.lookup(model) is None
    assert prices.cost(model, 1000, 1000, 0, 0) is None


def test_anthropic_cache_tokens_are_priced_apart_from_input() -> None:
    # Sonnet 4: $3 input, $15 output, $0.30 cache read, $3.75 cache write per million.
    cost = table().cost("claude-sonnet-4-6", 1_000_000, 100_000, 2_000_000, 400_000)
    assert cost == pytest.approx(3.0 + 1.5 + 0.6 + 1.5)


def test_openai_cached_tokens_inside_the_input_are_priced_once() -> None:
    # gpt-4o: $2.50 input, $1.25 cached input, $10 output; 400k of the 1M input were cached.
    cost = table().cost("gpt-4o", 1_000_000, 0, 400_000, 0)
    assert cost == pytest.approx(0.6 * 2.50 + 0.4 * 1.25)


def test_config_overrides_a_built_in_entry_and_keeps_what_it_leaves_out() -> None:
    prices = table({"gpt-4o": {"input": 2.0, "output": 8.0}})
    entry = prices.lookup("gpt-4o-2024-08-06")
    assert entry is not None and entry.source == "config"
    assert (entry.price.input, entry.price.output) == (2.0, 8.0)
    # The cached-input price and OpenAI's way of counting it come from the built-in entry.
    assert entry.price.cache_read == 1.25 and entry.price.input_includes_cache_read
    assert prices.lookup("gpt-4o-mini").price.input == 0.15  # type: ignore[union-attr]


def test_config_adds_a_model_and_a_more_specific_prefix() -> None:
    prices = table(
        {
            "My-Model": {"input": 1.0, "output": 2.0},
            "claude-sonnet-4-6": {"input": 2.7, "output": 13.5, "cache_read": 0.27},
        }
    )
    mine = prices.lookup("my-model-v2")
    assert mine is not None and mine.key == "my-model"
    assert (mine.price.cache_read, mine.price.cache_write) == (1.0, 1.0)  # as input
    assert not mine.price.input_includes_cache_read
    assert prices.cost("my-model", 1_000_000, 500_000, 0, 0) == pytest.approx(2.0)
    sonnet = prices.lookup("claude-sonnet-4-6-20260101")
    assert sonnet is not None and sonnet.price.input == 2.7 and sonnet.price.cache_write == 3.75
    assert prices.lookup("claude-sonnet-4-5").price.input == 3.0  # type: ignore[union-attr]


def test_a_local_openai_compatible_server_prices_what_has_no_price_at_zero() -> None:
    prices = table(provider="openai", base_url="http://127.0.0.1:11434/v1", model="llama3")
    assert prices.local_server
    entry = prices.lookup("llama3:8b")
    assert entry is not None and entry.source == "local server"
    assert prices.cost("llama3:8b", 10_000, 10_000, 0, 0) == 0.0
    # A priced name keeps its price: a local proxy in front of OpenAI still costs.
    assert prices.cost("gpt-4o", 1_000_000, 0, 0, 0) == pytest.approx(2.5)


def test_a_remote_server_or_an_anthropic_proxy_on_loopback_is_not_free() -> None:
    remote = table(provider="openai", base_url="https://llm.example.com/v1", model="llama3")
    assert not remote.local_server and remote.lookup("llama3") is None
    proxy = table(provider="anthropic", base_url="http://127.0.0.1:4000", api_key="k")
    assert not proxy.local_server and proxy.lookup("mystery") is None


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:11434/v1", True),
        ("http://127.0.0.1:8000/v1", True),
        ("http://[::1]:8000", True),
        ("http://192.168.1.20:11434", True),
        ("http://10.0.0.5:8000/v1", True),
        ("http://ollama:11434/v1", True),  # a Docker service name
        ("http://gpu-box.lan:8000", True),
        ("https://api.openai.com/v1", False),
        ("http://8.8.8.8:8000", False),
        (None, False),
    ],
)
def test_which_base_urls_are_local(url: str | None, local: bool) -> None:
    assert is_local_url(url) is local


def problems(usage: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        validate({"usage": usage})
    return caught.value.problems


def test_a_negative_price_is_refused_naming_the_model_and_the_field() -> None:
    [problem] = problems({"prices": {"gpt-4o": {"input": -1, "output": 10}}})
    assert problem.startswith("usage.prices.gpt-4o.input:")
    assert "negative" in problem and "per million tokens" in problem


def test_an_empty_model_name_is_refused_saying_what_to_write() -> None:
    [problem] = problems({"prices": {"  ": {"input": 1, "output": 2}}})
    assert problem.startswith("usage.prices:") and "empty model name" in problem


def test_a_price_without_its_output_is_refused() -> None:
    [problem] = problems({"prices": {"my-model": {"input": 1}}})
    assert problem.startswith("usage.prices.my-model.output:")


def test_a_budget_must_be_positive_and_notify_needs_channel_and_chat() -> None:
    [budget] = problems({"monthly_budget": 0})
    assert budget.startswith("usage.monthly_budget:") and "more than 0" in budget
    [notify] = problems({"notify": {"channel": "telegram"}})
    assert "usage.notify.chat_id" in notify
    [channel] = problems({"notify": {"channel": "sms", "chat_id": "1"}})
    assert channel.startswith("usage.notify.channel:")


def test_the_budget_chat_is_notify_else_telegrams_first_allowed_user() -> None:
    telegram = {"enabled": True, "token": "123:abc", "allowed_user_ids": [42, 7]}
    config = validate({"channels": {"telegram": telegram}, "usage": {"monthly_budget": 5}})
    assert config.budget_chat() == ("telegram", "42")
    assert not [w for w in config.warnings() if "usage." in w]
    config = validate(
        {
            "channels": {"telegram": telegram},
            "usage": {"monthly_budget": 5, "notify": {"channel": "discord", "chat_id": "99"}},
        }
    )
    assert config.budget_chat() == ("discord", "99")
    assert any("usage.notify.channel is 'discord'" in w for w in config.warnings())
    lonely = validate({"usage": {"monthly_budget": 5}})
    assert lonely.budget_chat() is None
    assert any("no chat gets its warnings" in w for w in lonely.warnings())
