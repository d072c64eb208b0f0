"""Bruce's wiring: every part built from the config, connected, and nothing started.

`build_parts` does no I/O — no connection is opened, no file read, no task started — so the
whole graph of a configuration can be built (and inspected) in a test; `app.Bruce` then starts
the parts in order. Each part gets its collaborators when it is built, in the order below:
storage → LLM → channels and outbox → inbox → scheduler → tools, confirmations and turns →
the web dashboard's context. The parts refer to each other in a circle that only closes at run
time (the inbox hands turns to the confirmations, which pass the rest to the turn runner; the
stores tell the monthly budget's watch, which sends through the outbox, of the usage they
record), so those links go through `_Circle`, here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from bruce_bot import platforms
from bruce_bot.agent.approvals import ActionApprovals
from bruce_bot.agent.asking import ChatApprover
from bruce_bot.agent.brain.library import Library
from bruce_bot.agent.brain.runner import AnalyticalBrain, BrainRunner
from bruce_bot.agent.subagent import SpawnSubagentTool
from bruce_bot.agent.turn import (
    BRIEFING_TURN,
    TurnFinished,
    TurnListener,
    TurnRunner,
    TurnSettings,
    TurnSupport,
    kind_of,
)
from bruce_bot.channels.base import ChannelAdapter
from bruce_bot.channels.policy import AllowlistPort, PairingPort
from bruce_bot.channels.web.channel import WebChannel
from bruce_bot.config import Config
from bruce_bot.domain import LLMCallRecord, utcnow
from bruce_bot.llm.base import LLMService
from bruce_bot.llm.factory import create_llm
from bruce_bot.llm.lazy import LazyLLM
from bruce_bot.llm.switchable import SwitchableLLM
from bruce_bot.llm.transcription import Transcriber
from bruce_bot.logs import scrubber
from bruce_bot.mcp_client.manager import McpManager
from bruce_bot.media.preparation import MediaSettings, MediaStep
from bruce_bot.media.vision import sees_images
from bruce_bot.messaging.inbox import Inbox, InboxSettings, QueuedMessage
from bruce_bot.messaging.inbox_port import ChoiceAnswerer, Gateway
from bruce_bot.messaging.outbox import FileSending, Outbox
from bruce_bot.pairing import PairingService, Sender
from bruce_bot.scheduler.confirmations import TaskConfirmations
from bruce_bot.scheduler.context import SchedulerContext
from bruce_bot.scheduler.firing import TaskFiring
from bruce_bot.scheduler.job_store import TaskJobs, create_scheduler
from bruce_bot.scheduler.leader import SchedulerLeadership
from bruce_bot.scheduler.runs import TaskRuns
from bruce_bot.scheduler.service import TaskService
from bruce_bot.scheduler.watching import WatchChecker
from bruce_bot.settings.allowlists import Allowlists
from bruce_bot.settings.editable import editable_overrides
from bruce_bot.settings.llm import LLMSettings
from bruce_bot.settings.sources import SettingSources
from bruce_bot.settings.tokens import AdapterSlot, PlatformToken, PlatformTokens
from bruce_bot.storage.changes import ChangeFeed, open_feed
from bruce_bot.storage.database import Database, sync_url
from bruce_bot.storage.leases import Claimant, new_owner, open_leases
from bruce_bot.storage.messages import UsageListener
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.settings import TOPIC as SETTINGS_TOPIC
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.approval import Approver
from bruce_bot.tools.artifacts import artifact_file
from bruce_bot.tools.catalog import build_tools, empty_registry
from bruce_bot.tools.own_address import OwnAddress
from bruce_bot.tools.proactive import proactive_tools
from bruce_bot.tools.registry import ToolRegistry
from bruce_bot.tools.run_code import run_code_enabled
from bruce_bot.tools.watches import watch_tools, web_reader
from bruce_bot.usage.monthly_budget import BudgetPolicy, BudgetWatch
from bruce_bot.usage.prices import PriceTable
from bruce_bot.web.context import WebContext
from bruce_bot.web.login_token import OneTimeLogin

INBOX_TOPIC = "inbox"  # change feed: a session got a message another process should take
WEB_TOPIC = "web-chat"  # change feed: a reply was delivered in a web chat


@dataclass(frozen=True, slots=True)
class Overrides:
    """What tests and the benchmark put in place of the configured parts."""

    llm: LLMService | None = None
    tools: ToolRegistry | None = None
    channels: Sequence[ChannelAdapter] | None = None
    clock: Callable[[], datetime] = utcnow
    transcriber: Transcriber | None = None


@dataclass(slots=True)
class Parts:
    database: Database
    feed: ChangeFeed
    stores: Stores
    llm: LLMService
    tools: ToolRegistry
    channels: dict[str, ChannelAdapter]
    outbox: Outbox
    inbox: Inbox
    tasks: TaskService
    confirmations: TaskConfirmations
    turns: TurnRunner
    gateway: Gateway
    brain: AnalyticalBrain | None
    shared: bool  # other processes may use the same database (PostgreSQL)
    pairing: PairingService
    web_channel: WebChannel | None = None
    adapters: list[ChannelAdapter] = field(default_factory=list)
    transcriber: Transcriber | None = None
    prices: PriceTable = field(default_factory=PriceTable.built_in)
    budget: BudgetWatch | None = None  # usage.monthly_budget is set
    # The dashboard's LLM settings (None: a test put its own LLM in place).
    llm_settings: LLMSettings | None = None
    # The Telegram and Discord tokens the dashboard changes (None: tests put their own channels
    # in place), and the allowlists it edits.
    platform_tokens: PlatformTokens | None = None
    allowlists: Allowlists | None = None
    # Where the LLM settings a failure reply names come from, and the dashboard's address.
    hints: SettingSources = field(default_factory=lambda: SettingSources(None))
    # The MCP servers of `mcp.servers` (None: none configured); started once Bruce is ready.
    mcp: McpManager | None = None
    # Bruce's own web address, never fetched (tools/own_address.py).
    own_address: OwnAddress = field(default_factory=OwnAddress)
    # Asks the user before a tool runs something (run_code); the dashboard answers it too.
    approver: ChatApprover | None = None
    # What the web app is built from (None: the dashboard is off).
    web: WebContext | None = None
    clock: Callable[[], datetime] = utcnow  # the clock the parts were built with


@dataclass(frozen=True, slots=True)
class WebLogin:
    """The dashboard's sign-in, read at start-up (app.py): its token ("" for `web.auth_token:
    none`) and this start's one-time sign-in link (None: the token is set in config.yml)."""

    token: str
    link: OneTimeLogin | None = None


@dataclass(frozen=True, slots=True)
class _Storage:
    """The database and what every other part reads and writes it through."""

    database: Database
    feed: ChangeFeed
    stores: Stores
    claimant: Claimant
    shared: bool  # other processes may use the same database (PostgreSQL)


@dataclass(frozen=True, slots=True)
class _Reach:
    """The channels, the outbox that sends through them, and who may talk on them."""

    adapters: list[ChannelAdapter]  # the web chat first, then the platforms
    channels: dict[str, ChannelAdapter]
    outbox: Outbox
    allowlists: Allowlists
    pairing: PairingService
    platform_tokens: PlatformTokens | None  # None: tests put their own channels in place


@dataclass(frozen=True, slots=True)
class _Agent:
    """What answers: the tools, the confirmations in front of the turns, and the turns."""

    tools: ToolRegistry
    mcp: McpManager | None
    confirmations: TaskConfirmations
    approver: ChatApprover
    turns: TurnRunner
    brain: AnalyticalBrain | None
    transcriber: Transcriber | None
    hints: SettingSources


class _Circle:
    """The links that close only at run time (the module docstring), each bound once its part
    exists: the inbox hands a batch to the confirmations, which pass the rest to the turn
    runner; the stores tell the budget's watch of the usage they record."""

    def __init__(self) -> None:
        self.confirmations: TaskConfirmations | None = None
        self.turns: TurnRunner | None = None
        self.budget: BudgetWatch | None = None

    async def confirm_first(self, session: SessionRecord, batch: Sequence[QueuedMessage]) -> None:
        """A bare yes/no may answer a task confirmation; the confirmations pass the rest on."""
        assert self.confirmations is not None, "a turn before the parts were built"
        await self.confirmations.run(session, batch)

    async def run_turn(self, session: SessionRecord, batch: Sequence[QueuedMessage]) -> None:
        assert self.turns is not None, "a turn before the parts were built"
        await self.turns.run(session, batch)

    def usage_recorded(self, records: Sequence[LLMCallRecord]) -> None:
        if self.budget is not None:
            self.budget.recorded(records)


def build_channels(config: Config) -> list[ChannelAdapter]:
    """The enabled platform channels (bruce_bot/platforms.py); each SDK is imported only when
    its channel is enabled."""
    adapters = [spec.build_adapter(section) for spec, section in config.channels.enabled()]
    for adapter in adapters:
        if isinstance(adapter, DataDirChannel):  # Matrix keeps its sync token there
            adapter.use_data_dir(config.app.data_dir)
    return adapters


@runtime_checkable
class DataDirChannel(Protocol):
    """A platform channel that keeps a small private file of its own in the data dir."""

    def use_data_dir(self, data_dir: Path) -> None: ...


def build_mcp(config: Config, tools: ToolRegistry) -> McpManager | None:
    """The MCP servers' manager, whose tools join the registry once their servers are up (the
    SDK itself is imported only when the first server starts)."""
    if not config.mcp.servers:
        return None
    manager = McpManager(config.mcp, tools.reserved_names())
    tools.add_source(manager)
    return manager


def build_transcriber(config: Config) -> Transcriber | None:
    """The speech-to-text client when `transcription:` is set up (the openai SDK is imported
    only then)."""
    if not config.transcription.is_configured:
        return None
    from bruce_bot.llm.openai_transcription import OpenAITranscriber

    return OpenAITranscriber(config.transcription)


def build_media(
    config: Config,
    stores: Stores,
    channels: dict[str, ChannelAdapter],
    transcriber: Transcriber | None,
) -> MediaStep:
    settings = MediaSettings(
        data_dir=config.app.data_dir,
        media=config.media,
        documents=config.documents,
        vision=sees_images(config.llm),
        model=config.llm.model,
        max_duration_seconds=config.transcription.max_duration_seconds,
        keep_documents=run_code_enabled(config.tools.run_code),
    )
    return MediaStep(settings, stores.messages, channels, transcriber)


def assemble_tools(
    config: Config,
    stores: Stores,
    llm: LLMService,
    confirmations: TaskConfirmations,
    brain: AnalyticalBrain | None,
    clock: Callable[[], datetime],
    own_address: OwnAddress | None = None,
    approver: Approver | None = None,
    registry: ToolRegistry | None = None,
) -> ToolRegistry:
    """Every tool the configuration enables, in `registry` (None: a new one); `approver`:
    run_code's."""
    registry = build_tools(config, stores, own_address, approver, registry)
    if config.tools.proactive.enabled:
        for tool in [*proactive_tools(confirmations), *watch_tools(confirmations)]:
            registry.add(tool)
    if config.tools.subagents.enabled:
        finished = brain.observe if brain is not None else None
        registry.add(
            SpawnSubagentTool(config, stores, llm, registry, clock=clock, finished=finished)
        )
    return registry


class _BrainListener:
    """After a chat exchange with a real answer, the analytical brain considers the session (it
    runs only when that can change something). A scheduled briefing is no exchange with the
    user: it neither wakes the brain nor counts towards its next run."""

    def __init__(self, brain: AnalyticalBrain) -> None:
        self._brain = brain

    async def turn_finished(self, turn: TurnFinished) -> None:
        if not turn.answered or kind_of(turn.batch) is BRIEFING_TURN:
            return
        texts = [item.text for item in turn.batch]
        if turn.answer:
            texts.append(turn.answer)
        await self._brain.exchange_finished(turn.session_id, texts)


class _BriefingListener:
    """A briefing's turn closes its task run: delivered, or why not."""

    def __init__(self, runs: TaskRuns) -> None:
        self._runs = runs

    async def turn_finished(self, turn: TurnFinished) -> None:
        for run_id in turn.run_ids:
            error = turn.error
            if turn.delivery != "sent":
                error = f"{error or ''} (delivery {turn.delivery})".strip()
            await self._runs.briefing_finished(run_id, error is None, error)


def _file_sending(config: Config) -> FileSending | None:
    """Replies carry the artifacts their turn saved as files, up to the configured size."""
    artifacts = config.tools.artifacts
    if not artifacts.enabled or artifacts.send_file_max_bytes == 0:
        return None
    locate = functools.partial(artifact_file, config.app.data_dir / "artifacts")
    return FileSending(locate, artifacts.send_file_max_bytes)


def _storage(config: Config, usage_recorded: UsageListener) -> _Storage:
    database = Database(config.database_url)
    claimant = Claimant(new_owner(), config.database.lease_seconds)
    feed = open_feed(config.database_url, claimant.owner)
    stores = Stores.open(database, feed, claimant=claimant, usage_recorded=usage_recorded)
    return _Storage(database, feed, stores, claimant, shared=not database.is_sqlite)


def _llm(
    config: Config, stores: Stores, override: LLMService | None
) -> tuple[LLMService, LLMSettings | None]:
    """The LLM client, switched when the dashboard's LLM settings change (the SDK is imported
    on the first call, or in the background once Bruce is ready); a test's own as it is."""
    if override is not None:
        return override, None
    switchable = SwitchableLLM(
        LazyLLM(lambda: create_llm(config.llm), config.llm.model), config.llm
    )
    llm_settings = LLMSettings(
        config.llm, stores.settings, switchable, secret_seen=scrubber.add_secret
    )
    return switchable, llm_settings


def _reach(
    config: Config, storage: _Storage, overrides: Overrides, web_channel: WebChannel | None
) -> _Reach:
    stores = storage.stores
    platform = build_channels(config) if overrides.channels is None else list(overrides.channels)
    adapters = ([web_channel] if web_channel is not None else []) + platform
    channels = {adapter.name: adapter for adapter in adapters}
    outbox = Outbox(
        stores.messages,
        stores.deliveries,
        stores.sessions,
        channels,
        shared=storage.shared,
        files=_file_sending(config),
    )
    allowlists = Allowlists(pairing_allowlists(config), stores.settings)
    pairing = _pair(config, stores, outbox, platform, overrides.clock, allowlists)
    platform_tokens = None
    if overrides.channels is None:
        platform_tokens = _platform_tokens(config, stores, channels, adapters, pairing, allowlists)
    return _Reach(adapters, channels, outbox, allowlists, pairing, platform_tokens)


def _inbox(config: Config, storage: _Storage, reach: _Reach, circle: _Circle) -> Inbox:
    feed = storage.feed
    return Inbox(
        storage.stores,
        circle.confirm_first,
        open_leases(storage.database.engine, storage.claimant, shared=storage.shared),
        InboxSettings(
            set(reach.channels),
            config.agent.max_concurrent_sessions,
            config.agent.max_message_chars,
        ),
        announce=lambda session_id: feed.publish(INBOX_TOPIC, str(session_id)),
    )


def _tasks(
    config: Config,
    storage: _Storage,
    inbox: Inbox,
    reach: _Reach,
    llm: LLMService,
    own_address: OwnAddress,
    clock: Callable[[], datetime],
) -> TaskService:
    """The scheduler and its parts (scheduler/service.py). On SQLite the instance lock already
    makes this process the only scheduler; on PostgreSQL, the processes elect one. Watches read
    with the web tools' policy (never Bruce's own address) and are judged by the background
    model."""
    rules = config.scheduler
    leadership = None
    if not storage.database.is_sqlite:
        leadership = SchedulerLeadership(
            config.database_url, retry_seconds=rules.leader_retry_seconds
        )
    scheduler = create_scheduler(
        sync_url(config.database_url), config.app.zone, rules.misfire_grace_seconds
    )
    jobs = TaskJobs(scheduler, leadership)
    runs = TaskRuns(storage.stores, jobs)
    context = SchedulerContext(storage.stores, jobs, runs, rules, config.app.zone, clock)
    reader = web_reader(config.tools, own_address)
    model = config.llm.effective_background_model
    checker = WatchChecker(context, reach.outbox, reader, llm, model)
    firing = TaskFiring(context, inbox, reach.outbox, set(reach.channels), checker)
    return TaskService(context, firing, leadership, reader)


def _brain(
    config: Config, llm: LLMService, stores: Stores, library: Library | None
) -> AnalyticalBrain | None:
    if not config.brain.enabled or library is None:
        return None
    memories = stores.memories if config.memory.enabled else None
    runner = BrainRunner(
        llm, config.llm.effective_background_model, stores, library, config.brain, memories
    )
    return AnalyticalBrain(runner, max_concurrent=config.agent.max_concurrent_sessions)


def _chooser(approver: ChatApprover, confirmations: TaskConfirmations) -> ChoiceAnswerer:
    """A button press: an approval's Run / Deny, else a confirmation's."""

    async def choose(session_id: int, data: str, by: str) -> str | None:
        reply = await approver.choose(session_id, data, by)
        return reply if reply is not None else await confirmations.choose(session_id, data)

    return choose


@runtime_checkable
class PairingChannel(Protocol):
    """A platform channel whose strangers may pair (Telegram, Discord)."""

    name: str

    def use_pairing(self, pairing: PairingPort) -> None: ...


@runtime_checkable
class AllowlistChannel(Protocol):
    """A platform channel whose allowlist is read for each message (Telegram, Discord)."""

    name: str

    def use_allowlist(self, allowlist: AllowlistPort) -> None: ...


def pairing_allowlists(config: Config) -> dict[str, list[int | str]]:
    """config.yml's `allowed_user_ids` of each platform channel, enabled or not."""
    return {
        spec.name: list(config.channels.section(spec.name).allowed_user_ids)
        for spec in platforms.platforms()
    }


def pairing_enabled(config: Config) -> list[str]:
    """The enabled platform channels that pair strangers (`pairing: true`)."""
    return [
        spec.name for spec, section in config.channels.enabled() if spec.pairing and section.pairing
    ]


def _pair(
    config: Config,
    stores: Stores,
    outbox: Outbox,
    platform: Sequence[ChannelAdapter],
    clock: Callable[[], datetime],
    allowlists: Allowlists,
) -> PairingService:
    """The pairing service, injected into each platform channel with `pairing: true` (channels
    never see the database: they ask this port)."""
    names = {adapter.name for adapter in platform}
    enabled = [name for name in pairing_enabled(config) if name in names]
    pairing = PairingService(
        stores,
        pairing_allowlists(config),
        sender=Sender(outbox, frozenset(names)),
        clock=clock,
        enabled=enabled,
        allowlist=allowlists,
    )
    for adapter in platform:
        _give_ports(adapter, pairing if adapter.name in enabled else None, allowlists)
    return pairing


def _give_ports(
    adapter: ChannelAdapter, pairing: PairingPort | None, allowlists: AllowlistPort
) -> None:
    """What a platform channel asks for each message: the allowlist, the approved people."""
    if pairing is not None and isinstance(adapter, PairingChannel):
        adapter.use_pairing(pairing)
    if isinstance(adapter, AllowlistChannel):
        adapter.use_allowlist(allowlists)


def _platform_tokens(
    config: Config,
    stores: Stores,
    channels: dict[str, ChannelAdapter],
    adapters: list[ChannelAdapter],
    pairing: PairingService,
    allowlists: Allowlists,
) -> PlatformTokens:
    """The token of each platform channel, changed from the dashboard (a new adapter gets the
    ports the first one got)."""
    tokens: dict[str, PlatformToken] = {}
    for name in platforms.names():
        pairs = name in pairing.enabled

        def prepare(adapter: ChannelAdapter, pairs: bool = pairs) -> None:
            _give_ports(adapter, pairing if pairs else None, allowlists)
            if isinstance(adapter, DataDirChannel):  # the same sync state: no replay, no loss
                adapter.use_data_dir(config.app.data_dir)

        tokens[name] = PlatformToken(
            config.channels,
            stores.settings,
            AdapterSlot(name, channels, adapters),
            prepare=prepare,
            secret_seen=scrubber.add_secret,
        )
    return PlatformTokens(tokens)


def _budget(
    config: Config,
    stores: Stores,
    outbox: Outbox,
    prices: PriceTable,
    clock: Callable[[], datetime],
) -> BudgetWatch | None:
    """The monthly budget's watch (the stores tell it of every LLM call they record)."""
    if config.usage.monthly_budget is None:
        return None
    policy = BudgetPolicy(
        prices, config.usage.monthly_budget, config.app.zone, config.budget_chat()
    )
    return BudgetWatch(stores, outbox, policy, clock=clock)


def _agent(
    config: Config,
    library: Library | None,
    overrides: Overrides,
    storage: _Storage,
    reach: _Reach,
    llm: tuple[LLMService, LLMSettings | None],
    tasks: TaskService,
    own_address: OwnAddress,
    circle: _Circle,
) -> _Agent:
    """The tools, the confirmations and the turns. What the agent loop holds after outside
    content waits in `approvals`, which the confirmations ask about; the tools (the scheduling
    ones talk to the confirmations) join its registry once those exist."""
    stores, clock = storage.stores, overrides.clock
    client, llm_settings = llm
    # A tool that asks before it runs (run_code) asks in the chat, with Run / Deny buttons.
    approver = ChatApprover(
        stores, reach.outbox, storage.feed, config.tools.run_code.approval_timeout_seconds, clock
    )
    tools = overrides.tools if overrides.tools is not None else empty_registry(config)
    # After outside content, what is not a plain read waits for the user (agent/approvals.py).
    approvals = ActionApprovals(stores.approvals, stores.audit, tools)
    confirmations = TaskConfirmations(
        tasks.planner, stores, reach.outbox, circle.run_turn, approvals
    )
    brain = _brain(config, client, stores, library)
    if overrides.tools is None:
        assemble_tools(
            config, stores, client, confirmations, brain, clock, own_address, approver, tools
        )
    mcp = build_mcp(config, tools)
    # The configured public URL, when the config sets one; else the address the web server binds.
    public_url = config.app.public_url if "public_url" in config.app.model_fields_set else None
    hints = SettingSources(llm_settings, public_url)
    transcriber = overrides.transcriber or build_transcriber(config)
    # The confirmations hear which turns read outside content: only those can leave
    # something waiting to be asked about.
    listeners: list[TurnListener] = [_BriefingListener(tasks.runs), confirmations]
    if brain:
        listeners.append(_BrainListener(brain))
    support = TurnSupport(
        listeners,
        build_media(config, stores, reach.channels, transcriber),
        hints.fix_hints,
        approvals,
    )
    turns = TurnRunner(
        _turn_settings(config, library, clock), stores, client, tools, reach.outbox, support
    )
    return _Agent(tools, mcp, confirmations, approver, turns, brain, transcriber, hints)


def _turn_settings(
    config: Config, library: Library | None, clock: Callable[[], datetime]
) -> TurnSettings:
    memory = config.memory if config.memory.enabled else None
    return TurnSettings(config.agent, config.llm, config.app.zone, clock, library, memory)


def _connect_feed(
    storage: _Storage,
    inbox: Inbox,
    web_channel: WebChannel | None,
    llm_settings: LLMSettings | None,
    platform_tokens: PlatformTokens | None,
) -> None:
    """What other processes tell this one: a session's new message, a web chat's reply, a
    setting saved there (a new LLM client, a channel reconnected with its token)."""
    feed = storage.feed
    feed.subscribe(INBOX_TOPIC, lambda key: inbox.poke(int(key) if key.isdigit() else None))
    if web_channel is not None and storage.shared:
        web_channel.relay(lambda chat_id: feed.publish(WEB_TOPIC, chat_id))
        feed.subscribe(WEB_TOPIC, web_channel.changed_elsewhere)
    if llm_settings is not None:
        feed.subscribe(SETTINGS_TOPIC, llm_settings.changed_elsewhere)
    if platform_tokens is not None:
        feed.subscribe(SETTINGS_TOPIC, platform_tokens.changed_elsewhere)


def web_context(
    config: Config, parts: Parts, web_channel: WebChannel, login: WebLogin
) -> WebContext:
    """What the dashboard is built from: the config sections it reads and the parts it shows
    or changes."""
    return WebContext(
        parts.stores,
        web_channel,
        login.token,
        app=config.app,
        web=config.web,
        tasks=parts.tasks,
        settings=editable_overrides(config),
        clock=parts.clock,
        pairing=parts.pairing,
        prices=parts.prices,
        usage=config.usage,
        budget_chat=config.budget_chat(),
        llm_settings=parts.llm_settings,
        channels_config=config.channels,
        platform_tokens=parts.platform_tokens,
        allowlists=parts.allowlists,
        storage_health=parts.inbox.health,
        mcp=parts.mcp,
        login_link=login.link,
        secrets=tuple(config.secrets()),
        approver=parts.approver,
        channels=parts.channels,
    )


def build_parts(
    config: Config,
    library: Library | None,
    overrides: Overrides = Overrides(),
    web_channel: WebChannel | None = None,
    web_login: WebLogin | None = None,
) -> Parts:
    """Every part of Bruce for `config`, connected; `library`: the skills and workflows, read
    beforehand (None: the brain is off); with `web_login`, the dashboard's context too."""
    circle = _Circle()
    storage = _storage(config, circle.usage_recorded)
    stores = storage.stores
    llm, llm_settings = _llm(config, stores, overrides.llm)
    reach = _reach(config, storage, overrides, web_channel)
    inbox = _inbox(config, storage, reach, circle)
    own_address = OwnAddress.from_config(config)  # the web server tells it its port (app.py)
    tasks = _tasks(config, storage, inbox, reach, llm, own_address, overrides.clock)
    agent = _agent(
        config, library, overrides, storage, reach, (llm, llm_settings), tasks, own_address, circle
    )
    circle.confirmations, circle.turns = agent.confirmations, agent.turns
    choices = _chooser(agent.approver, agent.confirmations)
    gateway = Gateway(inbox, stores, reminders=tasks.planner.describe_session, choices=choices)
    _connect_feed(storage, inbox, web_channel, llm_settings, reach.platform_tokens)
    prices = PriceTable.from_config(config.usage, config.llm)
    circle.budget = _budget(config, stores, reach.outbox, prices, overrides.clock)
    parts = Parts(
        database=storage.database,
        feed=storage.feed,
        stores=stores,
        llm=llm,
        tools=agent.tools,
        channels=reach.channels,
        outbox=reach.outbox,
        inbox=inbox,
        tasks=tasks,
        confirmations=agent.confirmations,
        turns=agent.turns,
        gateway=gateway,
        brain=agent.brain,
        shared=storage.shared,
        pairing=reach.pairing,
        web_channel=web_channel,
        adapters=reach.adapters,
        transcriber=agent.transcriber,
        prices=prices,
        budget=circle.budget,
        llm_settings=llm_settings,
        platform_tokens=reach.platform_tokens,
        allowlists=reach.allowlists,
        hints=agent.hints,
        mcp=agent.mcp,
        own_address=own_address,
        approver=agent.approver,
        clock=overrides.clock,
    )
    if web_channel is None or web_login is None:
        return parts
    return dataclasses.replace(parts, web=web_context(config, parts, web_channel, web_login))
