"""Dashboard authentication: signed-in browsers for the pages, a bearer token for the API.

Signing in (POST /login with `web.auth_token`) makes a random cookie (`secrets.token_urlsafe(32)`)
and a row in `web_sessions` keyed by the cookie's SHA-256, so that signing out, or revoking the
browser from the Settings page, really ends it: a copied cookie stops working at once. A session
lives `web.session_max_age_days` from its last use; use renews it at most once a minute (one write
then, none on the other requests). Each row carries a fingerprint of the token it was made with,
so a new `web.auth_token` signs every browser out. The cookie is HttpOnly and SameSite=Strict
(another site can neither read it nor send it along), and Secure when `app.public_url` is https.
Scripts use `Authorization: Bearer <web.auth_token>`, compared in constant time. Wrong tokens, at
the form or as a bearer, go through the throttle (`throttle.py`). A right one is looked at first
and let through whatever the throttle holds, so a burst of failures (from strangers, or from the
owner's own address) never shuts the owner out; the throttle only counts and refuses failures.
With a weak token (allowed on loopback only, with a warning) the throttle comes first: there the
wait is what keeps guessing slow.

Without `web.auth_token` in config.yml the token is Bruce's own (`login_token.py`), and
`GET /login?token=<nonce>` — the one-time link printed at start — signs a browser in once: it
answers 303 to the dashboard with `Referrer-Policy: no-referrer`, so the nonce leaves the address
bar and is never sent on as a Referer. The login page has the other pages' security headers.

API writes must be sent as `application/json`, token or not: a page of another site cannot send
that without the browser asking first (a preflight the app never grants), which keeps the API
safe from cross-site forms on top of SameSite. With `web.auth_token: none` (loopback only,
enforced by the config) there is no sign-in, and the Host check (`hosts.py`) is the only
protection.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import structlog
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from bruce_bot.config import token_weakness
from bruce_bot.storage.web_sessions import WebSessionRecord, WebSessionStore
from bruce_bot.web.credentials import (
    SignInPolicy,
    bearer_credentials,
    client_address,
    form_token,
    is_api,
    is_json,
    session_key,
    throttled,
    token_fingerprint,
    token_matches,
)
from bruce_bot.web.login_token import OneTimeLogin
from bruce_bot.web.pages import PAGE_HEADERS
from bruce_bot.web.throttle import AuthThrottle
from bruce_bot.web.wire import error_response

log = structlog.get_logger(__name__)

COOKIE_NAME = "bruce_session"
MAX_COOKIE_CHARS = 100  # token_urlsafe(32) is 43; anything much longer is not ours
RENEW_EVERY = timedelta(minutes=1)
USER_AGENT_CHARS = 300
# A platform's webhook (web/webhooks.py) is open too: the platform signs its requests.
OPEN_PATHS = ("/healthz", "/login", "/artifacts/", "/static/", "/slack/events")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
MAX_LINK_TOKEN_CHARS = 100
# The answers to the sign-in link: the nonce in their URL must not travel on as a Referer.
LINK_HEADERS = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


class WebAuth:
    """Who may use the dashboard, and the sign-in and sign-out routes (the signed-in browsers
    are listed and revoked by `api/web_sessions.py`)."""

    def __init__(
        self,
        token: str,
        store: WebSessionStore,
        policy: SignInPolicy,
        *,
        clock: Callable[[], datetime],
        one_time: OneTimeLogin | None = None,
    ) -> None:
        self.token = token
        # A strong token is checked before the throttle (a right one always passes); a weak one
        # after it, so that guessing it stays slow.
        self.strong = bool(token) and token_weakness(token) is None
        self.one_time = one_time  # this start's sign-in link (None: config.yml sets the token)
        self.fingerprint = token_fingerprint(token) if token else ""
        self.store = store
        self.clock = clock
        self.policy = policy
        self.throttle = AuthThrottle(lambda: clock().timestamp())

    # ---- browser sessions --------------------------------------------------------------------

    async def browser_session(self, request: Request) -> WebSessionRecord | None:
        """The live session of the request's cookie (None: none, or it ended)."""
        cookie = request.cookies.get(COOKIE_NAME, "")
        if not cookie or len(cookie) > MAX_COOKIE_CHARS:
            return None
        key = session_key(cookie)
        record = await self.store.get(key)
        if record is None:
            return None
        if record.expires_at <= self.clock() or not hmac.compare_digest(
            record.token_fingerprint, self.fingerprint
        ):
            await self.store.delete(key)  # expired, or made with another web.auth_token
            return None
        return record

    async def renew_if_due(self, record: WebSessionRecord) -> bool:
        now = self.clock()
        if now - record.last_seen_at < RENEW_EVERY:
            return False
        await self.store.renew(record.id, now, now + self.policy.max_age)
        return True

    def _set_cookie(self, response: Response, request: Request, value: str) -> None:
        response.set_cookie(
            COOKIE_NAME,
            value,
            max_age=int(self.policy.max_age.total_seconds()),
            path="/",
            httponly=True,
            samesite="strict",
            secure=self.policy.secure_cookie or request.url.scheme == "https",
        )

    # ---- the middleware's decision -----------------------------------------------------------

    async def admit(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        path = request.url.path
        if path.startswith(OPEN_PATHS):
            return await call_next(request)
        renewed_cookie: str | None = None
        if self.token:
            session = await self.browser_session(request)
            if session is not None:
                request.state.web_session = session
                if await self.renew_if_due(session):
                    renewed_cookie = request.cookies[COOKIE_NAME]
            else:
                refused = self._check_bearer(request)
                if refused is not None:
                    return refused
        if is_api(request) and request.method in WRITE_METHODS and not is_json(request):
            return error_response(
                415, "send API writes with the header 'Content-Type: application/json'"
            )
        response = await call_next(request)
        if renewed_cookie is not None:
            self._set_cookie(response, request, renewed_cookie)  # the browser's expiry slides too
        return response

    def _attempt(self, request: Request, right: bool) -> Response | None:
        """The throttle's say on a sign-in attempt whose token is `right` or not: None to go
        on (a right token: signed in), else the 429 to send. A failure is counted."""
        address = client_address(request)
        if right and self.strong:
            self.throttle.succeeded(address)  # a valid token is never held by the throttle
            return None
        refusal = self.throttle.check(address)
        if refusal is not None:
            return throttled(request, refusal)
        if right:
            self.throttle.succeeded(address)
            return None
        self.throttle.failed(address)
        return None

    def _check_bearer(self, request: Request) -> Response | None:
        """None when the request carries the right bearer token, else the refusal to send."""
        credentials = bearer_credentials(request)
        if credentials is not None:
            right = token_matches(credentials, self.token)
            refused = self._attempt(request, right)
            if refused is not None:
                return refused
            if right:
                return None
        if is_api(request):
            return error_response(
                401, "missing or wrong token: send 'Authorization: Bearer <web.auth_token>'"
            )
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)

    # ---- routes ------------------------------------------------------------------------------

    async def show_login(self, request: Request) -> Response:
        if not self.token:
            return RedirectResponse("/chat", status_code=303)
        if "token" in request.query_params:
            return await self._redeem_link(request)
        return HTMLResponse(self.policy.login_page, headers=PAGE_HEADERS)

    async def _redeem_link(self, request: Request) -> Response:
        """`GET /login?token=<nonce>`: the one-time link signs in once, then is spent."""
        candidate = str(request.query_params.get("token", ""))[:MAX_LINK_TOKEN_CHARS]
        # The nonce is random (256 bits) and single-use: a right one passes whatever the
        # throttle holds, like a strong token; a wrong or spent one is a failed sign-in.
        right = self.one_time is not None and self.one_time.redeem(candidate)
        address = client_address(request)
        if right:
            self.throttle.succeeded(address)
            response = await self._signed_in(request, "/chat", via="link")
            response.headers.update(LINK_HEADERS)
            return response
        refusal = self.throttle.check(address)
        if refusal is not None:
            response = throttled(request, refusal)
        else:
            self.throttle.failed(address)
            log.warning("web_login_link_refused", client=address)
            response = RedirectResponse("/login?error=link", status_code=303)
        response.headers.update(LINK_HEADERS)
        return response

    async def login(self, request: Request) -> Response:
        if not self.token:
            return RedirectResponse("/chat", status_code=303)
        # A weak token: a throttled attempt is not even read.
        if not self.strong and (refusal := self.throttle.check(client_address(request))):
            return throttled(request, refusal)
        right = token_matches(await form_token(request), self.token)
        refused = self._attempt(request, right)
        if refused is not None:
            return refused
        if not right:
            return RedirectResponse("/login?error=1", status_code=303)
        target = str(request.query_params.get("next", "/chat"))
        if not target.startswith("/") or target.startswith("//"):
            target = "/chat"  # never redirect off-site
        return await self._signed_in(request, target, via="form")

    async def _signed_in(self, request: Request, target: str, *, via: str) -> Response:
        """A new browser session, and the redirect to `target` that sets its cookie."""
        address = client_address(request)
        now = self.clock()
        await self.store.purge(self.fingerprint, now)
        cookie = secrets.token_urlsafe(32)
        record = WebSessionRecord(
            id=session_key(cookie),
            public_id=secrets.token_urlsafe(12),
            token_fingerprint=self.fingerprint,
            user_agent=request.headers.get("user-agent", "")[:USER_AGENT_CHARS],
            client_address=address,
            created_at=now,
            last_seen_at=now,
            expires_at=now + self.policy.max_age,
        )
        await self.store.add(record)
        log.info("web_signed_in", client=address, web_session=record.public_id, via=via)
        response = RedirectResponse(target, status_code=303)
        self._set_cookie(response, request, cookie)
        return response

    async def logout(self, request: Request) -> Response:
        session: WebSessionRecord | None = getattr(request.state, "web_session", None)
        if session is not None:
            await self.store.delete(session.id)
            log.info(
                "web_signed_out", client=client_address(request), web_session=session.public_id
            )
        response = RedirectResponse("/login" if self.token else "/chat", status_code=303)
        response.delete_cookie(
            COOKIE_NAME,
            path="/",
            httponly=True,
            samesite="strict",
            secure=self.policy.secure_cookie or request.url.scheme == "https",
        )
        return response

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/login", self.show_login, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
        ]


class AuthGate(BaseHTTPMiddleware):
    """Lets a request through to the app only when `WebAuth.admit` does."""

    def __init__(self, app: Any, auth: WebAuth) -> None:
        super().__init__(app)
        self._auth = auth

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        return await self._auth.admit(request, call_next)
