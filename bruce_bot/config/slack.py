"""`channels.slack`: the Slack app Bruce runs as (bruce_bot/channels/slack/).

Two ways in: Socket Mode (`mode: socket`, the default: Bruce opens a WebSocket to Slack with
the app-level token `xapp-...`, nothing to expose) or the Events API (`mode: events`: Slack
POSTs to `/slack/events` on Bruce's web server, signed with the app's signing secret). Either
way Bruce answers with the bot token `xoxb-...`. The tokens' shapes are checked here, so a token
pasted into the wrong key is named at start-up rather than refused by Slack later.

A Slack user id is text ("U012ABCDEF", "W..." on Enterprise Grid), so `allowed_user_ids` is a
list of such ids; with `pairing` (on by default) a stranger gets a one-time code the owner
approves, as on the other platforms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from bruce_bot.config.schema import SecretText, Section, _check_url
from bruce_bot.platforms import SLACK_USER_IDS

SLACK_USER_ID = re.compile(SLACK_USER_IDS.pattern, SLACK_USER_IDS.flags)
BOT_TOKEN = re.compile(r"xoxb-[A-Za-z0-9-]{10,}")
APP_TOKEN = re.compile(r"xapp-[A-Za-z0-9-]{10,}")
SIGNING_SECRET = re.compile(r"[A-Za-z0-9]{16,}")  # 32 characters on the Basic Information page

BOT_TOKEN_HOW = (
    "copy the Bot User OAuth Token (xoxb-...) from your Slack app's OAuth & Permissions page"
)
APP_TOKEN_HOW = (
    "make an app-level token with the connections:write scope on your Slack app's Basic "
    "Information page (App-Level Tokens) and paste it (xapp-...)"
)
SIGNING_SECRET_HOW = "copy the Signing Secret from your Slack app's Basic Information page"


def _check_user_id(value: str, key: str) -> str:
    value = value.strip()
    if not SLACK_USER_ID.fullmatch(value):
        raise ValueError(
            f"{key}: {value[:40]!r} is not a Slack user id like U012ABCDEF (in Slack: the "
            "person's profile → ⋮ → Copy member ID)"
        )
    return value


def _shape_problem(value: str, shape: re.Pattern[str], key: str, how: str) -> str | None:
    if not value or shape.fullmatch(value):
        return None
    if value[:5] == shape.pattern[:5]:  # the right kind, cut short or mistyped
        return f"{key} is too short or has characters a Slack token does not: {how}"
    if value.startswith("xox") or value.startswith("xapp-"):
        # Which kind it is may be said: the prefix is no secret.
        return f"{key} is a {value[:5]}... token, not the one this key needs: {how}"
    return f"{key} does not look like a Slack token of this kind: {how}"


class SlackConfig(Section):
    enabled: bool = False
    bot_token: SecretText = ""  # xoxb-...: every call Bruce makes
    app_token: SecretText = ""  # xapp-...: Socket Mode's connection
    mode: Literal["socket", "events"] = "socket"
    signing_secret: SecretText = ""  # the Events API's requests are signed with it
    api_base_url: str | None = None  # Slack's Web API, "https://slack.com/api/" (tests)
    allowed_user_ids: list[str] = Field(default_factory=list)  # "U012ABCDEF"
    pairing: bool = True  # strangers get a one-time code the owner approves (see telegram)
    streaming: bool = True  # live replies: one message updated as the answer is written

    _check_api = field_validator("api_base_url")(classmethod(lambda cls, v: _check_url(v)))

    @field_validator("allowed_user_ids")
    @classmethod
    def _allowed(cls, values: list[str]) -> list[str]:
        return [
            _check_user_id(value, f"allowed_user_ids[{index}]")
            for index, value in enumerate(values)
        ]

    @model_validator(mode="after")
    def _complete(self) -> SlackConfig:
        problems = [
            problem
            for problem in (
                _shape_problem(self.bot_token, BOT_TOKEN, "bot_token", BOT_TOKEN_HOW),
                _shape_problem(self.app_token, APP_TOKEN, "app_token", APP_TOKEN_HOW),
            )
            if problem
        ]
        if self.signing_secret and not SIGNING_SECRET.fullmatch(self.signing_secret):
            problems.append(f"signing_secret does not look like one: {SIGNING_SECRET_HOW}")
        if problems:
            raise ValueError("; ".join(problems))
        if self.enabled:
            self._check_complete()
        return self

    def _check_complete(self) -> None:
        # No bot_token is allowed here: the channel then waits for a login saved in the
        # dashboard (Settings asks for both tokens).
        if not self.bot_token:
            return
        if self.mode == "socket" and not self.app_token:
            raise ValueError(f"mode socket needs app_token: {APP_TOKEN_HOW}")
        if self.mode == "events" and not self.signing_secret:
            raise ValueError(f"mode events needs signing_secret: {SIGNING_SECRET_HOW}")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A token saved in the dashboard (`ChannelsConfig.with_token` updates `token`) is the
        bot token here: `token` is a property over `bot_token`."""
        if update is not None and "token" in update:
            update = {**update, "bot_token": update["token"]}
            del update["token"]
        return super().model_copy(update=update, deep=deep)

    @property
    def token(self) -> str:
        """The bot token (the registry's `token`: empty means "waiting for one")."""
        return self.bot_token
