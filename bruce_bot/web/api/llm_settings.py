"""`/api/llm`: the LLM settings the Settings page and the chat's setup card change while Bruce
runs (provider, model, background model, base URL, API key; see `settings/llm.py`).

A save is tried first with one tiny call and refused (400, the provider's words) when the
provider says no; the old settings stay. The API key is write-only: answers show it masked. The
saved key is sent only to the provider and server it is in use with: a test, a save or a model
list for another provider or base URL sends none, and is refused (400, naming `api_key`) when
that server needs one and none was typed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.llm.model_list import ModelListError, list_models
from bruce_bot.settings.llm import (
    KeyNeeded,
    LLMSettings,
    SettingsRefused,
    destination,
    key_needed,
    server_url,
)
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError

Provider = Literal["anthropic", "openai"]


class FieldAnswer(BaseModel):
    name: str
    value: str | None = Field(description="in use; the API key masked (sk-…abcd)")
    source: Literal["config", "dashboard", "default"]
    config_value: str | None = Field(description="config.yml's, what a reset goes back to")
    secret: bool


class LLMSettingsAnswer(BaseModel):
    configured: bool = Field(description="whether a model is set up (else: the setup card)")
    provider: str
    model: str
    fields: list[FieldAnswer]


class TestAnswer(BaseModel):
    ok: bool
    detail: str


class ModelsAnswer(BaseModel):
    models: list[str]


class LLMChange(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"provider": "openai", "base_url": "http://127.0.0.1:11434/v1", "model": "llama3"}
            ]
        },
    )

    provider: Provider | None = None
    model: str | None = Field(default=None, min_length=1, max_length=200)
    background_model: str | None = Field(default=None, max_length=200)
    base_url: str | None = Field(default=None, max_length=2000, description="empty: the default")
    api_key: str | None = Field(
        default=None, max_length=500, description="write-only; missing or empty keeps the key"
    )

    def changes(self) -> dict[str, str | None]:
        return self.model_dump(exclude_unset=True)


class ModelsQuery(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"provider": "openai", "base_url": "http://127.0.0.1:11434/v1"}]
        },
    )

    provider: Provider
    base_url: str | None = Field(default=None, max_length=2000)
    api_key: str | None = Field(default=None, max_length=500, description="empty: the saved one")


def _settings(context: WebContext) -> LLMSettings:
    llm = context.llm_settings
    if llm is None:
        raise ApiError("the LLM settings cannot be changed in this process", 503)
    return llm


async def _answer(llm: LLMSettings) -> LLMSettingsAnswer:
    settings = await llm.effective()
    fields = [
        FieldAnswer(
            name=view.name,
            value=view.value,
            source=view.source,
            config_value=view.config_value,
            secret=view.secret,
        )
        for view in await llm.view()
    ]
    return LLMSettingsAnswer(
        configured=settings.is_configured,
        provider=settings.provider,
        model=settings.model,
        fields=fields,
    )


async def get_llm(call: Call[NoParams, None]) -> LLMSettingsAnswer:
    return await _answer(_settings(call.context))


async def put_llm(call: Call[NoParams, LLMChange]) -> LLMSettingsAnswer:
    llm = _settings(call.context)
    try:
        await llm.save(call.body.changes())
    except SettingsRefused as exc:
        raise ApiError(f"not saved, the old settings stay: {exc}") from None
    return await _answer(llm)


async def try_llm(call: Call[NoParams, LLMChange]) -> TestAnswer:
    llm = _settings(call.context)
    try:
        settings, withheld_for = await llm.trial(call.body.changes())
        await llm.test(settings, withheld_for=withheld_for)
    except KeyNeeded as exc:
        raise ApiError(str(exc)) from None
    except SettingsRefused as exc:
        return TestAnswer(ok=False, detail=str(exc))
    return TestAnswer(ok=True, detail=f"{settings.provider} / {settings.model} answers")


async def reset_llm(call: Call[NoParams, None]) -> LLMSettingsAnswer:
    llm = _settings(call.context)
    await llm.reset()
    return await _answer(llm)


async def post_models(call: Call[NoParams, ModelsQuery]) -> ModelsAnswer:
    llm, query = _settings(call.context), call.body
    current = await llm.effective()
    url = server_url(query.provider, query.base_url or None)
    kept_for = destination(current)[1]
    key = query.api_key or ""
    if not key and (query.provider, url) == destination(current):
        key = current.api_key  # the saved key, to the server it was saved for
    elif not key and current.api_key and (query.provider == "anthropic" or not query.base_url):
        raise ApiError(str(key_needed(query.provider, url, kept_for)))
    try:
        models = await list_models(query.provider, query.base_url or None, key)
    except ModelListError as exc:
        unsent = ""
        if not key and current.api_key:
            unsent = (
                f" (the saved key was not sent: it goes only to {kept_for}; type the key for "
                f"{url} if it needs one)"
            )
        raise ApiError(f"{exc}{unsent}") from None
    return ModelsAnswer(models=models)


ENDPOINTS = (
    Endpoint("GET", "/api/llm", get_llm, LLMSettingsAnswer, "The LLM settings in use"),
    Endpoint(
        "PUT",
        "/api/llm",
        put_llm,
        LLMSettingsAnswer,
        "Change them: tried with one tiny call, saved only if the provider answers",
        body=LLMChange,
        errors=(503,),
    ),
    Endpoint(
        "POST",
        "/api/llm/test",
        try_llm,
        TestAnswer,
        "Try settings with one tiny call, without saving them",
        body=LLMChange,
        errors=(503,),
    ),
    Endpoint(
        "DELETE", "/api/llm", reset_llm, LLMSettingsAnswer, "Back to config.yml", errors=(503,)
    ),
    Endpoint(
        "POST",
        "/api/llm/models",
        post_models,
        ModelsAnswer,
        "The models a provider's server lists (GET /v1/models)",
        body=ModelsQuery,
        errors=(503,),
    ),
)
