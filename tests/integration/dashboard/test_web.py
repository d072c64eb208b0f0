"""The web dashboard's HTTP contract (docs/design.md), driven with httpx against a running Bruce
whose LLM is the fake Anthropic server: open health check, bearer-token API, cookie login for pages,
a chat round trip through the API, and bad input that always gets a clear 4xx, never a 500."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from structlog.testing import capture_logs

from bruce_bot.app import Bruce
from bruce_bot.channels.web.channel import WebChannel
from bruce_bot.config import ConfigError, validate
from bruce_bot.domain import OutboundMessage
from bruce_bot.web.app import MAX_BODY_BYTES
from bruce_bot.web.auth import COOKIE_NAME
from bruce_bot.web.server import WebServer
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text

TOKEN = "lDuCtwUktuEDg5VYlefoZ_UGtU5m36jtRGdGLUf8Gbk"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def bruce(tmp_path: Any, anthropic_fake: FakeAnthropicServer) -> AsyncIterator[Bruce]:
    anthropic_fake.responder = lambda body: f"You said: {last_user_text(body)}"
    config = make_config(tmp_path, anthropic_fake.base_url, web={"auth_token": TOKEN})
    async with running_bruce(config) as running:
        yield running


@pytest.fixture
async def client(bruce: Bruce) -> AsyncIterator[httpx.AsyncClient]:
    assert bruce.web_url is not None
    async with httpx.AsyncClient(base_url=bruce.web_url, timeout=20) as http:
        yield http


def assert_clear_client_error(response: httpx.Response, status: int) -> str:
    """A 4xx with a JSON `error` message (never a 500 or a traceback); returns the message."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    assert response.headers["content-type"].startswith("application/json")
    message = response.json()["error"]
    assert isinstance(message, str) and message
    return message


async def messages_until(
    client: httpx.AsyncClient, predicate: Any, *, chat_id: str = "dashboard", within: float = 15
) -> list[dict[str, Any]]:
    """Long-poll the chat until the messages seen so far satisfy `predicate`; returns them."""
    seen: list[dict[str, Any]] = []
    after = 0
    deadline = time.monotonic() + within
    while not predicate(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"chat never reached the expected state; saw {seen}")
        response = await client.get(
            "/api/chat/messages",
            params={"after": after, "wait": 5, "chat_id": chat_id},
            headers=AUTH,
        )
        assert response.status_code == 200, response.text
        batch = response.json()["messages"]
        seen += batch
        if batch:
            after = batch[-1]["id"]
    return seen


def has_assistant_reply(messages: list[dict[str, Any]]) -> bool:
    return any(m["role"] == "assistant" for m in messages)


# ---- authentication --------------------------------------------------------------------------


