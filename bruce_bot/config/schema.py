"""The configuration's schema: one pydantic section per top-level key, forbidding unknown keys.

The key names are a public contract (docs/design.md). Fields holding a secret are marked
(`SecretText`, `Annotated[str, SECRET]`) and `Config.secrets` derives the log scrubber's list
from the marks. Checks across sections that need the whole config live in loading.py."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, cast
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import idna
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bruce_bot import platforms
from bruce_bot.config.token_strength import TOKEN_HOW_TO, token_weakness
from bruce_bot.platforms import PlatformSection, PlatformSpec

DEFAULT_CONFIG_FILE = "config.yml"
DEFAULT_SYSTEM_PROMPT = (
    "You are Bruce, a proactive personal AI assistant. You help your user get things done: you "
    "search the web, read pages, write reports and keep track of reminders. Be concise, concrete "
    "and honest: say plainly when you do not know something or could not do it."
)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class Secret:
    """Marks a config field whose value is a secret (`Annotated[str, SECRET]`): the log scrubber
    hides its value wherever it appears (`Config.secrets`); on a dict, every value is one."""

    def __repr__(self) -> str:
        return "SECRET"


SECRET = Secret()
SecretText = Annotated[str, SECRET]


def secret_values(model: BaseModel) -> list[str]:
    """The values of the fields marked `SECRET` in `model` and the sections inside it."""
    found: list[str] = []
    for extra in (model.__pydantic_extra__ or {}).values():  # a plug-in platform's section
        if isinstance(extra, BaseModel):
            found += secret_values(extra)
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        marked = any(isinstance(item, Secret) for item in field.metadata)
        if marked and isinstance(value, str):
            found.append(value)
        elif marked and isinstance(value, dict):
            found += [item for item in value.values() if isinstance(item, str)]
        inner = value.values() if isinstance(value, dict) else [value]
        for section in inner:
            if isinstance(section, BaseModel):
                found += secret_values(section)
    return found


class Section(BaseModel):
    """A config section: unknown keys refused, an empty value is the default. A plug-in
    platform's section (bruce_bot/platforms.py) is one too."""

    # Numbers are accepted for text keys so `auth_token: 123456` or a numeric `${TOKEN}` work.
    model_config = ConfigDict(extra="forbid", validate_default=True, coerce_numbers_to_str=True)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_means_default(cls, value: Any, info: ValidationInfo) -> Any:
        # `key:` with nothing after it loads as None in YAML; treat it as "use the default".
        if value is None and info.field_name is not None:
            return cls.model_fields[info.field_name].get_default(call_default_factory=True)
        return value


def _check_url(value: str | None, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    if value is None or value == "":
        return None
    parsed = urlparse(value)
    if parsed.scheme not in schemes or not parsed.netloc:
        expected = " or ".join(f"{scheme}://" for scheme in schemes)
        raise ValueError(
            f"is not a valid URL here; it must start with {expected} "
            f"(like {schemes[-1]}://host:port/path)"
        )
    return value.rstrip("/")


# ---- web_fetch domain lists ------------------------------------------------------------------

_DOMAIN_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def normalise_domain(value: str) -> str:
    """A bare domain as the fetcher compares it: lower case, no trailing dot, IDNA (punycode)."""
    domain = value.strip().lower().rstrip(".")
    if not domain.isascii():
        domain = idna.encode(domain).decode("ascii")
    return domain


def _bare_domain(value: str) -> str:
    hint = "write a bare domain like example.com (no scheme, port or path; subdomains are included)"
    text = value.strip()
    if "://" in text or any(mark in text for mark in "/:@?#* "):
        raise ValueError(f"is not a bare domain; {hint}")
    try:
        domain = normalise_domain(text)
    except (idna.IDNAError, UnicodeError):
        raise ValueError(f"is not a valid domain name; {hint}") from None
    labels = domain.split(".")
    if not domain or len(domain) > 253 or not all(_DOMAIN_LABEL.fullmatch(x) for x in labels):
        raise ValueError(f"is not a valid domain name; {hint}")
    return domain


DomainName = Annotated[str, AfterValidator(_bare_domain)]


class AppConfig(Section):
    name: str = "Bruce"
    timezone: str = "UTC"
    data_dir: Path = Path("./data")
    public_url: str = "http://127.0.0.1:8080"

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                "is not a known IANA timezone; use a name like America/Sao_Paulo, "
                "Europe/Berlin or UTC"
            ) from None
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        return _check_url(value) or "http://127.0.0.1:8080"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


