"""The watch tools (`watch_create`, `watch_list`, `watch_cancel`) and what watches read with.

A watch checks a page or a web search every interval against a condition and alerts the chat
when the answer changes (bruce_bot/scheduler/watching.py). The tools follow the scheduling
tools' rules (proactive.py): set up in a turn that read untrusted content, a watch waits for the
user's confirmation. `WebReader` gives the scheduler the same readers the model has: web_fetch's
SSRF-safe fetcher under `tools.web_fetch`'s policy, and the configured search engine, their text
fenced as untrusted data.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Protocol

from bruce_bot.config import ToolsConfig
from bruce_bot.scheduler.new_task import NewWatch
from bruce_bot.scheduler.timing import ScheduleError
from bruce_bot.scheduler.watching import Reading
from bruce_bot.storage.tasks import TaskRecord
from bruce_bot.storage.watches import WATCH_MODE, WatchRecord
from bruce_bot.tools.own_address import OwnAddress
from bruce_bot.tools.proactive import call_origin
from bruce_bot.tools.registry import Tool, ToolContext, ToolError, as_untrusted
from bruce_bot.tools.web_fetch import FetchPolicy, PageFetcher, page_text, render
from bruce_bot.tools.web_search import SearchFailed, SearchProvider, format_results, provider_for

CREATE_TOOL = "watch_create"
LIST_TOOL = "watch_list"
CANCEL_TOOL = "watch_cancel"
WATCH_TOOLS = frozenset({CREATE_TOOL, LIST_TOOL, CANCEL_TOOL})
SEARCH_RESULTS = 8  # results a watched search reads


class WatchPort(Protocol):
    async def create_watch(self, new: NewWatch) -> TaskRecord: ...
    async def watches(self, session_id: int) -> list[tuple[TaskRecord, WatchRecord]]: ...
    async def cancel(self, task_id: int, session_id: int) -> TaskRecord: ...
    def describe_watch(self, task: TaskRecord, watch: WatchRecord) -> str: ...


def _session(context: ToolContext) -> int:
    if context.session_id is None:
        raise ToolError("a watch needs a conversation; this call has none")
    return context.session_id


class WatchCreate(Tool):
    name = CREATE_TOOL
    effect = "own_state"
    confirms_itself = True  # after outside content: stored unconfirmed, Bruce asks
    description = (
        "Watch a web page (url) or a web search (query) for the user: every interval Bruce reads "
        "it and checks `condition` (e.g. 'the price is below 100 EUR', 'tickets are on sale'), "
        "and alerts this chat when the condition starts to hold or what matches changes. Give "
        "exactly one of url and query; interval in minutes ('30') or words like "
        "'30 minutes', 'every 2 hours', 'daily'."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "url": {"type": "string", "minLength": 1, "maxLength": 2000},
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "condition": {"type": "string", "minLength": 1, "maxLength": 2000},
            "interval": {
                "type": "string",
                "minLength": 1,
                "maxLength": 60,
                "description": "Minutes ('30') or words: '30 minutes', 'every 2 hours', 'daily'.",
            },
        },
        "required": ["title", "condition", "interval"],
        "additionalProperties": False,
    }

    def __init__(self, watches: WatchPort) -> None:
        self._watches = watches

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        try:
            task = await self._watches.create_watch(
                NewWatch(
                    session_id=_session(context),
                    channel=context.channel,
                    chat_id=context.chat_id,
                    title=arguments["title"],
                    condition=arguments["condition"],
                    interval=arguments["interval"],
                    url=arguments.get("url"),
                    query=arguments.get("query"),
                    confirmed=not context.untrusted_input,
                    origin=call_origin(context, self.name, arguments),
                    created_by=context.person or None,
                )
            )
        except ScheduleError as exc:
            raise ToolError(str(exc)) from None
        if task.status == "unconfirmed":
            return (
                f"Watch {task.id} was stored but is NOT active yet: this turn read content from "
                "outside (web pages or search results), so the user must confirm it first. "
                "Bruce asks the user in the chat after your answer. Tell the user it waits for "
                "their yes."
            )
        return (
            f"Watch {task.id} created; its first check runs now and the user is alerted when "
            "the condition holds."
        )


class WatchList(Tool):
    name = LIST_TOOL
    effect = "reads"
    description = "List this chat's watches: target, condition, interval and last result."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }

    def __init__(self, watches: WatchPort) -> None:
        self._watches = watches

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        found = await self._watches.watches(_session(context))
        if not found:
            return "No watches in this chat."
        return "\n".join(self._watches.describe_watch(task, watch) for task, watch in found)


class WatchCancel(Tool):
    name = CANCEL_TOOL
    effect = "own_state"
    description = "Cancel a watch of this chat by its id (see watch_list)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"watch_id": {"type": "integer", "minimum": 1}},
        "required": ["watch_id"],
        "additionalProperties": False,
    }

    def __init__(self, watches: WatchPort) -> None:
        self._watches = watches

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        session_id = _session(context)
        watch_id = arguments["watch_id"]
        if not any(task.id == watch_id for task, _ in await self._watches.watches(session_id)):
            raise ToolError(
                f"there is no watch {watch_id} in this conversation; call watch_list to see "
                "the watch ids"
            )
        try:
            task = await self._watches.cancel(watch_id, session_id)
        except ScheduleError as exc:
            raise ToolError(str(exc)) from None
        return f"Watch {task.id} ('{task.title}') cancelled."


def watch_tools(watches: WatchPort) -> list[Tool]:
    return [WatchCreate(watches), WatchList(watches), WatchCancel(watches)]


class WebReader:
    """What watches read with: the web tools' fetcher and search engine (None: that tool family
    is off, and a watch of that kind fails its checks saying so)."""

    def __init__(
        self, fetcher: PageFetcher | None, search: SearchProvider | None, max_chars: int
    ) -> None:
        self._fetcher = fetcher
        self._search = search
        self._max_chars = max_chars

    async def read_page(self, url: str) -> Reading:
        if self._fetcher is None:
            raise ToolError("tools.web_fetch is disabled, so pages cannot be read")
        page = await self._fetcher.fetch(url)
        title, text = await asyncio.to_thread(page_text, page)
        content = render(page, title, text, self._max_chars)
        return Reading(content, as_untrusted(content, "web_fetch"))

    async def refusal(self, url: str) -> str | None:
        """Why checks of `url` would be refused (web_fetch's policy), told when the watch is
        made rather than after its first failed checks."""
        if self._fetcher is None:
            return "tools.web_fetch is disabled, so pages cannot be watched"
        return await self._fetcher.refusal(url)

    async def search(self, query: str) -> Reading:
        if self._search is None:
            raise ToolError("tools.web_search is disabled, so searches cannot be run")
        try:
            results = await self._search.search(query, SEARCH_RESULTS)
        except SearchFailed as exc:
            raise ToolError(f"web search failed ({exc})") from None
        content = format_results(query, results)
        return Reading(content, as_untrusted(content, "web_search"))


def web_reader(tools: ToolsConfig, own_address: OwnAddress | None = None) -> WebReader:
    """The reader for the configured web tools: the same policy as the model's web_fetch."""
    fetch, search = tools.web_fetch, tools.web_search
    fetcher = PageFetcher(FetchPolicy.from_config(fetch, own_address)) if fetch.enabled else None
    return WebReader(fetcher, provider_for(search) if search.enabled else None, fetch.max_chars)


__all__ = ["WATCH_MODE", "WATCH_TOOLS", "WebReader", "watch_tools", "web_reader"]
