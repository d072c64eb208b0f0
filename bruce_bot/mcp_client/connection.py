"""One live session with one MCP server, over the official `mcp` SDK (the only module importing it).

A `McpConnection` is opened and closed by its server's supervisor task (`manager.py`): it starts
the command (stdio, its stderr written to the file the supervisor gives, whose tail explains a
failure) or connects
to the URL (streamable HTTP with the configured headers, or SSE), runs the initialize handshake,
lists the tools and calls them. The handshake-era protocol ("legacy" in the SDK) is used on
purpose: it is what the servers of the ecosystem speak, and on it a server may announce
`notifications/tools/list_changed` at any time (a 2026-07-28 session would need a subscription).
The read stream is watched, so a server that exits is noticed at once, not at the next call.
A call's result is turned into plain text here, so nothing outside this module sees SDK types.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, TextIO, cast

import httpx
import mcp_types as types
import structlog
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from bruce_bot.config import McpServerConfig
from bruce_bot.mcp_client.tools import Outcome

log = structlog.get_logger(__name__)

_LIST_PAGES = 20  # a server whose listing never ends cannot hang the start
PING_SECONDS = 5.0  # how long a live server may take to answer a ping


async def reachable(config: McpServerConfig, within: float) -> bool:
    """Whether a URL server's address answers HTTP at all (any status). Over HTTP a server that
    went away is not always told by the SDK's transport (its requests just get no answer), and a
    probe through the session itself would wait on that same transport: a plain request tells."""
    if not config.url:
        return True
    try:
        async with httpx.AsyncClient(timeout=within) as http:
            await http.get(config.url, headers=dict(config.headers))
    except httpx.HTTPError:
        return False
    return True


class ConnectionLost(Exception):
    """The server went away (it exited, or its HTTP endpoint stopped answering)."""


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    # The server's `readOnlyHint`: true only when it says the tool does not change anything.
    read_only: bool = False


class _WatchedReadStream:
    """The transport's read stream, setting `ended` once it ends: the server is gone."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def _watched(self, next_message: Awaitable[Any]) -> Any:
        try:
            return await next_message
        except BaseException:
            self._ended.set()
            raise

    async def receive(self) -> Any:
        return await self._watched(self._inner.receive())

    async def aclose(self) -> None:
        self._ended.set()
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        return await self._watched(self._inner.__anext__())

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _WatchedTransport:
    """Wraps an SDK transport so that the end of its read stream is seen."""

    def __init__(self, inner: AbstractAsyncContextManager[Any], ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    async def __aenter__(self) -> tuple[Any, Any]:
        read_stream, write_stream = await self._inner.__aenter__()
        return _WatchedReadStream(read_stream, self._ended), write_stream

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        self._ended.set()
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


class McpConnection:
    """An open session with one server. Enter and leave it in the same task (the SDK's task
    groups require it); `call` and `list_tools` may be awaited from any task."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        on_tools_changed: Callable[[], None],
        stderr: IO[bytes] | None = None,
    ) -> None:
        self.name = name
        self._config = config
        self._on_tools_changed = on_tools_changed
        # A real file: the child writes its stderr there directly (a pipe nobody reads would
        # fill up and stall the server).
        self._stderr = stderr
        self.ended = asyncio.Event()
        self._stack = AsyncExitStack()
        self._client: Client | None = None

    async def __aenter__(self) -> McpConnection:
        try:
            transport = self._transport()
            client = Client(
                cast(Any, _WatchedTransport(transport, self.ended)),
                mode="legacy",
                message_handler=self._message,
                client_info=types.Implementation(name="bruce", version="1"),
                cache=None,  # listings are asked for when they change, never served stale
            )
            self._client = await self._stack.enter_async_context(client)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.ended.set()
        await self._stack.aclose()

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        config = self._config
        if config.command:
            params = StdioServerParameters(
                command=config.command,
                args=config.args,
                env=config.env or None,
                cwd=config.cwd,
            )
            errlog = cast(TextIO, self._stderr) if self._stderr is not None else sys.stderr
            return stdio_client(params, errlog=errlog)
        assert config.url is not None
        headers = dict(config.headers)
        if config.transport == "sse":
            return sse_client(config.url, headers=headers or None)
        http = create_mcp_http_client(headers=headers or None)
        return streamable_http_client(config.url, http_client=http)

    async def _message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._on_tools_changed()

    @property
    def client(self) -> Client:
        if self._client is None or self.ended.is_set():
            raise ConnectionLost(f"the connection to MCP server {self.name} is closed")
        return self._client

    async def list_tools(self) -> list[RemoteTool]:
        found: list[RemoteTool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            try:
                page = await self.client.list_tools(cursor=cursor)
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    raise ConnectionLost(str(exc)) from exc
                raise
            found += [
                RemoteTool(
                    tool.name,
                    tool.description or "",
                    dict(tool.input_schema),
                    read_only=bool(tool.annotations and tool.annotations.read_only_hint),
                )
                for tool in page.tools
            ]
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    async def call(self, tool: str, arguments: dict[str, Any], within: float) -> Outcome:
        """Call `tool`; raises `ConnectionLost` when the server went away meanwhile."""
        client = self.client
        try:
            result = await client.call_tool(tool, arguments, read_timeout_seconds=within)
        except ValidationError as exc:
            # The SDK checks the answer against the protocol: what it rejects is no result.
            problems = "; ".join(str(error["msg"]) for error in exc.errors()[:3])
            return Outcome(
                f"MCP server {self.name} answered with content that is not valid MCP ({problems}).",
                is_error=True,
                from_server=False,
            )
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED or self.ended.is_set():
                raise ConnectionLost(str(exc)) from exc
            if exc.code == types.REQUEST_TIMEOUT and not await reachable(
                self._config, PING_SECONDS
            ):
                raise ConnectionLost(
                    f"no answer within {within:g} s; its URL is unreachable"
                ) from exc
            return Outcome(
                f"MCP server {self.name} refused the call: {exc.error.message}", is_error=True
            )
        except (OSError, ConnectionError) as exc:
            raise ConnectionLost(repr(exc)) from exc
        return _outcome(result)


def _outcome(result: types.CallToolResult) -> Outcome:
    parts = [_describe(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(part for part in parts if part) or "(the tool returned no content)"
    return Outcome(text, is_error=bool(result.is_error))


def _size(data: str) -> str:
    try:
        size = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        size = len(data) * 3 // 4
    return f"{size / 1024:.0f} KB" if size >= 1024 else f"{size} bytes"


def _describe(block: types.ContentBlock) -> str:
    """Text as it is; anything else described in a line (the model cannot see it here)."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[an image was returned: {block.mime_type}, {_size(block.data)}; not shown]"
    if isinstance(block, types.AudioContent):
        return f"[an audio clip was returned: {block.mime_type}, {_size(block.data)}; not played]"
    if isinstance(block, types.ResourceLink):
        return f"[a resource: {block.name} <{block.uri}>]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        kind = resource.mime_type or "binary data"
        return f"[a resource was returned: {resource.uri}, {kind}, {_size(resource.blob)}]"
    return f"[content of type {getattr(block, 'type', '?')} not shown]"