class DatabaseConfig(Section):
    url: str = ""  # empty: SQLite under app.data_dir
    # PostgreSQL with several processes: how long a process's claim on a session (or on a reply
    # it is sending) lasts without renewal; a process that dies is taken over after this.
    lease_seconds: float = Field(default=30.0, ge=0.5, le=3600)

    @field_validator("url")
    @classmethod
    def _known_driver(cls, value: str) -> str:
        if value and not value.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            raise ValueError(
                "must start with sqlite+aiosqlite:/// (a file) or postgresql+asyncpg:// "
                "(user:password@host/db)"
            )
        return value


class ThinkingConfig(Section):
    """Extended thinking for models that support it (Anthropic); off by default."""

    enabled: bool = False
    budget_tokens: int = Field(default=4096, ge=1024)


class LLMConfig(Section):
    provider: Literal["anthropic", "openai"] = "anthropic"
    model: str = "claude-sonnet-4-6"
    background_model: str = ""  # empty: same as model
    api_key: SecretText = ""
    base_url: str | None = None
    max_tokens: int = Field(default=4096, ge=16)
    timeout_seconds: float = Field(default=120, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    context_window: int | None = Field(default=None, ge=1024)  # None: known per model
    thinking: ThinkingConfig = Field(default_factory=ThinkingConfig)
    # Whether the model is shown pictures: auto decides by the model's name (media/vision.py).
    vision: Literal["auto", "on", "off"] = "auto"
    # False for a server that cannot stream answers: live replies then show the whole answer
    # when it is ready (tool status lines still show).
    stream: bool = True
    # Tool calls the model writes into its text (models without native tool calling): read only
    # as the answer's tail, for offered tools, with no native call in the answer; auto stops
    # once the model has called a tool natively, off never reads them (llm/text_calls.py).
    text_tool_calls: Literal["auto", "on", "off"] = "auto"

    _check_base_url = field_validator("base_url")(classmethod(lambda cls, v: _check_url(v)))

    @field_validator("text_tool_calls", mode="before")
    @classmethod
    def _switch_words(cls, value: object) -> object:
        # YAML reads an unquoted on/off as a boolean: `text_tool_calls: off` means "off".
        if isinstance(value, bool):
            return "on" if value else "off"
        return value

    @model_validator(mode="after")
    def _thinking_fits(self) -> LLMConfig:
        if self.thinking.enabled and self.max_tokens <= self.thinking.budget_tokens:
            raise ValueError(
                f"llm.max_tokens ({self.max_tokens}) must be larger than "
                f"llm.thinking.budget_tokens ({self.thinking.budget_tokens}): the thinking is "
                "part of the reply. Raise max_tokens or lower budget_tokens."
            )
        return self

    def with_values(self, values: Mapping[str, Any]) -> LLMConfig:
        """These settings with `values` (e.g. the dashboard's) over them, validated (an empty
        base URL means none); pydantic's ValidationError when they do not fit."""
        data = {**self.model_dump(), **values}
        if data.get("base_url") == "":
            data["base_url"] = None
        return LLMConfig.model_validate(data)

    @property
    def effective_background_model(self) -> str:
        return self.background_model or self.model

    @property
    def is_configured(self) -> bool:
        # A local OpenAI-compatible server (Ollama, vLLM) usually needs no key.
        return bool(self.api_key) or (self.provider == "openai" and bool(self.base_url))


class AgentConfig(Section):
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_turns: int = Field(default=5, ge=1, le=50)
    history_max_messages: int = Field(default=40, ge=2)
    history_max_chars: int = Field(default=60_000, ge=1000)
    summary_keep_messages: int = Field(default=10, ge=0)
    max_concurrent_sessions: int = Field(default=8, ge=1)
    max_message_chars: int = Field(default=32_000, ge=100)
    tool_timeout_seconds: float = Field(default=60, gt=0)
    shutdown_timeout_seconds: float = Field(default=20, ge=0)


class TelegramWebhookConfig(Section):
    url: str | None = None
    listen: str = "127.0.0.1"
    port: int = Field(default=8443, ge=1, le=65535)
    secret_token: SecretText = ""

    _check_url = field_validator("url")(classmethod(lambda cls, v: _check_url(v)))


class TelegramConfig(Section):
    enabled: bool = False
    token: SecretText = ""
    base_url: str | None = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook: TelegramWebhookConfig = Field(default_factory=TelegramWebhookConfig)
    allowed_user_ids: list[int] = Field(default_factory=list)
    # A stranger gets a one-time code the owner approves (dashboard People, `bruce pairing`);
    # false: they are told once an hour to have their id added to allowed_user_ids.
    pairing: bool = True
    # Live replies: the answer shown while it is written (a draft in private chats, an edited
    # message in groups), a status line while tools run.
    streaming: bool = True

    _check_base_url = field_validator("base_url")(classmethod(lambda cls, v: _check_url(v)))


class DiscordConfig(Section):
    enabled: bool = False
    token: SecretText = ""
    api_base_url: str | None = None
    gateway_url: str | None = None
    allowed_user_ids: list[int] = Field(default_factory=list)
    pairing: bool = True  # strangers get a one-time code the owner approves (see telegram)
    streaming: bool = True  # live replies: one message edited as the answer is written

    _check_api = field_validator("api_base_url")(classmethod(lambda cls, v: _check_url(v)))
    _check_gateway = field_validator("gateway_url")(
        classmethod(lambda cls, v: _check_url(v, ("ws", "wss")))
    )


class ChannelsConfig(Section):
    """`channels:`, a section per platform of the registry (bruce_bot/platforms.py). The
    built-in platforms' sections are fields here, for typed access; any other registered
    platform's section is validated with the model its spec names, and an unknown name is an
    error listing the platforms."""

    model_config = ConfigDict(extra="allow", validate_default=True, coerce_numbers_to_str=True)

    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)

    @model_validator(mode="after")
    def _registered_platforms(self) -> ChannelsConfig:
        extra = self.__pydantic_extra__ if self.__pydantic_extra__ is not None else {}
        for name, raw in list(extra.items()):
            spec = platforms.find(name)
            if spec is None:
                known = platforms.names()
                guess = difflib.get_close_matches(name, known, n=1)
                hint = f"did you mean '{guess[0]}'? " if guess else ""
                raise ValueError(
                    f"unknown platform channels.{name}; {hint}the platforms: {', '.join(known)}"
                )
            try:
                extra[name] = spec.section_model().model_validate(raw or {})
            except ValidationError as exc:
                raise ValueError(_problems(name, exc)) from None
        for spec in platforms.platforms():  # registered, not in config.yml: its defaults
            if spec.name not in type(self).model_fields and spec.name not in extra:
                extra[spec.name] = spec.section_model()()
        return self

    def section(self, name: str) -> PlatformSection:
        """The section of platform `name` (its defaults when config.yml has none)."""
        if name in type(self).model_fields:
            found: PlatformSection = getattr(self, name)
            return found
        extra = self.__pydantic_extra__ or {}
        if name not in extra:
            return cast(PlatformSection, platforms.get(name).section_model()())
        return cast(PlatformSection, extra[name])

    def enabled(self) -> list[tuple[PlatformSpec, PlatformSection]]:
        """The platforms enabled in config.yml, with their sections."""
        found = [(spec, self.section(spec.name)) for spec in platforms.platforms()]
        return [(spec, section) for spec, section in found if section.enabled]

    def with_token(self, name: str, token: str) -> ChannelsConfig:
        """A copy whose platform `name` uses `token` (a token saved in the dashboard)."""
        section = cast(BaseModel, self.section(name)).model_copy(update={"token": token})
        return self._with_section(name, section)

    def with_login(self, name: str, login: Mapping[str, str]) -> ChannelsConfig:
        """A copy whose platform `name` logs in with `login` (its login fields, saved in the
        dashboard) over config.yml's section, checked as config.yml's is: ValueError naming
        the keys and what is wrong."""
        section = cast(BaseModel, self.section(name))
        try:
            updated = type(section).model_validate({**section.model_dump(), **login})
        except ValidationError as exc:
            raise ValueError(_problems(name, exc)) from None
        return self._with_section(name, updated)

    def _with_section(self, name: str, section: BaseModel) -> ChannelsConfig:
        if name in type(self).model_fields:
            return self.model_copy(update={name: section})
        copy = self.model_copy()
        copy.__pydantic_extra__ = {**(self.__pydantic_extra__ or {}), name: section}
        return copy


