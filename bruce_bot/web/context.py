"""What the web app is built from: the stores, the web chat channel, a few settings and a clock.

The timezone the pages show times in is read for each request (`display_timezone`): the one
saved in the dashboard's Settings wins over `app.timezone`, without a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from bruce_bot.channels.web.channel import WebChannel
from bruce_bot.config import ChannelsConfig, Config
from bruce_bot.domain import utcnow
from bruce_bot.faults import StorageHealth
from bruce_bot.settings import editable
from bruce_bot.settings.override import Override
from bruce_bot.storage.stores import Stores
from bruce_bot.usage.prices import PriceTable

if TYPE_CHECKING:
    from bruce_bot.approval_desk import ApprovalDesk
    from bruce_bot.mcp_client.manager import McpManager
    from bruce_bot.pairing import PairingService
    from bruce_bot.scheduler.service import TaskService
    from bruce_bot.settings.allowlists import Allowlists
    from bruce_bot.settings.llm import LLMSettings
    from bruce_bot.settings.tokens import PlatformTokens
    from bruce_bot.web.login_token import OneTimeLogin


@dataclass(frozen=True, slots=True)
class WebContext:
    stores: Stores
    web_channel: WebChannel
    auth_token: str
    app_name: str = "Bruce"
    data_dir: Path = Path("data")  # artifacts are served from <data_dir>/artifacts
    # Cancelling a task goes through the service so that its scheduler job goes too.
    tasks: TaskService | None = None
    timezone: str = "UTC"  # app.timezone in config.yml; the Settings page's timezone wins
    # The overrides of the Settings page's text settings, over the YAML values (what "reset" goes
    # back to); the default config's when not given (tests).
    settings: Mapping[str, Override[Any]] = field(
        default_factory=lambda: editable.editable_overrides(Config())
    )
    # The Host check answers to loopback, the host of app.public_url and web.allowed_hosts; an
    # https public_url also makes the login cookie Secure.
    public_url: str = ""
    allowed_hosts: tuple[str, ...] = ()
    session_max_age_days: int = 30  # web.session_max_age_days, from the last use
    # Sign-in sessions, the failed-sign-in throttle and which days the usage page counts.
    clock: Callable[[], datetime] = utcnow
    # Who may talk on the chat platforms and the pairing codes waiting (the People page).
    pairing: PairingService | None = None
    # The Usage page's prices (usage.prices over the built-in table) and monthly budget (USD;
    # None: none), and the chat its warnings go to (None: the dashboard's banner only).
    prices: PriceTable = field(default_factory=PriceTable.built_in)
    monthly_budget: float | None = None
    budget_chat: tuple[str, str] | None = None
    # The LLM settings the Settings page and the chat's setup card change (None: not offered).
    live_llm: LLMSettings | None = None
    # The channels' config, for "Test connection" of a Telegram or Discord token.
    channels_config: ChannelsConfig | None = None
    # The Telegram and Discord tokens the Settings page changes (None: not offered), and the
    # allowlists it edits (None: not offered).
    live_tokens: PlatformTokens | None = None
    live_allowlists: Allowlists | None = None
    # Whether incoming messages can be stored now (the inbox's): /healthz says degraded if not.
    storage_health: StorageHealth | None = None

    async def display_zone(self) -> ZoneInfo:
        """The timezone the pages show times (and count days) in now."""
        return await editable.timezone(ZoneInfo(self.timezone)).value(self.stores.settings)

    async def display_timezone(self) -> str:
        """`display_zone`'s IANA name."""
        return (await self.display_zone()).key

    # The MCP servers, their state and tools (None: none configured).
    mcp: McpManager | None = None
    # This start's one-time sign-in link (None: web.auth_token is set in config.yml, or 'none').
    login_link: OneTimeLogin | None = None
    # The configured secrets (Config.secrets()): scrubbed from what the API shows of outside
    # processes (an MCP server's stderr), as from the logs.
    secrets: tuple[str, ...] = ()
    # The runs waiting for the user's approval (None: not offered).
    approver: ApprovalDesk | None = None
