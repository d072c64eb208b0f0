"""A chat platform's bot token changed while Bruce runs: tried first with the platform's probe
(bruce_bot/platforms.py: Telegram `getMe`, Discord's REST login), stored under
`channels.<name>.token` in `settings` (it wins over config.yml), and the channel reconnected with
it, without a restart.

One `PlatformToken` per platform, an `Override` of its section's `token`. The running adapter
stops taking messages and is closed; a new one, built from config.yml's section with the new
token and given the same ports (pairing, the allowlist), starts and takes its place
(`AdapterSlot`: the one place that replaces it) in the channel map the
outbox and the media step share, so replies go out through it. A token the platform refuses is
not stored and the old channel keeps running. A channel enabled in config.yml without a token
(neither there nor saved here) is not started at boot: it waits, and starts once a token is
saved. The platform must be enabled in config.yml: the rest of its section (the allowlist,
webhook mode, the Discord addresses) is read from there. With several processes on one
PostgreSQL database, a token saved in one reaches the others through the change feed (topic
`settings`): each reconnects its own channel with it, without trying it again. The token is a
secret: added to the log scrubber, never answered back unmasked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from bruce_bot import platforms
from bruce_bot.channels.base import ChannelAdapter, InboxPort
from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import ChannelsConfig
from bruce_bot.platforms import BotIdentity, PlatformSection
from bruce_bot.settings.llm import mask
from bruce_bot.settings.override import Current, Override, Source, changed_elsewhere
from bruce_bot.storage.changes import Refresh
from bruce_bot.storage.settings import SettingsStore

log = structlog.get_logger(__name__)


def token_setting(channel: str) -> str:
    """Where a platform's bot token saved in the dashboard is kept."""
    return f"channels.{channel}.token"


PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class TokenView:
    value: str  # masked
    source: Source


async def try_token(channel: str, configured: ChannelsConfig, token: str) -> BotIdentity:
    """Log in with `token` (config.yml's section otherwise); ProbeError with the platform's
    words when it refuses, or when it does not answer within `PROBE_TIMEOUT_SECONDS`."""
    spec = platforms.get(channel)
    if not token:
        raise ProbeError("no token", spec.token_help)
    section = configured.with_token(channel, token).section(channel)
    return await spec.identity(section, PROBE_TIMEOUT_SECONDS)


def build_adapter(channel: str, section: PlatformSection) -> ChannelAdapter:
    """A new adapter of `channel` for `section` (its SDK imported only here, when needed)."""
    adapter: ChannelAdapter = platforms.get(channel).build_adapter(section)
    return adapter


def _token(value: Any) -> str:
    token = str(value)
    if not token:
        raise ValueError("an empty token")
    return token


@dataclass(frozen=True, slots=True)
class Connector:
    """How a token is tried and an adapter built with it: the platform's (platforms.py), or a
    test's stand-ins."""

    probe: Callable[[str], Awaitable[BotIdentity]]
    build: Callable[[str], ChannelAdapter]

    @classmethod
    def of(cls, channel: str, configured: ChannelsConfig) -> Connector:
        return cls(
            lambda token: try_token(channel, configured, token),
            lambda token: build_adapter(
                channel, configured.with_token(channel, token).section(channel)
            ),
        )


class AdapterSlot:
    """Where one platform's adapter is: the channel map the outbox and the media step share,
    and the list of adapters Bruce starts and stops. A token change replaces it here, and only
    here (absent from the map: the platform is not enabled in config.yml)."""

    def __init__(
        self, channel: str, channels: dict[str, ChannelAdapter], adapters: list[ChannelAdapter]
    ) -> None:
        self.channel = channel
        self._channels = channels
        self._adapters = adapters

    @property
    def filled(self) -> bool:
        return self.channel in self._channels

    @property
    def adapter(self) -> ChannelAdapter:
        return self._channels[self.channel]

    def replace(self, adapter: ChannelAdapter) -> ChannelAdapter:
        """Put `adapter` in the old one's place; the old one."""
        old = self._channels[self.channel]
        self._channels[self.channel] = adapter
        self._adapters[self._adapters.index(old)] = adapter
        return old


