"""The price table: what a model costs in USD per million tokens (input, output, cache read,
cache write), looked up by the longest matching name or prefix.

The built-in table holds the published prices of the current Anthropic and OpenAI models;
`usage.prices` in the config extends and overrides it. A model served by a local
OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio: provider `openai` with
`llm.base_url` on a loopback or private address, a `localhost`/`.local`/`.internal`/`.lan` name,
or a dot-less name such as Docker's `ollama`) costs nothing: while the server is local, a model
without a price is priced at zero. A model whose name has a price keeps it (a local proxy in
front of a paid API still costs), and an Anthropic base URL on loopback is taken for such a
proxy. Any other model without a price has none: its tokens are shown without cost, and the
dashboard says which models those are and how to price them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

from bruce_bot.config import LLMConfig, PriceConfig, UsageConfig

PriceSource = Literal["built-in", "config", "local server"]
# A prefix matches a longer name only at one of these (gpt-4o matches gpt-4o-2024-08-06, never
# gpt-4os; claude-sonnet-4 never prices a future claude-sonnet-40).
_BOUNDARIES = frozenset("-:@_/[")
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    # OpenAI counts cached tokens inside `prompt_tokens` (our input tokens); Anthropic reports
    # them apart. Counted inside, they are priced once: at the cache-read price.
    input_includes_cache_read: bool = False

    def cost(
        self, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int
    ) -> float:
        fresh = input_tokens - cache_read if self.input_includes_cache_read else input_tokens
        total = (
            max(fresh, 0) * self.input
            + output_tokens * self.output
            + cache_read * self.cache_read
            + cache_write * self.cache_write
        )
        return total / 1_000_000


FREE = Price(0.0, 0.0, 0.0, 0.0)


def _anthropic(input: float, output: float, cache_read: float, cache_write: float) -> Price:
    return Price(input, output, cache_read, cache_write)


def _openai(input: float, cached: float, output: float) -> Price:
    # OpenAI charges nothing extra to write its cache: a written token is an input token.
    return Price(input, output, cached, input, input_includes_cache_read=True)


# Anthropic: https://platform.claude.com/docs/en/about-claude/pricing ("Model pricing": base
# input, 5-minute cache writes, cache hits, output), read 2026-12-01. Cache writes are priced at
# the 5-minute rate, the default TTL Bruce uses.
_OPUS_NEW = _anthropic(5.0, 25.0, 0.50, 6.25)
_OPUS_OLD = _anthropic(15.0, 75.0, 1.50, 18.75)
_SONNET = _anthropic(3.0, 15.0, 0.30, 3.75)
ANTHROPIC_PRICES: dict[str, Price] = {
    "claude-opus-4-8": _OPUS_NEW,
    "claude-opus-4-7": _OPUS_NEW,
    "claude-opus-4-6": _OPUS_NEW,
    "claude-opus-4-5": _OPUS_NEW,
    "claude-opus-4-1": _OPUS_OLD,
    "claude-opus-4": _OPUS_OLD,  # Opus 4 (claude-opus-4-0, claude-opus-4-20250514)
    "claude-sonnet-4": _SONNET,  # Sonnet 4, 4.5, 4.6
    "claude-haiku-4": _anthropic(1.0, 5.0, 0.10, 1.25),  # Haiku 4.5
    "claude-3-7-sonnet": _SONNET,
    "claude-3-5-sonnet": _SONNET,
    "claude-3-sonnet": _SONNET,
    "claude-3-5-haiku": _anthropic(0.80, 4.0, 0.08, 1.0),
    "claude-3-opus": _OPUS_OLD,
    "claude-3-haiku": _anthropic(0.25, 1.25, 0.03, 0.30),
}

# OpenAI: https://developers.openai.com/api/docs/pricing (standard processing: input, cached
# input, output), read 2026-12-01.
OPENAI_PRICES: dict[str, Price] = {
    "gpt-5": _openai(1.25, 0.125, 10.0),
    "gpt-5-mini": _openai(0.25, 0.025, 2.0),
    "gpt-5-nano": _openai(0.05, 0.005, 0.40),
    "gpt-5-pro": _openai(15.0, 15.0, 120.0),
    "gpt-5.1": _openai(1.25, 0.125, 10.0),
    "gpt-5.2": _openai(1.75, 0.175, 14.0),
    "gpt-5.4": _openai(2.50, 0.25, 15.0),
    "gpt-5.4-mini": _openai(0.75, 0.075, 4.50),
    "gpt-5.4-nano": _openai(0.20, 0.02, 1.25),
    "gpt-4.1": _openai(2.0, 0.50, 8.0),
    "gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "gpt-4o": _openai(2.50, 1.25, 10.0),
    "gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "o1": _openai(15.0, 7.50, 60.0),
    "o1-mini": _openai(1.10, 0.55, 4.40),
    "o3": _openai(2.0, 0.50, 8.0),
    "o3-mini": _openai(1.10, 0.55, 4.40),
    "o4-mini": _openai(1.10, 0.275, 4.40),
}

BUILT_IN_PRICES: dict[str, Price] = {**ANTHROPIC_PRICES, **OPENAI_PRICES}


@dataclass(frozen=True, slots=True)
class PriceEntry:
    key: str  # the model name or prefix it prices
    price: Price
    source: PriceSource


def is_local_url(url: str | None) -> bool:
    """Whether `url` names a server on this machine or a private network (no DNS lookup: a
    name is judged by its form)."""
    if not url:
        return False
    host = (urlparse(url).hostname or "").lower()
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or host.endswith(_LOCAL_SUFFIXES) or "." not in host
    return address.is_loopback or address.is_private or address.is_link_local


def _configured(key: str, entry: PriceConfig) -> Price:
    """A `usage.prices` entry; what it leaves out comes from the built-in entry that would price
    the key (`claude-sonnet-4-6` from `claude-sonnet-4`), else the cache is priced as input and
    counted apart from it."""
    built_in = _BUILT_IN.lookup(key)
    base = built_in.price if built_in is not None else None
    cache_read = entry.cache_read
    if cache_read is None:
        cache_read = base.cache_read if base else entry.input
    cache_write = entry.cache_write
    if cache_write is None:
        cache_write = base.cache_write if base else entry.input
    inside = entry.input_includes_cache_read
    if inside is None:
        inside = base.input_includes_cache_read if base else False
    return Price(entry.input, entry.output, cache_read, cache_write, inside)


class PriceTable:
    def __init__(self, entries: Iterable[PriceEntry], *, local_server: bool = False) -> None:
        self._entries = {entry.key.lower(): entry for entry in entries}
        # The configured server is local: a model without a price is one it serves, for free.
        self.local_server = local_server

    @classmethod
    def from_config(cls, usage: UsageConfig, llm: LLMConfig | None = None) -> PriceTable:
        entries = {
            key: PriceEntry(key, price, "built-in") for key, price in BUILT_IN_PRICES.items()
        }
        # An Anthropic base URL on loopback is a proxy to the paid API, not a model server.
        local = llm is not None and llm.provider == "openai" and is_local_url(llm.base_url)
        for key, entry in usage.prices.items():
            entries[key] = PriceEntry(key, _configured(key, entry), "config")
        return cls(entries.values(), local_server=local)

    @classmethod
    def built_in(cls) -> PriceTable:
        return cls.from_config(UsageConfig())

    def entries(self) -> list[PriceEntry]:
        return sorted(self._entries.values(), key=lambda entry: entry.key)

    def lookup(self, model: str) -> PriceEntry | None:
        """The entry for `model`: its own name, else the longest prefix ending at a boundary
        (a name like `anthropic/claude-sonnet-4-5` is also tried without its `provider/`)."""
        name = model.strip().lower()
        for candidate in dict.fromkeys((name, name.rsplit("/", 1)[-1])):
            found = self._longest_prefix(candidate)
            if found is not None:
                return found
        if self.local_server and name:
            return PriceEntry(name, FREE, "local server")
        return None

    def _longest_prefix(self, name: str) -> PriceEntry | None:
        best: PriceEntry | None = None
        for key, entry in self._entries.items():
            if name == key or (name.startswith(key) and name[len(key)] in _BOUNDARIES):
                if best is None or len(key) > len(best.key):
                    best = entry
        return best

    def cost(
        self, model: str, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int
    ) -> float | None:
        """The estimated cost in USD, None when the model has no price."""
        entry = self.lookup(model)
        if entry is None:
            return None
        return entry.price.cost(input_tokens, output_tokens, cache_read, cache_write)


_BUILT_IN = PriceTable(PriceEntry(key, price, "built-in") for key, price in BUILT_IN_PRICES.items())
