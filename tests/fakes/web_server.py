"""A local fake of the web for the web tools: pages to fetch and search engines' JSON APIs.

One aiohttp server on 127.0.0.1 answers:

- pages: `/article` (a news article with navigation and footer), `/long-article`, `/latin1`
  (ISO-8859-1), `/plain`, `/data.json`, `/scripts-only`, `/image.png` (binary), `/missing` (404),
  `/slow` (answers after `slow_seconds`), `/huge` (streams up to `HUGE_BYTES`, stopping when the
  reader hangs up), `/news.html` (what the end-to-end test's model links to);
- redirects: `/hop/N` (N more hops, then `/article`), `/loop` (forever), `/redirect?to=URL`;
- `extra_pages` and `answers`: pages and bare answers (status, reason phrase, headers) a test
  adds;
- search APIs: SearXNG `GET /search?format=json`, Brave `GET /res/v1/web/search`, Tavily
  `POST /tavily/search`; `search_status` makes them fail with that HTTP status, `search_delay`
  makes them slow.

Every request is logged in `requests` (method, path with query, Host header) so tests can prove a
request never arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

HUGE_BYTES = 40_000_000
HUGE_CHUNK = b"All work and no play makes Jack a dull boy.\n" * 1500  # ~66 kB

ARTICLE_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Brazilian startups raise record funding</title>
<script>var tracking = "do-not-show-this-script";</script>
<style>body { color: #111 }</style></head>
<body>
<nav><a href="/">Home</a> | <a href="/tech">Tech</a> | <a href="/login">Log in</a></nav>
<article>
<h1>Brazilian startups raise record funding</h1>
<p>São Paulo startups raised a record amount of venture capital this quarter, according to a
report published on Monday by the Brazilian Association of Startups.</p>
<p>Fintech companies led the way with several large rounds, while agritech firms also grew
quickly across the interior of the state, the report said.</p>
<p>Analysts expect the pace to continue next year as interest rates fall and more foreign funds
open offices in the city.</p>
</article>
<footer>Copyright 2026 Example News. All rights reserved.</footer>
</body></html>
"""

SEARCH_RESULTS = [
    {
        "title": "Brazil's tech sector: <b>record</b> quarter",
        "url": "https://news.example/brazil-tech-record",
        "content": "Startups in S&atilde;o Paulo raised record funding this quarter.",
    },
    {
        "title": "Pix turns five",
        "url": "https://news.example/pix-five",
        "content": "Brazil's instant payment system keeps growing.",
    },
    {
        "title": "Chip plant opens in Minas Gerais",
        "url": "https://news.example/chip-plant",
        "content": "A new semiconductor packaging plant opened near Belo Horizonte.",
    },
    {"title": "Not a web result", "url": "magnet:?xt=urn:btih:abc", "content": "skipped"},
    {
        "title": "Rio hosts a developer conference",
        "url": "https://news.example/rio-devconf",
        "content": "Thousands of developers met in Rio de Janeiro.",
    },
    {
        "title": "Brazilian AI startup expands to Mexico",
        "url": "https://news.example/ai-mexico",
        "content": "",
    },
    {
        "title": "Fintech regulation update",
        "url": "https://news.example/fintech-rules",
        "content": "The central bank published new rules.",
    },
]


@dataclass
class LoggedRequest:
    method: str
    path: str  # with the query string
    host: str
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


