"""The chat platforms Bruce speaks, as data: one `PlatformSpec` per platform, in one registry.

Everything that differs by platform is read from here: the config section under `channels:` and
its model, how its adapter is built, how a token is tried (`bruce doctor`, the dashboard's token
test and live token), the words that say where a token comes from, whether strangers can pair,
what the platform can show (buttons, drafts, edits, files), the SDK's standard-library
loggers, and the fields of its login (`SetupField`s: one bot token, or Matrix's homeserver, user
id and password) from which the dashboard's setup card and Settings draw their forms. Adding a
platform is a package under `channels/`, one entry in `BUILT_IN` (or a `register` call), and its
tests (docs/architecture.md).

The module imports nothing of Bruce's: a spec names its section model, adapter and probe as
`"module:attribute"` references, loaded only when needed, so the core never imports a platform
SDK and config validation can read the registry without an import cycle. A test may pass the
objects themselves instead of references.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Capability = Literal["buttons", "drafts", "edits", "files"]


class PlatformSection(Protocol):
    """What Bruce reads of any platform's config section (`channels.<name>`)."""

    @property
    def enabled(self) -> bool: ...

    @property
    def token(self) -> str: ...

    @property
    def allowed_user_ids(self) -> Sequence[int | str]: ...  # Matrix's ids are text

    @property
    def pairing(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class TextUserIds:
    """A platform whose user ids are text: their shape, and how one looks in words (said when
    an entry of an allowlist is not one)."""

    pattern: str  # a regular expression an id matches whole
    looks_like: str  # 'looks like "@alice:example.org": @, the name, a colon, the homeserver'
    flags: int = 0  # re flags of `pattern`

    def matches(self, text: str) -> bool:
        return re.fullmatch(self.pattern, text, self.flags) is not None


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who a token logs in as: the bot's name and the link to it (t.me/<bot>, Discord's invite
    URL; None when the platform gave none)."""

    name: str
    link: str | None = None


# (the section with the token to try, a timeout in seconds) -> who it is; raises
# channels.probe.ProbeError in the platform's words when it refuses or cannot be reached.
Identify = Callable[[Any, float], Awaitable[BotIdentity]]


@dataclass(frozen=True, slots=True)
class SetupField:
    """One field of a platform's login, as the dashboard asks for it: `key` is its key in the
    platform's config section (`channels.<name>.<key>`). A secret one is never answered back
    (only masked) and is scrubbed from the logs; an optional one may stay empty (Matrix takes a
    password or an access token: its section's validation says which is missing)."""

    key: str
    label: str
    secret: bool = False
    placeholder: str = ""
    help: str = ""
    optional: bool = False


# The login of most platforms: one bot token (`channels.<name>.token`).
BOT_TOKEN: tuple[SetupField, ...] = (SetupField("token", "Bot token", secret=True),)


def load(reference: Any) -> Any:
    """`"package.module:attribute"` imported; anything else is already the object."""
    if not isinstance(reference, str):
        return reference
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True, slots=True)
class PlatformSpec:
    name: str  # the section under `channels:`, and the channel's name in sessions and logs
    title: str  # as a person writes it: "Telegram"
    section: Any  # its config model (a pydantic section), or a reference to it
    adapter: Any  # section -> its ChannelAdapter, or a reference to that callable
    identify: Any  # an `Identify`, or a reference to one
    token_help: str  # where a token comes from, said when none is given
    pairing: bool = True  # strangers may ask for a code the owner approves
    capabilities: frozenset[Capability] = frozenset()
    loggers: tuple[str, ...] = ()  # the SDK's chatty standard-library loggers
    # A private chat's id is the user's id (Telegram): the first allowed user can be told
    # things (the budget's warnings) without having written first.
    user_id_is_chat_id: bool = False
    text_user_ids: TextUserIds | None = None  # None: the ids are positive numbers
    # What logs it in, field by field (the dashboard's forms): a bot token unless said otherwise.
    login: tuple[SetupField, ...] = BOT_TOKEN

    @property
    def single_token(self) -> bool:
        """Its login is one `token` (saved as `channels.<name>.token`), not several fields."""
        return tuple(field.key for field in self.login) == ("token",)

    def section_model(self) -> type[Any]:
        model: type[Any] = load(self.section)
        return model

    def build_adapter(self, section: Any) -> Any:
        """A new adapter on `section` (its SDK is imported only now)."""
        return load(self.adapter)(section)

    async def identity(self, section: Any, timeout_seconds: float) -> BotIdentity:
        identify: Identify = load(self.identify)
        return await identify(section, timeout_seconds)


