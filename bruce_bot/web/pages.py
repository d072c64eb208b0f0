"""The dashboard's pages: one layout (head, header and nav bar, written once in
`templates/layout.html`) that each page's own template fills. The templates are read when this
module is imported and the pages rendered once when the app is made, all but the timezone the
page shows times in: that one is the live setting (the dashboard's over `app.timezone`), put in
at each page view. The pages render the API's JSON with DOM calls (text only, never markup from
data) and share `static/dashboard.css` and `static/dashboard.js`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import BaseRoute, Route

from bruce_bot.web.paths import DOCS_PATH

TEMPLATES = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"
# Files the pages share, served at /static/<name> without login (nothing secret in them).
ASSETS = {
    "dashboard.css": "text/css",
    "dashboard.js": "text/javascript",
    "chat.css": "text/css",
    "llm_setup.js": "text/javascript",
    # Vendored libraries (static/vendor/README.md says which version, from where).
    "vendor/chart.umd.min.js": "text/javascript",
}
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self' 'unsafe-inline'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
        "base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
CURRENT = ' aria-current="page"'
_PLACEHOLDER = re.compile(r"{{(\w+)}}")


@dataclass(frozen=True, slots=True)
class Page:
    path: str
    title: str
    template: str  # in templates/: the page's <main> and script
    styles: tuple[str, ...] = ()  # its own stylesheets in static/, after dashboard.css
    scripts: tuple[str, ...] = ()  # its own scripts in static/, loaded before the page's own
    in_nav: bool = True


# In the order of the nav bar.
PAGES = (
    Page("/chat", "Chat", "chat.html", styles=("chat.css",), scripts=("llm_setup.js",)),
    Page("/sessions", "Sessions", "sessions.html"),
    Page("/schedules", "Schedules", "schedules.html"),
    Page("/artifacts", "Artifacts", "artifacts.html"),
    Page("/memory", "Memory", "memory.html"),
    Page("/people", "People", "people.html"),
    Page("/logs", "Logs", "logs.html"),
    Page("/settings", "Settings", "settings.html", scripts=("llm_setup.js",)),
    Page("/usage", "Usage", "usage.html", scripts=("vendor/chart.umd.min.js",)),
    Page(DOCS_PATH, "API", "api_docs.html", in_nav=False),
)


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


LAYOUT = _template("layout.html")
MAINS = {page.template: _template(page.template) for page in PAGES}
LOGIN_PAGE = _template("login.html")


TIMEZONE = "{{timezone}}"


@dataclass(frozen=True, slots=True)
class Rendered:
    """A page rendered but for its timezone: the pieces between the places it goes."""

    pieces: tuple[str, ...]

    def in_zone(self, timezone: str) -> str:
        return html.escape(timezone).join(self.pieces)


def render(page: Page, app_name: str, *, signed_in: bool) -> Rendered:
    values = {
        "app_name": html.escape(app_name),
        "title": html.escape(page.title),
        "nav": nav(page.path, signed_in=signed_in),
        "styles": "".join(f'<link rel="stylesheet" href="/static/{s}">\n' for s in page.styles)
        + "".join(f'<script src="/static/{s}"></script>\n' for s in page.scripts),
    }
    text = LAYOUT.replace("{{main}}", MAINS[page.template])
    # Split first, so that no value (an app name with braces) can become a placeholder.
    pieces = text.split(TIMEZONE)
    return Rendered(tuple(_PLACEHOLDER.sub(lambda match: values[match[1]], p) for p in pieces))


def nav(current: str, *, signed_in: bool) -> str:
    links = "".join(
        f'<a href="{page.path}"{CURRENT if page.path == current else ""}>{page.title}</a>'
        for page in PAGES
        if page.in_nav
    )
    sign_out = (
        '<form method="post" action="/logout"><button type="submit" class="link">'
        "Sign out</button></form>"
        if signed_in
        else ""
    )
    return f'<nav class="nav" aria-label="Dashboard">{links}{sign_out}</nav>'


def page_routes(
    app_name: str, timezone: Callable[[], Awaitable[str]], *, signed_in: bool
) -> list[BaseRoute]:
    """`/` (to the chat), every page, rendered now, and the shared files under /static/;
    `timezone`: the one to show times in, asked at each page view."""
    pages = [
        Route(page.path, _send(render(page, app_name, signed_in=signed_in), timezone))
        for page in PAGES
    ]
    return [Route("/", _to_chat), *pages, Route("/static/{name:path}", _asset)]


def _send(
    page: Rendered, timezone: Callable[[], Awaitable[str]]
) -> Callable[[Request], Coroutine[Any, Any, Response]]:
    async def show(request: Request) -> Response:
        return HTMLResponse(page.in_zone(await timezone()), headers=PAGE_HEADERS)

    return show


async def _to_chat(request: Request) -> Response:
    return RedirectResponse("/chat", status_code=303)


async def _asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in ASSETS:
        return PlainTextResponse("Not found", status_code=404)
    return FileResponse(  # stat and read in a worker thread, with an ETag
        STATIC_DIR / name,
        media_type=ASSETS[name],
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
    )
