"""The models a provider offers: `GET /v1/models` (Anthropic, OpenAI and the OpenAI-compatible
local servers: Ollama, vLLM, LM Studio all serve it), for the dashboard's model picker.

Only the owner reaches this (the dashboard's token): a local server on loopback or the LAN is
the point, so private addresses are allowed here, unlike the agent's fetch tools. It still
takes only http(s), follows no redirect, waits at most 10 s and reads at most 1 MB.
"""

from __future__ import annotations

from typing import Literal

import httpx

ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"
MAX_BYTES = 1024 * 1024
MAX_MODELS = 500
TIMEOUT_SECONDS = 10.0


class ModelListError(Exception):
    """The list could not be had; the message says what the server (or the network) said."""


async def list_models(
    provider: Literal["anthropic", "openai"], base_url: str | None, api_key: str
) -> list[str]:
    """The ids of the models the server lists, sorted."""
    if provider == "anthropic":
        root = (base_url or ANTHROPIC_URL).rstrip("/")
        url = f"{root}/v1/models"
        headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01"}
    else:
        url = f"{(base_url or OPENAI_URL).rstrip('/')}/models"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if not url.startswith(("http://", "https://")):
        raise ModelListError(f"{url}: only http:// and https:// addresses are allowed")
    try:
        async with (
            httpx.AsyncClient(timeout=TIMEOUT_SECONDS, follow_redirects=False) as http,
            http.stream(
                "GET",
                url,
                params={"limit": 1000} if provider == "anthropic" else None,
                headers=headers,
            ) as response,
        ):
            received = bytearray()  # extended in place: `bytes +=` copies it all on each chunk
            async for chunk in response.aiter_bytes():
                received += chunk
                if len(received) > MAX_BYTES:
                    raise ModelListError(f"{url} answered with more than 1 MB")
            body = bytes(received)
    except httpx.HTTPError as exc:
        raise ModelListError(
            f"{url} could not be reached: {str(exc) or type(exc).__name__}"
        ) from None
    if response.status_code != 200:
        raise ModelListError(f"{url} answered {response.status_code}: {_words(body)}")
    try:
        data = httpx.Response(200, content=body).json()
        ids = {str(item["id"]) for item in data["data"] if isinstance(item, dict)}
    except (ValueError, KeyError, TypeError):
        raise ModelListError(f"{url} did not answer with a model list") from None
    return sorted(ids)[:MAX_MODELS]


def _words(body: bytes) -> str:
    """The error message of an error body (OpenAI's and Anthropic's shapes), else its start."""
    try:
        error = httpx.Response(200, content=body).json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return body[:300].decode("utf-8", "replace") or "(no body)"
