"""A chat platform's login changed while Bruce runs: tried first with the platform's probe
(bruce_bot/platforms.py: Telegram `getMe`, Discord's REST login, Matrix's login on the
homeserver), stored in `settings` (it wins over config.yml), and the channel reconnected with it,
without a restart.

A login is the fields of the platform's spec (`PlatformSpec.login`): one bot token for most,
kept under `channels.<name>.token`; several for Matrix (homeserver, user id, password or access
token), kept together as one object under `channels.<name>.login`, so a change is never half
applied. One `PlatformToken` per platform, an `Override` of those fields of its section. The
running adapter stops taking messages and is closed; a new one, built from config.yml's section
with the new login and given the same ports (pairing, the allowlist), starts and takes its place
(`AdapterSlot`: the one place that replaces it) in the channel map the
outbox and the media step share, so replies go out through it. A login the platform refuses (or
its section's validation) is not stored and the old channel keeps running. A channel enabled in
config.yml without a token (neither there nor saved here) is not started at boot: it waits, and
starts once a login is saved. The platform must be enabled in config.yml: the rest of its section
(the allowlist, webhook mode, the Discord addresses) is read from there. With several processes
on one PostgreSQL database, a login saved in one reaches the others through the change feed
(topic `settings`): each reconnects its own channel with it, without trying it again. Its secret
fields are added to the log scrubber and never answered back unmasked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
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


Login = dict[str, str]  # a platform's login fields (`PlatformSpec.login`) by key


def token_setting(channel: str) -> str:
    """Where a platform's bot token saved in the dashboard is kept."""
    return f"channels.{channel}.token"


def login_setting(channel: str) -> str:
    """Where a platform's login saved in the dashboard is kept: its token's key for a one-token
    login, `channels.<name>.login` (one object) for a login of several fields."""
    spec = platforms.get(channel)
    return token_setting(channel) if spec.single_token else f"channels.{channel}.login"


PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class TokenView:
    value: str  # masked
    source: Source


@dataclass(frozen=True, slots=True)
class FieldView:
    """One login field as the dashboard shows it: a secret one only masked."""

    key: str
    value: str
    secret: bool


def login_of(channel: str, section: PlatformSection) -> Login:
    """The login fields of `section` (config.yml's, or one a login was applied to)."""
    return {
        field.key: str(getattr(section, field.key, "") or "")
        for field in platforms.get(channel).login
    }


def with_login(configured: ChannelsConfig, channel: str, login: Mapping[str, str]) -> Any:
    """`channel`'s section logging in with `login`; ValueError naming the keys when the
    section's validation refuses it (Matrix: a user id that is not one)."""
    if platforms.get(channel).single_token:
        return configured.with_token(channel, login["token"]).section(channel)
    return configured.with_login(channel, login).section(channel)


async def try_token(channel: str, configured: ChannelsConfig, token: str) -> BotIdentity:
    """Log in with `token` (config.yml's section otherwise); ProbeError with the platform's
    words when it refuses, or when it does not answer within `PROBE_TIMEOUT_SECONDS`."""
    spec = platforms.get(channel)
    if not token:
        raise ProbeError("no token", spec.token_help)
    section = configured.with_token(channel, token).section(channel)
    return await spec.identity(section, PROBE_TIMEOUT_SECONDS)


async def try_login(
    channel: str, configured: ChannelsConfig, login: Mapping[str, str]
) -> BotIdentity:
    """Log in with the fields of `login` over config.yml's section; ProbeError saying what is
    wrong (a field the section refuses, or the platform's words)."""
    spec = platforms.get(channel)
    try:
        section = with_login(configured, channel, login)
    except ValueError as exc:
        raise ProbeError(str(exc), f"correct the {spec.title} fields and save again") from None
    if not section.token:
        raise ProbeError("no token", spec.token_help)
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


def login_parser(channel: str) -> Callable[[Any], Login]:
    """A stored login back to its fields: a one-token login is kept as the token itself, a
    login of several fields as an object of them (ValueError for anything else)."""
    spec = platforms.get(channel)
    keys = [field.key for field in spec.login]
    if spec.single_token:
        return lambda value: {"token": _token(value)}

    def parse(value: Any) -> Login:
        if not isinstance(value, dict) or not set(value) <= set(keys):
            raise ValueError(f"not a login of {', '.join(keys)}")
        if not all(isinstance(text, str) for text in value.values()):
            raise ValueError("a login field that is not text")
        return {key: value.get(key, "") for key in keys}

    return parse


def login_dumper(channel: str) -> Callable[[Login], Any]:
    if platforms.get(channel).single_token:
        return lambda login: login["token"]
    return dict


