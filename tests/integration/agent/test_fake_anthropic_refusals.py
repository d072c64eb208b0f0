"""The fake Messages API refuses what the API refuses, before any script is asked, with the API's
bodies (tests/fixtures/anthropic/error_*.json, recorded from the real API): a key it does not
know, a model it does not serve, a prompt longer than the context window. Through the real SDK,
whose exception classes are what Bruce's provider sees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from tests.fakes.anthropic_server import FakeAnthropicServer, load_fixture, prompt_tokens

MODEL = "claude-sonnet-4-6"
HELLO = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


@pytest.fixture
async def server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(responder=lambda body: "ok", context_window=1000) as fake:
        yield fake


def client(server: FakeAnthropicServer, key: str = "test-key") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key=key, base_url=server.base_url, max_retries=0)


def error_of(caught: pytest.ExceptionInfo[anthropic.APIStatusError]) -> Any:
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    return body["error"]


async def test_a_key_the_api_does_not_know_gets_its_401(server: FakeAnthropicServer) -> None:
    async with client(server, "sk-ant-api03-revoked") as sdk:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await sdk.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    assert caught.value.status_code == 401
    assert error_of(caught) == load_fixture("error_invalid_api_key.json")["error"]
    assert server.pending == 0  # nothing was asked of the model


async def test_a_key_of_the_tests_own_is_taken_when_given() -> None:
    async with (
        FakeAnthropicServer(responder=lambda body: "ok", api_keys={"sk-ant-mine"}) as server,
        client(server, "sk-ant-mine") as sdk,
    ):
        message = await sdk.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
        assert message.content[0].type == "text"
        async with client(server, "test-key") as other:
            with pytest.raises(anthropic.AuthenticationError):
                await other.messages.create(model=MODEL, max_tokens=10, messages=HELLO)


async def test_a_model_the_api_does_not_serve_gets_its_404(server: FakeAnthropicServer) -> None:
    recorded = load_fixture("error_model_not_found.json")["error"]  # "model: opus-4"
    async with client(server) as sdk:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await sdk.messages.create(model="opus-4", max_tokens=10, messages=HELLO)
        assert error_of(caught) == recorded
        server.known_models = (server.known_models or set()) | {"opus-4"}  # a test's own model
        message = await sdk.messages.create(model="opus-4", max_tokens=10, messages=HELLO)
    assert message.model == "opus-4"


async def test_a_prompt_longer_than_the_window_gets_the_apis_400(
    server: FakeAnthropicServer,
) -> None:
    recorded = load_fixture("error_prompt_too_long.json")["error"]
    long = [{"role": "user", "content": [{"type": "text", "text": "word " * 1000}]}]
    tokens = prompt_tokens({"messages": long})
    assert tokens > 1000
    async with client(server) as sdk:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await sdk.messages.create(model=MODEL, max_tokens=10, messages=long)
        error = error_of(caught)
        assert error["type"] == recorded["type"]
        assert error["message"] == f"prompt is too long: {tokens} tokens > 1000 maximum"
        # Room for the prompt but not for the answer asked for: the API's other wording.
        with pytest.raises(anthropic.BadRequestError) as caught:
            await sdk.messages.create(model=MODEL, max_tokens=999, messages=HELLO)
        assert error_of(caught)["message"].startswith(
            "input length and `max_tokens` exceed context limit: "
        )
        # What fits is answered, and its usage adds up to the length the window is checked on.
        message = await sdk.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == prompt_tokens(
        {"messages": HELLO}
    )
