"""`/api/settings`: the settings the dashboard edits. A value set here is stored in the `settings`
table and wins over the YAML one; resetting it goes back to the YAML value."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

from bruce_bot.settings.editable import EDITABLE, Editable
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError


class SettingAnswer(BaseModel):
    key: str
    label: str
    description: str
    max_chars: int
    multiline: bool
    value: str | None = Field(description="what Bruce uses: the dashboard's value, else config's")
    config_value: str | None = Field(description="the YAML value, what a reset goes back to")
    source: Literal["config", "dashboard"]


class SettingList(BaseModel):
    settings: list[SettingAnswer]


class OneSetting(BaseModel):
    setting: SettingAnswer


def _editable(key: str) -> str:
    # An ApiError is not a validation error: it leaves pydantic as it is, a 404 (before the body
    # is read, as for any route that does not exist).
    if key not in EDITABLE:
        raise ApiError(
            f"'{key[:100]}' is not a setting the dashboard edits; editable: {', '.join(EDITABLE)}",
            404,
        )
    return key


class SettingKey(BaseModel):
    key: Annotated[str, AfterValidator(_editable)] = Field(
        description="one of: " + ", ".join(EDITABLE)
    )


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("blank")
    return value


class NewValue(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"value": "..."}]})

    value: Annotated[StrictStr, Field(min_length=1), AfterValidator(_not_blank)]


async def setting_answer(context: WebContext, setting: Editable) -> SettingAnswer:
    override = context.settings[setting.key]
    current = await override.current(context.stores.settings)
    return SettingAnswer(
        key=setting.key,
        label=setting.label,
        description=setting.description,
        max_chars=setting.max_chars,
        multiline=setting.multiline,
        value=override.dump(current.value),
        config_value=override.dump(override.default),
        source=current.source,
    )


async def list_settings(call: Call[NoParams, None]) -> SettingList:
    answers = [await setting_answer(call.context, s) for s in EDITABLE.values()]
    return SettingList(settings=answers)


async def put_setting(call: Call[SettingKey, NewValue]) -> OneSetting:
    setting, value = EDITABLE[call.params.key], call.body.value
    if len(value) > setting.max_chars:
        raise ApiError(
            f"'value' has {len(value)} characters; {setting.key} takes at most {setting.max_chars}"
        )
    override = call.context.settings[setting.key]
    try:
        parsed = override.parse(value)
    except ValueError as exc:
        raise ApiError(f"{setting.key}: {exc}") from None
    await override.save(call.context.stores.settings, parsed)
    return OneSetting(setting=await setting_answer(call.context, setting))


async def reset_setting(call: Call[SettingKey, None]) -> OneSetting:
    setting = EDITABLE[call.params.key]
    await call.context.settings[setting.key].reset(call.context.stores.settings)
    return OneSetting(setting=await setting_answer(call.context, setting))


ONE = "/api/settings/{key:path}"
ENDPOINTS = (
    Endpoint(
        "GET", "/api/settings", list_settings, SettingList, "The settings the dashboard edits"
    ),
    Endpoint(
        "PUT",
        ONE,
        put_setting,
        OneSetting,
        "Set a value: used from the next agent request on",
        params=SettingKey,
        body=NewValue,
        errors=(404,),
    ),
    Endpoint(
        "DELETE",
        ONE,
        reset_setting,
        OneSetting,
        "Back to the YAML value",
        params=SettingKey,
        errors=(404,),
    ),
)
