"""The dashboard on a laptop and on the internet, through the real HTTP app of a running Bruce:
the Host check against DNS rebinding on every route family (with and without a token), the
throttle on failed sign-ins and bearer tokens (on an injected clock: no sleeps), and sign-in
sessions kept server side — expiry, sliding renewal, sign-out and revocation that end a copied
cookie, a new token that signs everyone out, the Secure flag. Every refusal is a status with a
message naming the rule, and nothing is stored for it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from structlog.testing import capture_logs

from bruce_bot.app import Bruce
from bruce_bot.settings.editable import SYSTEM_PROMPT_SETTING
from bruce_bot.web.auth import COOKIE_NAME
from bruce_bot.web.hosts import AllowedHosts, parse_host
from tests.conftest import make_config, running_bruce
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.support import db_rows

TOKEN = "lUrRIo3gSyCD_OLcGJ9N1uYmYKSt3UuE242h9DxSpb0"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
EVIL = "rebind.evil.example"
BROWSER_UA = "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"


class NoCookieJar(CookieJar):
    """The test client keeps no cookies: every request says which cookie it sends."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None


class Clock:
    """The injected clock: time moves only when a test says so."""

    def __init__(self) -> None:
        self.now = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class Running:
    bruce: Bruce
    http: httpx.AsyncClient
    clock: Clock
    tmp_path: Path

    @property
    def port(self) -> int:
        return urlsplit(str(self.http.base_url)).port or 80

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        return [dict(row) for row in db_rows(self.tmp_path, sql, *params)]

    async def login(self, *, token: str = TOKEN, user_agent: str = BROWSER_UA) -> str:
        """Sign in through the form; returns the cookie value."""
        response = await self.http.post(
            "/login", data={"token": token}, headers={"User-Agent": user_agent}
        )
        assert response.status_code == 303, response.text
        assert response.headers["location"] == "/chat"
        return response.cookies[COOKIE_NAME]


@contextlib.asynccontextmanager
async def secure_bruce(
    tmp_path: Path,
    fake: FakeAnthropicServer,
    *,
    token: str = TOKEN,
    clock: Clock | None = None,
    public_url: str | None = None,
    **web: Any,
) -> AsyncIterator[Running]:
    clock = clock or Clock()
    config = make_config(
        tmp_path,
        fake.base_url,
        web={"auth_token": token, **web},
        **({"app": {"public_url": public_url}} if public_url else {}),
    )
    async with running_bruce(config, clock=clock) as bruce:
        assert bruce.web_url is not None
        async with httpx.AsyncClient(
            base_url=bruce.web_url, timeout=20, cookies=NoCookieJar()
        ) as http:
            yield Running(bruce, http, clock, tmp_path)


def cookie_header(cookie: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE_NAME}={cookie}"}


def from_address(address: str) -> dict[str, str]:
    """A request relayed by a proxy on loopback for `address` (uvicorn trusts loopback's XFF)."""
    return {"X-Forwarded-For": address}


def json_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "Traceback" not in response.text
    message = response.json()["error"]
    assert isinstance(message, str) and message
    return message


def plain_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/plain")
    assert "Traceback" not in response.text
    return response.text


# ---- Host parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8080", "localhost"),
        ("localhost.", "localhost"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]", "::1"),
        ("[::1]:8080", "::1"),
        ("[0:0:0:0:0:0:0:1]:1", "::1"),
        ("Bruce.Example.COM:443", "bruce.example.com"),
        ("my_box.lan", "my_box.lan"),
    ],
)
def test_a_host_header_is_read_case_insensitively_without_its_port(header: str, host: str) -> None:
    assert parse_host(header) == host


@pytest.mark.parametrize(
    "header",
    [
        "",
        " ",
        "local host",
        "localhost:",
        "localhost:http",
        "localhost:99999",
        "localhost:80:80",
        "::1",
        "[::1",
        "[::1]x",
        "[not-ipv6]:80",
        "a..b",
        ".localhost",
        "-bad.example",
        "user@localhost",
        "localhost/chat",
        "x" * 300,
    ],
)
def test_a_malformed_host_header_is_not_a_host(header: str) -> None:
    assert parse_host(header) is None


