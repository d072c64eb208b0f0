"""The ASGI app: health check, login, the chat page and the JSON API (routes: DESIGN §6).

`GET /healthz` is open; everything else needs `web.auth_token` when one is set — a bearer token
for `/api/`, the login cookie for pages (401 for the API, a redirect to /login for pages).
Request bodies are size-capped and validated, and errors come back as JSON that says what to fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from bruce_bot.channels.web import WEB_CHANNEL, WebChannel
from bruce_bot.domain import SessionKey
from bruce_bot.storage.stores import Stores
from bruce_bot.web.artifacts import artifact_routes
from bruce_bot.web.auth import COOKIE_NAME, cookie_value, is_authorised, token_matches

STATIC_DIR = Path(__file__).parent / "static"
MAX_BODY_BYTES = 1_000_000
MAX_LOGIN_BYTES = 4096
MAX_MESSAGE_ID = 2**63 - 1
MAX_WAIT_SECONDS = 30.0
DEFAULT_CHAT_ID = "dashboard"
OPEN_PATHS = ("/healthz", "/login", "/artifacts/", "/static/")


@dataclass(frozen=True, slots=True)
class WebContext:
    stores: Stores
    web_channel: WebChannel
    auth_token: str
    app_name: str = "Bruce"
    data_dir: Path = Path("data")  # artifacts are served from <data_dir>/artifacts


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


class _AuthMiddleware(BaseHTTPMiddleware):
    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self._token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        path = request.url.path
        if path.startswith(OPEN_PATHS) or is_authorised(request, self._token):
            return await call_next(request)
        if path.startswith("/api/"):
            return _error(
                401, "missing or wrong token: send 'Authorization: Bearer <web.auth_token>'"
            )
        return RedirectResponse(f"/login?next={path}", status_code=303)


async def _json_body(request: Request) -> dict[str, Any] | JSONResponse:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return _error(413, f"request body too large; the limit is {MAX_BODY_BYTES} bytes")
    body = b""
    async for chunk in request.stream():  # counted as it arrives: a chunked body has no length
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return _error(413, f"request body too large; the limit is {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(400, 'body must be JSON, e.g. {"text": "hello"}')
    if not isinstance(data, dict):
        return _error(400, 'body must be a JSON object, e.g. {"text": "hello"}')
    return data


async def _login_token(request: Request) -> str:
    """The `token` field of the login form (urlencoded, as a browser posts it); "" if absent.

    Parsed here rather than with `request.form()`, which needs the python-multipart package.
    """
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_LOGIN_BYTES:
        return ""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_LOGIN_BYTES:
            return ""
    try:
        fields = parse_qs(body.decode("utf-8", errors="replace"), max_num_fields=20)
    except ValueError:  # too many fields
        return ""
    return fields.get("token", [""])[0]


def create_app(context: WebContext) -> Starlette:
    stores, channel, token = context.stores, context.web_channel, context.auth_token

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def index(request: Request) -> Response:
        return RedirectResponse("/chat", status_code=303)

    async def login_page(request: Request) -> Response:
        if not token:
            return RedirectResponse("/chat", status_code=303)
        return FileResponse(STATIC_DIR / "login.html", media_type="text/html")

    async def login(request: Request) -> Response:
        candidate = await _login_token(request)
        if not token_matches(candidate, token):
            return RedirectResponse("/login?error=1", status_code=303)
        target = str(request.query_params.get("next", "/chat"))
        if not target.startswith("/") or target.startswith("//"):
            target = "/chat"  # never redirect off-site
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE_NAME,
            cookie_value(token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=30 * 86_400,
        )
        return response

    async def logout(request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE_NAME)
        return response

    async def chat_page(request: Request) -> Response:
        html = (STATIC_DIR / "chat.html").read_text(encoding="utf-8")
        return HTMLResponse(html.replace("{{app_name}}", context.app_name))

    def _chat_id(request: Request, data: dict[str, Any] | None = None) -> str | JSONResponse:
        chat_id = (data or {}).get("chat_id", request.query_params.get("chat_id", DEFAULT_CHAT_ID))
        if not isinstance(chat_id, str) or not chat_id or len(chat_id) > 64:
            return _error(400, "chat_id must be a non-empty string of at most 64 characters")
        return chat_id

    async def post_message(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, JSONResponse):
            return data
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
                    }
                    for r in rows
                ],
            }
        )

    async def list_sessions(request: Request) -> Response:
        sessions = await stores.sessions.list_recent()
        return JSONResponse(
            {
                "sessions": [
                    {
                        "id": s.id,
                        "channel": s.channel,
                        "chat_id": s.chat_id,
                        "title": s.title,
                        "kind": s.kind,
                        "last_message_at": _iso(s.last_message_at),
                    }
                    for s in sessions
                ]
            }
        )

    routes = [
        Route("/healthz", healthz),
        Route("/", index),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/chat", chat_page),
        Route("/api/chat/messages", post_message, methods=["POST"]),
        Route("/api/chat/messages", get_messages, methods=["GET"]),
        Route("/api/sessions", list_sessions),
        *artifact_routes(stores.artifacts, context.data_dir / "artifacts"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_AuthMiddleware, token=token)])
