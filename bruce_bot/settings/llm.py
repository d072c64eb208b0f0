"""The LLM settings the dashboard changes while Bruce runs: provider, model, background model,
base URL and API key.

Each is stored under `llm.<name>` in the `settings` table and wins over `llm.<name>` of
config.yml; resetting drops them all, back to the YAML. A change is tried first (one call of one
output token with the new settings): when the provider refuses it, nothing is stored and the
provider's own words are the error; when it answers, the values are stored and a new client is
put behind the `SwitchableLLM` every part holds, so the next call uses it, without a restart.
The API key is a secret: it is added to the log scrubber as soon as it is read or saved, and it
leaves this module only masked (`sk-…abcd`). It goes only where it was saved for: settings that
change the provider or the base URL (the server the key would be sent to, `destination`) drop
it unless a key is typed with them, and need one typed when the new server cannot do without
(`KeyNeeded`); a keyless local server is tried without any. With several processes on one
PostgreSQL database, a change saved in one reaches the others through the change feed (topic
`settings`): each reads the stored values again and builds its own new client, without trying
them again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from pydantic import ValidationError

from bruce_bot.config import LLMConfig
from bruce_bot.llm.base import LLMAuthenticationError, LLMError, LLMService
from bruce_bot.llm.factory import create_llm
from bruce_bot.llm.lazy import LazyLLM
from bruce_bot.llm.model_list import ANTHROPIC_URL, OPENAI_URL
from bruce_bot.llm.probe import llm_failure, probe_llm
from bruce_bot.llm.switchable import SwitchableLLM
from bruce_bot.settings.override import Override, changed_elsewhere
from bruce_bot.storage.changes import Refresh
from bruce_bot.storage.settings import SettingsStore

log = structlog.get_logger(__name__)

# The LLM settings the dashboard changes, each stored as `llm.<field>` over config.yml's.
FIELDS = ("provider", "model", "background_model", "base_url", "api_key")
SECRET_FIELDS = frozenset({"api_key"})
# "default": config.yml does not set it, the schema's default is in use.
FieldSource = Literal["config", "dashboard", "default"]


def setting_key(field: str) -> str:
    """Where an LLM field saved in the dashboard is kept."""
    return f"llm.{field}"


def mask(secret: str) -> str:
    """`sk-…abcd`: enough to tell two keys apart, never enough to use one."""
    if not secret:
        return ""
    if len(secret) < 12:
        return "…" + secret[-2:]
    return f"{secret[:3]}…{secret[-4:]}"


class SettingsRefused(Exception):
    """The new settings were not saved; the message says why (the provider's words)."""


class KeyNeeded(SettingsRefused):
    """The settings name another server than the saved key's, and no key was typed for it."""


def server_url(provider: str, base_url: str | None) -> str:
    """The server a provider's calls go to: the base URL, else the provider's own."""
    default = ANTHROPIC_URL if provider == "anthropic" else OPENAI_URL
    return (base_url or default).rstrip("/")


def destination(settings: LLMConfig) -> tuple[str, str]:
    """Where settings send their key: the provider and its server."""
    return settings.provider, server_url(settings.provider, settings.base_url)


def key_needed(provider: str, url: str, kept_for: str) -> KeyNeeded:
    return KeyNeeded(
        f"api_key: type the API key for {url} (the saved key is sent only to {kept_for}, the "
        f"server it was saved for; {provider} at {url} needs a key of its own)"
    )


@dataclass(frozen=True, slots=True)
class FieldView:
    """One setting as the dashboard shows it: secrets masked, with where the value comes from."""

    name: str
    value: str | None
    source: FieldSource
    config_value: str | None
    secret: bool


def _as_text(value: Any) -> str | None:
    return None if value is None else str(value)


class LLMSettings:
    def __init__(
        self,
        configured: LLMConfig,
        store: SettingsStore,
        llm: SwitchableLLM,
        *,
        probe: Callable[[LLMConfig], Awaitable[None]] = probe_llm,
        build: Callable[[LLMConfig], LLMService] = create_llm,
        secret_seen: Callable[[str], None] = lambda _secret: None,
    ) -> None:
        self._configured = configured
        self._store = store
        self._llm = llm
        self._probe = probe
        self._build = build
        self._secret_seen = secret_seen
        self.following = Refresh(self._follow, "llm-settings-follow")
        # One override a field; a change of any (in another process) rebuilds the client once.
        self._fields = {
            name: Override(
                setting_key(name), _as_text(getattr(configured, name)), str, apply=self.following
            )
            for name in FIELDS
        }

    def _explicit(self, name: str) -> bool:
        """Whether config.yml sets the field (else its default is in use, shown as such)."""
        return name in self._configured.model_fields_set

    async def _stored(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for name, override in self._fields.items():
            current = await override.current(self._store)
            if current.source == "dashboard" and current.value is not None:
                found[name] = current.value
                if name in SECRET_FIELDS:
                    self._secret_seen(current.value)
        return found

    def _merged(self, values: Mapping[str, str | None]) -> LLMConfig:
        try:
            return self._configured.with_values(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'llm'}: {error['msg']}"
                for error in exc.errors()
            )
            raise SettingsRefused(problems) from None

    async def effective(self) -> LLMConfig:
        """The settings in use: the dashboard's values over config.yml's."""
        return self._merged(await self._stored())

    async def view(self) -> list[FieldView]:
        stored = await self._stored()
        views = []
        for name in FIELDS:
            configured = _as_text(getattr(self._configured, name))
            value = stored.get(name, configured)
            source: FieldSource = (
                "dashboard" if name in stored else "config" if self._explicit(name) else "default"
            )
            secret = name in SECRET_FIELDS
            views.append(
                FieldView(
                    name,
                    mask(value or "") if secret else value,
                    source,
                    mask(configured or "") if secret else configured,
                    secret,
                )
            )
        return views

    async def sources(self) -> dict[str, FieldSource]:
        """Where each field in use comes from."""
        return {view.name: view.source for view in await self.view()}

    async def candidate(self, changes: Mapping[str, str | None]) -> LLMConfig:
        """The settings `changes` would give (a missing or empty key keeps the current one,
        only for the same server: `KeyNeeded` when another one needs a key)."""
        return (await self.trial(changes))[0]

    async def trial(self, changes: Mapping[str, str | None]) -> tuple[LLMConfig, str | None]:
        """`candidate`'s settings, and the server the saved key was kept for when it was left
        out of them (another server, no key typed: tried without one), else None."""
        stored = await self._stored()
        current = self._merged(stored)
        values: dict[str, str | None] = dict(stored)
        for name, value in changes.items():
            if name in SECRET_FIELDS and not value:
                continue  # write-only: the page never has it, so "empty" means "keep"
            values[name] = value
        settings = self._merged(values)
        if changes.get("api_key") or destination(settings) == destination(current):
            return settings, None
        if not settings.api_key:
            return settings, None
        # Another server: the saved key stays home; a local server may need none.
        kept_for = destination(current)[1]
        settings = self._merged({**values, "api_key": ""})
        if not settings.is_configured:
            raise key_needed(settings.provider, destination(settings)[1], kept_for)
        return settings, kept_for

    async def test(self, settings: LLMConfig, *, withheld_for: str | None = None) -> None:
        """One tiny call with `settings`; SettingsRefused with the provider's words (KeyNeeded
        when the saved key, kept for `withheld_for`, was left out and the server refused)."""
        if not settings.is_configured:
            raise SettingsRefused(
                "no API key: paste the provider's key (a local OpenAI-compatible server needs "
                "a base URL instead)"
            )
        try:
            await self._probe(settings)
        except LLMError as exc:
            words = llm_failure(exc)
            if withheld_for is not None and isinstance(exc, LLMAuthenticationError):
                refusal = key_needed(settings.provider, destination(settings)[1], withheld_for)
                raise KeyNeeded(f"{refusal}; asked without a key, it said: {words}") from None
            raise SettingsRefused(words) from None

    async def save(self, changes: Mapping[str, str | None]) -> LLMConfig:
        """Try `changes`, then store them and use them from the next call on."""
        settings, withheld_for = await self.trial(changes)
        await self.test(settings, withheld_for=withheld_for)
        for name in FIELDS:
            value = getattr(settings, name)
            if name in SECRET_FIELDS and value:
                self._secret_seen(str(value))
            # A value the same as config.yml's is not kept: the field follows the file again.
            await self._fields[name].save(self._store, value)
        await self._use(settings)
        log.info("llm_settings_saved", provider=settings.provider, model=settings.model)
        return settings

    async def reset(self) -> LLMConfig:
        """Back to config.yml's settings."""
        for override in self._fields.values():
            await override.reset(self._store)
        await self._use(self._configured)
        return self._configured

    async def load(self) -> None:
        """At start: the dashboard's stored settings, if any, replace config.yml's. Stored
        values that no longer make a valid config are ignored (and logged), not fatal."""
        stored = await self._stored()
        if not stored:
            return
        try:
            settings = self._merged(stored)
        except SettingsRefused as exc:
            log.warning("llm_settings_ignored", error=str(exc))
            return
        await self._use(settings)

    def changed_elsewhere(self, key: str) -> None:
        """A change-feed notice of the `settings` topic: when it names an LLM setting (or
        anything), read them again and switch to what they make now."""
        changed_elsewhere(self._fields.values(), key)

    async def _follow(self) -> None:
        stored = await self._stored()
        try:
            settings = self._merged(stored) if stored else self._configured
        except SettingsRefused as exc:
            log.warning("llm_settings_ignored", error=str(exc))
            return
        if settings != self._llm.config:
            log.info(
                "llm_settings_changed_elsewhere", provider=settings.provider, model=settings.model
            )
        await self._use(settings)

    async def _use(self, settings: LLMConfig) -> None:
        if settings == self._llm.config:
            return
        build = self._build
        await self._llm.switch(LazyLLM(lambda: build(settings), settings.model), settings)
