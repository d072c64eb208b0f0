"""`/api/settings`: the settings the dashboard edits. A value set here is stored in the `settings`
table and wins over the YAML one; resetting it goes back to the YAML value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

from bruce_bot.storage.settings import (
    MAX_TURNS_RANGE,
    MAX_TURNS_SETTING,
    SYSTEM_PROMPT_SETTING,
    TIMEZONE_SETTING,
)
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError


@dataclass(frozen=True, slots=True)
class EditableSetting:
    """A setting the dashboard may change; the database value wins over the YAML one."""

    key: str
    label: str
    description: str
    max_chars: int
    multiline: bool = True
    # The value as stored, or ValueError saying what is wrong with it and what would do.
    check: Callable[[str], str] = lambda value: value


def _timezone(value: str) -> str:
    name = value.strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"'{name[:60]}' is not a timezone this system knows; use an IANA name such as "
            "Europe/Lisbon or America/Sao_Paulo"
        ) from None
    return name


def _max_turns(value: str) -> str:
    try:
        turns = int(value.strip())
    except ValueError:
        turns = 0
    if turns not in MAX_TURNS_RANGE:
        raise ValueError(
            f"'{value[:20]}' is not a number of model calls from {MAX_TURNS_RANGE.start} to "
            f"{MAX_TURNS_RANGE.stop - 1}"
        )
    return str(turns)


EDITABLE_SETTINGS = {
    setting.key: setting
    for setting in (
        EditableSetting(
            SYSTEM_PROMPT_SETTING,
            "Base system prompt",
            "The first layer of every agent request: who Bruce is and how it behaves. "
            "Takes effect from the next message.",
            50_000,
        ),
        EditableSetting(
            TIMEZONE_SETTING,
            "Timezone",
            "Your timezone (an IANA name such as Europe/Lisbon): the time Bruce tells the "
            "model, the times and days the dashboard shows, the month of the budget, and the "
            "zone of new reminders made without one. Takes effect from the next message or page "
            "view; reminders already set keep theirs.",
            60,
            multiline=False,
            check=_timezone,
        ),
        EditableSetting(
            MAX_TURNS_SETTING,
            "Agent max turns",
            "The most model calls one answer may take (each tool round is one), 1 to 50. "
            "Takes effect from the next message.",
            2,
            multiline=False,
            check=_max_turns,
        ),
    )
}


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
    if key not in EDITABLE_SETTINGS:
        raise ApiError(
            f"'{key[:100]}' is not a setting the dashboard edits; "
            f"editable: {', '.join(EDITABLE_SETTINGS)}",
            404,
        )
    return key


class SettingKey(BaseModel):
    key: Annotated[str, AfterValidator(_editable)] = Field(
        description="one of: " + ", ".join(EDITABLE_SETTINGS)
    )


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("blank")
    return value


class NewValue(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"value": "..."}]})

    value: Annotated[StrictStr, Field(min_length=1), AfterValidator(_not_blank)]


async def setting_answer(context: WebContext, setting: EditableSetting) -> SettingAnswer:
    config_value = context.config_settings.get(setting.key)
    stored = await context.stores.settings.get(setting.key)
    return SettingAnswer(
        key=setting.key,
        label=setting.label,
        description=setting.description,
        max_chars=setting.max_chars,
        multiline=setting.multiline,
        value=config_value if stored is None else stored,
        config_value=config_value,
        source="config" if stored is None else "dashboard",
    )


async def list_settings(call: Call[NoParams, None]) -> SettingList:
    answers = [await setting_answer(call.context, s) for s in EDITABLE_SETTINGS.values()]
    return SettingList(settings=answers)


async def put_setting(call: Call[SettingKey, NewValue]) -> OneSetting:
    setting, value = EDITABLE_SETTINGS[call.params.key], call.body.value
    if len(value) > setting.max_chars:
        raise ApiError(
            f"'value' has {len(value)} characters; {setting.key} takes at most {setting.max_chars}"
        )
    try:
        value = setting.check(value)
    except ValueError as exc:
        raise ApiError(f"{setting.key}: {exc}") from None
    await call.context.stores.settings.set(setting.key, value)
    return OneSetting(setting=await setting_answer(call.context, setting))


async def reset_setting(call: Call[SettingKey, None]) -> OneSetting:
    setting = EDITABLE_SETTINGS[call.params.key]
    await call.context.stores.settings.unset(setting.key)
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