async def test_healthz_answers_without_auth(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/api/sessions"), ("GET", "/api/chat/messages"), ("POST", "/api/chat/messages")],
)
async def test_api_without_token_is_401_with_json_that_says_how_to_authenticate(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await client.request(method, path, json={"text": "hi"})
    message = assert_clear_client_error(response, 401)
    assert "Authorization: Bearer" in message
    assert "web.auth_token" in message


@pytest.mark.parametrize("path", ["/api/sessions", "/api/chat/messages"])
async def test_api_with_bearer_token_is_200(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path, headers=AUTH)
    assert response.status_code == 200, response.text
    assert isinstance(response.json(), dict)


@pytest.mark.parametrize(
    "authorization",
    [
        b"Bearer wrong-token",
        b"Bearer " + TOKEN[:-1].encode(),
        b"Bearer " + TOKEN.encode() + b"x",
        b"Bearer",
        b"Basic " + TOKEN.encode(),
        TOKEN.encode(),
        "Bearer caf\u00e9-token".encode(),  # non-ASCII: must be a 401, not a crash
    ],
    ids=["wrong", "prefix", "longer", "empty", "basic", "no-scheme", "non-ascii"],
)
async def test_api_with_wrong_bearer_is_401(
    client: httpx.AsyncClient, authorization: bytes
) -> None:
    response = await client.get("/api/sessions", headers={"Authorization": authorization})
    assert_clear_client_error(response, 401)


async def test_a_forged_or_non_ascii_cookie_is_refused(client: httpx.AsyncClient) -> None:
    for value in (TOKEN, "0" * 64, "caf\u00e9"):
        response = await client.get(
            "/api/sessions", headers={"Cookie": f"{COOKIE_NAME}={value}".encode()}
        )
        assert_clear_client_error(response, 401)
    page = await client.get("/chat", headers={"Cookie": f"{COOKIE_NAME}=caf\u00e9".encode()})
    assert page.status_code == 303


async def test_chat_page_redirects_to_login(client: httpx.AsyncClient) -> None:
    response = await client.get("/chat")
    assert response.status_code in (302, 303, 307)
    location = urlsplit(response.headers["location"])
    assert location.path == "/login"
    login = await client.get(response.headers["location"])
    assert login.status_code == 200
    assert 'name="token"' in login.text


async def test_login_sets_a_strict_httponly_cookie_without_the_token_and_opens_the_chat(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/login", data={"token": TOKEN})
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/chat"
    set_cookie = response.headers["set-cookie"]
    attributes = [part.strip().lower() for part in set_cookie.split(";")]
    assert "httponly" in attributes
    assert "samesite=strict" in attributes
    assert TOKEN not in set_cookie
    cookie = response.cookies[COOKIE_NAME]
    assert cookie and TOKEN not in cookie

    with_cookie = {"Cookie": f"{COOKIE_NAME}={cookie}"}
    chat = await client.get("/chat", headers=with_cookie)
    assert chat.status_code == 200
    assert chat.headers["content-type"].startswith("text/html")
    assert 'id="composer"' in chat.text
    # The page's own long poll authenticates with the cookie as well.
    api = await client.get("/api/chat/messages", headers=with_cookie)
    assert api.status_code == 200


@pytest.mark.parametrize("wrong", ["nope", "", TOKEN.upper(), TOKEN + " ", "caf\u00e9"])
async def test_login_with_a_wrong_token_redirects_back_with_an_error(
    client: httpx.AsyncClient, wrong: str
) -> None:
    response = await client.post("/login?next=/chat", data={"token": wrong})
    assert response.status_code == 303
    assert response.headers["location"] == "/login?error=1"
    assert COOKIE_NAME not in response.cookies


async def test_login_form_without_a_body_is_a_wrong_token_not_a_crash(
    client: httpx.AsyncClient,
) -> None:
    for kwargs in ({}, {"json": {"token": TOKEN}}, {"content": b"\xff\xfe token=\x00"}):
        response = await client.post("/login", **kwargs)  # type: ignore[arg-type]
        assert response.status_code == 303, response.text
        assert response.headers["location"] == "/login?error=1"


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example",
        "//evil.example/chat",
        "https://evil.example/",
        "/\\evil.example",
        "\\\\evil.example",
        "/\t/evil.example",
        "javascript:alert(1)",
    ],
)
async def test_login_next_cannot_redirect_off_site(client: httpx.AsyncClient, target: str) -> None:
    response = await client.post("/login", params={"next": target}, data={"token": TOKEN})
    assert response.status_code == 303
    base = str(client.base_url)
    destination = urlsplit(urljoin(base, response.headers["location"]))
    assert destination.scheme == "http"
    assert destination.netloc == urlsplit(base).netloc
    assert destination.path.startswith("/") and not destination.path.startswith("//")


async def test_login_next_keeps_a_local_path(client: httpx.AsyncClient) -> None:
    response = await client.post("/login", params={"next": "/api/sessions"}, data={"token": TOKEN})
    assert response.status_code == 303
    assert response.headers["location"] == "/api/sessions"


async def test_with_the_none_opt_out_loopback_access_is_open_with_a_warning(
    tmp_path: Any, anthropic_fake: FakeAnthropicServer
) -> None:
    config = make_config(tmp_path, anthropic_fake.base_url, web={"auth_token": "none"})
    assert any("web.auth_token is 'none'" in warning for warning in config.warnings())
    with capture_logs() as logs:
        async with running_bruce(config) as open_bruce:
            assert open_bruce.web_url is not None and open_bruce.login_url is None
            async with httpx.AsyncClient(base_url=open_bruce.web_url) as http:
                assert (await http.get("/api/sessions")).status_code == 200
                assert (await http.get("/chat")).status_code == 200
                login = await http.get("/login")
                assert login.status_code == 303 and login.headers["location"] == "/chat"
    assert any(entry["event"] == "web_login_disabled" for entry in logs)
    assert not (tmp_path / "web_token").exists()


# ---- the chat through the API ----------------------------------------------------------------


