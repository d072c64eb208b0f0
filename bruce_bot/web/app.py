"""The ASGI app: health check, login, the dashboard pages and the JSON API (routes: docs/design.md).

Every request first passes the Host check (`hosts.py`: 421 for a name the dashboard is not
meant to have, against DNS rebinding), then authentication (`auth.py`): `GET /healthz`, the login
page, `/static/` and `/artifacts/` are open; everything else needs `web.auth_token` when one is set
— a signed-in browser (a session cookie) or a bearer token, 401 for the API and a redirect to
/login for pages. API writes must be sent as `application/json`. Request bodies are size-capped and
validated, and errors come back as JSON (API) or plain text (pages) that says what to fix, never
a stack trace. The pages are in `pages.py`, the API in `api/`, the artifact files in
`artifacts.py`. Without `web.auth_token` in config.yml the token is Bruce's own (made on first
start, `login_token.py`) and the one-time link printed at start signs a browser in. The API's
routes are made, and its modules imported, on the first request under
`/api/` (`lazy_routes.py`): start-up does not wait for them.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from bruce_bot.faults import StorageHealth
from bruce_bot.web.artifacts import artifact_routes
from bruce_bot.web.auth import AuthGate, WebAuth
from bruce_bot.web.chat_stream import chat_stream_routes
from bruce_bot.web.context import WebContext
from bruce_bot.web.credentials import SignInPolicy
from bruce_bot.web.hosts import AllowedHosts, HostCheck
from bruce_bot.web.lazy_routes import LazyRoutes
from bruce_bot.web.pages import LOGIN_PAGE, page_routes
from bruce_bot.web.paths import API_PREFIX, DOCS_PATH
from bruce_bot.web.webhooks import webhook_routes
from bruce_bot.web.wire import MAX_BODY_BYTES, ApiError, error_response

__all__ = ["MAX_BODY_BYTES", "WebContext", "create_app"]


class Health(BaseModel):
    status: str = "ok"
    reason: str | None = None  # degraded: why
    since_seconds: float | None = None  # degraded: for how long


def healthz_route(storage: StorageHealth | None) -> Route:
    """`GET /healthz`: 200 `{"status": "ok"}`; 503 `{"status": "degraded", "reason": ...}`
    while incoming messages cannot be stored (a full disk, the database away), so a probe or
    a monitor sees it; the messages themselves are held back and stored once it passes."""

    async def healthz(request: Request) -> Response:
        outage = storage.outage if storage is not None else None
        if outage is None:
            return JSONResponse(Health().model_dump(mode="json", exclude_none=True))
        degraded = Health(
            status="degraded",
            reason=f"incoming messages cannot be stored: {outage.reason}",
            since_seconds=round(storage.seconds_since(outage), 1) if storage else None,
        )
        return JSONResponse(degraded.model_dump(mode="json"), status_code=503)

    return Route("/healthz", healthz)


def create_app(context: WebContext) -> Starlette:
    policy = SignInPolicy(
        max_age=timedelta(days=context.web.session_max_age_days),
        secure_cookie=urlsplit(context.app.public_url).scheme == "https",
        login_page=LOGIN_PAGE,
    )
    auth = WebAuth(
        context.auth_token,
        context.stores.web_sessions,
        policy,
        clock=context.clock,
        one_time=context.login_link,
    )
    routes = [
        healthz_route(context.storage_health),
        *auth.routes(),
        *page_routes(
            context.app.name, context.display_timezone, signed_in=bool(context.auth_token)
        ),
        LazyRoutes(API_PREFIX, lambda: _api_routes(context, auth)),
        *artifact_routes(context.stores.artifacts, context.app.data_dir / "artifacts"),
        *chat_stream_routes(context.web_channel),
        *webhook_routes(context.channels),
    ]
    hosts = AllowedHosts(context.app.public_url, context.web.allowed_hosts)
    return Starlette(
        routes=routes,
        middleware=[Middleware(HostCheck, allowed=hosts), Middleware(AuthGate, auth=auth)],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )


def _api_routes(context: WebContext, auth: WebAuth) -> list[BaseRoute]:
    from bruce_bot.web.api import api_routes

    return api_routes(context, auth)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (405 on a known path, ...): JSON under /api/, else plain text."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if path.startswith(API_PREFIX):
        messages = {
            404: f"there is no API route {path}; {DOCS_PATH} lists them",
            405: f"{request.method} is not allowed on {path}",
        }
        message = messages.get(exc.status_code, str(exc.detail))
        return error_response(exc.status_code, message, exc.headers)
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=exc.headers)
