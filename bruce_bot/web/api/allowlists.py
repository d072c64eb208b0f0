"""`/api/channels/{channel}/allowlist`: who may talk to Bruce on Telegram or Discord, as the
Settings page edits it (settings/allowlists.py): the ids in use and where they come from, a new
list (from the next message on, no restart), or back to config.yml's. Ids travel as text: a
Discord id is larger than the numbers a browser keeps exactly."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.settings.allowlists import MAX_IDS, AllowlistRefused, Allowlists, AllowlistView
from bruce_bot.web.api.channel_tests import ChannelName
from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.wire import ApiError


class NewAllowlist(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"allowed_user_ids": ["123456789", "987654321"]}]},
    )

    # Any JSON value per entry: a wrong one is refused below with its index and the fix.
    allowed_user_ids: list[Any] = Field(
        max_length=MAX_IDS, description="user ids (digits, as text or numbers); [] lets nobody in"
    )


class AllowlistAnswer(BaseModel):
    channel: str
    allowed_user_ids: list[str] = Field(description="in use")
    source: Literal["config", "dashboard"]
    config_user_ids: list[str] = Field(description="config.yml's, what a reset goes back to")


def _answer(view: AllowlistView) -> AllowlistAnswer:
    return AllowlistAnswer(
        channel=view.channel,
        allowed_user_ids=[str(i) for i in view.user_ids],
        source=view.source,
        config_user_ids=[str(i) for i in view.config_user_ids],
    )


def _allowlists(call: Call[ChannelName, Any]) -> Allowlists:
    allowlists = call.context.allowlists
    if allowlists is None:
        raise ApiError("allowlists cannot be changed in this process", 503)
    return allowlists


async def allowlist(call: Call[ChannelName, None]) -> AllowlistAnswer:
    return _answer(await _allowlists(call).view(call.params.channel))


async def put_allowlist(call: Call[ChannelName, NewAllowlist]) -> AllowlistAnswer:
    try:
        view = await _allowlists(call).save(call.params.channel, call.body.allowed_user_ids)
    except AllowlistRefused as exc:
        raise ApiError(f"not saved: {exc}") from None
    return _answer(view)


async def reset_allowlist(call: Call[ChannelName, None]) -> AllowlistAnswer:
    return _answer(await _allowlists(call).reset(call.params.channel))


PATH = "/api/channels/{channel}/allowlist"
ENDPOINTS = (
    Endpoint(
        "GET",
        PATH,
        allowlist,
        AllowlistAnswer,
        "Who may talk on Telegram or Discord (besides the people approved by pairing)",
        params=ChannelName,
        errors=(503,),
    ),
    Endpoint(
        "PUT",
        PATH,
        put_allowlist,
        AllowlistAnswer,
        "Replace the allowlist: stored, it wins over config.yml from the next message on",
        params=ChannelName,
        body=NewAllowlist,
        errors=(503,),
    ),
    Endpoint(
        "DELETE",
        PATH,
        reset_allowlist,
        AllowlistAnswer,
        "Back to config.yml's allowed_user_ids",
        params=ChannelName,
        errors=(503,),
    ),
)