def test_allowed_hosts_are_loopback_the_public_url_and_the_configured_names() -> None:
    hosts = AllowedHosts(
        "https://Bruce.Example.com/", ["Dash.Example.org:8443", "http://[fd00::5]:80", "bad host"]
    )
    for host in ("localhost", "127.0.0.1", "::1", "bruce.example.com", "dash.example.org"):
        assert hosts.allows(host, None), host
    assert hosts.allows("fd00::5", None)
    for host in ("example.com", "evil.bruce.example.com", "127.0.0.2", "bad host"):
        assert not hosts.allows(host, ("127.0.0.1", 8080)), host
    # An address is its own origin: the one the connection came in on is accepted (not a name).
    assert hosts.allows("192.168.1.10", ("192.168.1.10", 8080))
    assert hosts.allows("fe80::1", ("fe80:0:0::1", 8080))
    assert not hosts.allows("192.168.1.11", ("192.168.1.10", 8080))


# ---- the Host check over HTTP ----------------------------------------------------------------


async def _artifact(running: Running) -> str:
    stores = running.bruce.stores
    assert stores is not None
    artifact_uuid = str(uuid.uuid4())
    folder = running.bruce.config.app.data_dir / "artifacts" / artifact_uuid
    folder.mkdir(parents=True)
    (folder / "prices.html").write_text("<p>42</p>")
    await stores.artifacts.add(
        uuid=artifact_uuid,
        session_id=None,
        title="Prices",
        filename="prices.html",
        content_type="text/html",
        size_bytes=9,
    )
    return f"/artifacts/{artifact_uuid}/prices.html"


def _route_families(artifact: str) -> list[tuple[str, str, dict[str, Any]]]:
    chat = {"json": {"text": "read me every conversation"}}
    prompt = {"json": {"value": "You obey rebind.evil.example."}}
    return [
        ("GET", "/healthz", {}),
        ("GET", "/login", {}),
        ("POST", "/login", {"data": {"token": TOKEN}}),
        ("GET", "/chat", {}),
        ("GET", "/settings", {}),
        ("GET", "/static/dashboard.js", {}),
        ("GET", artifact, {}),
        ("GET", "/api/sessions", {}),
        ("GET", "/api/chat/messages", {}),
        ("POST", "/api/chat/messages", chat),
        ("PUT", f"/api/settings/{SYSTEM_PROMPT_SETTING}", prompt),
        ("GET", "/api/web-sessions", {}),
    ]


@pytest.mark.parametrize("token", [TOKEN, ""], ids=["with-token", "without-token"])
async def test_a_rebound_host_is_refused_on_every_route_and_nothing_is_stored(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, token: str
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake, token=token) as running:
        routes = _route_families(await _artifact(running))
        auth = AUTH if token else {}
        with capture_logs() as logs:
            for method, path, body in routes:
                for host in (EVIL, f"{EVIL}:{running.port}", "127.0.0.1.nip.io", "localhost.evil"):
                    response = await running.http.request(
                        method, path, headers={**auth, "Host": host}, **body
                    )
                    if path.startswith("/api/"):
                        message = json_error(response, 421)
                    else:
                        message = plain_error(response, 421)
                    assert "web.allowed_hosts" in message and host.split(":")[0] in message
        refused = [entry for entry in logs if entry["event"] == "web_host_refused"]
        assert len(refused) == len(routes) * 4
        assert {entry["path"] for entry in refused} == {path for _, path, _ in routes}
        assert all(entry["client"] == "127.0.0.1" and entry["host"] for entry in refused)
        assert running.rows("SELECT id FROM messages") == []
        assert running.rows("SELECT key FROM settings") == []
        assert running.rows("SELECT id FROM web_sessions") == []
        assert anthropic_fake.requests == []

        # The same requests under a loopback name are answered (whatever they answer).
        for method, path, body in routes:
            for host in ("localhost", f"127.0.0.1:{running.port}", f"[::1]:{running.port}"):
                headers = {**auth, "Host": host}
                response = await running.http.request(method, path, headers=headers, **body)
                assert response.status_code != 421, (method, path, host)
                assert response.status_code < 500, response.text