@dataclass(frozen=True, slots=True)
class Connector:
    """How a login is tried and an adapter built with it: the platform's (platforms.py), or a
    test's stand-ins."""

    probe: Callable[[Login], Awaitable[BotIdentity]]
    build: Callable[[Login], ChannelAdapter]

    @classmethod
    def of(cls, channel: str, configured: ChannelsConfig) -> Connector:
        return cls(
            lambda login: try_login(channel, configured, login),
            lambda login: build_adapter(channel, with_login(configured, channel, login)),
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
    """The login of one platform channel (see the module docstring)."""

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
        self.spec = platforms.get(self.channel)
        self._configured = configured
        self._section = configured.section(self.channel)
        self._store = store
        self._slot = slot
        self._prepare = prepare  # give a new adapter the ports the first one was given
        self._secret_seen = secret_seen
        self._connector = connector or Connector.of(self.channel, configured)
        self._inbox: InboxPort | None = None
        self._running = False  # the adapter in the map was started
        self.in_use = login_of(self.channel, self._section)  # the login of the adapter in the map
        self._lock = asyncio.Lock()  # one reconnect at a time (the API, the change feed)
        self.following = Refresh(self._follow, f"{self.channel}-token-follow")
        self._override = Override(
            login_setting(self.channel),
            dict(self.in_use),
            login_parser(self.channel),
            login_dumper(self.channel),
            apply=self.following,
        )

    @property
    def available(self) -> bool:
        """Enabled in config.yml (so its adapter is in the channel map)."""
        return self._slot.filled

    @property
    def waiting(self) -> bool:
        """Enabled, but without a token yet: not started until one is saved."""
        return self.available and not self._secret(self.in_use)

    def _secret(self, login: Login) -> str:
        """The secret that logs in (the section's `token`; empty: none, or a login the
        section refuses)."""
        try:
            return str(with_login(self._configured, self.channel, login).token)
        except ValueError:
            return ""

    def _seen(self, login: Mapping[str, str]) -> None:
        for field in self.spec.login:
            if field.secret and login.get(field.key):
                self._secret_seen(login[field.key])

    async def _current(self) -> Current[Login]:
        current = await self._override.current(self._store)
        if current.source == "dashboard":
            self._seen(current.value)
        return current

    async def current(self) -> Login:
        """The login to use: the dashboard's, else config.yml's."""
        return (await self._current()).value

    async def view(self) -> TokenView:
        """The secret in use, masked (`/api/channels/<name>/token`)."""
        current = await self._current()
        return TokenView(mask(self._secret(current.value)), current.source)

    async def fields(self) -> tuple[list[FieldView], Source]:
        """Each login field in use, the secret ones masked, and where the login comes from."""
        current = await self._current()
        shown = [
            FieldView(field.key, mask(value) if field.secret else value, field.secret)
            for field in self.spec.login
            for value in (current.value.get(field.key, ""),)
        ]
        return shown, current.source

    async def load(self) -> None:
        """Before the channels start: a login saved in the dashboard replaces config.yml's."""
        current = await self._current()
        if current.source == "dashboard" and self.available and current.value != self.in_use:
            self._slot.replace(self._build(current.value))
            self.in_use = current.value

    def started(self, inbox: InboxPort) -> None:
        """The channels were started (the waiting one was not): later logins reconnect."""
        self._inbox = inbox
        self._running = self.available and not self.waiting

    async def change(self, token: str) -> BotIdentity:
        """A new bot token (a one-token login): see `change_login`."""
        return await self.change_login({"token": token})

    async def change_login(self, changes: Mapping[str, str]) -> BotIdentity:
        """Try the login in use with `changes` over it, store it and reconnect; who it logs
        in as. ProbeError (nothing stored, the old channel kept) when the section's validation
        or the platform says no."""
        if not self.available:
            raise ProbeError(
                f"{self.spec.title} is not enabled",
                f"set channels.{self.channel}.enabled: true in config.yml and restart once",
            )
        login = {**await self.current(), **changes}
        bot = await self._connector.probe(login)
        self._seen(login)
        await self._override.save(self._store, login)  # config.yml's: follows the file again
        await self._reconnect(login)
        log.info("channel_token_changed", channel=self.channel, bot=bot.name)
        return bot

    async def reset(self) -> None:
        await self._override.reset(self._store)
        if self.available:
            await self._reconnect(self._override.default)

    def changed_elsewhere(self, key: str) -> None:
        """A change-feed notice of the `settings` topic: another process may have saved (or
        reset) this login; reconnect when it differs from the one in use."""
        if self.available:
            changed_elsewhere([self._override], key)

    async def _follow(self) -> None:
        login = await self.current()
        if login != self.in_use and self._inbox is not None:
            log.info("channel_token_changed_elsewhere", channel=self.channel)
            await self._reconnect(login)

    def _build(self, login: Login) -> ChannelAdapter:
        adapter = self._connector.build(login)
        self._prepare(adapter)
        return adapter

    async def _stop(self, old: ChannelAdapter) -> None:
        for step in (old.stop, old.close):
            try:
                await step()
            except Exception as exc:  # the old login may already be refused: go on
                log.warning(
                    "channel_old_adapter_stop_failed", channel=self.channel, error=repr(exc)
                )

    async def _reconnect(self, login: Login) -> None:
        async with self._lock:
            secret = self._secret(login)
            if login == self.in_use and (self._running or not secret):
                return  # already in use (e.g. the notice of a change this process made)
            new = self._build(login)
            old = self._slot.adapter
            if self._running:
                await self._stop(old)
            self._slot.replace(new)
            self.in_use = dict(login)
            self._running = False
            if self._inbox is not None and secret:
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
