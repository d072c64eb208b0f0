"""`GET /api/platforms`: the chat platforms Bruce speaks (bruce_bot/platforms.py), whether each
is on in config.yml and the fields of its login, so the dashboard's setup card, login forms,
allowlist and people sections are drawn for every registered platform instead of a list of its
own (one bot token, or Matrix's homeserver, user id and password)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from bruce_bot import platforms
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams


class SetupFieldAnswer(BaseModel):
    key: str = Field(description="its key in the section: channels.<name>.<key>")
    label: str
    secret: bool = Field(description="never answered back: a password field, shown masked")
    placeholder: str
    help: str
    optional: bool = Field(description="may stay empty (the section's validation decides)")


class PlatformAnswer(BaseModel):
    name: str = Field(description="the section under channels:, and the channel's name")
    title: str = Field(description="as a person writes it: Telegram")
    enabled: bool = Field(description="channels.<name>.enabled in config.yml")
    token_help: str = Field(description="where a bot token comes from")
    pairing: bool = Field(description="strangers may ask for a code the owner approves")
    capabilities: list[str] = Field(description="buttons, drafts, edits, files")
    single_token: bool = Field(description="its login is one bot token (channels.<name>.token)")
    fields: list[SetupFieldAnswer] = Field(description="what logs it in, in the form's order")


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
                single_token=spec.single_token,
                fields=[
                    SetupFieldAnswer.model_validate(f, from_attributes=True) for f in spec.login
                ],
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