def _problems(name: str, exc: ValidationError) -> str:
    """A section's validation errors, each with its key: `channels.matrix.user_id: ...`."""
    return "; ".join(
        f"channels.{name}{''.join(f'.{part}' for part in error['loc'])}: "
        f"{error['msg'].removeprefix('Value error, ')}"
        for error in exc.errors()
    )


NO_LOGIN = "none"  # web.auth_token's explicit opt-out of the login (loopback only)


class WebConfig(Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # Empty: on loopback Bruce makes one on first start (web/login_token.py); "none": no login.
    auth_token: SecretText = ""
    # Host names the web app answers besides loopback and the host of app.public_url.
    allowed_hosts: list[str] = Field(default_factory=list)
    session_max_age_days: int = Field(default=30, ge=1, le=3650)
    streaming: bool = True  # live replies in the chat page: the answer shown as it is written

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS or self.host.startswith("127.")

    @property
    def login_disabled(self) -> bool:
        """`web.auth_token: none`: the owner chose a dashboard without a login."""
        return self.auth_token.strip().lower() == NO_LOGIN


def is_loopback_name(host: str) -> bool:
    return host.lower() in LOOPBACK_HOSTS or host.startswith("127.")


class WebSearchConfig(Section):
    enabled: bool = True
    provider: Literal["duckduckgo", "searxng", "brave", "tavily"] = "duckduckgo"
    searxng_url: str | None = None
    brave_api_key: SecretText = ""
    tavily_api_key: SecretText = ""

    _check_searxng = field_validator("searxng_url")(classmethod(lambda cls, v: _check_url(v)))


class WebFetchConfig(Section):
    enabled: bool = True
    allow_private_addresses: bool = False
    max_chars: int = Field(default=20_000, ge=100)
    # Domains (and their subdomains) never fetched; when allowed_domains is set, only those are.
    # Entries are normalised (lower case, no trailing dot, IDNA) when the config is loaded.
    blocked_domains: list[DomainName] = Field(default_factory=list)
    allowed_domains: list[DomainName] = Field(default_factory=list)


class ArtifactsConfig(Section):
    enabled: bool = True
    max_bytes: int = Field(default=2_000_000, ge=1)
    # An artifact saved in a Telegram or Discord chat up to this size is also sent there as a
    # document, after the reply with its link; 0: links only.
    send_file_max_bytes: int = Field(default=1_000_000, ge=0)


class ProactiveConfig(Section):
    enabled: bool = True


class SubagentsConfig(Section):
    enabled: bool = True


class RunCodeConfig(Section):
    """The `run_code` tool: Python or shell in a bubblewrap sandbox (bruce_bot/sandbox/)."""

    # None: on where the sandbox works (bruce doctor says why not where it does not).
    enabled: bool | None = None
    sandbox: Literal["bubblewrap", "none"] = "bubblewrap"
    allow_unsandboxed: bool = False  # needed for sandbox: none, and then every run asks
    # When a run waits for the user's Run / Deny (agent/asking.py): `risky` after outside
    # content, for the network, in a briefing or a sub-agent, or unsandboxed; `always`; `never`.
    approval: Literal["risky", "always", "never"] = "risky"
    # No answer within this long is a denial (the model is told).
    approval_timeout_seconds: int = Field(default=300, ge=1, le=86_400)
    timeout_seconds: int = Field(default=30, ge=1, le=600)  # the longest a model may ask for
    memory_mb: int = Field(default=1024, ge=64, le=65_536)
    max_processes: int = Field(default=128, ge=8, le=4096)
    max_output_chars: int = Field(default=20_000, ge=200, le=200_000)
    workspace_mb: int = Field(default=100, ge=1, le=100_000)
    max_code_chars: int = Field(default=100_000, ge=100, le=1_000_000)
    workspace_retention_days: int = Field(default=30, ge=0)  # 0: kept until the session goes
    # A read-only virtualenv with extra packages (numpy, pandas), mounted into the sandbox.
    python_env: Path | None = None

    @model_validator(mode="after")
    def _unsandboxed_needs_consent(self) -> RunCodeConfig:
        if self.sandbox == "none" and not self.allow_unsandboxed:
            raise ValueError(
                "tools.run_code.sandbox is 'none' but tools.run_code.allow_unsandboxed is not "
                "true: code would run on this machine with Bruce's own rights, reading its "
                "config and database. Install bubblewrap and remove 'sandbox: none', or set "
                "allow_unsandboxed: true (then every run waits for your approval)"
            )
        if self.python_env is not None and not (self.python_env / "bin" / "python").exists():
            raise ValueError(
                f"tools.run_code.python_env {str(self.python_env)!r} is not a virtualenv (no "
                "bin/python in it); create one with python3 -m venv <path> and pip install "
                "what the code needs, or remove the key"
            )
        return self


class ToolsConfig(Section):
    run_code: RunCodeConfig = Field(default_factory=RunCodeConfig)
    web_search: WebSearchConfig = Field(default_factory=WebSearchConfig)
    web_fetch: WebFetchConfig = Field(default_factory=WebFetchConfig)
    artifacts: ArtifactsConfig = Field(default_factory=ArtifactsConfig)
    proactive: ProactiveConfig = Field(default_factory=ProactiveConfig)
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)


