"""The `web_search` tool: a query in, a numbered list of results (title, URL, snippet) out.

The engine is chosen by `tools.web_search.provider` (docs/design.md): `duckduckgo` needs no key and
goes through the `ddgs` metasearch library (synchronous, so it runs in a worker thread); `searxng`,
`brave` and `tavily` are JSON APIs called with httpx. Every provider turns its answer into
`SearchResult`s; whatever goes wrong (timeout, HTTP error, rate limit, malformed answer) becomes a
`ToolError` that tells the model what happened and what it can do instead.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from bruce_bot.config import WebSearchConfig
from bruce_bot.tools.registry import Tool, ToolContext, ToolError

DEFAULT_RESULTS = 5
MAX_RESULTS = 10
MAX_QUERY_CHARS = 400  # Brave's limit; longer queries are not better queries anyway
SEARCH_TIMEOUT_SECONDS = 15.0
SNIPPET_CHARS = 400
BRAVE_ENDPOINT = "https://api.search.brave.com/res/v1/web/search"
TAVILY_ENDPOINT = "https://api.tavily.com/search"
USER_AGENT = "Bruce/0.1 (self-hosted personal assistant)"

_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    url: str
    snippet: str


class SearchFailed(Exception):
    """A provider could not answer; the message says what happened (e.g. "searxng answered 502")."""


class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, max_results: int) -> list[SearchResult]: ...


def plain(text: Any) -> str:
    """Text without HTML tags, entities or runs of white space (snippets often carry <strong>)."""
    if not isinstance(text, str):
        return ""
    return _SPACE.sub(" ", html.unescape(_TAG.sub("", text))).strip()


def _results(items: Any, snippet_key: str, max_results: int) -> list[SearchResult]:
    if not isinstance(items, list):
        raise SearchFailed("the answer had no result list")
    found: list[SearchResult] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        url = item.get("url") or item.get("href")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            continue
        title = plain(item.get("title")) or url
        found.append(SearchResult(title, url, plain(item.get(snippet_key))))
        if len(found) >= max_results:
            break
    return found


class _JSONProvider:
    """A provider behind an HTTP JSON API; subclasses build the request and read the answer."""

    name = ""

    def __init__(self, timeout: float = SEARCH_TIMEOUT_SECONDS) -> None:
        self.timeout = timeout

    async def _call(self, request: httpx.Request) -> Any:
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.send(request)
        except httpx.TimeoutException:
            raise SearchFailed(f"{self.name} did not answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise SearchFailed(f"{self.name} could not be reached: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise SearchFailed(f"{self.name} answered {response.status_code}{self._hint(response)}")
        try:
            return response.json()
        except ValueError:
            raise SearchFailed(f"{self.name} answered something that is not JSON") from None

    def _hint(self, response: httpx.Response) -> str:
        if response.status_code in (401, 403):
            return ": the API key was refused"
        if response.status_code == 429:
            return ": too many searches, rate limited"
        return ""


class SearXNGProvider(_JSONProvider):
    name = "searxng"

    def __init__(self, base_url: str, timeout: float = SEARCH_TIMEOUT_SECONDS) -> None:
        super().__init__(timeout)
        self.base_url = base_url.rstrip("/")

    def _hint(self, response: httpx.Response) -> str:
        if response.status_code == 403:
            # SearXNG refuses format=json unless the owner lists it under search.formats.
            return ": the instance does not allow the JSON format (search.formats in settings.yml)"
        return super()._hint(response)

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        request = httpx.Request(
            "GET",
            f"{self.base_url}/search",
            params={"q": query, "format": "json", "pageno": 1},
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
        )
        answer = await self._call(request)
        if not isinstance(answer, dict):
            raise SearchFailed("searxng answered an unexpected JSON value")
        return _results(answer.get("results"), "content", max_results)


class BraveProvider(_JSONProvider):
    name = "brave"

    def __init__(
        self, api_key: str, endpoint: str = BRAVE_ENDPOINT, timeout: float = SEARCH_TIMEOUT_SECONDS
    ) -> None:
        super().__init__(timeout)
        self.api_key = api_key
        self.endpoint = endpoint

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        request = httpx.Request(
            "GET",
            self.endpoint,
            params={"q": query, "count": max_results},
            headers={
                "Accept": "application/json",
                "X-Subscription-Token": self.api_key,
                "User-Agent": USER_AGENT,
            },
        )
        answer = await self._call(request)
        web = answer.get("web") if isinstance(answer, dict) else None
        if web is None and isinstance(answer, dict):
            return []  # no "web" section: Brave found nothing
        if not isinstance(web, dict):
            raise SearchFailed("brave answered an unexpected JSON value")
        return _results(web.get("results", []), "description", max_results)


class TavilyProvider(_JSONProvider):
    name = "tavily"

    def __init__(
        self, api_key: str, endpoint: str = TAVILY_ENDPOINT, timeout: float = SEARCH_TIMEOUT_SECONDS
    ) -> None:
        super().__init__(timeout)
        self.api_key = api_key
        self.endpoint = endpoint

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        request = httpx.Request(
            "POST",
            self.endpoint,
            json={"query": query, "max_results": max_results, "search_depth": "basic"},
            headers={"Authorization": f"Bearer {self.api_key}", "User-Agent": USER_AGENT},
        )
        answer = await self._call(request)
        if not isinstance(answer, dict):
            raise SearchFailed("tavily answered an unexpected JSON value")
        return _results(answer.get("results"), "content", max_results)


def _default_ddgs(timeout: float) -> Any:
    # Imported on first use: the library (and its HTTP client) is only loaded when DuckDuckGo
    # search is actually used, not at every start-up.
    from ddgs import DDGS

    return DDGS(timeout=int(timeout))


class DuckDuckGoProvider:
    """Keyless search through `ddgs` (it queries DuckDuckGo and other engines, merged)."""

    name = "duckduckgo"

    def __init__(
        self,
        timeout: float = SEARCH_TIMEOUT_SECONDS,
        ddgs_factory: Callable[[float], Any] = _default_ddgs,
    ) -> None:
        self.timeout = timeout
        self._ddgs_factory = ddgs_factory

    def _search_sync(self, query: str, max_results: int) -> list[dict[str, Any]]:
        return list(self._ddgs_factory(self.timeout).text(query, max_results=max_results) or [])

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        try:
            async with asyncio.timeout(self.timeout + 5):
                items = await asyncio.to_thread(self._search_sync, query, max_results)
        except TimeoutError:
            raise SearchFailed(f"duckduckgo did not answer within {self.timeout:g} s") from None
        except Exception as exc:  # ddgs raises its own exceptions and its HTTP client's
            message = str(exc)
            if "No results found" in message:
                return []
            kind = type(exc).__name__
            if "Ratelimit" in kind:
                raise SearchFailed("duckduckgo rate-limited the search") from None
            if "Timeout" in kind or "timed out" in message:
                raise SearchFailed(f"duckduckgo did not answer within {self.timeout:g} s") from None
            raise SearchFailed(f"duckduckgo failed: {kind}") from None
        return _results(items, "body", max_results)


def provider_for(config: WebSearchConfig) -> SearchProvider:
    """The provider `config` names; its URL or key was checked when the config was loaded."""
    if config.provider == "searxng":
        return SearXNGProvider(config.searxng_url or "")
    if config.provider == "brave":
        return BraveProvider(config.brave_api_key)
    if config.provider == "tavily":
        return TavilyProvider(config.tavily_api_key)
    return DuckDuckGoProvider()


def format_results(query: str, results: list[SearchResult]) -> str:
    if not results:
        return f"No results for {query!r}. Try other words, or a broader query."
    lines = [f"Search results for {query!r}:"]
    for number, result in enumerate(results, 1):
        snippet = result.snippet
        if len(snippet) > SNIPPET_CHARS:
            snippet = snippet[: SNIPPET_CHARS - 1].rstrip() + "…"
        lines.append(f"\n{number}. {result.title}\n   {result.url}")
        if snippet:
            lines.append(f"   {snippet}")
    return "\n".join(lines)


class WebSearchTool(Tool):
    name = "web_search"
    effect = "reads"
    reads_outside_world = True
    description = (
        "Search the web. Returns a numbered list of results, each with its title, URL and a "
        "short snippet. Use it for current events and facts you are not sure of; read a result "
        "in full with web_fetch when the snippet is not enough."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                "description": "What to search for, as you would type it into a search engine.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "description": f"How many results to return (default {DEFAULT_RESULTS}).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    timeout_seconds = SEARCH_TIMEOUT_SECONDS + 10

    def __init__(self, provider: SearchProvider) -> None:
        self.provider = provider

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        query = arguments["query"].strip()
        if not query:
            raise ToolError("argument 'query' is empty; say what to search for")
        max_results = int(arguments.get("max_results", DEFAULT_RESULTS))
        try:
            results = await self.provider.search(query, max_results)
        except SearchFailed as exc:
            raise ToolError(
                f"web search failed ({exc}); try again in a moment, or answer from what you "
                "already know and tell the user the search did not work"
            ) from None
        return format_results(query, results)
