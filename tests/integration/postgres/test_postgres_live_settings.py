"""Several Bruce processes on one PostgreSQL database: an LLM setting, a bot token or an
allowlist saved through one process's dashboard reaches the other through the change feed
(topic `settings`), without a restart: its LLM client is rebuilt for the new model, its channel
reconnects with the new token (not tried again: the first process did), and its policy lets
the new id in from the next message; a reset goes back to config.yml's in both.

Two processes in one event loop, as in test_postgres_changes.py (its `processes` fixture); the
platform adapter is a recording stand-in (the reconnect against the real SDKs is covered by
test_live_telegram_token.py and test_live_discord_token.py), the LLM client is built lazily and
never called."""

from __future__ import annotations

from typing import Any, cast

from bruce_bot.channels.base import ChannelAdapter, InboxPort
from bruce_bot.config import ChannelsConfig, LLMConfig
from bruce_bot.domain import OutboundMessage
from bruce_bot.llm.lazy import LazyLLM
from bruce_bot.llm.switchable import SwitchableLLM
from bruce_bot.settings.allowlists import Allowlists
from bruce_bot.settings.llm import LLMSettings
from bruce_bot.settings.tokens import AdapterSlot, BotIdentity, Connector, PlatformToken
from bruce_bot.storage.settings import TOPIC
from bruce_bot.storage.stores import Stores
from tests.conftest import wait_until
from tests.integration.postgres.test_postgres_changes import processes  # noqa: F401 (fixture)

OLD, NEW = "111:OLD-token", "222:NEW-token"
CONFIGURED = LLMConfig(provider="anthropic", api_key="sk-ant-old-0000", model="claude-sonnet-4-6")
INBOX = cast(InboxPort, object())  # the adapter stand-in never takes a message
CHANNELS = ChannelsConfig.model_validate(
    {"telegram": {"enabled": True, "token": OLD, "allowed_user_ids": [1001]}}
)


class Adapter:
    """A Telegram adapter as far as the live token sees it: built for a token, started, stopped."""

    name = "telegram"
    max_message_chars = 4096

    def __init__(self, token: str) -> None:
        self.token = token
        self.running = False

    async def start(self, inbox: InboxPort) -> None:
        self.running = True

    async def stop(self) -> None:
        self.running = False

    async def close(self) -> None:
        self.running = False

    async def send(self, message: OutboundMessage) -> None:
        return None

    async def typing(self, chat_id: str) -> None:
        return None


class Process:
    """One process's live settings over its stores, following the feed as parts.py wires them."""

    def __init__(self, stores: Stores) -> None:
        self.llm = SwitchableLLM(LazyLLM(self._refuse, CONFIGURED.model), CONFIGURED)
        self.llm_settings = LLMSettings(
            CONFIGURED,
            stores.settings,
            self.llm,
            probe=self._accept,
            build=lambda _s: self._refuse(),
        )
        first = Adapter(OLD)
        self.channels: dict[str, ChannelAdapter] = {"telegram": first}
        self.token = PlatformToken(
            CHANNELS,
            stores.settings,
            AdapterSlot("telegram", self.channels, [first]),
            connector=Connector(self._bot, lambda login: Adapter(login["token"])),
        )
        self.allowlists = Allowlists({"telegram": [1001]}, stores.settings)
        stores.feed.subscribe(TOPIC, self.llm_settings.changed_elsewhere)
        stores.feed.subscribe(TOPIC, self.token.changed_elsewhere)

    async def start(self) -> None:
        """As app.py starts the channels, then tells the live token."""
        await first_adapter(self).start(INBOX)
        self.token.started(INBOX)

    @staticmethod
    def _refuse() -> Any:
        raise AssertionError("no model call in this test")

    @staticmethod
    async def _accept(_settings: LLMConfig) -> None:
        return None

    @staticmethod
    async def _bot(_login: dict[str, str]) -> BotIdentity:
        return BotIdentity("@bruce_bot", "https://t.me/bruce_bot")


def first_adapter(process: Process) -> Adapter:
    adapter = process.channels["telegram"]
    assert isinstance(adapter, Adapter)
    return adapter


async def test_a_setting_saved_in_one_process_is_applied_in_the_other(
    processes: tuple[Stores, Stores],  # noqa: F811 (the fixture)
) -> None:
    one, other = Process(processes[0]), Process(processes[1])
    for process in (one, other):
        await process.start()

    await one.llm_settings.save({"model": "claude-haiku-4-5"})
    await wait_until(lambda: other.llm.config.model == "claude-haiku-4-5", timeout=5)

    await one.token.change(NEW)
    await wait_until(lambda: first_adapter(other).token == NEW, timeout=5)
    assert first_adapter(other).running  # reconnected: the old one stopped, the new one started
    assert (await other.token.view()).source == "dashboard"

    await one.allowlists.save("telegram", ["1001", "2002"])
    # The other's settings cache forgets the old list, so its policy reads the new one.
    await wait_until(lambda: _allows(other.allowlists, 2002), timeout=5)

    await one.llm_settings.reset()
    await one.token.reset()
    await wait_until(lambda: other.llm.config.model == CONFIGURED.model, timeout=5)
    await wait_until(lambda: first_adapter(other).token == OLD, timeout=5)
    assert first_adapter(other).running


async def _allows(allowlists: Allowlists, user_id: int) -> bool:
    return user_id in await allowlists.allowed_user_ids("telegram")
