"""A platform's bot token. `/api/channels/{channel}/test`: does it work? Telegram `getMe`,
Discord's REST login, Matrix's login on the homeserver, each through its SDK (the channels'
probe modules, as `bruce doctor`), answering with the bot's name and its link (t.me/<username>;
Discord's invite URL with the application id) or the platform's words; a token (or the fields of
a longer login) given in the body is tried, never stored (none: the one in use, the dashboard's
or config.yml's). `/api/channels/{channel}/token`: the token in use (masked), changed (tried,
stored, the channel reconnected: settings/tokens.py) or reset to config.yml's; a login of
several fields is changed field by field at `/login` (channel_logins.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot import platforms
from bruce_bot.channels.probe import ProbeError
from bruce_bot.platforms import PlatformSpec
from bruce_bot.settings.tokens import Login, login_of, try_login, try_token
from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.wire import ApiError, PlatformName

if TYPE_CHECKING:
    from bruce_bot.settings.tokens import PlatformToken


class ChannelName(BaseModel):
    channel: PlatformName


class TokenToTry(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"token": "123456:ABC-DEF"}]}
    )

    token: str | None = Field(default=None, max_length=200, description="empty: the one in use")
    fields: dict[str, str | None] | None = Field(
        default=None,
        description="a login of several fields (Matrix) to try, over the one in use, as "
        "PUT /api/channels/{channel}/login takes them",
    )


MAX_FIELD_CHARS = 2000


def login_changes(spec: PlatformSpec, fields: Mapping[str, str | None]) -> dict[str, str]:
    """The fields a request changes: a secret one sent empty is left out (kept); `null`
    empties one; a key that is not a login field of `spec` is a 400 naming them."""
    keys = [field.key for field in spec.login]
    secret = {field.key for field in spec.login if field.secret}
    changes: dict[str, str] = {}
    for key, value in fields.items():
        if key not in keys:
            raise ApiError(f"'{key[:60]}' is not a login field here; the fields: {', '.join(keys)}")
        if value is not None and len(value) > MAX_FIELD_CHARS:
            raise ApiError(f"'{key}' has {len(value)} characters; at most {MAX_FIELD_CHARS}")
        if value is None:
            changes[key] = ""
        elif value.strip() or key not in secret:
            changes[key] = value.strip()
    return changes


class ChannelTestAnswer(BaseModel):
    ok: bool
    detail: str = Field(description="the bot's name, or what the platform said")
    fix: str = ""
    link: str | None = Field(description="t.me/<bot>, or the Discord invite URL")


async def try_channel(call: Call[ChannelName, TokenToTry]) -> ChannelTestAnswer:
    configured = call.context.channels_config
    if configured is None:
        raise ApiError("channel tests are not available in this process", 503)
    name = call.params.channel
    try:
        if call.body.token:
            bot = await try_token(name, configured, call.body.token)
        else:  # the login in use (the dashboard's, else config.yml's), with the fields given
            changes = login_changes(platforms.get(name), call.body.fields or {})
            login = {**await _login_in_use(call), **changes}
            bot = await try_login(name, configured, login)
    except ProbeError as exc:
        return ChannelTestAnswer(ok=False, detail=exc.detail, fix=exc.fix, link=None)
    return ChannelTestAnswer(ok=True, detail=f"logged in as {bot.name}", link=bot.link)


async def _login_in_use(call: Call[ChannelName, Any]) -> Login:
    name, tokens = call.params.channel, call.context.platform_tokens
    platform = tokens.get(name) if tokens is not None else None
    if platform is not None:
        return await platform.current()
    assert call.context.channels_config is not None
    return login_of(name, call.context.channels_config.section(name))


class NewToken(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"token": "123456:ABC-DEF"}]}
    )

    token: str = Field(min_length=1, max_length=200)


class TokenAnswer(BaseModel):
    enabled: bool = Field(description="the platform is on in config.yml (else it cannot change)")
    token: str = Field(description="masked")
    source: Literal["config", "dashboard"]
    bot: str | None = Field(default=None, description="the bot's name after a change")
    link: str | None = Field(default=None, description="t.me/<bot>, or the Discord invite URL")


def _not_enabled(channel: str) -> ApiError:
    return ApiError(
        f"{channel.capitalize()} is not enabled: set channels.{channel}.enabled: true in "
        "config.yml and restart once; then its token can be changed here",
        409,
    )


def platform_token(call: Call[ChannelName, Any]) -> PlatformToken:
    """The platform's live login; 409 when it is not enabled in config.yml."""
    tokens = call.context.platform_tokens
    platform = tokens.get(call.params.channel) if tokens is not None else None
    if platform is None or not platform.available:
        raise _not_enabled(call.params.channel)
    return platform


async def _token_answer(call: Call[ChannelName, Any]) -> TokenAnswer:
    tokens = call.context.platform_tokens
    platform = tokens.get(call.params.channel) if tokens is not None else None
    if platform is None or not platform.available:
        return TokenAnswer(enabled=False, token="", source="config")
    view = await platform.view()
    return TokenAnswer(enabled=True, token=view.value, source=view.source)


async def channel_token(call: Call[ChannelName, None]) -> TokenAnswer:
    return await _token_answer(call)


async def put_channel_token(call: Call[ChannelName, NewToken]) -> TokenAnswer:
    platform = platform_token(call)
    if not platform.spec.single_token:
        keys = ", ".join(field.key for field in platform.spec.login)
        raise ApiError(
            f"{platform.spec.title} logs in with several fields ({keys}): change them with "
            f"PUT /api/channels/{platform.channel}/login",
            409,
        )
    try:
        bot = await platform.change(call.body.token.strip())
    except ProbeError as exc:
        raise ApiError(f"not saved, the old token stays: {exc.detail} ({exc.fix})") from None
    answer = await _token_answer(call)
    return answer.model_copy(update={"bot": bot.name, "link": bot.link})


async def reset_channel_token(call: Call[ChannelName, None]) -> TokenAnswer:
    await platform_token(call).reset()
    return await _token_answer(call)


TOKEN_PATH = "/api/channels/{channel}/token"  # /api/channels/telegram/token came first
ENDPOINTS = (
    Endpoint(
        "GET",
        TOKEN_PATH,
        channel_token,
        TokenAnswer,
        "The Telegram or Discord token in use, masked",
        params=ChannelName,
        errors=(409,),
    ),
    Endpoint(
        "PUT",
        TOKEN_PATH,
        put_channel_token,
        TokenAnswer,
        "Change a bot token: tried (getMe / Discord login), stored, the channel reconnected",
        params=ChannelName,
        body=NewToken,
        errors=(409,),
    ),
    Endpoint(
        "DELETE",
        TOKEN_PATH,
        reset_channel_token,
        TokenAnswer,
        "Back to config.yml's token",
        params=ChannelName,
        errors=(409,),
    ),
    Endpoint(
        "POST",
        "/api/channels/{channel}/test",
        try_channel,
        ChannelTestAnswer,
        "Try a Telegram or Discord bot token (getMe / login), without storing it",
        params=ChannelName,
        body=TokenToTry,
        errors=(503,),
    ),
)
