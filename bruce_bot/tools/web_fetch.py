"""The `web_fetch` tool: read one web page and give the model its title, final URL and text.

The model chooses the URL, so the fetch must not become a way into the owner's own network
(SSRF). Before each request, redirects included, the host is resolved (every address) and the
request is refused when any address is loopback, private, link-local, site-local, CGNAT,
multicast, reserved, unspecified or otherwise not globally reachable in IANA's special-purpose
registries (IPv6 forms that carry an IPv4 address are judged by it) — unless
`tools.web_fetch.allow_private_addresses` is on — and always when it is a cloud metadata
endpoint. The connection then goes to an address that was checked: a pinning
network backend under httpx refuses to dial anything else, so a DNS answer that changes between
the check and the connection (DNS rebinding) cannot redirect it. The URL keeps its host name, so
the Host header, TLS SNI and certificate checks are those of the real site.

The owner's domain lists come first, before any DNS lookup: a host in
`tools.web_fetch.blocked_domains`, or outside a non-empty `tools.web_fetch.allowed_domains`, is
refused (a domain covers its subdomains; names are compared in lower case, without a trailing dot,
in their IDNA form). The same tool object serves chats and scheduled runs, so both obey them.

Redirects are followed by hand (at most 5, each hop checked again), only HTML, plain text and
JSON are read, the body is streamed and cut at `MAX_BODY_BYTES`, and the whole fetch has a time
limit. Readable text comes from trafilatura (in a thread: it is CPU-bound), with a plain
HTML-to-text fallback when it finds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import ipaddress
import mimetypes
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import certifi
import httpcore
import httpx

from bruce_bot.config import WebFetchConfig, normalise_domain
from bruce_bot.tools.own_address import POLICY as OWN_ADDRESS_POLICY
from bruce_bot.tools.own_address import OwnAddress
from bruce_bot.tools.registry import Tool, ToolContext, ToolError

MAX_BODY_BYTES = 5_000_000
MAX_REDIRECTS = 5
FETCH_TIMEOUT_SECONDS = 20.0
MAX_URL_CHARS = 2048
USER_AGENT = "Mozilla/5.0 (compatible; Bruce/0.1; self-hosted personal assistant)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "application/json", "text/json"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port) -> the addresses the host name resolves to, as strings
Resolver = Callable[[str, int], Awaitable[list[str]]]

CLOUD_METADATA = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS over IPv6
    )
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Ranges the IANA special-purpose registries (and RFC 3879's deprecated site-local) mark as not
# globally reachable that Python's `ipaddress` (3.11) calls global: checked by name, so the
# guard does not depend on which Python release's tables are installed. The rest of those
# registries is covered by is_private / is_reserved / is_link_local and the embedded-IPv4 forms.
_NOT_PUBLIC = tuple(
    (ipaddress.ip_network(network), what)
    for network, what in (
        ("fec0::/10", "a site-local address"),  # deprecated, still routed inside some networks
        ("64:ff9b:1::/48", "a local-use NAT64 address"),  # RFC 8215: translates to private v4
        ("3fff::/20", "a documentation address"),  # RFC 9637
        ("5f00::/16", "a segment-routing (SRv6) address"),  # RFC 9602
        ("192.88.99.0/24", "a 6to4 relay anycast address"),  # RFC 7526, deprecated
        ("192.0.0.0/24", "an IETF protocol assignment address"),  # RFC 6890
        ("2001::/23", "an IETF protocol assignment address"),  # RFC 2928 (Teredo among them)
    )
)


# ---- which addresses may be fetched ----------------------------------------------------------


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, 6to4, NAT64, Teredo), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.teredo is not None:
        return address.teredo[1]
    return None


def address_problem(address: IPAddress, allow_private: bool = False) -> str | None:
    """Why `address` must not be fetched ("a loopback address", ...), or None when it may be."""
    if address in CLOUD_METADATA:
        return "a cloud metadata endpoint"  # never, even with private addresses allowed
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            problem = address_problem(embedded, allow_private)
            if problem:
                return f"{problem} (as IPv6 {address})"
            # Mapped, NAT64 and 6to4 forms reach the IPv4 address they carry; a Teredo address
            # is judged as IPv6 too (2001::/32 is not globally reachable).
            if address.teredo is None:
                return None
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "an unspecified address"
    if allow_private:
        return None
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.version == 4 and address in _CGNAT:
        return "a shared (CGNAT) address"
    if address.is_private:
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    for network, what in _NOT_PUBLIC:
        if address.version == network.version and address in network:
            return what
    if not address.is_global:
        return "an address that is not publicly routable"
    return None


def parse_address(text: str) -> IPAddress:
    return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone ("fe80::1%eth0")


async def system_resolver(host: str, port: int) -> list[str]:
    """All addresses of `host` from the system resolver (getaddrinfo runs in a worker thread)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# ---- which domains may be fetched --------------------------------------------------------------

