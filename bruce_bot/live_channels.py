"""A chat platform's bot token changed while Bruce runs: tried first with the platform's probe
(bruce_bot/platforms.py: Telegram `getMe`, Discord's REST login), stored under
`channels.<name>.token` in `settings` (it wins over config.yml), and the channel reconnected with
it, without a restart.

One `LiveToken` per platform channel enabled in config.yml. The running adapter stops taking
messages and is closed; a new one, built from config.yml's section with the new token and given
the same ports (pairing, the live allowlist), starts and takes its place in the channel map the
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

import structlog

from bruce_bot import platforms
from bruce_bot.channels.base import ChannelAdapter, InboxPort
from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import ChannelsConfig
from bruce_bot.platforms import BotIdentity, PlatformSection
from bruce_bot.settings.llm import mask
from bruce_bot.storage.changes import EVERYTHING, Refresh
from bruce_bot.storage.settings import SettingsStore, token_setting

log = structlog.get_logger(__name__)

PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class TokenView:
    value: str  # masked
    source: str  # config | dashboard


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


class LiveToken:
    """The token of one platform channel (see the module docstring)."""

    def __init__(
        self,
        channel: str,
        configured: ChannelsConfig,
        store: SettingsStore,
        channels: dict[str, ChannelAdapter],
        adapters: list[ChannelAdapter],
        *,
        prepare: Callable[[ChannelAdapter], None] = lambda _adapter: None,
        secret_seen: Callable[[str], None] = lambda _secret: None,
        probe: Callable[[str], Awaitable[BotIdentity]] | None = None,
        build: Callable[[str], ChannelAdapter] | None = None,
    ) -> None:
        self.channel = channel
        self._configured = configured
        self._section = configured.section(channel)
        self._key = token_setting(channel)
        self._store = store
        self._channels = channels
        self._adapters = adapters
        self._prepare = prepare  # give a new adapter the ports the first one was given
        self._secret_seen = secret_seen
        self._probe = probe or (lambda token: try_token(channel, configured, token))
        self._build_for = build or (
            lambda token: build_adapter(
                channel, configured.with_token(channel, token).section(channel)
            )
        )
        self._inbox: InboxPort | None = None
        self._running = False  # the adapter in the map was started
        self.in_use = self._section.token  # the token of the adapter in the map
        self._lock = asyncio.Lock()  # one reconnect at a time (the API, the change feed)
        self.following = Refresh(self._follow, f"{channel}-token-follow")

    @property
    def available(self) -> bool:
        """Enabled in config.yml (so its adapter is in the channel map)."""
        return self.channel in self._channels

    @property
    def waiting(self) -> bool:
        """Enabled, but without a token yet: not started until one is saved."""
        return self.available and not self.in_use

    async def _stored(self) -> str | None:
        token = await self._store.get(self._key)
        if token:
            self._secret_seen(str(token))
        return str(token) if token else None

    async def current(self) -> str:
        """The token to use: the dashboard's, else config.yml's."""
        return await self._stored() or self._section.token

    async def view(self) -> TokenView:
        stored = await self._stored()
        token = stored or self._section.token
        return TokenView(mask(token), "dashboard" if stored else "config")

    async def load(self) -> None:
        """Before the channels start: a token saved in the dashboard replaces config.yml's."""
        stored = await self._stored()
        if stored and self.available and stored != self.in_use:
            self._replace(self._build(stored))
            self.in_use = stored

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
        bot = await self._probe(token)
        self._secret_seen(token)
        if token == self._section.token:
            await self._store.unset(self._key)
        else:
            await self._store.set(self._key, token)
        await self._reconnect(token)
        log.info("channel_token_changed", channel=self.channel, bot=bot.name)
        return bot

    async def reset(self) -> None:
        await self._store.unset(self._key)
        if self.available:
            await self._reconnect(self._section.token)

    def changed_elsewhere(self, key: str) -> None:
        """A change-feed notice of the `settings` topic: another process may have saved (or
        reset) this token; reconnect when it differs from the one in use."""
        if key not in (self._key, EVERYTHING) or not self.available:
            return
        self.following()

    async def _follow(self) -> None:
        token = await self.current()
        if token != self.in_use and self._inbox is not None:
            log.info("channel_token_changed_elsewhere", channel=self.channel)
            await self._reconnect(token)

    def _build(self, token: str) -> ChannelAdapter:
        adapter = self._build_for(token)
        self._prepare(adapter)
        return adapter

    def _replace(self, adapter: ChannelAdapter) -> ChannelAdapter:
        old = self._channels[self.channel]
        self._channels[self.channel] = adapter
        self._adapters[self._adapters.index(old)] = adapter
        return old

    async def _reconnect(self, token: str) -> None:
        async with self._lock:
            if token == self.in_use and (self._running or not token):
                return  # already in use (e.g. the notice of a change this process made)
            new = self._build(token)
            old = self._channels[self.channel]
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
            self._replace(new)
            self.in_use = token
            self._running = False
            if self._inbox is not None and token:
                await new.start(self._inbox)
                self._running = True
                log.info("channel_started", channel=self.channel, live=True)


class LiveTokens:
    """The live token of each platform channel, by name."""

    def __init__(self, tokens: dict[str, LiveToken]) -> None:
        self._tokens = tokens

    def __getitem__(self, channel: str) -> LiveToken:
        return self._tokens[channel]

    def get(self, channel: str) -> LiveToken | None:
        return self._tokens.get(channel)

    def all(self) -> list[LiveToken]:
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
