"""The fake Messages API reports prompt caching the way Anthropic's API does, through the real SDK.

What Bruce's cache layout is measured against (bench/cache.py, the cost tests) is only as good as
this accounting: cache order tools → system → messages, reads found at a breakpoint or up to 20
blocks before it, writes up to the last breakpoint, `input_tokens` the rest, a minimum length per
model, a TTL on an injected clock, and the settings that invalidate the cached messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from tests.fakes.anthropic_server import (
    CACHE_TTL_SECONDS,
    FakeAnthropicServer,
    minimum_cacheable_tokens,
)

CACHED = {"type": "ephemeral"}
SONNET = "claude-sonnet-4-6"
HAIKU = "claude-haiku-4-5"
TOOL = {"name": "lookup", "description": "Look it up.", "input_schema": {"type": "object"}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def server(clock: Clock) -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(
        responder=lambda body: "ok", cache_minimum_tokens="per-model", clock=clock
    ) as fake:
        yield fake


@pytest.fixture
async def client(server: FakeAnthropicServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(api_key="test", base_url=server.base_url, max_retries=0)
    yield sdk
    await sdk.close()


def text(tokens: int, word: str = "abc") -> str:
    """About `tokens` tokens of text (the fake counts 4 characters a token)."""
    return " ".join([word[:3]] * tokens)


def turn(role: str, *blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "content": list(blocks)}


def block(content: str, *, cached: bool = False, ttl: str | None = None) -> dict[str, Any]:
    made: dict[str, Any] = {"type": "text", "text": content}
    if cached:
        made["cache_control"] = {**CACHED, **({"ttl": ttl} if ttl else {})}
    return made


async def usage_of(client: anthropic.AsyncAnthropic, **params: Any) -> dict[str, int]:
    params.setdefault("model", SONNET)
    params.setdefault("max_tokens", 100)
    message = await client.messages.create(**params)
    usage = message.usage
    return {
        "input": usage.input_tokens,
        "read": usage.cache_read_input_tokens or 0,
        "written": usage.cache_creation_input_tokens or 0,
    }


def total(usage: dict[str, int]) -> int:
    return usage["input"] + usage["read"] + usage["written"]


async def test_a_repeated_prefix_is_written_once_then_read_and_the_parts_add_up(
    client: anthropic.AsyncAnthropic,
) -> None:
    system = [block(text(1500), cached=True)]
    first = await usage_of(client, system=system, messages=[turn("user", block("Hi there"))])
    second = await usage_of(client, system=system, messages=[turn("user", block("Bye now"))])

    assert first["read"] == 0 and first["written"] > 1500
    assert second == {"input": first["input"], "read": first["written"], "written": 0}
    assert total(first) == total(second)  # the same size of prompt, however it was paid


async def test_input_tokens_are_what_follows_the_last_breakpoint(
    client: anthropic.AsyncAnthropic,
) -> None:
    system = [block(text(1500), cached=True)]
    short = await usage_of(client, system=system, messages=[turn("user", block("Hi"))])
    long = await usage_of(client, system=system, messages=[turn("user", block(text(800)))])

    assert long["read"] == short["written"]
    assert long["input"] - short["input"] >= 790  # the uncached tail is input, not read


async def test_the_order_is_tools_then_system_then_messages(
    client: anthropic.AsyncAnthropic,
) -> None:
    system = [block(text(1500), cached=True)]
    await usage_of(client, tools=[TOOL], system=system, messages=[turn("user", block("Hi"))])
    other_tool = {**TOOL, "description": "Look it up, carefully."}

    changed_tool = await usage_of(
        client, tools=[other_tool], system=system, messages=[turn("user", block("Hi"))]
    )

    assert changed_tool["read"] == 0  # a tool comes first: its change invalidates everything


async def test_a_prefix_shorter_than_the_models_minimum_is_never_cached(
    client: anthropic.AsyncAnthropic,
) -> None:
    assert minimum_cacheable_tokens(SONNET) == 1024
    assert minimum_cacheable_tokens(HAIKU) == 4096
    assert minimum_cacheable_tokens("claude-3-5-haiku-20241022") == 2048
    small = [block(text(900), cached=True)]
    medium = [block(text(2000), cached=True)]
    hello = [turn("user", block("Hi"))]

    for _ in range(2):
        too_small = await usage_of(client, system=small, messages=hello)
        haiku = await usage_of(client, model=HAIKU, system=medium, messages=hello)
    sonnet = [await usage_of(client, system=medium, messages=hello) for _ in range(2)]

    assert (too_small["read"], too_small["written"]) == (0, 0)
    assert too_small["input"] > 900
    assert (haiku["read"], haiku["written"]) == (0, 0)
    assert sonnet[1]["read"] > 2000


async def test_a_breakpoint_finds_a_prefix_cached_up_to_20_blocks_before_it(
    client: anthropic.AsyncAnthropic,
) -> None:
    system = [block(text(1500))]
    head = [turn("user", block("question", cached=True))]
    await usage_of(client, system=system, messages=head)

    def grown(extra_blocks: int) -> list[dict[str, Any]]:
        answer = [block(f"part {index}") for index in range(extra_blocks - 1)]
        return [*head_plain(), turn("assistant", *answer), turn("user", block("next", cached=True))]

    def head_plain() -> list[dict[str, Any]]:
        return [turn("user", block("question"))]

    within = await usage_of(client, system=system, messages=grown(19))
    beyond = await usage_of(client, system=system, messages=grown(21))

    assert within["read"] > 1500  # found by looking back from the new breakpoint
    assert beyond["read"] == 0  # too far back: the new breakpoint writes it all again
    assert beyond["written"] > 1500


async def test_at_most_four_breakpoints_and_one_hour_entries_come_first(
    client: anthropic.AsyncAnthropic,
) -> None:
    five = [block(f"block {index}", cached=True) for index in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
        await usage_of(client, messages=[turn("user", *five)])

    mixed = [block(text(1500), cached=True), block("later", cached=True, ttl="1h")]
    with pytest.raises(anthropic.BadRequestError, match="ttl='1h'"):
        await usage_of(client, system=mixed, messages=[turn("user", block("Hi"))])


async def test_an_entry_lives_five_minutes_from_its_last_use(
    client: anthropic.AsyncAnthropic, clock: Clock
) -> None:
    system = [block(text(1500), cached=True)]
    hello = [turn("user", block("Hi"))]
    written = (await usage_of(client, system=system, messages=hello))["written"]

    clock.now += CACHE_TTL_SECONDS["5m"] - 10
    refreshed = await usage_of(client, system=system, messages=hello)
    clock.now += CACHE_TTL_SECONDS["5m"] - 10  # 10 minutes after it was written
    still = await usage_of(client, system=system, messages=hello)
    clock.now += CACHE_TTL_SECONDS["5m"] + 1
    expired = await usage_of(client, system=system, messages=hello)

    assert refreshed["read"] == still["read"] == written
    assert (expired["read"], expired["written"]) == (0, written)


async def test_a_one_hour_entry_outlives_the_five_minute_ones(
    client: anthropic.AsyncAnthropic, clock: Clock
) -> None:
    system = [block(text(1500), cached=True, ttl="1h"), block(text(1500, "xyz"), cached=True)]
    hello = [turn("user", block("Hi"))]
    await usage_of(client, system=system, messages=hello)

    clock.now += 30 * 60
    later = await usage_of(client, system=system, messages=hello)

    assert 1500 < later["read"] < 2000  # the first block only
    assert later["written"] > 1400  # the second, written again


async def test_tool_choice_and_thinking_invalidate_the_cached_messages_only(
    client: anthropic.AsyncAnthropic,
) -> None:
    system = [block(text(1500), cached=True)]
    history = [turn("user", block(text(1500, "xyz"), cached=True))]
    params: dict[str, Any] = {"tools": [TOOL], "system": system, "messages": history}
    full = await usage_of(client, **params)
    again = await usage_of(client, **params)

    forced = await usage_of(client, **params, tool_choice={"type": "none"})
    thinking = await usage_of(
        client, **params, max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1024}
    )

    assert again["read"] == full["written"]
    for changed in (forced, thinking):
        assert 1500 < changed["read"] < 2000  # tools and system, not the messages
        assert changed["written"] > 1400


async def test_each_model_has_its_own_cache(client: anthropic.AsyncAnthropic) -> None:
    system = [block(text(5000), cached=True)]
    hello = [turn("user", block("Hi"))]
    await usage_of(client, system=system, messages=hello)

    other = await usage_of(client, model="claude-opus-4-1", system=system, messages=hello)

    assert other["read"] == 0 and other["written"] > 5000


async def test_the_default_fake_caches_tiny_prompts_and_keeps_the_breakdown_by_ttl() -> None:
    async with FakeAnthropicServer(responder=lambda body: "ok") as fake:
        sdk = anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=0)
        try:
            params: dict[str, Any] = {
                "model": SONNET,
                "max_tokens": 10,
                "system": [block("Tiny.", cached=True)],
                "messages": [turn("user", block("Hi"))],
            }
            first = await sdk.messages.create(**params)
            second = await sdk.messages.create(**params)
        finally:
            await sdk.close()

    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == (
        first.usage.cache_creation_input_tokens
    )
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


async def test_the_same_prompt_with_its_keys_in_another_order_is_a_cache_miss(
    client: anthropic.AsyncAnthropic,
) -> None:
    # The API caches the exact prompt: a tool schema whose keys come in another order (rebuilt
    # from a set, merged the other way) is another prefix, and nothing is read.
    schema = {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}
    reordered = {"required": ["a"], "properties": {"a": {"type": "number"}}, "type": "object"}
    system = [block(text(1100), cached=True)]
    hello = [turn("user", block("hi"))]

    def tools(input_schema: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"name": "add", "description": "Add.", "input_schema": input_schema}]

    first = await usage_of(client, tools=tools(schema), system=system, messages=hello)
    same = await usage_of(client, tools=tools(dict(schema)), system=system, messages=hello)
    other = await usage_of(client, tools=tools(reordered), system=system, messages=hello)
    assert first["read"] == 0 and first["written"] > 1100
    assert same["read"] == first["written"]
    assert other["read"] == 0 and other["written"] == first["written"]