class FakeWebServer:
    def __init__(self) -> None:
        self.requests: list[LoggedRequest] = []
        self.search_status = 200
        self.search_delay = 0.0
        self.slow_seconds = 5.0
        self.huge_sent = 0
        self.huge_finished = asyncio.Event()
        self.extra_pages: dict[str, tuple[str, str]] = {}  # path -> (content type, body)
        # path -> (status, reason phrase, headers): answers whose status line and headers say
        # what a test needs (a reason phrase with instructions in it, an odd Content-Type).
        self.answers: dict[str, tuple[int, str, dict[str, str]]] = {}
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()  # cuts delays short, so stop() never waits on them
        self.port = 0

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self.url

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    # ---- answers -----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body: Any = None
        if request.method == "POST":
            try:
                body = await request.json()
            except ValueError:
                body = None
        self.requests.append(
            LoggedRequest(
                request.method, request.path_qs, request.host, dict(request.headers), body
            )
        )
        path = request.path
        if path in ("/search", "/res/v1/web/search", "/tavily/search") and self.search_delay:
            await self._pause(self.search_delay)
        if path in self.extra_pages:
            content_type, text = self.extra_pages[path]
            return web.Response(text=text, content_type=content_type)
        if path in self.answers:
            status, reason, headers = self.answers[path]
            return web.Response(status=status, reason=reason, headers=headers, body=b"x")
        if path == "/search":
            return self._searxng(request)
        if path == "/res/v1/web/search":
            return self._brave(request)
        if path == "/tavily/search":
            return self._tavily(request, body)
        if path.startswith("/hop/"):
            remaining = int(path.removeprefix("/hop/"))
            target = "/article" if remaining <= 1 else f"/hop/{remaining - 1}"
            raise web.HTTPFound(target)
        if path == "/loop":
            raise web.HTTPFound("/loop")
        if path == "/redirect":
            raise web.HTTPFound(request.query["to"])
        if path == "/huge":
            return await self._huge(request)
        if path == "/slow":
            await self._pause(self.slow_seconds)
            return web.Response(text="finally", content_type="text/plain")
        return self._page(path)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _page(self, path: str) -> web.Response:
        if path == "/article":
            return web.Response(text=ARTICLE_HTML, content_type="text/html", charset="utf-8")
        if path == "/long-article":
            paragraphs = "".join(
                f"<p>Paragraph {i}: the quick brown fox jumps over the lazy dog again and "
                f"again, for the {i}th time, to make this article long.</p>"
                for i in range(1, 201)
            )
            html = (
                "<html><head><title>A very long article</title></head><body><article>"
                f"<h1>A very long article</h1>{paragraphs}</article></body></html>"
            )
            return web.Response(text=html, content_type="text/html")
        if path == "/latin1":
            html = (
                "<html><head><title>Notícias de São Paulo</title></head><body><article><p>"
                "A prefeitura de São Paulo anunciou hoje a expansão da rede de ciclovias, com "
                "mais de cem quilômetros de novas faixas até o fim do ano que vem.</p>"
                "</article></body></html>"
            )
            return web.Response(
                body=html.encode("iso-8859-1"),
                headers={"Content-Type": "text/html; charset=ISO-8859-1"},
            )
        if path == "/plain":
            return web.Response(text="Just plain text.\nSecond line.", content_type="text/plain")
        if path == "/data.json":
            return web.json_response({"city": "São Paulo", "population": 11451999})
        if path == "/scripts-only":
            return web.Response(
                text="<html><head><title>App</title></head><body><div id='root'></div>"
                "<script>render()</script></body></html>",
                content_type="text/html",
            )
        if path == "/image.png":
            return web.Response(body=b"\x89PNG\r\n\x1a\n" + b"\x00" * 512, content_type="image/png")
        return web.Response(status=404, text="no such page", content_type="text/plain")

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(request)
        try:
            while self.huge_sent < HUGE_BYTES:
                await response.write(HUGE_CHUNK)
                self.huge_sent += len(HUGE_CHUNK)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the reader hung up, as it should
        finally:
            self.huge_finished.set()
        return response

    def _search_failure(self) -> web.Response | None:
        if self.search_status == 200:
            return None
        return web.Response(status=self.search_status, text="upstream trouble")

    def _searxng(self, request: web.Request) -> web.Response:
        if (failure := self._search_failure()) is not None:
            return failure
        if request.query.get("format") != "json":
            return web.Response(status=403, text="format not allowed")
        return web.json_response({"query": request.query.get("q", ""), "results": SEARCH_RESULTS})

    def _brave(self, request: web.Request) -> web.Response:
        if (failure := self._search_failure()) is not None:
            return failure
        if request.headers.get("X-Subscription-Token") != "brave-test-key":
            return web.json_response({"error": "unauthorized"}, status=401)
        count = int(request.query.get("count", "20"))
        results = [
            {
                "title": r["title"],
                "url": r["url"],
                "description": f"<strong>{r['content']}</strong>",
            }
            for r in SEARCH_RESULTS[:count]
        ]
        return web.json_response({"type": "search", "web": {"results": results}})

    def _tavily(self, request: web.Request, body: Any) -> web.Response:
        if (failure := self._search_failure()) is not None:
            return failure
        if request.headers.get("Authorization") != "Bearer tvly-test-key":
            return web.json_response({"detail": {"error": "Unauthorized"}}, status=401)
        limit = int((body or {}).get("max_results", 5))
        results = [
            {"title": r["title"], "url": r["url"], "content": r["content"], "score": 0.9}
            for r in SEARCH_RESULTS[:limit]
        ]
        return web.json_response({"query": (body or {}).get("query"), "results": results})
