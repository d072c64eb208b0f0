"""The dashboard's credentials, read off a request: the browser session's row key, the token's
stored fingerprint, the constant-time comparison, the bearer header, the login form's token, and
the 429 a throttled attempt gets (web/auth.py uses them to admit or refuse); how a browser's
session cookie is issued (`SignInPolicy`)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from bruce_bot.web.throttle import Refusal
from bruce_bot.web.wire import capped_body, error_response

MAX_LOGIN_BYTES = 4096
FINGERPRINT_ROUNDS = 100_000  # the fingerprint is stored: make guessing the token from it slow


@dataclass(frozen=True, slots=True)
class SignInPolicy:
    """How a browser signs in: how long its session lasts, whether its cookie is sent over
    HTTPS only (the dashboard's public address is https), and the sign-in form's HTML."""

    max_age: timedelta
    secure_cookie: bool
    login_page: str


def session_key(cookie: str) -> str:
    """The row id of a browser session: the SHA-256 of its cookie (the cookie is never stored)."""
    return hashlib.sha256(cookie.encode("utf-8", errors="replace")).hexdigest()


def token_fingerprint(token: str) -> str:
    return hashlib.pbkdf2_hmac(
        "sha256", token.encode(), b"bruce-web-session-token", FINGERPRINT_ROUNDS
    ).hex()


def token_matches(candidate: str, token: str) -> bool:
    # Compare bytes: compare_digest refuses non-ASCII str, and a header may hold anything.
    return bool(token) and hmac.compare_digest(candidate.encode(), token.encode())


def bearer_credentials(request: Request) -> str | None:
    """The token of an `Authorization: Bearer …` header; None without one (other schemes, e.g.
    a proxy's Basic auth passed along, are not ours to judge)."""
    scheme, _, credentials = request.headers.get("authorization", "").strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def is_json(request: Request) -> bool:
    media_type = request.headers.get("content-type", "").split(";")[0]
    return media_type.strip().lower() == "application/json"


def throttled(request: Request, refusal: Refusal) -> Response:
    """429 for an attempt the throttle refused, unread, with `Retry-After`."""
    who = (
        "from many addresses"
        if refusal.everyone
        else f"from your address ({client_address(request)})"
    )
    message = (
        f"too many failed sign-ins {who}; wait {refusal.retry_after} s before trying again "
        "(each further failure doubles the wait, a success resets it)"
    )
    headers = {"Retry-After": str(refusal.retry_after)}
    if is_api(request):
        return error_response(429, message, headers)
    return PlainTextResponse(message, status_code=429, headers=headers)


async def form_token(request: Request) -> str:
    """The `token` field of the login form (urlencoded, as a browser posts it); "" if absent.

    Parsed here rather than with `request.form()`, which needs the python-multipart package.
    """
    body = await capped_body(request, MAX_LOGIN_BYTES)
    if body is None:
        return ""
    try:
        fields = parse_qs(body.decode("utf-8", errors="replace"), max_num_fields=20)
    except ValueError:  # too many fields
        return ""
    return fields.get("token", [""])[0]