async def test_chat_round_trip_through_the_api(
    client: httpx.AsyncClient, anthropic_fake: FakeAnthropicServer
) -> None:
    posted = await client.post("/api/chat/messages", json={"text": "hello bruce"}, headers=AUTH)
    assert posted.status_code == 202, posted.text
    body = posted.json()
    assert body["chat_id"] == "dashboard"
    assert isinstance(body["message_id"], int)

    # The user's own message is there at once (the long poll does not need to wait for it).
    first = await client.get("/api/chat/messages", params={"after": 0, "wait": 5}, headers=AUTH)
    assert first.status_code == 200
    user = first.json()["messages"][0]
    assert user["id"] == body["message_id"]
    assert (user["role"], user["content"]) == ("user", "hello bruce")

    messages = await messages_until(client, has_assistant_reply)
    reply = next(m for m in messages if m["role"] == "assistant")
    assert reply["content"] == "You said: hello bruce"
    assert reply["id"] > user["id"]
    assert reply["created_at"]
    assert any("hello bruce" in json.dumps(r["messages"]) for r in anthropic_fake.requests)

    # Nothing new after the reply: a short long poll comes back empty.
    idle = await client.get(
        "/api/chat/messages", params={"after": reply["id"], "wait": 0.2}, headers=AUTH
    )
    assert idle.json()["messages"] == []
    assert idle.json()["typing"] is False


async def test_chats_with_different_chat_ids_are_separate(client: httpx.AsyncClient) -> None:
    for chat_id, text in (("one", "first chat"), ("two", "second chat")):
        posted = await client.post(
            "/api/chat/messages", json={"text": text, "chat_id": chat_id}, headers=AUTH
        )
        assert posted.status_code == 202
    for chat_id, text in (("one", "first chat"), ("two", "second chat")):
        messages = await messages_until(client, has_assistant_reply, chat_id=chat_id)
        assert [m["content"] for m in messages] == [text, f"You said: {text}"]


async def test_sessions_lists_the_web_session_with_last_message_at_after_a_reply(
    client: httpx.AsyncClient,
) -> None:
    posted = await client.post("/api/chat/messages", json={"text": "remember me"}, headers=AUTH)
    assert posted.status_code == 202
    await messages_until(client, has_assistant_reply)

    response = await client.get("/api/sessions", headers=AUTH)
    assert response.status_code == 200
    sessions = response.json()["sessions"]
    web = [s for s in sessions if s["channel"] == "web" and s["chat_id"] == "dashboard"]
    assert len(web) == 1
    assert isinstance(web[0]["id"], int)
    assert web[0]["last_message_at"] is not None
    assert {"id", "channel", "chat_id", "title", "last_message_at"} <= set(web[0])


async def test_a_reply_stored_just_before_the_long_poll_waits_still_wakes_it() -> None:
    # The API reads the chat's version, then the messages, then waits: a reply delivered in
    # between must end the wait at once rather than after the whole long-poll period.
    channel = WebChannel()
    version = channel.version("dashboard")
    await channel.send(OutboundMessage("web", "dashboard", "the reply"))
    await asyncio.wait_for(channel.wait_for_change("dashboard", 30, since=version), 2)
    # With nothing new since, it does wait (until a change or the deadline).
    waiting = asyncio.create_task(
        channel.wait_for_change("dashboard", 30, since=channel.version("dashboard"))
    )
    await asyncio.sleep(0)
    assert not waiting.done()
    await channel.send(OutboundMessage("web", "dashboard", "another reply"))
    await asyncio.wait_for(waiting, 2)


async def test_an_open_long_poll_ends_when_bruce_stops_instead_of_holding_shutdown(
    tmp_path: Any, anthropic_fake: FakeAnthropicServer
) -> None:
    # A chat tab left open keeps a 30 s long poll waiting; stopping Bruce (a restart) must end
    # it at once rather than wait out the web server's stop timeout.
    config = make_config(tmp_path, anthropic_fake.base_url, web={"auth_token": TOKEN})
    bruce = Bruce(config)
    await bruce.start()
    channel = bruce.parts.web_channel if bruce.parts else None
    assert channel is not None
    async with httpx.AsyncClient(base_url=str(bruce.web_url)) as http:
        poll = asyncio.create_task(
            http.get("/api/chat/messages", params={"after": 0, "wait": 30}, headers=AUTH)
        )
        await wait_until(lambda: channel.waiting == 1)
        began = time.monotonic()
        await bruce.stop()
        stopped_in = time.monotonic() - began
        answer = await asyncio.wait_for(poll, 5)
    assert answer.status_code == 200 and answer.json()["messages"] == []
    assert stopped_in < 3, f"stop took {stopped_in:.1f} s with a long poll open"


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", "JSON"),
        (b"", "JSON"),
        (b"\xff\xfe\x00", "JSON"),
        (b'["hello"]', "object"),
        (b'"hello"', "object"),
        (b"42", "object"),
        (b"null", "object"),
    ],
    ids=["broken", "empty", "binary", "list", "string", "number", "null"],
)
async def test_a_body_that_is_not_a_json_object_is_400(
    client: httpx.AsyncClient, content: bytes, expected: str
) -> None:
    response = await client.post(
        "/api/chat/messages",
        content=content,
        headers={**AUTH, "Content-Type": "application/json"},
    )
    message = assert_clear_client_error(response, 400)
    assert expected in message


