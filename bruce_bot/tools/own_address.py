"""Bruce's own web address, which `web_fetch` (and a watch) never reads.

The dashboard and its API hold every conversation, memory and setting. A page the model reads
can ask it to fetch `http://127.0.0.1:8080/api/...` and pass on what comes back, so the fetcher
refuses Bruce's own address whatever `tools.web_fetch.allow_private_addresses` says:

- a host name Bruce is reached by: the host of `app.public_url` and each `web.allowed_hosts`
  entry (on any port: behind a reverse proxy the name is Bruce's), except loopback names and
  address literals, which are judged by address and port below, so that other local services
  stay readable when private addresses are allowed;
- the socket the dashboard listens on: `web.host` and `web.port` (the port actually bound, told
  once listening, for `web.port: 0`), with `localhost` and the other loopback names and
  addresses when it is bound to loopback, and every address of this machine when it is bound to
  0.0.0.0 or `::`; plus the port of a loopback or address-literal `app.public_url`.

An address "of this machine" is one a socket can be bound to: the kernel's own answer, with no
list of interfaces to keep up to date.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from bruce_bot.config import Config, normalise_domain

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})  # what web.host binds every address with
_LOOPBACK = ipaddress.ip_address("127.0.0.1")  # stands for every loopback address
POLICY = "web_fetch never reads Bruce's own web address (its dashboard and API), whatever "
POLICY += "tools.web_fetch.allow_private_addresses says"


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _host_and_port(entry: str) -> tuple[str, int | None] | None:
    """A URL, `name:port` or bare name as (lower-case IDNA host, port or None)."""
    text = entry.strip()
    try:
        parts = urlsplit(text if "://" in text else f"http://{text}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    try:
        host = normalise_domain(host)
    except UnicodeError:
        return None
    if "://" in text and port is None:
        port = 443 if parts.scheme == "https" else 80
    return host, port


def is_local_address(address: IPAddress) -> bool:
    """Whether this machine has `address` (a socket can be bound to it)."""
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((str(address), 0))
        return True
    return False


@dataclass(slots=True)
class OwnAddress:
    """What `web_fetch` must not reach (see the module). `listening` adds the port the dashboard
    bound once it listens."""

    names: set[str] = field(default_factory=set)  # refused on any port
    # (address, port) Bruce answers on; address None: every address of this machine.
    sockets: set[tuple[IPAddress | None, int]] = field(default_factory=set)
    _host: str = "127.0.0.1"

    @classmethod
    def from_config(cls, config: Config) -> OwnAddress:
        own = cls()
        for entry in [config.app.public_url, *config.web.allowed_hosts]:
            parsed = _host_and_port(entry)
            if parsed is None:
                continue
            host, port = parsed
            address = _address(host)
            if address is None and host not in LOOPBACK_NAMES:
                own.names.add(host)
            elif port is not None:  # a loopback or address-literal entry, with its port
                own._add_socket(host, port)
        if config.web.enabled:
            own._host = config.web.host
            if config.web.port:
                own.listening(config.web.port)
        return own

    def listening(self, port: int) -> None:
        """The dashboard listens on `port` (of `web.host`)."""
        self._add_socket(self._host, port)

    def _add_socket(self, host: str, port: int) -> None:
        address = _address(host)
        if host.strip("[]") in _WILDCARDS:
            self.sockets.add((None, port))
        elif (address is not None and address.is_loopback) or host in LOOPBACK_NAMES:
            # Every loopback address on that port is refused (127.0.0.1, 127.0.1.1, ::1,
            # localhost...): which of them reach the listener depends on how it was bound.
            self.sockets.add((_LOOPBACK, port))
        elif address is not None:
            self.sockets.add((address, port))
        else:  # bound by a name: whichever of this machine's addresses it has
            self.sockets.add((None, port))

    def name_problem(self, host: str) -> str | None:
        """Why the host name `host` (IDNA, lower case) is Bruce's, before any DNS lookup."""
        name = host.lower().rstrip(".")
        if name in self.names:
            return f"{name} is Bruce's own web address (app.public_url or web.allowed_hosts)"
        return None

    def address_problem(self, addresses: Iterable[str], port: int) -> str | None:
        """Why connecting to `port` on one of `addresses` would reach Bruce's dashboard."""
        for text in addresses:
            address = _address(text)
            if address is None:
                continue
            for own, own_port in self.sockets:
                if own_port != port:
                    continue
                if (
                    (own is None and is_local_address(address))
                    or (own == _LOOPBACK and address.is_loopback)
                    or address == own
                ):
                    return f"port {port} of {address} is where Bruce's own dashboard listens"
        return None
