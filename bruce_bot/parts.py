"""Bruce's wiring: every part built from the config, connected, and nothing started.

`build_parts` does no I/O — no connection is opened, no file read, no task started — so the
whole graph of a configuration can be built (and inspected) in a test; `app.Bruce` then starts
the parts in order. The parts refer to each other in a circle that only closes at run time (the
inbox hands turns to the confirmations, which pass the rest to the turn runner; the scheduler
fires briefings into the inbox), so those links are late-bound closures here and nowhere else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
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
    kind_of,
)
from bruce_bot.channels.base import ChannelAdapter
from bruce_bot.channels.policy import AllowlistPort, PairingPort
from bruce_bot.channels.web.channel import WebChannel
from bruce_bot.config import Config
from bruce_bot.domain import utcnow
from bruce_bot.gateway import ChoiceAnswerer, Gateway
from bruce_bot.inbox import Inbox
from bruce_bot.llm.base import LLMService
from bruce_bot.llm.factory import create_llm
from bruce_bot.llm.lazy import LazyLLM
from bruce_bot.llm.switchable import SwitchableLLM
from bruce_bot.llm.transcription import Transcriber
from bruce_bot.logs import scrubber
from bruce_bot.mcp_client.manager import McpManager
from bruce_bot.media.preparation import MediaSettings, MediaStep
from bruce_bot.media.vision import sees_images
from bruce_bot.outbox import FileSending, Outbox
from bruce_bot.pairing import PairingService
from bruce_bot.scheduler.confirmations import TaskConfirmations
from bruce_bot.scheduler.leader import SchedulerLeadership
from bruce_bot.scheduler.service import TaskService, create_scheduler
from bruce_bot.settings.allowlists import Allowlists
from bruce_bot.settings.llm import LLMSettings
from bruce_bot.settings.sources import SettingSources
from bruce_bot.settings.tokens import AdapterSlot, PlatformToken, PlatformTokens
from bruce_bot.storage.changes import ChangeFeed, open_feed
from bruce_bot.storage.database import Database, sync_url
from bruce_bot.storage.leases import Claimant, new_owner, open_leases
from bruce_bot.storage.settings import TOPIC as SETTINGS_TOPIC
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.approval import Approver
from bruce_bot.tools.artifacts import artifact_file
from bruce_bot.tools.catalog import build_tools
from bruce_bot.tools.own_address import OwnAddress
from bruce_bot.tools.proactive import proactive_tools
from bruce_bot.tools.registry import ToolRegistry
from bruce_bot.tools.run_code import run_code_enabled
from bruce_bot.tools.watches import watch_tools, web_reader
from bruce_bot.usage.budget import BudgetPolicy, BudgetWatch
from bruce_bot.usage.prices import PriceTable

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
    live_llm: LLMSettings | None = None
    # The Telegram and Discord tokens the dashboard changes (None: tests put their own channels
    # in place), and the allowlists it edits.
    live_tokens: PlatformTokens | None = None
    live_allowlists: Allowlists | None = None
    # Where the LLM settings a failure reply names come from, and the dashboard's address.
    hints: SettingSources = field(default_factory=lambda: SettingSources(None))
    # The MCP servers of `mcp.servers` (None: none configured); started once Bruce is ready.
    mcp: McpManager | None = None
    # Bruce's own web address, never fetched (tools/own_address.py).
    own_address: OwnAddress = field(default_factory=OwnAddress)
    # Asks the user before a tool runs something (run_code); the dashboard answers it too.
    approver: ChatApprover | None = None


def build_channels(config: Config) -> list[ChannelAdapter]:
    """The enabled platform channels (bruce_bot/platforms.py); each SDK is imported only when
    its channel is enabled."""
    return [spec.build_adapter(section) for spec, section in config.channels.enabled()]


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
) -> ToolRegistry:
    """Every tool the configuration enables, in one registry."""
    registry = build_tools(config, stores, own_address)
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

    def __init__(self, tasks: TaskService) -> None:
        self._tasks = tasks

    async def turn_finished(self, turn: TurnFinished) -> None:
        for run_id in turn.run_ids:
            error = turn.error
            if turn.delivery != "sent":
                error = f"{error or ''} (delivery {turn.delivery})".strip()
            await self._tasks.briefing_finished(run_id, error is None, error)


def _file_sending(config: Config) -> FileSending | None:
    """Replies carry the artifacts their turn saved as files, up to the configured size."""
    artifacts = config.tools.artifacts
    if not artifacts.enabled or artifacts.send_file_max_bytes == 0:
        return None
    locate = functools.partial(artifact_file, config.app.data_dir / "artifacts")
    return FileSending(locate, artifacts.send_file_max_bytes)


def _task_service(
    config: Config,
    database: Database,
    stores: Stores,
    inbox: Inbox,
    outbox: Outbox,
    channel_names: set[str],
    clock: Callable[[], datetime],
) -> TaskService:
    # On SQLite the instance lock already makes this process the only scheduler.
    leadership = (
        None
        if database.is_sqlite
        else SchedulerLeadership(
            config.database_url, retry_seconds=config.scheduler.leader_retry_seconds
        )
    )
    scheduler = create_scheduler(
        sync_url(config.database_url), config.app.zone, config.scheduler.misfire_grace_seconds
    )
    return TaskService(
        stores,
        inbox,
        outbox,
        scheduler,
        app_zone=config.app.zone,
        rules=config.scheduler,
        channels=channel_names,
        leadership=leadership,
        clock=clock,
    )


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


@runtime_checkable
class AsksFirst(Protocol):
    """A tool that asks the user before it runs something (run_code): given the approver."""

    def use_approver(self, approver: Approver) -> None: ...


def give_approver(tools: ToolRegistry, approver: Approver) -> None:
    for name in tools.names():
        tool = tools.get(name)
        if isinstance(tool, AsksFirst):
            tool.use_approver(approver)


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


def pairing_allowlists(config: Config) -> dict[str, list[int]]:
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
        outbox=outbox,
        sending=names,
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


def _live_tokens(
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
    """The monthly budget's watch, told of every LLM call the stores record."""
    if config.usage.monthly_budget is None:
        return None
    policy = BudgetPolicy(
        prices, config.usage.monthly_budget, config.app.zone, config.budget_chat()
    )
    watch = BudgetWatch(stores, outbox, policy, clock=clock)
    stores.audit.usage_recorded = watch.recorded
    stores.messages.usage_recorded = watch.recorded
    return watch


