"""`/api/channels/{channel}/login`: a platform's login field by field (`PlatformSpec.login`:
one bot token, or Matrix's homeserver, user id and password or access token), as the setup card
and Settings draw their forms from `GET /api/platforms`. Read with the secret fields masked;
changed (tried, stored, the channel reconnected: settings/tokens.py) or reset to config.yml's.

A change names the fields it changes: a field left out keeps its value, and so does a secret one
sent empty (the forms never show a secret, so an empty box means "unchanged"); `null` empties a
field (a Matrix password given up for an access token)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.channels.probe import ProbeError
from bruce_bot.web.api.channel_tests import (
    ChannelName,
    login_changes,
    platform_token,
)
from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.wire import ApiError


class LoginFieldAnswer(BaseModel):
    key: str = Field(description="its key in the section: channels.<name>.<key>")
    value: str = Field(description="the value in use; a secret one masked (sk-…abcd)")
    secret: bool
    set: bool = Field(description="it has a value")


class LoginAnswer(BaseModel):
    enabled: bool = Field(description="the platform is on in config.yml (else it cannot change)")
    fields: list[LoginFieldAnswer]
    source: Literal["config", "dashboard"]
    bot: str | None = Field(default=None, description="who it logs in as, after a change")
    link: str | None = Field(default=None, description="t.me/<bot>, the Discord invite URL…")


class NewLogin(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "fields": {
                        "homeserver": "https://matrix.example.org",
                        "user_id": "@bruce:example.org",
                        "password": "…",
                    }
                }
            ]
        },
    )

    fields: dict[str, str | None] = Field(
        min_length=1,
        description="the fields to change; left out, or a secret one empty: kept; null: emptied",
    )


async def _answer(call: Call[ChannelName, Any]) -> LoginAnswer:
    tokens = call.context.platform_tokens
    platform = tokens.get(call.params.channel) if tokens is not None else None
    if platform is None or not platform.available:
        return LoginAnswer(enabled=False, fields=[], source="config")
    shown, source = await platform.fields()
    return LoginAnswer(
        enabled=True,
        fields=[
            LoginFieldAnswer(key=f.key, value=f.value, secret=f.secret, set=bool(f.value))
            for f in shown
        ],
        source=source,
    )


async def channel_login(call: Call[ChannelName, None]) -> LoginAnswer:
    return await _answer(call)


async def put_channel_login(call: Call[ChannelName, NewLogin]) -> LoginAnswer:
    platform = platform_token(call)
    changes = login_changes(platform.spec, call.body.fields)
    try:
        bot = await platform.change_login(changes)
    except ProbeError as exc:
        raise ApiError(f"not saved, the old login stays: {exc.detail} ({exc.fix})") from None
    answer = await _answer(call)
    return answer.model_copy(update={"bot": bot.name, "link": bot.link})


async def reset_channel_login(call: Call[ChannelName, None]) -> LoginAnswer:
    await platform_token(call).reset()
    return await _answer(call)


LOGIN_PATH = "/api/channels/{channel}/login"
ENDPOINTS = (
    Endpoint(
        "GET",
        LOGIN_PATH,
        channel_login,
        LoginAnswer,
        "A platform's login fields in use, the secret ones masked",
        params=ChannelName,
    ),
    Endpoint(
        "PUT",
        LOGIN_PATH,
        put_channel_login,
        LoginAnswer,
        "Change a platform's login fields: tried, stored, the channel reconnected",
        params=ChannelName,
        body=NewLogin,
        errors=(409,),
    ),
    Endpoint(
        "DELETE",
        LOGIN_PATH,
        reset_channel_login,
        LoginAnswer,
        "Back to config.yml's login",
        params=ChannelName,
        errors=(409,),
    ),
)
