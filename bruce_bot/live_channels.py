"""A Telegram bot token changed while Bruce runs: tried with `getMe`, stored under
`channels.telegram.token` in `settings` (it wins over config.yml), and the channel reconnected
with it, without a restart.

The running adapter stops taking updates and is closed; a new one, built from config.yml's
Telegram section with the new token and given the same pairing port, starts and takes its place
in the channel map the outbox and the media step share, so replies go out through it. A token
Telegram refuses is not stored and the old channel keeps running. The token is a secret: added
to the log scrubber, never answered back unmasked. Telegram must be enabled in config.yml (the
rest of its section, e.g. the allowlist or webhook mode, is read from there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from bruce_bot.channels.base import ChannelAdapter, InboxPort
from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import TelegramConfig
from bruce_bot.live_llm import mask
from bruce_bot.storage.settings import SettingsStore

log = structlog.get_logger(__name__)

TELEGRAM_TOKEN_SETTING = "channels.telegram.token"
PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class TokenView:
    value: str  # masked
    source: str  # config | dashboard


class LiveTelegramToken:
    def __init__(
        self,
        configured: TelegramConfig,
        store: SettingsStore,
        channels: dict[str, ChannelAdapter],
        adapters: list[ChannelAdapter],
        *,
        prepare: Callable[[ChannelAdapter], None] = lambda _adapter: None,
        secret_seen: Callable[[str], None] = lambda _secret: None,
    ) -> None:
        self._configured = configured
        self._store = store
        self._channels = channels
        self._adapters = adapters
        self._prepare = prepare  # e.g. give the new adapter the pairing port
        self._secret_seen = secret_seen
        self._inbox: InboxPort | None = None

    @property
    def available(self) -> bool:
        return "telegram" in self._channels

    async def _stored(self) -> str | None:
        token = await self._store.get(TELEGRAM_TOKEN_SETTING)
        if token:
            self._secret_seen(str(token))
        return str(token) if token else None

    async def view(self) -> TokenView:
        stored = await self._stored()
        token = stored or self._configured.token
        return TokenView(mask(token), "dashboard" if stored else "config")

    async def load(self) -> None:
        """Before the channels start: a token saved in the dashboard replaces config.yml's."""
        stored = await self._stored()
        if stored and self.available and stored != self._configured.token:
            self._replace(self._build(stored))

    def started(self, inbox: InboxPort) -> None:
        self._inbox = inbox

    async def change(self, token: str) -> str:
        """Try `token` with getMe, store it and reconnect; the bot's @name. ProbeError (nothing
        stored, the old channel kept) when Telegram says no."""
        if not self.available:
            raise ProbeError(
                "Telegram is not enabled",
                "set channels.telegram.enabled: true in config.yml and restart once",
            )
        from bruce_bot.channels.telegram_probe import telegram_bot_name

        config = self._configured.model_copy(update={"token": token})
        name = await telegram_bot_name(config, PROBE_TIMEOUT_SECONDS)
        self._secret_seen(token)
        if token == self._configured.token:
            await self._store.unset(TELEGRAM_TOKEN_SETTING)
        else:
            await self._store.set(TELEGRAM_TOKEN_SETTING, token)
        await self._reconnect(token)
        log.info("telegram_token_changed", bot=name)
        return name

    async def reset(self) -> None:
        await self._store.unset(TELEGRAM_TOKEN_SETTING)
        if self.available:
            await self._reconnect(self._configured.token)

    def _build(self, token: str) -> ChannelAdapter:
        from bruce_bot.channels.telegram import TelegramChannel

        adapter = TelegramChannel(self._configured.model_copy(update={"token": token}))
        self._prepare(adapter)
        return adapter

    def _replace(self, adapter: ChannelAdapter) -> ChannelAdapter:
        old = self._channels["telegram"]
        self._channels["telegram"] = adapter
        self._adapters[self._adapters.index(old)] = adapter
        return old

    async def _reconnect(self, token: str) -> None:
        new = self._build(token)
        old = self._channels["telegram"]
        for step in (old.stop, old.close):
            try:
                await step()
            except Exception as exc:  # the old token may already be refused: go on
                log.warning("telegram_old_channel_stop_failed", error=repr(exc))
        self._replace(new)
        if self._inbox is not None:
            await new.start(self._inbox)