def _connect_feed(
    feed: ChangeFeed, inbox: Inbox, web_channel: WebChannel | None, shared: bool
) -> None:
    """What other processes tell this one: a session's new message, a web chat's reply."""
    feed.subscribe(INBOX_TOPIC, lambda key: inbox.poke(int(key) if key.isdigit() else None))
    if web_channel is not None and shared:
        web_channel.relay(lambda chat_id: feed.publish(WEB_TOPIC, chat_id))
        feed.subscribe(WEB_TOPIC, web_channel.changed_elsewhere)


def build_parts(
    config: Config,
    library: Library | None,
    overrides: Overrides = Overrides(),
    web_channel: WebChannel | None = None,
) -> Parts:
    """Every part of Bruce for `config`, connected; `library`: the skills and workflows, read
    beforehand (None: the brain is off)."""
    database = Database(config.database_url)
    shared = not database.is_sqlite
    claimant = Claimant(new_owner(), config.database.lease_seconds)
    feed = open_feed(config.database_url, claimant.owner)
    stores = Stores.open(database, feed, claimant=claimant)
    live_llm: LLMSettings | None = None
    llm: LLMService
    if overrides.llm is not None:
        llm = overrides.llm
    else:
        switchable = SwitchableLLM(
            LazyLLM(lambda: create_llm(config.llm), config.llm.model), config.llm
        )
        live_llm = LLMSettings(
            config.llm, stores.settings, switchable, secret_seen=scrubber.add_secret
        )
        llm = switchable
    platform = build_channels(config) if overrides.channels is None else list(overrides.channels)
    adapters = ([web_channel] if web_channel is not None else []) + platform
    channels = {adapter.name: adapter for adapter in adapters}
    outbox = Outbox(
        stores.messages,
        stores.deliveries,
        stores.sessions,
        channels,
        shared=shared,
        files=_file_sending(config),
    )
    brain = _brain(config, llm, stores, library)
    allowlists = Allowlists(pairing_allowlists(config), stores.settings)
    pairing = _pair(config, stores, outbox, platform, overrides.clock, allowlists)
    live_tokens = None
    if overrides.channels is None:
        live_tokens = _live_tokens(config, stores, channels, adapters, pairing, allowlists)
    inbox = Inbox(
        stores,
        # A bare yes/no may answer a task confirmation; the confirmations pass the rest on.
        lambda session, batch: confirmations.run(session, batch),
        open_leases(database.engine, claimant, shared=shared),
        channels=set(channels),
        max_concurrent_sessions=config.agent.max_concurrent_sessions,
        max_message_chars=config.agent.max_message_chars,
        announce=lambda session_id: feed.publish(INBOX_TOPIC, str(session_id)),
    )
    tasks = _task_service(config, database, stores, inbox, outbox, set(channels), overrides.clock)
    # Watches read with the web tools' policy and are judged by the background model.
    # Bruce's own web address, which neither web_fetch nor a watch reads; the dashboard tells
    # it the port it bound (app.py).
    own_address = OwnAddress.from_config(config)
    tasks.use_watches(
        web_reader(config.tools, own_address), llm, config.llm.effective_background_model
    )
    confirmations = TaskConfirmations(
        tasks, stores, outbox, lambda session, batch: turns.run(session, batch)
    )
    tools = overrides.tools
    if tools is None:
        tools = assemble_tools(
            config, stores, llm, confirmations, brain, overrides.clock, own_address
        )
    mcp = build_mcp(config, tools)
    # The confirmations hear which turns read outside content: only those can leave
    # something waiting to be asked about.
    listeners: list[TurnListener] = [_BriefingListener(tasks), confirmations]
    if brain:
        listeners.append(_BrainListener(brain))
    settings = TurnSettings(
        config.agent,
        config.llm,
        config.app.zone,
        overrides.clock,
        library,
        config.memory if config.memory.enabled else None,
    )
    transcriber = overrides.transcriber or build_transcriber(config)
    media = build_media(config, stores, channels, transcriber)
    # The configured public URL, when the config sets one; else the address the web server binds.
    public_url = config.app.public_url if "public_url" in config.app.model_fields_set else None
    hints = SettingSources(live_llm, public_url)
    turns = TurnRunner(settings, stores, llm, tools, outbox, listeners, media, hints.fix_hints)
    # After outside content, what is not a plain read waits for the user (agent/approvals.py).
    approvals = ActionApprovals(stores.approvals, stores.audit, tools)
    turns.gate_actions(approvals)
    confirmations.use_actions(approvals)
    # A tool that asks before it runs (run_code) asks in the chat, with Run / Deny buttons.
    approver = ChatApprover(
        stores, outbox, feed, config.tools.run_code.approval_timeout_seconds, overrides.clock
    )
    give_approver(tools, approver)
    gateway = Gateway(
        inbox, stores, reminders=tasks.describe_session, choices=_chooser(approver, confirmations)
    )
    _connect_feed(feed, inbox, web_channel, shared)
    # A setting saved in another process: a new LLM client, a channel reconnected with its token.
    if live_llm is not None:
        feed.subscribe(SETTINGS_TOPIC, live_llm.changed_elsewhere)
    if live_tokens is not None:
        feed.subscribe(SETTINGS_TOPIC, live_tokens.changed_elsewhere)
    prices = PriceTable.from_config(config.usage, config.llm)
    budget = _budget(config, stores, outbox, prices, overrides.clock)
    return Parts(
        database=database,
        feed=feed,
        stores=stores,
        llm=llm,
        tools=tools,
        channels=channels,
        outbox=outbox,
        inbox=inbox,
        tasks=tasks,
        confirmations=confirmations,
        turns=turns,
        gateway=gateway,
        brain=brain,
        shared=shared,
        pairing=pairing,
        web_channel=web_channel,
        adapters=adapters,
        transcriber=transcriber,
        prices=prices,
        budget=budget,
        live_llm=live_llm,
        live_tokens=live_tokens,
        live_allowlists=allowlists,
        hints=hints,
        mcp=mcp,
        own_address=own_address,
        approver=approver,
    )
