"""Dashboard authentication: a bearer token for the API, an HttpOnly cookie for pages.

The cookie holds an HMAC of the configured token, never the token itself. With no token
configured the server only ever binds to loopback (enforced by the config), and access is open.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request

COOKIE_NAME = "bruce_session"


def cookie_value(token: str) -> str:
    return hmac.new(token.encode(), b"bruce-dashboard-session", hashlib.sha256).hexdigest()


def is_authorised(request: Request, token: str) -> bool:
    if not token:
        return True
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer ") and token_matches(header[7:].strip(), token):
        return True
    cookie = request.cookies.get(COOKIE_NAME, "")
    return bool(cookie) and token_matches(cookie, cookie_value(token))


def token_matches(candidate: str, token: str) -> bool:
    # Compare bytes: compare_digest refuses non-ASCII str, and a header may hold anything.
    return bool(token) and hmac.compare_digest(candidate.encode(), token.encode())
