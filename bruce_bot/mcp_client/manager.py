"""The MCP servers of `mcp.servers`: started in the background, watched, restarted, tools offered.

Each enabled server has a supervisor task. It connects (within the server's
`startup_timeout_seconds`), lists the tools and offers those its `tools.allow`/`tools.deny` let
through, then waits: for the server to announce `tools/list_changed` (the list is asked for
again), for it to go away (it is restarted after a capped exponential backoff with jitter, its
last tools still listed so that a call gets "restarting" rather than "unknown tool"), or for
Bruce to stop (the session is closed, which ends a stdio child and its process group). A server
that never comes up is marked `failed` with why, and the tail of its stderr, and left alone: the
rest of Bruce works. The SDK (0.7 s to import) is imported in a thread, once the first server
starts, after Bruce is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

import structlog

from bruce_bot.config import McpConfig, McpServerConfig
from bruce_bot.mcp_client.tools import McpTool, Outcome, mcp_tool, tool_name
from bruce_bot.tools.registry import Tool

if TYPE_CHECKING:
    from bruce_bot.mcp_client.connection import McpConnection

log = structlog.get_logger(__name__)

State = Literal["starting", "ready", "failed", "restarting", "disabled"]
STDERR_TAIL_CHARS = 1_500
STOP_SECONDS = 8.0  # a stdio child gets 2 s to leave after its stdin closes, then SIGTERM, SIGKILL


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before restarting a server that died: `first` seconds, times `factor`
    per failed attempt, at most `cap`, each spread by ±`jitter` (servers that died together do
    not all come back at once)."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 60.0
    jitter: float = 0.2

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        base = min(self.cap, self.first * self.factor**attempt)
        return max(0.0, base * (1 + self.jitter * (2 * rand() - 1)))


@dataclass(frozen=True, slots=True)
class ToolStatus:
    name: str  # as the model sees it: <server>__<tool>
    server_tool: str  # as the server names it
    description: str
    offered: bool
    reason: str = ""  # why not offered


@dataclass(frozen=True, slots=True)
class ServerStatus:
    name: str
    transport: Literal["stdio", "streamable_http", "sse"]
    state: State
    last_error: str
    tools: tuple[ToolStatus, ...]
    allow_in_tasks: bool


def _reason(error: BaseException) -> str:
    """The first real error inside the SDK's exception groups, in words."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, TimeoutError):
        return "it did not answer the handshake in time"
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def stderr_tail(stderr: IO[bytes] | None) -> str:
    """The last lines a stdio server wrote to its stderr (a small read at the file's end)."""
    if stderr is None or stderr.closed:
        return ""
    try:
        stderr.flush()
        size = stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, size - STDERR_TAIL_CHARS * 2))
        text = stderr.read().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return ""
    return text[-STDERR_TAIL_CHARS:].strip()


