"""Bruce's life cycle: the parts (built by `parts.build_parts`, no I/O) started and stopped in
order.

Start: the data dir made or tightened to 0700 (`private_files.py`) → instance lock → schema
upgrade → skills and workflows (read once) → the dashboard's token (read or made) → the parts
built, the web context with them, and the web app made (no I/O: most of Bruce's modules are
imported by now; the `built` hook runs) → change feed (PostgreSQL) → background upkeep (lease
renewal, periodic redelivery) → recovery of unfinished messages → channels (intake) →
redelivery of unsent replies → scheduler (on PostgreSQL, once this process is elected its
leader) → web server listening → ready (the LLM SDK then loads in the background,
and the MCP servers start, each on its own). Without `web.auth_token` in config.yml the
dashboard's token is Bruce's own (`web/login_token.py`, made on first start) and, once the web
server listens, a one-time sign-in link is printed on stdout (the log scrubber masks a `?token=`
in log lines, and a log is kept longer than a console).
Stop: channels stop taking messages → running turns finish within `agent.shutdown_timeout_seconds`
(the rest go back to `pending`) → brain runs finish within what is left of that time (the rest
are cancelled) → MCP servers (their sessions closed, stdio children ended) → web server → LLM
client → database.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import structlog
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from bruce_bot.agent.brain.library import Library, load_library
from bruce_bot.agent.brain.runner import AnalyticalBrain
from bruce_bot.channels.base import ChannelAdapter
from bruce_bot.channels.web.channel import WebChannel
from bruce_bot.config import Config
from bruce_bot.domain import utcnow
from bruce_bot.instance_lock import AlreadyRunningError, InstanceLock
from bruce_bot.llm.base import LLMService
from bruce_bot.llm.lazy import LazyLLM
from bruce_bot.llm.switchable import SwitchableLLM
from bruce_bot.logs import scrubber
from bruce_bot.messaging.inbox import Inbox
from bruce_bot.messaging.outbox import REDELIVERY_INTERVAL_SECONDS, Outbox
from bruce_bot.parts import Overrides, Parts, WebLogin, build_parts
from bruce_bot.private_files import secure_data_dir
from bruce_bot.scheduler.confirmations import TaskConfirmations
from bruce_bot.scheduler.service import TaskService
from bruce_bot.storage.changes import ChangeFeed
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.registry import ToolRegistry
from bruce_bot.web.context import WebContext
from bruce_bot.web.login_token import OneTimeLogin, load_or_create, token_path
from bruce_bot.web.server import CannotListenError, WebServer

log = structlog.get_logger(__name__)


def _only_for_this_user(url: str) -> None:
    """A SQLite file readable by the daemon's user only: it holds the API keys and tokens saved
    in the dashboard (PostgreSQL guards its own files)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database or "")
        if path.exists():
            path.chmod(0o600)