class SchedulerConfig(Section):
    misfire_grace_seconds: int = Field(default=86_400, ge=0)
    min_agent_interval_minutes: int = Field(default=30, ge=1)
    max_active_tasks_per_chat: int = Field(default=50, ge=1)
    # The shortest interval between two checks of a watch (a page fetch or a search, then a call
    # to the background model). A test or a home lab may lower it to a fraction of a minute.
    min_watch_interval_minutes: float = Field(default=15.0, gt=0, le=10_080)
    # PostgreSQL with several processes: how often a process that does not lead the scheduler
    # tries to take over (and the leader checks its lock).
    leader_retry_seconds: float = Field(default=15.0, ge=0.5, le=3600)


class SkillsConfig(Section):
    dirs: list[Path] = Field(default_factory=list)


class BrainConfig(Section):
    """The analytical brain: background upkeep of a session, after the exchanges where it can
    change something (agent/brain/triggers.py)."""

    enabled: bool = True
    max_rounds: int = Field(default=4, ge=1, le=20)
    # Most messages one run reads: those since the previous run, newest kept, plus
    # `lookback_messages` the previous run already read, as context.
    context_messages: int = Field(default=12, ge=2, le=200)
    lookback_messages: int = Field(default=2, ge=0, le=50)
    # When a run is due: while the session is unnamed during its first `naming_exchanges`
    # exchanges, every `every_exchanges` exchanges, and when the topic may have shifted (less
    # than `topic_shift_overlap` of the new exchange's content words occur in the few before it;
    # 0 switches the signal off; exchanges with fewer than `topic_min_words` never count).
    every_exchanges: int = Field(default=10, ge=1, le=1000)
    naming_exchanges: int = Field(default=2, ge=0, le=100)
    topic_shift_overlap: float = Field(default=0.15, ge=0.0, le=1.0)
    topic_min_words: int = Field(default=4, ge=1, le=100)
    # A due run waits this long, so that exchanges finishing close together get one run.
    coalesce_seconds: float = Field(default=2.0, ge=0.0, le=600.0)

    @model_validator(mode="after")
    def _lookback_within_context(self) -> BrainConfig:
        if self.lookback_messages >= self.context_messages:
            raise ValueError(
                f"brain.lookback_messages ({self.lookback_messages}) must be smaller than "
                f"brain.context_messages ({self.context_messages}): a run must have room for "
                "the new messages. Lower lookback_messages or raise context_messages."
            )
        return self