BLOCKED_KEY = "tools.web_fetch.blocked_domains"
ALLOWED_KEY = "tools.web_fetch.allowed_domains"


def _covers(domain: str, host: str) -> bool:
    return host == domain or host.endswith("." + domain)


@dataclass(frozen=True, slots=True)
class DomainPolicy:
    """The owner's lists of domains (normalised, see `config.normalise_domain`)."""

    blocked: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()  # empty: any domain that is not blocked

    @classmethod
    def from_config(cls, config: WebFetchConfig) -> DomainPolicy:
        return cls(
            tuple(normalise_domain(d) for d in config.blocked_domains),
            tuple(normalise_domain(d) for d in config.allowed_domains),
        )

    def problem(self, host: str) -> str | None:
        """Why `host` (a URL's host, IDNA-encoded) must not be fetched, or None when it may be."""
        name = host.lower().rstrip(".")
        for domain in self.blocked:
            if _covers(domain, name):
                shown = f"{name} is in" if name == domain else f"{name} is under {domain!r} in"
                return f"{shown} {BLOCKED_KEY}; the owner does not let Bruce read that site"
        if self.allowed and not any(_covers(domain, name) for domain in self.allowed):
            return (
                f"{name} is not in {ALLOWED_KEY}; only those domains (and their subdomains) are "
                "read, so use one of them or answer without this page"
            )
        return None


# ---- connecting only to checked addresses ----------------------------------------------------


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials, for each host name, only the addresses pinned for it after they were checked."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.inner = inner or httpcore.AnyIOBackend()
        self.pins: dict[str, list[str]] = {}
        self.dialled: list[tuple[str, str, int]] = []  # (host, address, port), for the curious

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = self.pins.get(host.lower())
        if not addresses:
            raise httpcore.ConnectError(f"{host} was not checked before connecting; refused")
        failure: Exception | None = None
        for address in addresses:
            self.dialled.append((host, address, port))
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


_CORE_TO_HTTPX: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    # The most specific first: a failure to connect is told apart from a broken answer.
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for core, mapped in _CORE_TO_HTTPX:
            if isinstance(exc, core):
                raise mapped(str(exc) or type(exc).__name__) from exc
        raise


