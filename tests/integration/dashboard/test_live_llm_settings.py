"""Live LLM settings through the dashboard's API (`/api/llm`): changing the provider, model and
base URL makes the next turn go to the new server with no restart; a key the server refuses is
not saved (the provider's words are the error, the old settings keep answering); the API key is
never sent back unmasked, and the model list comes from the server's `/v1/models`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bruce_bot.agent.failures import (
    AUTHENTICATION_CONFIG,
    AUTHENTICATION_DASHBOARD,
    MODEL_NOT_FOUND_DASHBOARD,
)
from bruce_bot.logs import scrubber
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.openai_server import last_user_text as openai_user_text
from tests.integration.dashboard_support import Dashboard, running_dashboard

TOKEN = "kq3uX0b0m6dV1mYcT8v7rQ2nZ5pL4wA9sE6fG1hJ2kM"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
YAML_KEY = "sk-ant-yaml-0123456789abcd"
LOCAL_KEY = "sk-local-9876543210wxyz"


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    async with running_dashboard(tmp_path, TOKEN, llm={"api_key": YAML_KEY}) as running:
        yield running


@pytest.fixture
async def local() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(
        responder=lambda body: f"Local model says: {openai_user_text(body).splitlines()[0]}"
    ) as server:
        server.api_key = LOCAL_KEY
        server.models = ["qwen3:8b", "llama3.2:3b"]
        yield server


@pytest.fixture
async def client(dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=20) as http:
        yield http


def fields(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {field["name"]: field for field in answer["fields"]}


async def test_a_new_provider_answers_the_next_message_without_a_restart(
    dashboard: Dashboard, local: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    assert await dashboard.chat("alice", "hello") == "You said: hello"

    response = await client.put(
        "/api/llm",
        json={
            "provider": "openai",
            "model": "qwen3:8b",
            "base_url": local.base_url,
            "api_key": LOCAL_KEY,
        },
    )

    assert response.status_code == 200, response.text
    assert LOCAL_KEY not in response.text and YAML_KEY not in response.text
    saved = fields(response.json())
    assert saved["provider"] == {**saved["provider"], "value": "openai", "source": "dashboard"}
    assert saved["api_key"]["value"] == "sk-…wxyz"
    assert saved["api_key"]["config_value"] == "sk-…abcd"
    anthropic_requests = len(dashboard.fake.requests)
    assert await dashboard.chat("alice", "and now?") == "Local model says: and now?"
    assert len(dashboard.fake.requests) == anthropic_requests  # the old server heard nothing
    assert local.requests[-1]["model"] == "qwen3:8b"
    assert local.request_headers[-1]["Authorization"] == f"Bearer {LOCAL_KEY}"
    # The saved key is a secret from now on: logs scrub it.
    assert LOCAL_KEY not in scrubber.scrub(f"key={LOCAL_KEY}")

    reset = await client.delete("/api/llm", headers={"Content-Type": "application/json"})
    assert reset.status_code == 200, reset.text
    assert fields(reset.json())["provider"]["source"] == "config"
    assert await dashboard.chat("alice", "back?") == "You said: back?"


async def test_a_refused_key_is_not_saved_and_the_old_settings_keep_answering(
    dashboard: Dashboard, local: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    before = (await client.get("/api/llm")).json()
    change = {"provider": "openai", "model": "qwen3:8b", "base_url": local.base_url}

    response = await client.put("/api/llm", json={**change, "api_key": "sk-wrong-000000000000"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert "not saved, the old settings stay" in error
    assert "Incorrect API key provided" in error  # the provider's own words
    assert "sk-wrong-000000000000" not in error
    assert (await client.get("/api/llm")).json() == before
    assert await dashboard.chat("bob", "still you?") == "You said: still you?"

    tried = await client.post("/api/llm/test", json={**change, "api_key": LOCAL_KEY})
    assert tried.json() == {"ok": True, "detail": "openai / qwen3:8b answers"}
    assert (await client.get("/api/llm")).json() == before  # a test saves nothing


# ---- the chat's hint names where the key really comes from ------------------------------------


async def test_a_dashboard_key_refused_later_points_to_the_settings_page_without_a_restart(
    dashboard: Dashboard, local: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    change = {"provider": "openai", "model": "qwen3:8b", "base_url": local.base_url}
    saved = await client.put("/api/llm", json={**change, "api_key": LOCAL_KEY})
    assert saved.status_code == 200, saved.text
    local.api_key = "sk-rotated-111111111111"  # the provider revoked the saved key

    reply = await dashboard.chat("alice", "are you there?")

    assert reply == AUTHENTICATION_DASHBOARD.format(url=dashboard.url)
    assert f"check the API key in the dashboard's Settings (Bruce at {dashboard.url}/settings)" in (
        reply
    )
    assert "config.yml" not in reply and "restart me" not in reply
    assert local.request_headers[-1]["Authorization"] == f"Bearer {LOCAL_KEY}"  # refused, 401


async def test_a_dashboard_model_the_server_dropped_points_to_the_settings_page(
    dashboard: Dashboard, local: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    change = {"provider": "openai", "model": "qwen3:8b", "base_url": local.base_url}
    saved = await client.put("/api/llm", json={**change, "api_key": LOCAL_KEY})
    assert saved.status_code == 200, saved.text
    local.script(error=404)  # the model was removed from the server since

    reply = await dashboard.chat("alice", "still there?")

    assert reply == MODEL_NOT_FOUND_DASHBOARD.format(model="qwen3:8b", url=dashboard.url)
    assert f"in the dashboard's Settings (Bruce at {dashboard.url}/settings" in reply
    assert "config.yml" not in reply and "restart me" not in reply


async def test_a_config_key_refused_names_config_yml_and_the_settings_page_as_the_live_fix(
    dashboard: Dashboard,
) -> None:
    dashboard.fake.script(error=401)

    reply = await dashboard.chat("alice", "are you there?")

    assert reply == AUTHENTICATION_CONFIG.format(url=dashboard.url)
    assert "check llm.api_key in config.yml" in reply
    assert (
        f"paste a working key in the dashboard's Settings (Bruce at {dashboard.url}/settings)"
        in (reply)
    )
    assert "no restart needed" in reply


async def test_without_a_model_the_reply_points_to_the_setup_card_first(tmp_path: Path) -> None:
    async with running_dashboard(tmp_path, TOKEN, llm={"api_key": ""}) as dashboard:
        reply = await dashboard.chat("alice", "hello?")
    assert reply.startswith("I'm not connected to a language model yet."), reply
    setup, config = reply.index(f"open {dashboard.url}/chat"), reply.index("llm.api_key")
    assert setup < config and "no restart needed" in reply[:config]
    assert "${ANTHROPIC_API_KEY}" in reply  # the format braces came out as the user writes them


async def test_an_unreachable_server_is_refused_with_what_went_wrong(
    dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    async with FakeOpenAIServer() as gone:
        url = gone.base_url
    response = await client.put(
        "/api/llm", json={"provider": "openai", "model": "m", "base_url": url}
    )
    assert response.status_code == 400
    assert "not saved" in response.json()["error"]
    assert fields((await client.get("/api/llm")).json())["provider"]["value"] == "anthropic"


async def test_the_model_list_comes_from_the_server(
    local: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    response = await client.post(
        "/api/llm/models",
        json={"provider": "openai", "base_url": local.base_url, "api_key": LOCAL_KEY},
    )
    assert response.json() == {"models": ["llama3.2:3b", "qwen3:8b"]}

    refused = await client.post(
        "/api/llm/models", json={"provider": "openai", "base_url": local.base_url}
    )
    assert refused.status_code == 400
    assert "401" in refused.json()["error"]
    assert "Incorrect API key provided" in refused.json()["error"]


async def test_the_settings_say_where_each_value_comes_from(client: httpx.AsyncClient) -> None:
    answer = (await client.get("/api/llm")).json()
    assert answer["configured"] is True
    shown = fields(answer)
    assert shown["api_key"] == {
        "name": "api_key",
        "value": "sk-…abcd",
        "source": "config",
        "config_value": "sk-…abcd",
        "secret": True,
    }
    assert shown["background_model"]["source"] == "default"
    assert YAML_KEY not in str(answer)


async def test_saved_settings_win_over_the_yaml_after_a_restart(
    tmp_path: Path, local: FakeOpenAIServer
) -> None:
    change = {"provider": "openai", "model": "qwen3:8b", "base_url": local.base_url}
    async with running_dashboard(tmp_path, TOKEN, llm={"api_key": YAML_KEY}) as first:
        async with httpx.AsyncClient(base_url=first.url, headers=AUTH, timeout=20) as http:
            saved = await http.put("/api/llm", json={**change, "api_key": LOCAL_KEY})
            assert saved.status_code == 200, saved.text

    async with running_dashboard(tmp_path, TOKEN, llm={"api_key": YAML_KEY}) as second:
        assert await second.chat("carol", "remember me?") == "Local model says: remember me?"
        assert second.fake.requests == []  # config.yml's provider is not asked


async def test_the_database_holding_the_key_is_readable_by_its_user_only(
    dashboard: Dashboard, tmp_path: Path
) -> None:
    assert (tmp_path / "bruce.db").stat().st_mode & 0o777 == 0o600


# ---- the saved key stays with its server ----------------------------------------------------


def keys_heard(server: FakeOpenAIServer) -> list[str]:
    """Every Authorization header the server got (chat calls and model lists)."""
    return [
        headers.get("Authorization", "")
        for headers in [*server.request_headers, *server.models_request_headers]
    ]


async def test_the_saved_key_is_never_sent_to_another_base_url(
    dashboard: Dashboard, local: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    elsewhere = {"provider": "openai", "base_url": local.base_url}

    models = await client.post("/api/llm/models", json=elsewhere)
    assert models.status_code == 400
    error = models.json()["error"]
    assert "the saved key was not sent" in error and f"type the key for {local.base_url}" in error

    tried = await client.post("/api/llm/test", json={**elsewhere, "model": "qwen3:8b"})
    assert tried.status_code == 400
    assert f"api_key: type the API key for {local.base_url}" in tried.json()["error"]

    saved = await client.put("/api/llm", json={**elsewhere, "model": "qwen3:8b"})
    assert saved.status_code == 400
    assert "not saved" in saved.json()["error"] and "type the API key" in saved.json()["error"]

    # Anthropic's own API (no base URL) cannot be asked without a key: refused unasked.
    other = await client.post("/api/llm/models", json={"provider": "anthropic"})
    assert other.status_code == 400
    assert "type the API key for https://api.anthropic.com" in other.json()["error"]

    heard = keys_heard(local)
    assert len(heard) == 3  # the model list, the test and the save's try: all without a key
    assert all(YAML_KEY not in header for header in heard)
    assert fields((await client.get("/api/llm")).json())["provider"]["value"] == "anthropic"

    # Typed in, the key goes where it was typed for.
    listed = await client.post("/api/llm/models", json={**elsewhere, "api_key": LOCAL_KEY})
    assert listed.json() == {"models": ["llama3.2:3b", "qwen3:8b"]}
    tested = await client.post(
        "/api/llm/test", json={**elsewhere, "model": "qwen3:8b", "api_key": LOCAL_KEY}
    )
    assert tested.json()["ok"] is True
    assert local.models_request_headers[-1]["Authorization"] == f"Bearer {LOCAL_KEY}"
    assert local.request_headers[-1]["Authorization"] == f"Bearer {LOCAL_KEY}"
    assert all(YAML_KEY not in header for header in keys_heard(local))


async def test_a_keyless_local_server_is_tried_without_the_saved_key(
    dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    async with FakeOpenAIServer(responder=lambda body: "Ollama here") as ollama:
        ollama.models = ["llama3.2:3b"]  # api_key None: takes any key, or none
        change = {"provider": "openai", "model": "llama3.2:3b", "base_url": ollama.base_url}
        listed = await client.post(
            "/api/llm/models", json={"provider": "openai", "base_url": ollama.base_url}
        )
        assert listed.json() == {"models": ["llama3.2:3b"]}
        saved = await client.put("/api/llm", json=change)
        assert saved.status_code == 200, saved.text
        assert fields(saved.json())["api_key"]["value"] == ""  # the key stayed behind
        assert await dashboard.chat("dan", "hi") == "Ollama here"
        heard = keys_heard(ollama)
        assert len(heard) >= 3 and all(YAML_KEY not in header for header in heard)

        # The model alone changes: same server, the key in use (none here) goes on.
        again = await client.post("/api/llm/test", json={"model": "llama3.2:3b"})
        assert again.json()["ok"] is True