MATRIX_USER_IDS = TextUserIds(
    r"@[a-z0-9._=\-/+]+:[A-Za-z0-9.\-\[\]:]+",
    'looks like "@alice:example.org": @, the name, a colon, the homeserver',
    re.IGNORECASE,
)
SLACK_USER_IDS = TextUserIds(
    r"[UW][A-Z0-9]{6,}",
    "looks like U012ABCDEF (in Slack: the person's profile → ⋮ → Copy member ID)",
)

BUILT_IN: tuple[PlatformSpec, ...] = (
    PlatformSpec(
        name="telegram",
        title="Telegram",
        section="bruce_bot.config:TelegramConfig",
        adapter="bruce_bot.channels.telegram.channel:TelegramChannel",
        identify="bruce_bot.channels.telegram.probe:identify",
        token_help="paste the token @BotFather gave you",
        capabilities=frozenset({"buttons", "drafts", "edits", "files"}),
        loggers=("telegram",),
        user_id_is_chat_id=True,
    ),
    PlatformSpec(
        name="discord",
        title="Discord",
        section="bruce_bot.config:DiscordConfig",
        adapter="bruce_bot.channels.discord.channel:DiscordChannel",
        identify="bruce_bot.channels.discord.probe:identify",
        token_help="paste the bot token of your application (Developer Portal)",
        capabilities=frozenset({"buttons", "edits", "files"}),
        loggers=("discord",),
    ),
    PlatformSpec(
        name="matrix",
        title="Matrix",
        section="bruce_bot.config.matrix:MatrixConfig",
        adapter="bruce_bot.channels.matrix.channel:MatrixChannel",
        identify="bruce_bot.channels.matrix.probe:identify",
        token_help="set channels.matrix.password (or an access_token) of Bruce's Matrix account",
        capabilities=frozenset({"edits", "files"}),
        loggers=("nio",),
        text_user_ids=MATRIX_USER_IDS,
        login=(
            SetupField(
                "homeserver",
                "Homeserver",
                placeholder="https://matrix.example.org",
                help="the client-server API's base URL of Bruce's account",
            ),
            SetupField("user_id", "User id", placeholder="@bruce:example.org"),
            SetupField(
                "password",
                "Password",
                secret=True,
                optional=True,
                help="logs in once and keeps the device; or give an access token instead",
            ),
            SetupField(
                "access_token",
                "Access token",
                secret=True,
                optional=True,
                placeholder="syt_…",
                help="used instead of the password when given",
            ),
        ),
    ),
    PlatformSpec(
        name="slack",
        title="Slack",
        section="bruce_bot.config.slack:SlackConfig",
        adapter="bruce_bot.channels.slack.channel:SlackChannel",
        identify="bruce_bot.channels.slack.probe:identify",
        token_help="paste the Bot User OAuth Token (xoxb-...) of your Slack app",
        capabilities=frozenset({"buttons", "edits", "files"}),
        loggers=("slack_sdk",),
        text_user_ids=SLACK_USER_IDS,
        login=(
            SetupField(
                "bot_token",
                "Bot token",
                secret=True,
                placeholder="xoxb-…",
                help="OAuth & Permissions → Bot User OAuth Token",
            ),
            SetupField(
                "app_token",
                "App-level token",
                secret=True,
                optional=True,
                placeholder="xapp-…",
                help="Basic Information → App-Level Tokens (connections:write), for Socket "
                "Mode; not needed with the Events API",
            ),
        ),
    ),
)

_registry: dict[str, PlatformSpec] = {spec.name: spec for spec in BUILT_IN}


def platforms() -> tuple[PlatformSpec, ...]:
    """Every platform, in the order they were registered."""
    return tuple(_registry.values())


def names() -> tuple[str, ...]:
    return tuple(_registry)


def find(name: str) -> PlatformSpec | None:
    return _registry.get(name)


def get(name: str) -> PlatformSpec:
    """The platform called `name`; ValueError naming the known ones otherwise."""
    spec = _registry.get(name)
    if spec is None:
        raise ValueError(f"no platform {name!r}; the platforms are {', '.join(_registry)}")
    return spec


def register(spec: PlatformSpec) -> None:
    """Add a platform (a plug-in, or a test's); its name must be new."""
    if spec.name in _registry:
        raise ValueError(f"a platform {spec.name!r} is registered already")
    _registry[spec.name] = spec


def unregister(name: str) -> None:
    _registry.pop(name, None)


@contextmanager
def registered(spec: PlatformSpec) -> Iterator[PlatformSpec]:
    """`spec` registered for the duration of a `with` block (tests)."""
    register(spec)
    try:
        yield spec
    finally:
        unregister(spec.name)
