"""What a channel's connection probe reports when the platform refuses or cannot be reached.

`bruce doctor` asks each configured platform who the bot is (Telegram `getMe`, Discord
`GET /users/@me`) through the platform's own SDK, in the channel modules that own it; a failure
comes back as a `ProbeError` in plain words with the config key to fix, so the caller never sees
an SDK's exception type.
"""

from __future__ import annotations


class ProbeError(Exception):
    """The platform refused the bot or could not be reached; `fix` says what to change."""

    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fix = fix