@dataclass
class _Supervisor:
    """One server's life: connect, serve, restart."""

    name: str
    config: McpServerConfig
    reserved: frozenset[str]
    backoff: Backoff
    state: State = "starting"
    last_error: str = ""
    tools: list[McpTool] = field(default_factory=list)
    statuses: tuple[ToolStatus, ...] = ()
    _connection: McpConnection | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _refresh: asyncio.Event = field(default_factory=asyncio.Event)
    _broken: asyncio.Event = field(default_factory=asyncio.Event)

    def status(self) -> ServerStatus:
        return ServerStatus(
            self.name,
            self.config.kind,
            self.state,
            self.last_error,
            self.statuses,
            self.config.allow_in_tasks,
        )

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        attempt = 0
        ever_ready = False
        while not self._stop.is_set():
            came_up = await self._session()
            if self._stop.is_set():
                return
            ever_ready = ever_ready or came_up
            if not ever_ready:
                self.state = "failed"
                log.error("mcp_server_failed", server=self.name, error=self.last_error)
                return
            attempt = 0 if came_up else attempt + 1
            self.state = "restarting"
            delay = self.backoff.delay(attempt)
            log.warning(
                "mcp_server_restarting",
                server=self.name,
                error=self.last_error,
                in_seconds=round(delay, 2),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def _session(self) -> bool:
        """One connection, from start to its end; whether it came up."""
        from bruce_bot.mcp_client.connection import ConnectionLost, McpConnection

        self._broken.clear()
        stderr = tempfile.TemporaryFile() if self.config.command else None
        connection = McpConnection(self.name, self.config, self._refresh.set, stderr)
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self.config.startup_timeout_seconds):
                        await stack.enter_async_context(connection)
                        await self._load_tools(connection)
                except Exception as exc:
                    self._failed(_reason(exc), stderr)
                    return False
                self._connection = connection
                self.state = "ready"
                self.last_error = ""
                log.info("mcp_server_ready", server=self.name, tools=[t.name for t in self.tools])
                lost = ""
                try:
                    await self._serve(connection)
                except ConnectionLost as exc:
                    self._broken.set()
                    lost = _reason(exc)
                finally:
                    self._connection = None
                if not self._stop.is_set():
                    self._failed(lost or "the server stopped", stderr)
                return True
        finally:
            if stderr is not None:
                stderr.close()

    def _failed(self, reason: str, stderr: IO[bytes] | None) -> None:
        tail = stderr_tail(stderr)
        self.last_error = f"{reason}; its stderr ended with: {tail}" if tail else reason

    async def _serve(self, connection: McpConnection) -> None:
        """Until the server goes away or Bruce stops; a changed tool list is read again."""
        from bruce_bot.mcp_client.connection import PING_SECONDS, ConnectionLost, reachable

        # A URL server that went away may go unnoticed by the transport (its requests just get
        # no answer): its URL is probed when quiet for `call_timeout_seconds`, restarted if mute.
        quiet = self.config.call_timeout_seconds if self.config.url else None
        while True:
            waits = {
                asyncio.ensure_future(event.wait())
                for event in (self._stop, self._refresh, self._broken, connection.ended)
            }
            try:
                done, _ = await asyncio.wait(
                    waits, timeout=quiet, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiting in waits:
                    waiting.cancel()
            if self._stop.is_set() or self._broken.is_set() or connection.ended.is_set():
                return
            if not done:
                if not await reachable(self.config, min(PING_SECONDS, quiet or PING_SECONDS)):
                    raise ConnectionLost(f"MCP server {self.name} does not answer at its URL")
                continue
            self._refresh.clear()
            try:
                async with asyncio.timeout(self.config.startup_timeout_seconds):
                    await self._load_tools(connection)
            except ConnectionLost:
                raise
            except Exception as exc:  # the old list stays; the next change tries again
                log.warning("mcp_tools_refresh_failed", server=self.name, error=_reason(exc))
                continue
            log.info("mcp_tools_changed", server=self.name, tools=[t.name for t in self.tools])

    async def _load_tools(self, connection: McpConnection) -> None:
        listed = await connection.list_tools()
        config, key = self.config, f"mcp.servers.{self.name}.tools"
        tools: list[McpTool] = []
        statuses: list[ToolStatus] = []
        taken = set(self.reserved)
        for remote in listed:
            name = tool_name(self.name, remote.name)
            reason = ""
            if remote.name in config.tools.deny:
                reason = f"denied by {key}.deny"
            elif config.tools.allow and remote.name not in config.tools.allow:
                reason = f"not in {key}.allow"
            elif name in taken:
                reason = f"its name {name} is taken by another tool"
                log.warning("mcp_tool_name_clash", server=self.name, tool=remote.name, name=name)
            statuses.append(ToolStatus(name, remote.name, remote.description, not reason, reason))
            if reason:
                continue
            taken.add(name)
            tools.append(
                mcp_tool(
                    self.name,
                    remote.name,
                    remote.description,
                    remote.input_schema,
                    self.call,
                    timeout_seconds=config.call_timeout_seconds,
                    max_output_chars=config.max_output_chars,
                    allowed_in_tasks=config.allow_in_tasks,
                    read_only=remote.read_only,
                )
            )
        self.tools, self.statuses = tools, tuple(statuses)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Outcome:
        from bruce_bot.mcp_client.connection import ConnectionLost

        connection = self._connection
        if connection is None or self.state != "ready":
            return Outcome(self._unavailable(), is_error=True, from_server=False)
        try:
            return await connection.call(tool, arguments, self.config.call_timeout_seconds)
        except ConnectionLost:
            self._broken.set()  # a URL server's end is seen here first
            log.warning("mcp_server_lost_in_call", server=self.name, tool=tool)
            return Outcome(
                f"MCP server {self.name} stopped during the call; it is restarting, try again "
                "in a moment (the call may or may not have taken effect).",
                is_error=True,
                from_server=False,
            )

    def _unavailable(self) -> str:
        if self.state == "restarting":
            return f"MCP server {self.name} is restarting; try again in a moment."
        return f"MCP server {self.name} is not running ({self.last_error or self.state})."


class McpManager:
    """Every configured server; the tool registry's source of their tools."""

    def __init__(
        self,
        config: McpConfig,
        reserved: frozenset[str] = frozenset(),
        backoff: Backoff | None = None,
    ) -> None:
        self._config = config
        self._supervisors = [
            _Supervisor(name, server, reserved, backoff or Backoff())
            for name, server in config.enabled_servers.items()
        ]
        self._tasks: list[asyncio.Task[None]] = []
        self._starting: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start every enabled server in the background; returns at once."""
        if self._supervisors and self._starting is None:
            self._starting = asyncio.create_task(self._start(), name="mcp-start")

    async def _start(self) -> None:
        # The SDK costs most of a second to import: in a thread, not on the event loop.
        await asyncio.to_thread(importlib.import_module, "bruce_bot.mcp_client.connection")
        for supervisor in self._supervisors:
            self._tasks.append(asyncio.create_task(supervisor.run(), name=f"mcp-{supervisor.name}"))

    def tools(self) -> Sequence[Tool]:
        return [
            tool
            for supervisor in self._supervisors
            if supervisor.state in ("ready", "restarting")
            for tool in supervisor.tools
        ]

    def statuses(self) -> list[ServerStatus]:
        running = {supervisor.name: supervisor.status() for supervisor in self._supervisors}
        return [
            running.get(name)
            or ServerStatus(name, server.kind, "disabled", "", (), server.allow_in_tasks)
            for name, server in self._config.servers.items()
        ]

    async def stop(self) -> None:
        """Close every session; a stdio child and its process group end with it."""
        for supervisor in self._supervisors:
            supervisor.stop()
        if self._starting is not None:
            with contextlib.suppress(BaseException):
                await self._starting
        if not self._tasks:
            return
        _done, pending = await asyncio.wait(self._tasks, timeout=STOP_SECONDS)
        for task in pending:  # still in its handshake: cancelled (the SDK still ends the child)
            task.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for supervisor, result in zip(self._supervisors, results, strict=False):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.warning("mcp_server_stop_failed", server=supervisor.name, error=repr(result))
        log.info("mcp_stopped", servers=len(self._supervisors), cut_short=len(pending))
