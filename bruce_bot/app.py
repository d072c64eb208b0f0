"""Bruce's composition root: builds the parts from the config and owns start/stop order.

Start: schema upgrade → stores → LLM (SDK loading in the background) → tools → outbox → skills
and workflows (read once) → analytical brain → turn runner → inbox → channels (intake) → recovery
of unfinished messages → scheduler (on PostgreSQL, once this process is elected its leader) → web
server → ready.
Stop: channels stop taking messages → running turns finish within `agent.shutdown_timeout_seconds`
(the rest go back to `pending`) → brain runs finish within what is left of that time (the rest
are cancelled) → web server → LLM client → database.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Sequence
from datetime import datetime

import structlog
from sqlalchemy.exc import DBAPIError

from bruce_bot.agent.brain.library import load_library
from bruce_bot.agent.brain.runner import AnalyticalBrain, BrainRunner
from bruce_bot.agent.subagent import SpawnSubagentTool
from bruce_bot.agent.summarizer import Summarizer
from bruce_bot.agent.turn import TurnRunner
from bruce_bot.channels.base import ChannelAdapter
from bruce_bot.channels.web import WebChannel
from bruce_bot.config import Config
from bruce_bot.domain import utcnow
from bruce_bot.gateway import Gateway
from bruce_bot.inbox import Inbox, QueuedMessage
from bruce_bot.instance_lock import AlreadyRunningError, InstanceLock
from bruce_bot.llm.base import LLMService
from bruce_bot.llm.factory import create_llm
from bruce_bot.llm.lazy import LazyLLM
from bruce_bot.outbox import REDELIVERY_INTERVAL_SECONDS, Outbox
from bruce_bot.scheduler.confirmations import TaskConfirmations
from bruce_bot.scheduler.leader import SchedulerLeadership
from bruce_bot.scheduler.service import TaskService, create_scheduler
from bruce_bot.storage.changes import ChangeFeed, open_feed
from bruce_bot.storage.database import Database, sync_url, upgrade_schema
from bruce_bot.storage.leases import Claimant, new_owner, open_leases
from bruce_bot.storage.sessions import SessionRecord
from bruce_bot.storage.settings import SYSTEM_PROMPT_SETTING
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.catalog import build_tools
from bruce_bot.tools.proactive import proactive_tools
from bruce_bot.tools.registry import ToolRegistry

log = structlog.get_logger(__name__)

INBOX_TOPIC = "inbox"  # change feed: a session got a message another process should take
WEB_TOPIC = "web-chat"  # change feed: a reply was delivered in a web chat


class StartupError(Exception):
    """Bruce cannot start; the message says why and what to do."""


def build_channels(config: Config) -> list[ChannelAdapter]:
    """The enabled platform channels; each SDK is imported only when its channel is enabled."""
    channels: list[ChannelAdapter] = []
    if config.channels.telegram.enabled:
        from bruce_bot.channels.telegram import TelegramChannel

        channels.append(TelegramChannel(config.channels.telegram))
    if config.channels.discord.enabled:
        from bruce_bot.channels.discord import DiscordChannel

        channels.append(DiscordChannel(config.channels.discord))
    return channels


class Bruce:
    """The running daemon. Tests and the benchmark inject `llm`, `tools`, extra channels and
    the clock."""

    def __init__(
        self,
        config: Config,
        *,
        llm: LLMService | None = None,
        tools: ToolRegistry | None = None,
        channels: Sequence[ChannelAdapter] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.config = config
        self._llm_override = llm
        self._tools_override = tools
        self._channels_override = channels
        self._clock = clock
        self.web_channel = WebChannel() if config.web.enabled else None
        self.channels: dict[str, ChannelAdapter] = {}
        self.database: Database | None = None
        self.feed: ChangeFeed | None = None
        self.stores: Stores | None = None
        self.inbox: Inbox | None = None
        self.llm: LLMService | None = None
        self.web_url: str | None = None
        self._web_server: object | None = None
        self._web_task: asyncio.Task[None] | None = None
        self.ready_seconds: float | None = None
        self.outbox: Outbox | None = None
        self.tasks: TaskService | None = None
        self.confirmations: TaskConfirmations | None = None
        self._turns: TurnRunner | None = None
        self.brain: AnalyticalBrain | None = None
        self._background: list[asyncio.Task[None]] = []
        self._lock = InstanceLock(config.app.data_dir)

    async def start(self) -> None:
        started = time.perf_counter()
        config = self.config
        try:
            self._lock.acquire()
        except AlreadyRunningError as exc:
            raise StartupError(str(exc)) from None
        try:
            await upgrade_schema(config.database_url)
        except (OSError, DBAPIError) as exc:
            self._lock.release()
            where = config.database_url.split("@")[-1]
            reason = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
            raise StartupError(
                f"cannot open the database {where}: {reason}. Check database.url; a PostgreSQL "
                "database must exist (createdb) and its user must be allowed to connect."
            ) from exc
        self.database = Database(config.database_url)
        shared = not self.database.is_sqlite  # other processes may use the same database
        claimant = Claimant(new_owner(), config.database.lease_seconds)
        self.feed = feed = open_feed(config.database_url, claimant.owner)
        await feed.start()
        self.stores = stores = Stores.open(self.database, feed, claimant=claimant)
        self.llm = llm = self._llm_override or self._lazy_llm()
        tools = (
            self._tools_override
            if self._tools_override is not None
            else build_tools(config, stores)
        )
        platform = (
            list(self._channels_override)
            if self._channels_override is not None
            else build_channels(config)
        )
        adapters = ([self.web_channel] if self.web_channel else []) + platform
        self.channels = {adapter.name: adapter for adapter in adapters}
        self.outbox = outbox = Outbox(
            stores.messages, stores.deliveries, stores.sessions, self.channels, shared=shared
        )
        summarizer = Summarizer(
            llm,
            config.llm,
            config.agent,
            stores.messages,
            stores.summaries,
            stores.audit,
        )
        library = None
        if config.brain.enabled:
            library = await asyncio.to_thread(load_library, config.skills.dirs)
            self.brain = AnalyticalBrain(
                BrainRunner(
                    llm, config.llm.effective_background_model, stores, library, config.brain
                ),
                max_concurrent=config.agent.max_concurrent_sessions,
            )
        turns = TurnRunner(
            config,
            stores,
            llm,
            tools,
            outbox,
            summarizer,
            clock=self._clock,
            briefing_finished=self._briefing_finished,
            library=library,
            exchange_finished=self.brain.observe if self.brain is not None else None,
        )
        self._turns = turns
        self.inbox = inbox = Inbox(
            stores,
            self._run_turn,
            open_leases(self.database.engine, claimant, shared=shared),
            channels=set(self.channels),
            max_concurrent_sessions=config.agent.max_concurrent_sessions,
            max_message_chars=config.agent.max_message_chars,
            announce=lambda session_id: feed.publish(INBOX_TOPIC, str(session_id)),
        )
        feed.subscribe(INBOX_TOPIC, lambda key: inbox.poke(int(key) if key.isdigit() else None))
        if self.web_channel is not None and shared:
            web_channel = self.web_channel
            web_channel.relay(lambda chat_id: feed.publish(WEB_TOPIC, chat_id))
            feed.subscribe(WEB_TOPIC, web_channel.changed_elsewhere)
        # On SQLite the instance lock already makes this process the only scheduler.
        leadership = (
            None
            if self.database.is_sqlite
            else SchedulerLeadership(
                config.database_url, retry_seconds=config.scheduler.leader_retry_seconds
            )
        )
        self.tasks = tasks = TaskService(
            stores,
            inbox,
            outbox,
            create_scheduler(
                sync_url(config.database_url),
                config.app.zone,
                config.scheduler.misfire_grace_seconds,
            ),
            app_zone=config.app.zone,
            rules=config.scheduler,
            channels=set(self.channels),
            leadership=leadership,
            clock=self._clock,
        )
        self.confirmations = confirmations = TaskConfirmations(tasks, stores, outbox, turns.run)
        if self._tools_override is None and config.tools.proactive.enabled:
            for tool in proactive_tools(confirmations):
                tools.add(tool)
        if self._tools_override is None and config.tools.subagents.enabled:
            tools.add(
                SpawnSubagentTool(
                    config,
                    stores,
                    llm,
                    tools,
                    clock=self._clock,
                    finished=self.brain.observe if self.brain is not None else None,
                )
            )
        gateway = Gateway(
            inbox, stores, reminders=tasks.describe_session, choices=confirmations.choose
        )
        await inbox.recover()
        for adapter in adapters:
            try:
                await adapter.start(gateway)
            except Exception as exc:  # a wrong token or setting: the adapter's message says which
                raise StartupError(f"the {adapter.name} channel could not start: {exc}") from exc
            log.info("channel_started", channel=adapter.name)
        await outbox.redeliver()
        # With other processes, a reply a dead one left unsent is found within a lease or two.
        every = config.database.lease_seconds if shared else REDELIVERY_INTERVAL_SECONDS
        self._background += [
            asyncio.create_task(self._redeliver_periodically(outbox, every), name="redelivery"),
            asyncio.create_task(inbox.keep_leases(), name="session-leases"),
        ]
        await tasks.start()
        if self.web_channel is not None:
            await self._start_web()
        self.ready_seconds = time.perf_counter() - started
        if isinstance(llm, LazyLLM):
            llm.preload()  # after ready: the SDK import must not compete with start-up
        log.info(
            "bruce_ready",
            seconds=round(self.ready_seconds, 3),
            web=self.web_url,
            channels=sorted(self.channels),
            tools=tools.names(),
            llm=config.llm.provider,
            model=config.llm.model,
        )

    async def _run_turn(self, session: SessionRecord, batch: Sequence[QueuedMessage]) -> None:
        # A bare yes/no may answer a task confirmation; the confirmations pass the rest on.
        if self.confirmations is not None:
            await self.confirmations.run(session, batch)
        elif self._turns is not None:
            await self._turns.run(session, batch)

    async def _briefing_finished(self, run_id: int, delivered: bool, error: str | None) -> None:
        if self.tasks is not None:
            await self.tasks.briefing_finished(run_id, delivered, error)

    async def _redeliver_periodically(self, outbox: Outbox, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await outbox.redeliver()
            except Exception as exc:  # keep retrying next round; never kill the daemon
                log.warning("redelivery_failed", error=repr(exc))

    def _lazy_llm(self) -> LLMService:
        config = self.config.llm
        return LazyLLM(lambda: create_llm(config), config.model)

    async def _start_web(self) -> None:
        import uvicorn

        from bruce_bot.web.app import WebContext, create_app

        assert self.stores is not None and self.web_channel is not None
        web = self.config.web
        app = create_app(
            WebContext(
                self.stores,
                self.web_channel,
                web.auth_token,
                self.config.app.name,
                data_dir=self.config.app.data_dir,
                tasks=self.tasks,
                timezone=self.config.app.timezone,
                config_settings={SYSTEM_PROMPT_SETTING: self.config.agent.system_prompt},
                public_url=self.config.app.public_url,
                allowed_hosts=tuple(web.allowed_hosts),
                session_max_age_days=web.session_max_age_days,
                clock=self._clock,
            )
        )
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=web.host,
                port=web.port,
                log_config=None,
                access_log=False,
                lifespan="off",
                server_header=False,
            )
        )
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # we own signals
        self._web_server = server
        self._web_task = asyncio.create_task(server.serve(), name="web-server")
        deadline = time.monotonic() + 10
        while not server.started:
            if self._web_task.done() or time.monotonic() > deadline:
                with contextlib.suppress(BaseException):
                    await self._web_task
                raise StartupError(
                    f"the web dashboard could not listen on {web.host}:{web.port} (is the port in "
                    "use?). Change web.port in config.yml or stop the other program."
                )
            await asyncio.sleep(0.01)
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        self.web_url = f"http://{host}:{port}"

    async def stop(self) -> None:
        log.info("bruce_stopping")
        for adapter in self.channels.values():
            try:
                await adapter.stop()
            except Exception as exc:
                log.warning("channel_stop_failed", channel=adapter.name, error=repr(exc))
        if self.tasks is not None:
            await self.tasks.stop()
        grace = self.config.agent.shutdown_timeout_seconds
        draining_since = time.monotonic()
        if self.inbox is not None:
            await self.inbox.drain(grace)
        if self.brain is not None:
            # Background upkeep gets what is left of the same budget: expendable, never longer.
            await self.brain.stop(max(0.0, grace - (time.monotonic() - draining_since)))
        for adapter in self.channels.values():
            # Adapters keep sending after `stop` (for the turns drained above); now they may go.
            try:
                await adapter.close()
            except Exception as exc:
                log.warning("channel_close_failed", channel=adapter.name, error=repr(exc))
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._web_server is not None and self._web_task is not None:
            self._web_server.should_exit = True  # type: ignore[attr-defined]
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._web_task, 5)
        if self.llm is not None:
            with contextlib.suppress(Exception):
                await self.llm.aclose()
        if self.feed is not None:
            await self.feed.stop()
        if self.database is not None:
            await self.database.dispose()
        self._lock.release()
        log.info("bruce_stopped")

    async def run_until_signal(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
