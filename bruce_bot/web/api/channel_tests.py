"""`/api/channels/{channel}/test`: does a Telegram or Discord bot token work? Telegram `getMe`,
Discord's REST login, each through its SDK (the channels' probe modules, as `bruce doctor`),
answering with the bot's name and its link (t.me/<username>; Discord's invite URL with the
application id) or the platform's words. A token given in the body is tried, never stored; none:
the configured one."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import ChannelsConfig
from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.wire import ApiError

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


ENDPOINTS = (
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
