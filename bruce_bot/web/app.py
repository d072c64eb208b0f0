"""The ASGI app: health check, login, the dashboard pages and the JSON API (routes: DESIGN §6).

Every request first passes the Host check (`hosts.py`: 421 for a name the dashboard is not
meant to have, against DNS rebinding), then authentication (`auth.py`): `GET /healthz`, the login
page, `/static/` and `/artifacts/` are open; everything else needs `web.auth_token` when one is set
— a signed-in browser (a session cookie) or a bearer token, 401 for the API and a redirect to
/login for pages. API writes must be sent as `application/json`. Request bodies are size-capped and
validated, and errors come back as JSON (API) or plain text (pages) that says what to fix, never
a stack trace. The pages are small static HTML files that render the API's JSON with DOM calls
(text only, never markup from data); they share `dashboard.css`, `dashboard.js` and a nav bar.
"""

from __future__ import annotations

import html
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route

from bruce_bot.channels.web import WEB_CHANNEL
from bruce_bot.domain import SessionKey
from bruce_bot.web.api import MAX_BODY_BYTES, ApiError, dashboard_api_routes, json_body
from bruce_bot.web.artifacts import artifact_routes
from bruce_bot.web.auth import AuthGate, WebAuth
from bruce_bot.web.context import WebContext
from bruce_bot.web.hosts import AllowedHosts, HostCheck

__all__ = ["MAX_BODY_BYTES", "WebContext", "create_app"]

