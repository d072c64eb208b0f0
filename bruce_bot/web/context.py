"""What the web app is built from: the stores, the web chat channel, the config sections it
reads, the live parts it shows or changes, and a clock. Built by the composition root
(bruce_bot/parts.py, `web_context`); a test builds one from the stores, a channel and a token.

The timezone the pages show times in is read for each request (`display_timezone`): the one
saved in the dashboard's Settings wins over `app.timezone`, without a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from bruce_bot.channels.web.channel import WebChannel
from bruce_bot.config import AppConfig, ChannelsConfig, Config, UsageConfig, WebConfig
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
    # app.name, app.data_dir (artifacts are served from <data_dir>/artifacts), app.timezone (the
    # Settings page's timezone wins) and app.public_url: the Host check answers to loopback, its
    # host and web.allowed_hosts; an https public_url also makes the login cookie Secure.
    app: AppConfig = field(default_factory=AppConfig)
    web: WebConfig = field(default_factory=WebConfig)  # allowed_hosts, session_max_age_days
    # Cancelling a task goes through the scheduler's planner so that its job goes too; the
    # dashboard's edits through its editor (None: no scheduler here).
    tasks: TaskService | None = None
    # The overrides of the Settings page's text settings, over the YAML values (what "reset" goes
    # back to); the default config's when not given (tests).
    settings: Mapping[str, Override[Any]] = field(
        default_factory=lambda: editable.editable_overrides(Config())
    )
    # Sign-in sessions, the failed-sign-in throttle and which days the usage page counts.
    clock: Callable[[], datetime] = utcnow
    # Who may talk on the chat platforms and the pairing codes waiting (the People page).
    pairing: PairingService | None = None
    # The Usage page's prices (usage.prices over the built-in table) and monthly budget
    # (usage.monthly_budget, USD), and the chat its warnings go to (None: the banner only).
    prices: PriceTable = field(default_factory=PriceTable.built_in)
    usage: UsageConfig = field(default_factory=UsageConfig)
    budget_chat: tuple[str, str] | None = None
    # The LLM settings the Settings page and the chat's setup card change (None: not offered).
    llm_settings: LLMSettings | None = None
    # The channels' config, for "Test connection" of a Telegram or Discord token.
    channels_config: ChannelsConfig | None = None
    # The Telegram and Discord tokens the Settings page changes (None: not offered), and the
    # allowlists it edits (None: not offered).
    platform_tokens: PlatformTokens | None = None
    allowlists: Allowlists | None = None
    # Whether incoming messages can be stored now (the inbox's): /healthz says degraded if not.
    storage_health: StorageHealth | None = None
    # The MCP servers, their state and tools (None: none configured).
    mcp: McpManager | None = None
    # This start's one-time sign-in link (None: web.auth_token is set in config.yml, or 'none').
    login_link: OneTimeLogin | None = None
    # The configured secrets (Config.secrets()): scrubbed from what the API shows of outside
    # processes (an MCP server's stderr), as from the logs.
    secrets: tuple[str, ...] = ()
    # The runs waiting for the user's approval (None: not offered).
    approver: ApprovalDesk | None = None
    # The channel adapters by name (the outbox's map): a platform that posts to Bruce (Slack's
    # Events API) is routed to its adapter of the moment (web/webhooks.py).
    channels: Mapping[str, Any] = field(default_factory=dict)

    async def display_zone(self) -> ZoneInfo:
        """The timezone the pages show times (and count days) in now."""
        return await editable.timezone(ZoneInfo(self.app.timezone)).value(self.stores.settings)

    async def display_timezone(self) -> str:
        """`display_zone`'s IANA name."""
        return (await self.display_zone()).key
