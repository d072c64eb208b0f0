"""`GET /api/platforms`: the chat platforms Bruce speaks (bruce_bot/platforms.py) and whether
each is on in config.yml, so the dashboard's token, allowlist and people sections are drawn for
every registered platform instead of a list of its own."""

from __future__ import annotations

from pydantic import BaseModel, Field

from bruce_bot import platforms
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams


class PlatformAnswer(BaseModel):
    name: str = Field(description="the section under channels:, and the channel's name")
    title: str = Field(description="as a person writes it: Telegram")
    enabled: bool = Field(description="channels.<name>.enabled in config.yml")
    token_help: str = Field(description="where a bot token comes from")
    pairing: bool = Field(description="strangers may ask for a code the owner approves")
    capabilities: list[str] = Field(description="buttons, drafts, edits, files")


class PlatformsAnswer(BaseModel):
    platforms: list[PlatformAnswer]


async def list_platforms(call: Call[NoParams, None]) -> PlatformsAnswer:
    configured = call.context.channels_config
    return PlatformsAnswer(
        platforms=[
            PlatformAnswer(
                name=spec.name,
                title=spec.title,
                enabled=configured is not None and configured.section(spec.name).enabled,
                token_help=spec.token_help,
                pairing=spec.pairing,
                capabilities=sorted(spec.capabilities),
            )
            for spec in platforms.platforms()
        ]
    )


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/platforms",
        list_platforms,
        PlatformsAnswer,
        "The chat platforms Bruce speaks, and which are on in config.yml",
    ),
)