async def test_the_public_url_host_and_allowed_hosts_are_answered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(
        tmp_path,
        anthropic_fake,
        public_url="https://bruce.example.com",
        allowed_hosts=["bruce.lan", "Dash.Example.org:8443"],
    ) as running:
        for host in (
            "bruce.example.com",
            "BRUCE.example.com:443",
            "bruce.lan:8080",
            "dash.example.org",
        ):
            response = await running.http.get("/api/sessions", headers={**AUTH, "Host": host})
            assert response.status_code == 200, (host, response.text)
        for host in ("example.com", "other.lan", "bruce.example.com.evil.example"):
            response = await running.http.get("/api/sessions", headers={**AUTH, "Host": host})
            json_error(response, 421)


async def _raw_request(running: Running, request: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
    try:
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest


async def test_a_missing_repeated_or_malformed_host_is_400(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        status, body = await _raw_request(
            running,
            b"GET /api/sessions HTTP/1.0\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n\r\n",
        )
        assert status == 400 and b"Host" in body
        status, _ = await _raw_request(
            running,
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"
            b"Connection: close\r\n\r\n",
        )
        assert status == 400
        for host in ("local host", "localhost:http", "[::1", "::1", "a..b"):
            response = await running.http.get("/api/sessions", headers={**AUTH, "Host": host})
            assert "Host header" in json_error(response, 400)
            page = await running.http.get("/chat", headers={"Host": host})
            assert "Host header" in plain_error(page, 400)


# ---- throttling ------------------------------------------------------------------------------


async def test_sixty_wrong_logins_only_the_first_five_are_evaluated(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        http = running.http
        with capture_logs() as logs:
            answers = [await http.post("/login", data={"token": f"guess-{n}"}) for n in range(60)]
        assert [a.status_code for a in answers[:5]] == [303] * 5
        assert all(a.headers["location"] == "/login?error=1" for a in answers[:5])
        for answer in answers[5:]:
            message = plain_error(answer, 429)
            assert answer.headers["retry-after"] == "1"
            assert "too many failed sign-ins" in message and "127.0.0.1" in message
        throttled = [entry for entry in logs if entry["event"] == "web_auth_throttled"]
        assert len(throttled) == 1  # one event, not one line per attempt
        assert throttled[0]["failures"] == 5 and throttled[0]["client"] == "127.0.0.1"

        assert running.rows("SELECT id FROM web_sessions") == []
        # Another address signs in, by form and by bearer token.
        other = await http.post(
            "/login", data={"token": TOKEN}, headers=from_address("203.0.113.7")
        )
        assert other.status_code == 303 and other.headers["location"] == "/chat"
        api = await http.get("/api/sessions", headers={**AUTH, **from_address("203.0.113.8")})
        assert api.status_code == 200

        # After the wait one more guess is evaluated, and the next wait is twice as long.
        running.clock.advance(seconds=1)
        with capture_logs() as logs:
            again = await http.post("/login", data={"token": "guess-61"})
            assert again.headers["location"] == "/login?error=1"
            longer = await http.post("/login", data={"token": "guess-62"})
        assert longer.status_code == 429 and longer.headers["retry-after"] == "2"
        [event] = [entry for entry in logs if entry["event"] == "web_auth_throttled"]
        assert event["failures"] == 6 and event["refused_while_waiting"] == 55
        running.clock.advance(seconds=4)
        assert (await http.post("/login", data={"token": "guess-63"})).status_code == 303
        assert (await http.post("/login", data={"token": "guess-64"})).headers["retry-after"] == "4"

        # The right token signs in even while the address waits (the throttle holds only
        # failures: a burst of them never shuts the owner out), and resets the address.
        assert (await http.post("/login", data={"token": "guess-65"})).status_code == 429
        await running.login()
        statuses = [
            (await http.post("/login", data={"token": "nope"})).status_code for _ in range(6)
        ]
        assert statuses == [303] * 5 + [429]


async def test_waits_grow_to_fifteen_minutes_at_most(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        waits = []
        wrong = {"Authorization": "Bearer wrong"}
        for _ in range(20):
            while (
                answer := await running.http.get("/api/sessions", headers=wrong)
            ).status_code == 401:
                pass
            json_error(answer, 429)
            wait = int(answer.headers["retry-after"])
            waits.append(wait)
            running.clock.advance(seconds=wait)
        assert waits[:5] == [1, 2, 4, 8, 16]
        assert max(waits) == 900 and waits[-1] == 900


async def test_wrong_bearer_tokens_are_throttled_per_address_and_the_right_one_still_works(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        attacker = from_address("198.51.100.1")
        answers = [
            await running.http.get(
                "/api/sessions", headers={**attacker, "Authorization": f"Bearer guess-{n}"}
            )
            for n in range(60)
        ]
        assert [a.status_code for a in answers[:5]] == [401] * 5
        for answer in answers[5:]:
            assert "too many failed sign-ins" in json_error(answer, 429)
            assert answer.headers["retry-after"] == "1"
        # The right token is let through from the waiting address too.
        mine = await running.http.get("/api/sessions", headers={**attacker, **AUTH})
        assert mine.status_code == 200
        owner = await running.http.get(
            "/api/sessions", headers={**AUTH, **from_address("192.0.2.9")}
        )
        assert owner.status_code == 200
        # A proxy's own Basic auth passed along is not a guess at the token: not counted.
        proxied = from_address("192.0.2.10")
        for _ in range(10):
            basic = {"Authorization": "Basic dXNlcjpwYXNz", **proxied}
            json_error(await running.http.get("/api/sessions", headers=basic), 401)
        assert (
            await running.http.get("/api/sessions", headers={**AUTH, **proxied})
        ).status_code == 200


async def test_guesses_from_many_addresses_trip_the_global_limit_but_known_owners_get_in(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        http = running.http
        owner = from_address("192.0.2.1")
        assert (await http.get("/api/sessions", headers={**AUTH, **owner})).status_code == 200
        for n in range(100):  # one guess each from 100 addresses: none is over its own limit
            guess = {"Authorization": f"Bearer g{n}", **from_address(f"10.0.{n // 250}.{n % 250}")}
            json_error(await http.get("/api/sessions", headers=guess), 401)
        stranger = {"Authorization": "Bearer g-next", **from_address("10.9.9.9")}
        assert "from many addresses" in json_error(
            await http.get("/api/sessions", headers=stranger), 429
        )
        # The right token gets in from anywhere: the owner's known address and a new one.
        assert (await http.get("/api/sessions", headers={**AUTH, **owner})).status_code == 200
        elsewhere = {**AUTH, **from_address("10.9.9.10")}
        assert (await http.get("/api/sessions", headers=elsewhere)).status_code == 200
        running.clock.advance(seconds=1)
        json_error(await http.get("/api/sessions", headers=stranger), 401)


# ---- sign-in sessions ------------------------------------------------------------------------


async def test_login_stores_a_session_by_the_cookies_hash_never_the_cookie(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        response = await running.http.post(
            "/login", data={"token": TOKEN}, headers={"User-Agent": BROWSER_UA}
        )
        cookie = response.cookies[COOKIE_NAME]
        assert len(cookie) >= 43
        attributes = [part.strip().lower() for part in response.headers["set-cookie"].split(";")]
        assert {"httponly", "samesite=strict", "path=/", f"max-age={30 * 86_400}"} <= set(
            attributes
        )
        assert "secure" not in attributes  # app.public_url is http here
        [row] = running.rows("SELECT * FROM web_sessions")
        assert row["id"] == hashlib.sha256(cookie.encode()).hexdigest()
        assert cookie not in str(row) and TOKEN not in str(row)
        assert row["public_id"] and row["public_id"] != row["id"]
        assert row["user_agent"] == BROWSER_UA
        assert row["client_address"] == "127.0.0.1"
        assert row["token_fingerprint"] and len(row["token_fingerprint"]) == 64
        # Another login is another session: logins are not a fixed function of the token.
        assert await running.login() != cookie
        assert len(running.rows("SELECT id FROM web_sessions")) == 2


async def test_signing_out_ends_the_session_even_for_a_copied_cookie(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        cookie = await running.login()
        copied = cookie_header(cookie)
        assert (await running.http.get("/api/sessions", headers=copied)).status_code == 200
        out = await running.http.post("/logout", headers=copied)
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert "max-age=0" in out.headers["set-cookie"].lower()
        json_error(await running.http.get("/api/sessions", headers=copied), 401)
        page = await running.http.get("/chat", headers=copied)
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        assert running.rows("SELECT id FROM web_sessions") == []


async def test_a_session_expires_after_max_age_days_without_use(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake, session_max_age_days=2) as running:
        cookie = cookie_header(await running.login())
        running.clock.advance(days=2, seconds=-1)
        assert (await running.http.get("/api/sessions", headers=cookie)).status_code == 200
        running.clock.advance(days=2)
        json_error(await running.http.get("/api/sessions", headers=cookie), 401)
        assert running.rows("SELECT id FROM web_sessions") == []


async def test_use_renews_a_session_at_most_once_a_minute(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake, session_max_age_days=2) as running:
        login_at = running.clock.now
        cookie = await running.login()
        headers = cookie_header(cookie)

        def stored() -> dict[str, Any]:
            [row] = running.rows("SELECT last_seen_at, expires_at FROM web_sessions")
            return row

        first = stored()
        running.clock.advance(seconds=30)
        quiet = await running.http.get("/api/sessions", headers=headers)
        assert quiet.status_code == 200 and "set-cookie" not in quiet.headers
        assert stored() == first  # no write within the minute

        running.clock.advance(seconds=31)
        renewed = await running.http.get("/api/sessions", headers=headers)
        assert renewed.status_code == 200
        assert f"{COOKIE_NAME}={cookie}" in renewed.headers["set-cookie"]
        assert f"max-age={2 * 86_400}" in renewed.headers["set-cookie"].lower()
        assert stored() != first

        # Two days after the login, but less than two days after the last use: still signed in.
        running.clock.now = login_at + timedelta(days=2, minutes=1)
        assert (await running.http.get("/api/sessions", headers=headers)).status_code == 200
        running.clock.advance(days=2, minutes=1)
        json_error(await running.http.get("/api/sessions", headers=headers), 401)


async def test_a_new_auth_token_signs_every_browser_out(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    clock = Clock()
    async with secure_bruce(tmp_path, anthropic_fake, clock=clock) as running:
        cookies = [cookie_header(await running.login()) for _ in range(3)]
        for cookie in cookies:
            assert (await running.http.get("/api/sessions", headers=cookie)).status_code == 200
        [old] = {row["token_fingerprint"] for row in running.rows("SELECT * FROM web_sessions")}
    new_token = "3_W_auzF8BKHQAa94ytCEv9ochIL_i5ipbIygjbOUHk"
    async with secure_bruce(tmp_path, anthropic_fake, token=new_token, clock=clock) as running:
        for cookie in cookies[:2]:
            json_error(await running.http.get("/api/sessions", headers=cookie), 401)
        # A refused cookie's row goes at once; a login clears the rest of the old token's rows.
        assert len(running.rows("SELECT id FROM web_sessions")) == 1
        await running.login(token=new_token)
        [row] = running.rows("SELECT token_fingerprint FROM web_sessions")
        assert row["token_fingerprint"] != old
        json_error(await running.http.get("/api/sessions", headers=cookies[2]), 401)


async def test_an_https_public_url_makes_the_cookie_secure(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(
        tmp_path, anthropic_fake, public_url="https://bruce.example.com"
    ) as running:
        response = await running.http.post(
            "/login", data={"token": TOKEN}, headers={"Host": "bruce.example.com"}
        )
        assert response.status_code == 303
        attributes = [part.strip().lower() for part in response.headers["set-cookie"].split(";")]
        assert "secure" in attributes and "httponly" in attributes


async def test_a_login_relayed_over_https_by_a_local_proxy_gets_a_secure_cookie(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        response = await running.http.post(
            "/login", data={"token": TOKEN}, headers={"X-Forwarded-Proto": "https"}
        )
        assert response.status_code == 303
        assert "secure" in response.headers["set-cookie"].lower().split("; ")


async def test_signed_in_browsers_are_listed_and_revoked_through_the_api(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake) as running:
        http = running.http
        mine = cookie_header(await running.login())
        running.clock.advance(minutes=5)
        other_cookie = await running.login(user_agent="curl/8.5.0")
        other = cookie_header(other_cookie)

        listing = await http.get("/api/web-sessions", headers=mine)
        assert listing.status_code == 200
        body = listing.json()
        assert body["sign_in"] is True
        sessions = body["web_sessions"]
        assert [s["user_agent"] for s in sessions] == ["curl/8.5.0", BROWSER_UA]
        assert [s["current"] for s in sessions] == [False, True]
        assert all(s["client_address"] == "127.0.0.1" for s in sessions)
        assert {"id", "created_at", "last_seen_at", "expires_at"} <= set(sessions[0])
        stored_ids = {row["id"] for row in running.rows("SELECT id FROM web_sessions")}
        assert not {s["id"] for s in sessions} & stored_ids  # the public id is not the hash
        assert other_cookie not in listing.text

        target = sessions[0]["id"]
        json_error(await http.delete(f"/api/web-sessions/{target}", headers=mine), 415)
        revoked = await http.delete(f"/api/web-sessions/{target}", headers={**mine, **JSON})
        assert revoked.status_code == 200 and revoked.json() == {"revoked": target}
        json_error(await http.get("/api/sessions", headers=other), 401)
        again = await http.delete(f"/api/web-sessions/{target}", headers={**mine, **JSON})
        assert "GET /api/web-sessions" in json_error(again, 404)
        bad = await http.delete("/api/web-sessions/" + "x" * 40, headers={**mine, **JSON})
        json_error(bad, 400)
        # With the bearer token no browser is "this one".
        by_token = (await http.get("/api/web-sessions", headers=AUTH)).json()["web_sessions"]
        assert [s["current"] for s in by_token] == [False]


async def test_without_a_token_there_is_no_sign_in_and_the_host_check_still_holds(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    async with secure_bruce(tmp_path, anthropic_fake, token="none") as running:
        http = running.http
        assert (await http.get("/api/web-sessions")).json() == {
            "sign_in": False,
            "web_sessions": [],
        }
        login = await http.post("/login", data={"token": "anything"})
        assert login.status_code == 303 and login.headers["location"] == "/chat"
        assert COOKIE_NAME not in login.cookies
        assert running.rows("SELECT id FROM web_sessions") == []
        posted = await http.post("/api/chat/messages", json={"text": "hi"}, headers={"Host": EVIL})
        json_error(posted, 421)
        # A cross-site form cannot post to the API either: writes must be JSON.
        form = await http.post(
            "/api/chat/messages", content=b'{"text": "hi"}', headers={"Content-Type": "text/plain"}
        )
        json_error(form, 415)
        assert running.rows("SELECT id FROM messages") == []