class MediaConfig(Section):
    """Pictures, voice notes and documents people send (bruce_bot/media/)."""

    max_file_bytes: int = Field(default=20_000_000, ge=1000)  # larger files are refused
    retention_days: int = Field(default=30, ge=0)  # 0: stored pictures are kept for ever
    image_max_edge: int = Field(default=1568, ge=64, le=8000)  # px, Anthropic's advice
    image_max_bytes: int = Field(default=3_750_000, ge=50_000)  # as sent (Anthropic: 5 MB base64)
    max_images_per_message: int = Field(default=10, ge=1, le=100)


class DocumentsConfig(Section):
    max_chars: int = Field(default=30_000, ge=500)  # text given to the model per document
    max_pdf_pages: int = Field(default=200, ge=1)
    # A PDF is parsed in a child process under these limits (media/pdf_sandbox.py): a small
    # file can be built to need gigabytes or hours.
    pdf_max_memory_mb: int = Field(default=512, ge=128)
    pdf_max_seconds: int = Field(default=30, ge=1)


class TranscriptionConfig(Section):
    """An OpenAI-compatible /v1/audio/transcriptions endpoint; off while base_url and api_key
    are both empty."""

    base_url: str | None = None  # e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1
    model: str = "whisper-1"
    api_key: SecretText = ""
    language: str | None = None  # ISO-639-1 ("en"); None: the server detects it
    max_duration_seconds: int = Field(default=600, ge=1)
    timeout_seconds: float = Field(default=120, gt=0)

    _check_base_url = field_validator("base_url")(classmethod(lambda cls, v: _check_url(v)))

    @field_validator("language")
    @classmethod
    def _language_code(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        code = value.strip().lower()
        if not re.fullmatch(r"[a-z]{2,3}", code):
            raise ValueError(
                f"{value!r} is not a language code; use ISO-639-1, like en, pt or de (or leave "
                "it empty to let the server detect the language)"
            )
        return code

    @property
    def is_configured(self) -> bool:
        return bool(self.base_url) or bool(self.api_key)


class MemoryConfig(Section):
    """Memory across conversations: the memory tools, the memories shown each turn, and the
    brain's upkeep of them (tools/memory.py, storage/memories.py)."""

    enabled: bool = True
    # Memories matching what the person just said shown to the model each turn, then up to
    # `recent_in_prompt` of their newest others; at most `prompt_chars` characters in all.
    max_in_prompt: int = Field(default=6, ge=0, le=50)
    recent_in_prompt: int = Field(default=3, ge=0, le=50)
    prompt_chars: int = Field(default=2_000, ge=100, le=50_000)


class PriceConfig(Section):
    """What one model (or every model whose name starts with the key) costs, in USD per million
    tokens. `cache_read` and `cache_write` default to the built-in entry that would price the key,
    else to `input`; `input_includes_cache_read`: the provider counts cache reads inside the input
    tokens (OpenAI does, Anthropic does not), so they are priced once, at `cache_read`."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    input_includes_cache_read: bool | None = None

    @field_validator("input", "output", "cache_read", "cache_write")
    @classmethod
    def _not_negative(cls, value: float | None) -> float | None:
        if value is not None and value < 0:
            raise ValueError("is negative; a price is USD per million tokens, 0 or more")
        return value


class UsageNotifyConfig(Section):
    """Where the monthly budget's warnings go (`usage.notify`); empty: the first allowed user of
    Telegram when it is enabled (a private chat's id is the user's id), else nowhere."""

    channel: str = ""  # a platform's name (bruce_bot/platforms.py)
    chat_id: str = ""

    @field_validator("channel")
    @classmethod
    def _a_platform(cls, value: str) -> str:
        if value and platforms.find(value) is None:
            raise ValueError(f"is not a platform; use one of {', '.join(platforms.names())}")
        return value

    @model_validator(mode="after")
    def _both_or_neither(self) -> UsageNotifyConfig:
        if bool(self.channel) != bool(self.chat_id.strip()):
            raise ValueError(
                "set both usage.notify.channel and usage.notify.chat_id (the chat the budget "
                "warnings go to), or neither"
            )
        return self


class UsageConfig(Section):
    """LLM usage and its estimated cost (docs/usage.md)."""

    # Model name or prefix (the longest matching prefix wins) -> price; they extend and override
    # the built-in table (bruce_bot/usage/prices.py).
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    monthly_budget: float | None = None  # USD a calendar month (app.timezone); None: no budget
    notify: UsageNotifyConfig = Field(default_factory=UsageNotifyConfig)

    @field_validator("prices")
    @classmethod
    def _model_names(cls, value: dict[str, PriceConfig]) -> dict[str, PriceConfig]:
        names: dict[str, PriceConfig] = {}
        for name, price in value.items():
            key = str(name).strip().lower()
            if not key:
                raise ValueError(
                    "has an empty model name; write the model's name or a prefix of it "
                    "(like claude-sonnet-4 or gpt-4o) before the colon"
                )
            names[key] = price
        return names

    @field_validator("monthly_budget")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("must be more than 0 (USD a month); leave it out for no budget")
        return value


class McpToolFilter(Section):
    """Which of a server's tools are offered: `allow` empty means all of them; `deny` wins.
    Names are the server's own (`read_file`), not Bruce's `<server>__<tool>`."""

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    def offers(self, tool: str) -> bool:
        return tool not in self.deny and (not self.allow or tool in self.allow)


class McpServerConfig(Section):
    """One MCP server: a command Bruce runs (stdio) or a URL it connects to (streamable HTTP;
    `transport: sse` for a server that only speaks the older SSE transport)."""

    enabled: bool = True
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: Annotated[dict[str, str], SECRET] = Field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = None
    headers: Annotated[dict[str, str], SECRET] = Field(default_factory=dict)
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    tools: McpToolFilter = Field(default_factory=McpToolFilter)
    call_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    startup_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    max_output_chars: int = Field(default=20_000, ge=100)
    # Scheduled (agent-mode) runs act with nobody watching: a server's tools are kept out of
    # them unless the owner says otherwise.
    allow_in_tasks: bool = False

    _check_server_url = field_validator("url")(classmethod(lambda cls, v: _check_url(v)))

    @property
    def kind(self) -> Literal["stdio", "streamable_http", "sse"]:
        return "stdio" if self.command else self.transport


# A server's name is the first half of its tools' names (`<server>__<tool>`), which the LLM APIs
# restrict to ^[a-zA-Z0-9_-]{1,64}$.
_MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")


class McpConfig(Section):
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)

    @property
    def enabled_servers(self) -> dict[str, McpServerConfig]:
        return {name: server for name, server in self.servers.items() if server.enabled}


def mcp_problems(mcp: McpConfig) -> list[str]:
    problems: list[str] = []
    for name, server in mcp.servers.items():
        key = f"mcp.servers.{name}"
        if not _MCP_SERVER_NAME.fullmatch(name) or len(name) > 30:
            problems.append(
                f"{key}: the name {name!r} cannot start tool names; use up to 30 letters, digits, "
                "'-' or single '_' (like github or home-assistant)"
            )
        if server.command is not None and not server.command.strip():
            problems.append(f"{key}.command: empty; give the program that starts the server")
        elif server.command and server.url:
            problems.append(
                f"{key}.command: set together with {key}.url; a server is either a command "
                "Bruce runs (stdio) or a URL it connects to, keep one of them"
            )
        elif not server.command and not server.url:
            problems.append(
                f"{key}.command: missing; set command (and args) for a server Bruce runs, or "
                f"{key}.url for one it connects to over HTTP"
            )
        if server.command and (server.headers or server.transport != "streamable_http"):
            problems.append(
                f"{key}.headers: headers and transport are for a server with a url; a command "
                "gets its settings through env"
            )
        if server.url and (server.args or server.env or server.cwd):
            problems.append(
                f"{key}.args: args, env and cwd are for a server Bruce runs (command); a URL "
                "server takes headers"
            )
    return problems


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    json_output: bool = Field(default=False, alias="json")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Config(Section):
    app: AppConfig = Field(default_factory=AppConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    brain: BrainConfig = Field(default_factory=BrainConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    documents: DocumentsConfig = Field(default_factory=DocumentsConfig)
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    usage: UsageConfig = Field(default_factory=UsageConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite+aiosqlite:///{self.app.data_dir / 'bruce.db'}"

    def budget_chat(self) -> tuple[str, str] | None:
        """The (channel, chat id) the monthly budget's warnings go to: `usage.notify`, else the
        first allowed user of an enabled Telegram (a private chat's id is the user's id); None:
        the dashboard's banner only. Discord has no such default: a user id is no channel id."""
        notify = self.usage.notify
        if notify.channel:
            return notify.channel, notify.chat_id.strip()
        for spec, section in self.channels.enabled():
            if spec.user_id_is_chat_id and section.allowed_user_ids:
                return spec.name, str(section.allowed_user_ids[0])
        return None

    def secrets(self) -> list[str]:
        """Every secret value in this config, so logs can scrub them wherever they appear."""
        candidates = secret_values(self)
        if self.web.login_disabled:  # `auth_token: none` is a word, not a secret
            candidates.remove(self.web.auth_token)
        password = urlparse(self.database_url.replace("+asyncpg", "")).password
        if password:
            candidates.append(password)
        # An MCP server's env and headers carry its tokens (`Authorization: Bearer ${GITHUB}`):
        # every value is scrubbed, and so is a bearer token on its own.
        for server in self.mcp.servers.values():
            for value in [*server.env.values(), *server.headers.values()]:
                scheme, _, credential = value.partition(" ")
                if credential and scheme.lower() in {"bearer", "token", "basic"}:
                    candidates.append(credential)
        return [secret for secret in candidates if secret and len(secret) >= 4]

    def warnings(self) -> list[str]:
        """Problems that do not stop Bruce from starting but that the owner should fix."""
        found: list[str] = []
        if not self.llm.is_configured:
            env = "ANTHROPIC_API_KEY" if self.llm.provider == "anthropic" else "OPENAI_API_KEY"
            found.append(
                f"llm.api_key is empty for provider '{self.llm.provider}': Bruce will start but "
                f"cannot answer. Set llm.api_key: ${{{env}}} in config.yml and export {env}."
            )
        web = self.web
        if web.enabled and web.login_disabled:
            found.append(
                "web.auth_token is 'none': the dashboard has no login, so every program and "
                "every user on this machine can use it as you (read your chats, change "
                "settings). Remove the line to get a generated token and a sign-in link."
            )
        elif web.enabled and web.is_loopback and web.auth_token:
            weakness = token_weakness(web.auth_token)
            if weakness:
                found.append(
                    f"web.auth_token is weak ({weakness}): fine while web.host is loopback, but "
                    f"Bruce will refuse it on any other address; {TOKEN_HOW_TO}"
                )
        if self.usage.monthly_budget is not None:
            chat = self.budget_chat()
            if chat is None:
                found.append(
                    "usage.monthly_budget is set but no chat gets its warnings; set "
                    "usage.notify.channel and usage.notify.chat_id (or enable Telegram with "
                    "allowed_user_ids). The dashboard shows them either way."
                )
            elif not self.channels.section(chat[0]).enabled:
                found.append(
                    f"usage.notify.channel is {chat[0]!r} but that channel is not enabled: the "
                    "budget warnings cannot be sent; enable it or name another."
                )
        for spec, channel in self.channels.enabled():
            # With pairing on, strangers get a code the owner approves: nobody listed is fine.
            if not channel.allowed_user_ids and not (spec.pairing and channel.pairing):
                found.append(
                    f"channels.{spec.name}.allowed_user_ids is empty: nobody can talk to Bruce "
                    f"on {spec.title}. Add your user id to the list, or turn on "
                    f"channels.{spec.name}.pairing."
                )
        return found
