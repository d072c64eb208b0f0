"""`/api/channels/{channel}/test`: does a Telegram or Discord bot token work? Telegram `getMe`,
Discord's REST login, each through its SDK (the channels' probe modules, as `bruce doctor`),
answering with the bot's name and its link (t.me/<username>; Discord's invite URL with the
application id) or the platform's words. A token given in the body is tried, never stored; none:
the configured one."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import ChannelsConfig
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.wire import ApiError

if TYPE_CHECKING:
    from bruce_bot.live_channels import LiveTelegramToken

PROBE_TIMEOUT_SECONDS = 10.0


class ChannelName(BaseModel):
    channel: Annotated[Literal["telegram", "discord"], Field(description="telegram or discord")]


class TokenToTry(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"token": "123456:ABC-DEF"}]}
    )

    token: str | None = Field(default=None, max_length=200, description="empty: the configured")


class ChannelTestAnswer(BaseModel):
    ok: bool
    detail: str = Field(description="the bot's name, or what the platform said")
    fix: str = ""
    link: str | None = Field(description="t.me/<bot>, or the Discord invite URL")


async def try_channel(call: Call[ChannelName, TokenToTry]) -> ChannelTestAnswer:
    configured = call.context.channels_config
    if configured is None:
        raise ApiError("channel tests are not available in this process", 503)
    name, token = call.params.channel, call.body.token
    try:
        if name == "telegram":
            return await _telegram(configured, token)
        return await _discord(configured, token)
    except ProbeError as exc:
        return ChannelTestAnswer(ok=False, detail=exc.detail, fix=exc.fix, link=None)


async def _telegram(configured: ChannelsConfig, token: str | None) -> ChannelTestAnswer:
    from bruce_bot.channels.telegram_probe import telegram_bot_name

    config = configured.telegram
    if token:
        config = config.model_copy(update={"token": token})
    if not config.token:
        raise ProbeError("no token", "paste the token @BotFather gave you")
    bot = await telegram_bot_name(config, PROBE_TIMEOUT_SECONDS)
    link = f"https://t.me/{bot.removeprefix('@')}"
    return ChannelTestAnswer(ok=True, detail=f"logged in as {bot}", link=link)


async def _discord(configured: ChannelsConfig, token: str | None) -> ChannelTestAnswer:
    from bruce_bot.channels.discord_probe import discord_bot_identity, invite_url

    config = configured.discord
    if token:
        config = config.model_copy(update={"token": token})
    if not config.token:
        raise ProbeError("no token", "paste the bot token of your application (Developer Portal)")
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
            name, user_id = await discord_bot_identity(config)
    except TimeoutError:
        raise ProbeError(
            f"Discord did not answer within {PROBE_TIMEOUT_SECONDS:g} s",
            "check the network (or channels.discord.api_base_url)",
        ) from None
    link = invite_url(user_id) if user_id else None
    return ChannelTestAnswer(ok=True, detail=f"logged in as {name}", link=link)


class NewToken(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"token": "123456:ABC-DEF"}]}
    )

    token: str = Field(min_length=1, max_length=200)


class TokenAnswer(BaseModel):
    enabled: bool = Field(description="Telegram is on in config.yml (else it cannot change here)")
    token: str = Field(description="masked")
    source: Literal["config", "dashboard"]
    bot: str | None = Field(default=None, description="the bot's @name after a change")
    link: str | None = None


def _live_telegram(call: Call[Any, Any]) -> LiveTelegramToken:
    live = call.context.live_telegram
    if live is None or not live.available:
        raise ApiError(
            "Telegram is not enabled: set channels.telegram.enabled: true in config.yml and "
            "restart once; then its token can be changed here",
            409,
        )
    return live


async def telegram_token(call: Call[NoParams, None]) -> TokenAnswer:
    live = call.context.live_telegram
    if live is None or not live.available:
        return TokenAnswer(enabled=False, token="", source="config")
    view = await live.view()
    return TokenAnswer(
        enabled=True,
        token=view.value,
        source="dashboard" if view.source == "dashboard" else "config",
    )


async def put_telegram_token(call: Call[NoParams, NewToken]) -> TokenAnswer:
    live = _live_telegram(call)
    try:
        bot = await live.change(call.body.token.strip())
    except ProbeError as exc:
        raise ApiError(f"not saved, the old token stays: {exc.detail} ({exc.fix})") from None
    answer = await telegram_token(call)  # type: ignore[arg-type]
    return answer.model_copy(update={"bot": bot, "link": f"https://t.me/{bot.removeprefix('@')}"})


async def reset_telegram_token(call: Call[NoParams, None]) -> TokenAnswer:
    await _live_telegram(call).reset()
    return await telegram_token(call)


TOKEN_PATH = "/api/channels/telegram/token"
ENDPOINTS = (
    Endpoint(
        "GET",
        TOKEN_PATH,
        telegram_token,
        TokenAnswer,
        "The Telegram token in use, masked",
        errors=(409,),
    ),
    Endpoint(
        "PUT",
        TOKEN_PATH,
        put_telegram_token,
        TokenAnswer,
        "Change the Telegram token: tried with getMe, stored, the channel reconnected",
        body=NewToken,
        errors=(409,),
    ),
    Endpoint(
        "DELETE",
        TOKEN_PATH,
        reset_telegram_token,
        TokenAnswer,
        "Back to config.yml's token",
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