class _CoreStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose only way out is a `PinnedBackend`."""

    def __init__(self, backend: PinnedBackend, ssl_context: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or ssl.create_default_context(cafile=certifi.where()),
            network_backend=backend,
            max_connections=4,
            keepalive_expiry=5.0,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_CoreStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


# ---- fetching ---------------------------------------------------------------------------------


class FetchRefused(ToolError):
    """The URL (or a redirect) points somewhere Bruce does not fetch."""


@dataclass(frozen=True, slots=True)
class FetchedPage:
    url: str  # after redirects
    requested_url: str
    content_type: str  # e.g. "text/html"; "" when the server sent none
    body: bytes
    charset: str | None
    cut_at_bytes: bool  # the body was larger than `read_limit` and was cut there
    read_limit: int = MAX_BODY_BYTES
    redirects: tuple[str, ...] = field(default=())


def _check_url(url: httpx.URL, original: str) -> str:
    if url.scheme not in ("http", "https"):
        raise FetchRefused(
            f"refused to fetch {original}: only http:// and https:// URLs can be fetched"
        )
    host = url.raw_host.decode("ascii").lower()
    if not host:
        raise FetchRefused(f"refused to fetch {original}: the URL has no host name")
    return host


def _parse_url(url: str) -> httpx.URL:
    if len(url) > MAX_URL_CHARS:
        raise ToolError(f"the URL is too long ({len(url)} characters; at most {MAX_URL_CHARS})")
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ToolError(f"{url!r} is not a valid URL ({exc})") from None
    _check_url(parsed, url)
    return parsed


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """What may be fetched: the SSRF rule, the owner's domain lists, Bruce's own address."""

    allow_private: bool = False
    domains: DomainPolicy = field(default_factory=DomainPolicy)
    own: OwnAddress = field(default_factory=OwnAddress)

    @classmethod
    def from_config(cls, config: WebFetchConfig, own: OwnAddress | None = None) -> FetchPolicy:
        return cls(
            config.allow_private_addresses, DomainPolicy.from_config(config), own or OwnAddress()
        )


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_bytes: int = MAX_BODY_BYTES
    max_redirects: int = MAX_REDIRECTS
    timeout: float = FETCH_TIMEOUT_SECONDS


@dataclass(frozen=True, slots=True)
class FetchNetwork:
    """How a fetch connects: the resolver, the network backend below the pinning and the TLS
    trust store; tests play DNS and route "public" addresses to local fakes with them."""

    resolver: Resolver = system_resolver
    backend: httpcore.AsyncNetworkBackend | None = None
    ssl_context: ssl.SSLContext | None = None


class PageFetcher:
    """Fetches one URL under the SSRF policy."""

    def __init__(
        self,
        policy: FetchPolicy | None = None,
        limits: FetchLimits | None = None,
        network: FetchNetwork | None = None,
    ) -> None:
        self.policy = policy or FetchPolicy()
        self.limits = limits or FetchLimits()
        self.network = network or FetchNetwork()

    async def fetch(self, url: str) -> FetchedPage:
        try:
            async with asyncio.timeout(self.limits.timeout):
                return await self._fetch(url)
        except TimeoutError:
            raise ToolError(
                f"{url} did not answer within {self.limits.timeout:g} seconds; try again later or "
                "another source"
            ) from None

    async def refusal(self, url: str) -> str | None:
        """Why the policy would refuse `url` (its scheme, domain, or the addresses its host has
        now), or None. A host that does not resolve now is not refused: that may pass."""
        try:
            await self._resolve_and_pin(httpx.URL(url), PinnedBackend())
        except FetchRefused as exc:
            return str(exc)
        except (ToolError, httpx.InvalidURL) as exc:
            return None if isinstance(exc, ToolError) else f"{url} is not a valid URL ({exc})"
        return None

    async def _resolve_and_pin(self, url: httpx.URL, backend: PinnedBackend) -> None:
        host = _check_url(url, str(url))
        refusal = self.policy.domains.problem(host)
        if refusal:
            raise FetchRefused(f"refused to fetch {url}: {refusal}")
        own = self.policy.own.name_problem(host)
        if own:
            raise FetchRefused(f"refused to fetch {url}: {own}; {OWN_ADDRESS_POLICY}")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = [str(ipaddress.ip_address(host))]  # an address literal: no DNS
        except ValueError:
            addresses = []
        try:
            addresses = addresses or await self.network.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ToolError(
                f"could not resolve the host {host!r} ({reason}); check the URL"
            ) from None
        if not addresses:
            raise ToolError(f"the host {host!r} has no address; check the URL")
        for text in addresses:
            try:
                problem = address_problem(parse_address(text), self.policy.allow_private)
            except ValueError:
                problem = "not an IP address"
            if problem:
                policy = (
                    "cloud metadata endpoints are never fetched"
                    if problem.startswith("a cloud metadata")
                    else "web_fetch only reads public internet addresses"
                )
                where = f"{host} is" if host == text else f"{host} resolves to {text},"
                raise FetchRefused(f"refused to fetch {url}: {where} {problem}; {policy}")
        own = self.policy.own.address_problem(addresses, port)
        if own:
            raise FetchRefused(f"refused to fetch {url}: {own}; {OWN_ADDRESS_POLICY}")
        backend.pins[host] = addresses

    async def _fetch(self, url: str) -> FetchedPage:
        current = _parse_url(url)
        backend = PinnedBackend(self.network.backend)
        redirects: list[str] = []
        async with httpx.AsyncClient(
            transport=PinnedTransport(backend, self.network.ssl_context),
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: it would dial unchecked hosts
            timeout=httpx.Timeout(10.0, connect=5.0),
            headers={"User-Agent": USER_AGENT, "Accept": ACCEPT},
        ) as client:
            while True:
                try:
                    await self._resolve_and_pin(current, backend)
                except ToolError as exc:
                    if not redirects:
                        raise  # the model's own URL: the message names nothing else
                    raise _hop_refused(exc, url, current) from None
                answer = await self._request(client, current, url, redirects)
                if isinstance(answer, FetchedPage):
                    return answer
                current = answer

    async def _request(
        self, client: httpx.AsyncClient, current: httpx.URL, url: str, redirects: list[str]
    ) -> FetchedPage | httpx.URL:
        """One hop: the page, or the next URL of a redirect (noted in `redirects`)."""
        try:
            async with client.stream("GET", current) as response:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    return self._redirect(current, location, url, redirects)
                return await self._read(response, url, tuple(redirects))
        except httpx.TimeoutException:
            raise ToolError(
                f"{url} did not answer in time; try again later or another source",
                untrusted=_server_text(redirects, current),
            ) from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            # Before the server said anything: the words are the system's.
            raise ToolError(
                f"could not fetch {url} ({type(exc).__name__}: {exc}); check the URL or "
                "try another source",
                untrusted=_server_text(redirects, current),
            ) from None
        except httpx.HTTPError as exc:
            # A protocol error quotes what the server sent (a header line, ...).
            raise ToolError(
                f"could not fetch {url} (the server's answer broke off or was not valid "
                f"HTTP: {type(exc).__name__}); check the URL or try another source",
                untrusted=_server_text(redirects, current, error=str(exc)),
            ) from None

    def _redirect(
        self, current: httpx.URL, location: str, url: str, redirects: list[str]
    ) -> httpx.URL:
        if len(redirects) >= self.limits.max_redirects:
            raise ToolError(
                f"{url} redirected more than {self.limits.max_redirects} times; giving up"
            )
        redirects.append(str(current))
        try:
            return current.join(location)
        except (httpx.InvalidURL, ValueError):
            raise ToolError(
                f"{url} redirected to an address that is not a valid URL; try another source",
                untrusted=_server_text(redirects, None, location=location),
            ) from None

    async def _read(
        self, response: httpx.Response, requested: str, redirects: tuple[str, ...]
    ) -> FetchedPage:
        # Errors name the model's own URL; what the server chose (the reason phrase, the type,
        # the address it redirected to) goes in `untrusted`, fenced as data (registry.py).
        final = str(response.url)
        status = response.status_code
        if status >= 400:
            reason = response.reason_phrase
            standard = _standard_phrase(status)
            if reason in ("", standard):
                shown, outside = f"HTTP {status} {standard}".rstrip(), None
            else:
                shown, outside = f"HTTP {status} with its own reason phrase", reason
            raise ToolError(
                f"{requested} answered {shown}; the page is not available",
                untrusted=_server_text(redirects, final, reason_phrase=outside),
            )
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        readable = content_type in HTML_TYPES or content_type in TEXT_TYPES
        if content_type and not (readable or content_type.endswith("+json")):
            known = content_type in _KNOWN_TYPES
            raise ToolError(
                f"{requested} is {content_type if known else 'a file of another type'}, not a "
                "page web_fetch can read (it reads HTML, plain text and JSON)",
                untrusted=_server_text(
                    redirects, final, content_type=None if known else content_type
                ),
            )
        body = bytearray()
        cut = False
        async for chunk in response.aiter_bytes():  # decompressed: the limit holds for gzip too
            body += chunk
            if len(body) > self.limits.max_bytes:
                del body[self.limits.max_bytes :]
                cut = True
                break  # leaving the stream closes the connection: the rest is never downloaded
        return FetchedPage(
            url=final,
            requested_url=requested,
            content_type=content_type,
            body=bytes(body),
            charset=response.charset_encoding,
            cut_at_bytes=cut,
            read_limit=self.limits.max_bytes,
            redirects=redirects,
        )


# The types of Python's built-in table (not the machine's /etc/mime.types, so that the same
# types are named everywhere) are said in Bruce's words. Any other Content-Type is the server's
# text, and only shown fenced.
_KNOWN_TYPES = frozenset(mimetypes.MimeTypes().types_map[True].values())


def _standard_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _server_text(
    redirects: Iterable[str], final: httpx.URL | str | None, **fields: str | None
) -> str | None:
    """What the server chose that an error explains itself with ("Reason phrase: ...", the
    address it redirected to), or None when there is none."""
    names = {
        "reason_phrase": "The server's reason phrase",
        "content_type": "The Content-Type it sent",
        "location": "The Location it redirected to",
        "error": "The error, quoting the server",
    }
    lines = [f"Redirected to: {final}"] if list(redirects) and final is not None else []
    lines += [f"{names[key]}: {value}" for key, value in fields.items() if value]
    return "\n".join(lines) or None


def _hop_refused(exc: ToolError, url: str, hop: httpx.URL) -> ToolError:
    """A redirect hop's refusal, told in Bruce's words: its message names the address the
    server chose (and that address's host), so it is fenced whole."""
    what = (
        "somewhere web_fetch does not read"
        if isinstance(exc, FetchRefused)
        else "an address that could not be reached"
    )
    kind = FetchRefused if isinstance(exc, FetchRefused) else ToolError
    return kind(
        f"{url} redirected to {what}; answer without this page or try another source",
        untrusted=f"Redirected to: {hop}\nWhy: {exc}",
    )


# ---- turning a page into text -----------------------------------------------------------------

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br dd div dl dt figcaption footer form h1 h2 h3 h4 h5 h6 "
    "header hr li main nav ol p pre section table td th tr ul".split()
)
_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe"})