STATIC_DIR = Path(__file__).parent / "static"
MAX_MESSAGE_ID = 2**63 - 1
MAX_WAIT_SECONDS = 30.0
DEFAULT_CHAT_ID = "dashboard"
# The dashboard's pages, in the order of the nav bar: (path, title, file in static/).
PAGES = (
    ("/chat", "Chat", "chat.html"),
    ("/sessions", "Sessions", "sessions.html"),
    ("/schedules", "Schedules", "schedules.html"),
    ("/artifacts", "Artifacts", "artifacts.html"),
    ("/logs", "Logs", "logs.html"),
    ("/settings", "Settings", "settings.html"),
    ("/usage", "Usage", "usage.html"),
)
# Files the pages share, served at /static/<name> without login (nothing secret in them).
ASSETS = {"dashboard.css": "text/css", "dashboard.js": "text/javascript"}
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


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def create_app(context: WebContext) -> Starlette:
    stores, channel, token = context.stores, context.web_channel, context.auth_token
    auth = WebAuth(
        token,
        stores.web_sessions,
        clock=context.clock,
        max_age=timedelta(days=context.session_max_age_days),
        secure_cookie=urlsplit(context.public_url).scheme == "https",
        login_page=STATIC_DIR / "login.html",
    )
    hosts = AllowedHosts(context.public_url, context.allowed_hosts)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def index(request: Request) -> Response:
        return RedirectResponse("/chat", status_code=303)

    def page(filename: str) -> Any:
        async def render(request: Request) -> Response:
            template = (STATIC_DIR / filename).read_text(encoding="utf-8")
            values = {
                "{{app_name}}": html.escape(context.app_name),
                "{{timezone}}": html.escape(context.timezone),
                "{{nav}}": _nav(request.url.path, signed_in=bool(token)),
            }
            for placeholder, value in values.items():
                template = template.replace(placeholder, value)
            return HTMLResponse(template, headers=PAGE_HEADERS)

        return render

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return PlainTextResponse("Not found", status_code=404)
        return FileResponse(
            STATIC_DIR / name,
            media_type=ASSETS[name],
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
        )

    def _chat_id(request: Request, data: dict[str, Any] | None = None) -> str | JSONResponse:
        chat_id = (data or {}).get("chat_id", request.query_params.get("chat_id", DEFAULT_CHAT_ID))
        if not isinstance(chat_id, str) or not chat_id or len(chat_id) > 64:
            return _error(400, "chat_id must be a non-empty string of at most 64 characters")
        return chat_id

    async def post_message(request: Request) -> Response:
        data = await json_body(request, example='{"text": "hello"}')
        text = data.get("text")
        if not isinstance(text, str):
            return _error(400, "field 'text' is required and must be a string")
        chat_id = _chat_id(request, data)
        if isinstance(chat_id, JSONResponse):
            return chat_id
        submission = await channel.submit(chat_id, text)
        if not submission.accepted:
            status = {"empty": 400, "stopping": 503}.get(submission.reason, 409)
            reasons = {
                "empty": "the message is empty; type something",
                "stopping": "Bruce is shutting down; try again in a moment",
            }
            return _error(status, reasons.get(submission.reason, submission.reason))
        return JSONResponse(
            {"message_id": submission.message_id, "chat_id": chat_id}, status_code=202
        )

    async def get_messages(request: Request) -> Response:
        chat_id = _chat_id(request)
        if isinstance(chat_id, JSONResponse):
            return chat_id
        try:
            after = int(request.query_params.get("after", "0"))
            wait = min(float(request.query_params.get("wait", "0")), MAX_WAIT_SECONDS)
            if not 0 <= after <= MAX_MESSAGE_ID:  # beyond SQL's 64-bit integers
                raise ValueError(after)
        except ValueError:
            return _error(
                400, "'after' must be an integer message id and 'wait' a number of seconds"
            )
        version = channel.version(chat_id)  # read first: a reply stored meanwhile is not missed
        session = await stores.sessions.get_or_create(SessionKey(WEB_CHANNEL, chat_id))
        rows = await stores.messages.recent(session.id, after)
        if not rows and wait > 0:
            await channel.wait_for_change(chat_id, wait, since=version)
            rows = await stores.messages.recent(session.id, after)
        return JSONResponse(
            {
                "chat_id": chat_id,
                "typing": channel.is_typing(chat_id),
                "messages": [
                    {
                        "id": r.id,
                        "role": r.role,
                        "kind": r.kind,
                        "content": r.content,
                        "status": r.status,
                        "created_at": _iso(r.created_at),
                        "choices": (r.extra or {}).get("choices", []),
                    }
                    for r in rows
                ],
            }
        )

    async def post_choice(request: Request) -> Response:
        data = await json_body(request, example='{"data": "task-confirm:12"}')
        choice = data.get("data")
        if not isinstance(choice, str) or not choice or len(choice) > 200:
            return _error(400, "field 'data' is required: the data of the button pressed")
        chat_id = _chat_id(request, data)
        if isinstance(chat_id, JSONResponse):
            return chat_id
        reply = await channel.choose(chat_id, choice)
        if reply is None:
            return _error(404, "no such button in this chat (it may be out of date)")
        return JSONResponse({"reply": reply, "chat_id": chat_id})

    routes = [
        Route("/healthz", healthz),
        Route("/", index),
        *auth.routes(),
        *(Route(path, page(filename)) for path, _, filename in PAGES),
        Route("/static/{name}", asset),
        Route("/api/chat/messages", post_message, methods=["POST"]),
        Route("/api/chat/messages", get_messages, methods=["GET"]),
        Route("/api/chat/choices", post_choice, methods=["POST"]),
        *dashboard_api_routes(context),
        *artifact_routes(stores.artifacts, context.data_dir / "artifacts"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(HostCheck, allowed=hosts), Middleware(AuthGate, auth=auth)],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )


CURRENT = ' aria-current="page"'


def _nav(current: str, *, signed_in: bool) -> str:
    links = "".join(
        f'<a href="{path}"{CURRENT if path == current else ""}>{title}</a>'
        for path, title, _ in PAGES
    )
    sign_out = (
        '<form method="post" action="/logout"><button type="submit" class="link">'
        "Sign out</button></form>"
        if signed_in
        else ""
    )
    return f'<nav class="nav" aria-label="Dashboard">{links}{sign_out}</nav>'


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error(exc.status, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (405 on a known path, ...): JSON under /api/, else plain text."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if path.startswith("/api/"):
        messages = {
            404: f"there is no API route {path}; the README lists them",
            405: f"{request.method} is not allowed on {path}",
        }
        message = messages.get(exc.status_code, str(exc.detail))
        return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=exc.headers)
