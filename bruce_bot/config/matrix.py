"""`channels.matrix`: the Matrix account Bruce logs in as (bruce_bot/channels/matrix/).

A Matrix user id is text ("@alice:example.org"), not a number as on Telegram and Discord, so
`allowed_user_ids` here is a list of such ids. Enabled with none of the login
(homeserver, user id, password or access token) it waits for one saved in the dashboard;
with part of it, config.yml says what is missing. With `pairing` (on by default) a stranger
gets a one-time code the owner approves, as on the other platforms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from bruce_bot.config.schema import SecretText, Section, _check_url
from bruce_bot.platforms import MATRIX_USER_IDS

# "@localpart:server" (the server may carry a port); see the Matrix spec's user identifiers.
LOGIN = ("homeserver", "user_id", "password", "access_token")  # the fields that log it in
MATRIX_USER_ID = re.compile(MATRIX_USER_IDS.pattern, MATRIX_USER_IDS.flags)


def _check_user_id(value: str, key: str) -> str:
    value = value.strip()
    if not MATRIX_USER_ID.fullmatch(value):
        raise ValueError(f"{key}: {value[:60]!r} is not a Matrix user id like @alice:example.org")
    return value


class MatrixConfig(Section):
    enabled: bool = False
    homeserver: str | None = None  # the client-server API's base URL: https://matrix.example.org
    user_id: str = ""  # Bruce's account: "@bruce:example.org"
    password: SecretText = ""  # logs in (and keeps `device_id`), or:
    access_token: SecretText = ""  # an access token of the account
    device_id: str = ""  # the device to log in as; kept across restarts
    allowed_user_ids: list[str] = Field(default_factory=list)  # "@alice:example.org"
    pairing: bool = True  # strangers get a one-time code the owner approves (see telegram)
    streaming: bool = True  # live replies: one message edited (m.replace) as it is written

    _check_homeserver = field_validator("homeserver")(classmethod(lambda cls, v: _check_url(v)))

    @field_validator("allowed_user_ids")
    @classmethod
    def _allowed(cls, values: list[str]) -> list[str]:
        return [
            _check_user_id(value, f"allowed_user_ids[{index}]")
            for index, value in enumerate(values)
        ]

    @model_validator(mode="after")
    def _complete(self) -> MatrixConfig:
        if self.user_id:
            self.user_id = _check_user_id(self.user_id, "user_id")
        if not self.enabled or not any(getattr(self, key) for key in LOGIN):
            # Enabled with no login at all: it waits for one from the dashboard (Settings).
            return self
        missing = [key for key in ("homeserver", "user_id") if not getattr(self, key)]
        if not (self.password or self.access_token):
            missing.append("password (or access_token)")
        if missing:
            raise ValueError(
                f"channels.matrix is enabled but needs {', '.join(missing)} (or none of them in "
                "config.yml: then the dashboard's Settings asks for them)"
            )
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A token saved in the dashboard (`ChannelsConfig.with_token` updates `token`) is an
        access token here: `token` is a property over `access_token` and `password`."""
        if update is not None and "token" in update:
            update = {**update, "access_token": update["token"]}
            del update["token"]
        return super().model_copy(update=update, deep=deep)

    @property
    def token(self) -> str:
        """The secret that logs in (the registry's `token`: empty means "waiting for one"):
        the access token when one is given, else the password."""
        return self.access_token or self.password