def decode(body: bytes, charset: str | None) -> str:
    if not charset:
        found = _META_CHARSET.search(body[:4096])
        charset = found.group(1).decode("ascii") if found else "utf-8"
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


class _TextParser(HTMLParser):
    """A forgiving HTML-to-text pass: the title, and the visible text with line breaks at blocks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.parts: list[str] = []
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED_TAGS:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def html_to_text(markup: str) -> tuple[str, str]:
    """(title, text) of an HTML document with the standard library only."""
    parser = _TextParser()
    with contextlib.suppress(Exception):  # malformed markup: keep what was parsed
        parser.feed(markup)
        parser.close()
    return " ".join(parser.title.split()), parser.text()


def extract_readable(markup: str, url: str) -> tuple[str, str]:
    """(title, main text) of an HTML page: trafilatura first, the plain pass when it finds none."""
    title, fallback = html_to_text(markup)
    text = ""
    try:
        # Imported on first use (it loads lxml and more): only when a page is actually read.
        import trafilatura

        document = trafilatura.bare_extraction(
            markup,
            url=url,
            with_metadata=True,
            include_comments=False,
            include_tables=True,
            favor_recall=True,
        )
        if document is not None:
            text = (getattr(document, "text", None) or "").strip()
            title = title or (getattr(document, "title", None) or "").strip()
    except Exception:  # trafilatura gives up on some markup: the plain pass still works
        text = ""
    return title, text or fallback


def page_text(page: FetchedPage) -> tuple[str, str]:
    """(title, text) of a fetched page, whatever its type (runs in a worker thread)."""
    decoded = decode(page.body, page.charset)
    kind = page.content_type
    if not kind:  # no Content-Type: looks like markup, or plain text?
        if b"\x00" in page.body[:1024]:
            raise ToolError(
                f"{page.requested_url} looks like a binary file, not a page web_fetch can read",
                untrusted=_server_text(page.redirects, page.url),
            )
        kind = "text/html" if decoded.lstrip()[:1] == "<" else "text/plain"
    if kind in HTML_TYPES:
        return extract_readable(decoded, page.url)
    return "", decoded.strip()


def render(page: FetchedPage, title: str, text: str, max_chars: int) -> str:
    lines = [f"Title: {title[:300] or '(none)'}", f"URL: {page.url}"]
    if page.redirects:
        lines.append(f"Redirected from: {page.requested_url}")
    lines.append("")
    if not text:
        lines.append("(The page has no readable text; it may need JavaScript to show anything.)")
    elif len(text) > max_chars:
        lines.append(text[:max_chars])
        lines.append(
            f"\n[Truncated: showing the first {max_chars} of {len(text)} characters of text.]"
        )
    else:
        lines.append(text)
    if page.cut_at_bytes:
        lines.append(
            f"[The page is larger than {page.read_limit:,} bytes; only its beginning was read.]"
        )
    return "\n".join(lines)


class WebFetchTool(Tool):
    name = "web_fetch"
    effect = "reads"  # but a URL carrying the conversation's text sends it out (agent/outward.py)
    url_argument = "url"
    description = (
        "Read a web page: returns its title, final URL (after redirects) and readable text, "
        "truncated when long. Only http:// and https:// URLs of the public internet; HTML, plain "
        "text and JSON pages."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_URL_CHARS,
                "description": "The full URL to read, starting with http:// or https://.",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    timeout_seconds = FETCH_TIMEOUT_SECONDS + 25  # the fetch, then extraction in a thread
    reads_outside_world = True  # a page is data for the model, never instructions
    # The tool cuts the text to tools.web_fetch.max_chars itself, with a note; this is a backstop.
    max_output_chars = 2_000_000

    def __init__(
        self,
        config: WebFetchConfig,
        fetcher: PageFetcher | None = None,
        *,
        own: OwnAddress | None = None,
    ) -> None:
        self.max_chars = config.max_chars
        self.fetcher = fetcher or PageFetcher(FetchPolicy.from_config(config, own))

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        page = await self.fetcher.fetch(arguments["url"])
        title, text = await asyncio.to_thread(page_text, page)
        return render(page, title, text, self.max_chars)