class PlatformToken:
    """The token of one platform channel (see the module docstring)."""

    def __init__(
        self,
        configured: ChannelsConfig,
        store: SettingsStore,
        slot: AdapterSlot,
        *,
        prepare: Callable[[ChannelAdapter], None] = lambda _adapter: None,
        secret_seen: Callable[[str], None] = lambda _secret: None,
        connector: Connector | None = None,
    ) -> None:
        self.channel = slot.channel
        self._section = configured.section(self.channel)
        self._store = store
        self._slot = slot
        self._prepare = prepare  # give a new adapter the ports the first one was given
        self._secret_seen = secret_seen
        self._connector = connector or Connector.of(self.channel, configured)
        self._inbox: InboxPort | None = None
        self._running = False  # the adapter in the map was started
        self.in_use = self._section.token  # the token of the adapter in the map
        self._lock = asyncio.Lock()  # one reconnect at a time (the API, the change feed)
        self.following = Refresh(self._follow, f"{self.channel}-token-follow")
        self._override = Override(
            token_setting(self.channel), self._section.token, _token, apply=self.following
        )

    @property
    def available(self) -> bool:
        """Enabled in config.yml (so its adapter is in the channel map)."""
        return self._slot.filled

    @property
    def waiting(self) -> bool:
        """Enabled, but without a token yet: not started until one is saved."""
        return self.available and not self.in_use

    async def _current(self) -> Current[str]:
        current = await self._override.current(self._store)
        if current.source == "dashboard":
            self._secret_seen(current.value)
        return current

    async def current(self) -> str:
        """The token to use: the dashboard's, else config.yml's."""
        return (await self._current()).value

    async def view(self) -> TokenView:
        current = await self._current()
        return TokenView(mask(current.value), current.source)

    async def load(self) -> None:
        """Before the channels start: a token saved in the dashboard replaces config.yml's."""
        current = await self._current()
        if current.source == "dashboard" and self.available and current.value != self.in_use:
            self._slot.replace(self._build(current.value))
            self.in_use = current.value

    def started(self, inbox: InboxPort) -> None:
        """The channels were started (the waiting one was not): later tokens reconnect."""
        self._inbox = inbox
        self._running = self.available and not self.waiting

    async def change(self, token: str) -> BotIdentity:
        """Try `token`, store it and reconnect; who it logs in as. ProbeError (nothing stored,
        the old channel kept) when the platform says no."""
        if not self.available:
            raise ProbeError(
                f"{platforms.get(self.channel).title} is not enabled",
                f"set channels.{self.channel}.enabled: true in config.yml and restart once",
            )
        bot = await self._connector.probe(token)
        self._secret_seen(token)
        await self._override.save(self._store, token)  # config.yml's: follows the file again
        await self._reconnect(token)
        log.info("channel_token_changed", channel=self.channel, bot=bot.name)
        return bot

    async def reset(self) -> None:
        await self._override.reset(self._store)
        if self.available:
            await self._reconnect(self._section.token)

    def changed_elsewhere(self, key: str) -> None:
        """A change-feed notice of the `settings` topic: another process may have saved (or
        reset) this token; reconnect when it differs from the one in use."""
        if self.available:
            changed_elsewhere([self._override], key)

    async def _follow(self) -> None:
        token = await self.current()
        if token != self.in_use and self._inbox is not None:
            log.info("channel_token_changed_elsewhere", channel=self.channel)
            await self._reconnect(token)

    def _build(self, token: str) -> ChannelAdapter:
        adapter = self._connector.build(token)
        self._prepare(adapter)
        return adapter

    async def _reconnect(self, token: str) -> None:
        async with self._lock:
            if token == self.in_use and (self._running or not token):
                return  # already in use (e.g. the notice of a change this process made)
            new = self._build(token)
            old = self._slot.adapter
            if self._running:
                for step in (old.stop, old.close):
                    try:
                        await step()
                    except Exception as exc:  # the old token may already be refused: go on
                        log.warning(
                            "channel_old_adapter_stop_failed",
                            channel=self.channel,
                            error=repr(exc),
                        )
            self._slot.replace(new)
            self.in_use = token
            self._running = False
            if self._inbox is not None and token:
                await new.start(self._inbox)
                self._running = True
                log.info("channel_started", channel=self.channel, live=True)


class PlatformTokens:
    """The token of each platform channel, by name."""

    def __init__(self, tokens: dict[str, PlatformToken]) -> None:
        self._tokens = tokens

    def __getitem__(self, channel: str) -> PlatformToken:
        return self._tokens[channel]

    def get(self, channel: str) -> PlatformToken | None:
        return self._tokens.get(channel)

    def all(self) -> list[PlatformToken]:
        return list(self._tokens.values())

    def waiting(self) -> set[str]:
        """The channels enabled without a token (not started at boot)."""
        return {name for name, token in self._tokens.items() if token.waiting}

    async def load(self) -> None:
        for token in self._tokens.values():
            await token.load()

    def started(self, inbox: InboxPort) -> None:
        for token in self._tokens.values():
            token.started(inbox)

    def changed_elsewhere(self, key: str) -> None:
        for token in self._tokens.values():
            token.changed_elsewhere(key)
