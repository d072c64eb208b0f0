"""The Host check: the dashboard answers only under the names it is meant to have.

A page of another site that the owner opens can point a name it controls at 127.0.0.1 (DNS
rebinding) and then talk to the dashboard as if it were its own origin; the browser sends that
name in `Host`. So every request — pages, API, login, chat, artifacts and `/healthz` — must name
a host that is loopback (`localhost`, `127.0.0.1`, `[::1]`, any port), the host of
`app.public_url`, one of `web.allowed_hosts`, or the IP address the connection itself arrived at
(rebinding needs a name; an address typed into the browser is its own origin, which also lets a
container's health probe call `http://<pod ip>:8080/healthz`). Anything else is 421 Misdirected
Request; a missing, repeated or malformed Host is 400. The check runs before authentication,
with or without `web.auth_token`, and before anything is read or stored.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import structlog
from starlette.responses import PlainTextResponse, Response

from bruce_bot.web.wire import error_response

log = structlog.get_logger(__name__)

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MAX_HOST_CHARS = 260  # 253 for a DNS name, a port and a trailing dot
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_PORT = re.compile(r":[0-9]{1,5}")

Send = Any
Receive = Any
Scope = dict[str, Any]


def parse_host(value: str) -> str | None:
    """The host of a `Host` header value — lower case, port and IPv6 brackets removed, a final
    dot dropped — or None when it is not `name[:port]`, `IPv4[:port]` or `[IPv6][:port]`."""
    value = value.strip().lower()
    if not value or len(value) > MAX_HOST_CHARS:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, port = value[1:end], value[end + 1 :]
        try:
            host = str(ipaddress.IPv6Address(host))
        except ValueError:
            return None
    else:
        host, colon, port = value.partition(":")
        port = colon + port
        host = host.removesuffix(".")
        if not host or not all(_LABEL.fullmatch(label) for label in host.split(".")):
            return None
    if port and not (_PORT.fullmatch(port) and int(port[1:]) <= 65535):
        return None
    return host


def _configured_host(entry: str) -> str | None:
    """An entry of web.allowed_hosts (a name, `name:port`, or a whole URL) as a host."""
    entry = entry.strip()
    if "://" in entry:
        try:
            hostname = urlsplit(entry).hostname
        except ValueError:
            return None
        return parse_host(f"[{hostname}]" if hostname and ":" in hostname else hostname or "")
    return parse_host(entry)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class AllowedHosts:
    """The hosts the dashboard answers to: loopback, `app.public_url`'s, `web.allowed_hosts`."""

    def __init__(self, public_url: str = "", allowed_hosts: Iterable[str] = ()) -> None:
        self.names = set(LOOPBACK_NAMES)
        entries = [*([public_url] if public_url else []), *allowed_hosts]
        for entry in entries:
            host = _configured_host(entry)
            if host is None:
                log.warning("web_allowed_host_ignored", entry=entry[:100])
            else:
                self.names.add(host)

    def allows(self, host: str, server: tuple[str, int] | None) -> bool:
        if host in self.names:
            return True
        # An IP address host is accepted when it is the address this connection came in on.
        address = _address(host)
        return address is not None and server is not None and address == _address(server[0])


def _refusal(path: str, status: int, message: str) -> Response:
    if path.startswith("/api/"):
        return error_response(status, message)
    return PlainTextResponse(message, status_code=status)


class HostCheck:
    """ASGI middleware answering 421 (or 400) before the app sees a request with a bad Host."""

    def __init__(self, app: Any, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        values = [value for name, value in scope["headers"] if name == b"host"]
        raw = values[0].decode("latin-1") if len(values) == 1 else ""
        host = parse_host(raw)
        if host is not None and self.allowed.allows(host, scope.get("server")):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        client = (scope.get("client") or ("", 0))[0]
        if len(values) != 1:
            status, message = 400, "send exactly one Host header naming the dashboard's host"
        elif host is None:
            status = 400
            message = (
                "the Host header must be a host name or address with an optional port "
                "(name:port, 1.2.3.4:port or [::1]:port)"
            )
        else:
            status = 421
            message = (
                f"this dashboard does not answer to the host {raw[:100]!r}: it answers only to "
                "localhost, 127.0.0.1, [::1], the host of app.public_url and the hosts in "
                "web.allowed_hosts (a guard against DNS rebinding). If this is your address for "
                "Bruce, add it to web.allowed_hosts; behind a reverse proxy, pass the original "
                "Host header."
            )
        log.warning(
            "web_host_refused", host=raw[:100], path=path[:200], client=client, status=status
        )
        await _refusal(path, status, message)(scope, receive, send)