class StartupError(Exception):
    """Bruce cannot start; the message says why and what to do."""


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
        self._overrides = Overrides(llm=llm, tools=tools, channels=channels, clock=clock)
        uploads = config.app.data_dir / "media" / "uploads"
        self.web_channel = (
            WebChannel(uploads, streaming=config.web.streaming) if config.web.enabled else None
        )
        self.parts: Parts | None = None
        self.web_url: str | None = None
        # This start's one-time sign-in link (None: the token is set in config.yml, or 'none').
        self.login_url: str | None = None
        self._login_link: OneTimeLogin | None = None
        self.ready_seconds: float | None = None
        self._web: WebServer | None = None
        self._background: list[asyncio.Task[None]] = []
        self._lock = InstanceLock(config.app.data_dir)

    # What tests and the tools of the repository reach for, once started.
    @property
    def stores(self) -> Stores | None:
        return self.parts.stores if self.parts else None

    @property
    def database(self) -> Database | None:
        return self.parts.database if self.parts else None

    @property
    def feed(self) -> ChangeFeed | None:
        return self.parts.feed if self.parts else None

    @property
    def llm(self) -> LLMService | None:
        return self.parts.llm if self.parts else None

    @property
    def inbox(self) -> Inbox | None:
        return self.parts.inbox if self.parts else None

    @property
    def outbox(self) -> Outbox | None:
        return self.parts.outbox if self.parts else None

    @property
    def tasks(self) -> TaskService | None:
        return self.parts.tasks if self.parts else None

    @property
    def confirmations(self) -> TaskConfirmations | None:
        return self.parts.confirmations if self.parts else None

    @property
    def brain(self) -> AnalyticalBrain | None:
        return self.parts.brain if self.parts else None

    @property
    def channels(self) -> dict[str, ChannelAdapter]:
        return self.parts.channels if self.parts else {}

    async def start(self, built: Callable[[], None] | None = None) -> None:
        """Start everything, in order; `built` is called once the parts are built, before any
        of them starts (`bruce run` resumes the garbage collector there: see cli/run.py)."""
        started = time.perf_counter()
        self._lock_instance()
        await self._upgrade_database()
        library = await self._load_library()
        self.parts = parts = self._build(library)
        web = None if parts.web is None else self._build_web(parts.web)
        if built is not None:
            built()
        await parts.feed.start()
        if parts.llm_settings is not None:
            await parts.llm_settings.load()  # the dashboard's LLM settings win over config.yml
        # Leases are renewed from before the first is taken: a slow start-up (a backlog of
        # replies to redeliver) must not let them lapse under running turns.
        self._start_background(parts)
        await parts.inbox.recover()
        if parts.platform_tokens is not None:
            await parts.platform_tokens.load()  # a token saved in the dashboard wins
        await self._start_channels(parts)
        if parts.platform_tokens is not None:
            parts.platform_tokens.started(parts.gateway)
        await parts.outbox.redeliver()
        # What a crash left between storing a held action (or task) and asking about it.
        await parts.confirmations.ask_everywhere()
        if parts.budget is not None:
            parts.budget.start()  # the month read once: a level reached while down is told
        await parts.tasks.start()
        if web is not None:
            await self._start_web(web)
        self.ready_seconds = seconds = time.perf_counter() - started
        self._after_ready(parts, seconds)

    def _after_ready(self, parts: Parts, seconds: float) -> None:
        """What waits until Bruce is ready, so that it competes with nothing at start-up."""
        if isinstance(parts.llm, LazyLLM | SwitchableLLM):
            parts.llm.preload()  # the SDK import
        if parts.mcp is not None:
            parts.mcp.start()  # in the background: a slow or broken server delays nothing
        log.info(
            "bruce_ready",
            seconds=round(seconds, 3),
            web=self.web_url,
            channels=sorted(parts.channels),
            tools=parts.tools.names(),
            llm=self.config.llm.provider,
            model=self.config.llm.model,
        )

    def _lock_instance(self) -> None:
        data_dir = self.config.app.data_dir
        try:
            secure_data_dir(data_dir)
        except OSError as exc:
            raise StartupError(
                f"cannot make the data directory {data_dir}: {exc.strerror or exc}. Check "
                "app.data_dir: it must be a folder this user may create and write."
            ) from None
        try:
            self._lock.acquire()
        except AlreadyRunningError as exc:
            raise StartupError(str(exc)) from None

    async def _upgrade_database(self) -> None:
        url = self.config.database_url
        try:
            await upgrade_schema(url)
            _only_for_this_user(url)
        except (OSError, DBAPIError) as exc:
            self._lock.release()
            where = url.split("@")[-1]
            reason = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
            raise StartupError(
                f"cannot open the database {where}: {reason}. Check database.url; a PostgreSQL "
                "database must exist (createdb) and its user must be allowed to connect."
            ) from exc

    async def _load_library(self) -> Library | None:
        if not self.config.brain.enabled:
            return None
        return await asyncio.to_thread(load_library, self.config.skills.dirs)

    async def _start_channels(self, parts: Parts) -> None:
        # Enabled without a token (none in config.yml, none saved): it starts once one is saved.
        waiting = parts.platform_tokens.waiting() if parts.platform_tokens is not None else set()
        for adapter in parts.adapters:
            if adapter.name in waiting:
                log.warning(
                    "channel_waiting_for_token",
                    channel=adapter.name,
                    hint=f"save a {adapter.name} bot token in the dashboard (Settings), or set "
                    f"channels.{adapter.name}.token in config.yml",
                )
                continue
            try:
                await adapter.start(parts.gateway)
            except Exception as exc:  # a wrong token or setting: the adapter's message says which
                raise StartupError(f"the {adapter.name} channel could not start: {exc}") from exc
            log.info("channel_started", channel=adapter.name)

    def _start_background(self, parts: Parts) -> None:
        # With other processes, a reply a dead one left unsent is found within a lease or two.
        lease = self.config.database.lease_seconds
        every = lease if parts.shared else REDELIVERY_INTERVAL_SECONDS
        self._background += [
            asyncio.create_task(
                self._redeliver_periodically(parts.outbox, every), name="redeliver"
            ),
            asyncio.create_task(parts.inbox.keep_leases(), name="session-leases"),
        ]

    async def _redeliver_periodically(self, outbox: Outbox, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await outbox.redeliver()
            except Exception as exc:  # keep retrying next round; never kill the daemon
                log.warning("redelivery_failed", error=repr(exc))

    def _build(self, library: Library | None) -> Parts:
        """The parts (no I/O), with the dashboard's sign-in read first (file I/O) when it is on."""
        login = None if self.web_channel is None else self._web_login()
        return build_parts(self.config, library, self._overrides, self.web_channel, login)

    def _build_web(self, context: WebContext) -> WebServer:
        from bruce_bot.web.app import create_app

        return WebServer(create_app(context), self.config.web.host, self.config.web.port)

    def _web_login(self) -> WebLogin:
        """The dashboard's token: config.yml's, else Bruce's own (with this start's sign-in
        link); "" for `web.auth_token: none`."""
        web = self.config.web
        if web.login_disabled:
            log.warning(
                "web_login_disabled",
                hint="web.auth_token is 'none': anyone on this machine can use the dashboard; "
                "remove it to get a generated token and a sign-in link",
            )
            return WebLogin("")
        if web.auth_token:
            return WebLogin(web.auth_token)
        token = load_or_create(self.config.app.data_dir)
        scrubber.add_secret(token)  # never in a log line, like a configured one
        if self.config.database_url.startswith("postgresql"):
            # Each process has its own data dir, so its own token: a browser signed in to one
            # is signed out by another (its session was made with another token).
            log.warning(
                "web_token_per_process",
                hint="several processes share this database: give them one web.auth_token "
                "(bruce token) so that a signed-in browser stays signed in on each",
            )
        self._login_link = OneTimeLogin()
        return WebLogin(token, self._login_link)

    async def _start_web(self, web: WebServer) -> None:
        self._web = web
        try:
            self.web_url = await web.start()
        except CannotListenError as exc:
            raise StartupError(str(exc)) from None
        if self.parts is not None:
            self.parts.hints.dashboard_listening(self.web_url)
            self.parts.own_address.listening(int(self.web_url.rsplit(":", 1)[1]))
        if self._login_link is not None:
            self.login_url = self._login_link.link(self.web_url)
            print(
                "\nBruce's dashboard: open this link to sign in (it works once, until Bruce "
                f"restarts):\n\n    {self.login_url}\n\nScripts: send 'Authorization: Bearer "
                f"<token>', the token in {token_path(self.config.app.data_dir)} "
                "(`bruce token --show` prints it).\n",
                flush=True,
            )
            log.info(
                "web_login_link_printed",
                to="stdout",
                token_file=str(token_path(self.config.app.data_dir)),
            )

    async def stop(self) -> None:
        log.info("bruce_stopping")
        parts = self.parts
        if parts is not None:
            await self._stop_intake_and_work(parts)
        if parts is not None and parts.mcp is not None:
            await parts.mcp.stop()  # the turns are done: no call is cut
        if parts is not None and parts.budget is not None:
            await parts.budget.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._web is not None:
            await self._web.stop()
        if parts is not None:
            await self._close(parts)
        self._lock.release()
        log.info("bruce_stopped")

    async def _stop_intake_and_work(self, parts: Parts) -> None:
        """Channels stop taking messages, the scheduler stops firing, running turns finish
        within the grace period, then brain runs within what is left of it."""
        for adapter in parts.adapters:
            try:
                await adapter.stop()
            except Exception as exc:
                log.warning("channel_stop_failed", channel=adapter.name, error=repr(exc))
        await parts.tasks.stop()
        grace = self.config.agent.shutdown_timeout_seconds
        draining_since = time.monotonic()
        await parts.inbox.drain(grace)
        if parts.brain is not None:
            # Background upkeep gets what is left of the same budget: expendable, never longer.
            await parts.brain.stop(max(0.0, grace - (time.monotonic() - draining_since)))
        await self._stop_redelivery()
        for adapter in parts.adapters:
            # Adapters keep sending after `stop` (for the turns drained above); now they may go.
            try:
                await adapter.close()
            except Exception as exc:
                log.warning("channel_close_failed", channel=adapter.name, error=repr(exc))

    async def _stop_redelivery(self) -> None:
        """The redelivery sweep stopped while the channels can still send: a send it began is
        finished and recorded first (the outbox's rule), never cut by a closing channel."""
        sweeps = [task for task in self._background if task.get_name() == "redeliver"]
        for task in sweeps:
            task.cancel()
        await asyncio.gather(*sweeps, return_exceptions=True)

    async def _close(self, parts: Parts) -> None:
        try:
            await parts.llm.aclose()
        except Exception as exc:
            log.debug("llm_close_failed", error=repr(exc))
        if parts.transcriber is not None:
            try:
                await parts.transcriber.aclose()
            except Exception as exc:
                log.debug("transcriber_close_failed", error=repr(exc))
        await parts.feed.stop()
        await parts.database.dispose()

    async def run_until_signal(self, built: Callable[[], None] | None = None) -> None:
        """Start (`built`: see `start`), serve until SIGTERM or SIGINT, then stop."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start(built)
        try:
            await stop.wait()
        finally:
            await self.stop()