@pytest.mark.parametrize(
    "body",
    [{}, {"text": None}, {"text": 42}, {"text": ["hi"]}, {"text": {"x": 1}}, {"message": "hi"}],
    ids=["missing", "null", "number", "list", "object", "wrong-key"],
)
async def test_missing_or_non_string_text_is_400_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    response = await client.post("/api/chat/messages", json=body, headers=AUTH)
    message = assert_clear_client_error(response, 400)
    assert "'text'" in message


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
async def test_empty_text_is_400(client: httpx.AsyncClient, text: str) -> None:
    response = await client.post("/api/chat/messages", json={"text": text}, headers=AUTH)
    message = assert_clear_client_error(response, 400)
    assert "empty" in message
    listing = await client.get("/api/chat/messages", headers=AUTH)
    assert listing.json()["messages"] == []


async def test_a_too_large_body_is_413(client: httpx.AsyncClient) -> None:
    big = json.dumps({"text": "x" * MAX_BODY_BYTES}).encode()
    response = await client.post(
        "/api/chat/messages", content=big, headers={**AUTH, "Content-Type": "application/json"}
    )
    message = assert_clear_client_error(response, 413)
    assert str(MAX_BODY_BYTES) in message

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the server must count
        for start in range(0, len(big), 65_536):
            yield big[start : start + 65_536]

    chunked = await client.post(
        "/api/chat/messages", content=chunks(), headers={**AUTH, "Content-Type": "application/json"}
    )
    assert_clear_client_error(chunked, 413)
    listing = await client.get("/api/chat/messages", headers=AUTH)
    assert listing.json()["messages"] == []


async def test_a_body_just_under_the_limit_is_accepted(client: httpx.AsyncClient) -> None:
    text = "y" * (MAX_BODY_BYTES - 100)
    response = await client.post("/api/chat/messages", json={"text": text}, headers=AUTH)
    assert response.status_code == 202, response.text[:200]


@pytest.mark.parametrize(
    "params",
    [
        {"after": "abc"},
        {"after": "1.5"},
        {"after": ""},
        {"after": str(10**30)},
        {"after": "0", "wait": "soon"},
    ],
    ids=["word", "float", "empty", "huge", "bad-wait"],
)
async def test_bad_after_or_wait_is_400(client: httpx.AsyncClient, params: dict[str, str]) -> None:
    response = await client.get("/api/chat/messages", params=params, headers=AUTH)
    message = assert_clear_client_error(response, 400)
    assert "'after'" in message


async def test_an_overlong_or_non_string_chat_id_is_400(client: httpx.AsyncClient) -> None:
    long_id = "c" * 65
    responses = [
        await client.get("/api/chat/messages", params={"chat_id": long_id}, headers=AUTH),
        await client.get("/api/chat/messages", params={"chat_id": ""}, headers=AUTH),
        await client.post(
            "/api/chat/messages", json={"text": "hi", "chat_id": long_id}, headers=AUTH
        ),
        await client.post("/api/chat/messages", json={"text": "hi", "chat_id": 7}, headers=AUTH),
    ]
    for response in responses:
        message = assert_clear_client_error(response, 400)
        assert "chat_id" in message
    # 64 characters is still fine.
    ok = await client.get("/api/chat/messages", params={"chat_id": "c" * 64}, headers=AUTH)
    assert ok.status_code == 200


# ---- configuration ---------------------------------------------------------------------------


def test_public_host_without_auth_token_is_rejected_naming_web_auth_token() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"web": {"host": "0.0.0.0"}})
    assert any("web.auth_token" in problem for problem in caught.value.problems)
    assert "web.auth_token" in caught.value.render()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "bruce.lan"])
def test_public_host_with_auth_token_is_accepted(host: str) -> None:
    config = validate({"web": {"host": host, "auth_token": TOKEN}})
    assert config.web.host == host
    assert config.web.auth_token == TOKEN


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_host_needs_no_auth_token(host: str) -> None:
    assert validate({"web": {"host": host}}).web.auth_token == ""


async def test_the_dashboard_server_leaves_the_process_signals_to_bruce() -> None:
    # uvicorn installs its own SIGINT/SIGTERM handlers while it serves: they would stop the
    # dashboard on their own, before Bruce's orderly shutdown.
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    server = WebServer(Starlette(), "127.0.0.1", 0)
    await server.start()
    try:
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    finally:
        await server.stop()
