"""No deployment path without a login, through a running Bruce and the real `bruce` command.

A dashboard meant to be reached under another name (a reverse proxy for `app.public_url`, a
`web.allowed_hosts` entry) without a strong `web.auth_token` refuses to start, naming the key. On
loopback without one, Bruce makes its own token on first start (0600 in the data dir, reused on
later starts) and prints a one-time sign-in link: opened once it signs the browser in and
redirects the token out of the address bar (no Referer), opened again, or after a restart, it
grants nothing. `web.auth_token: none` opts out, with a warning. A burst of failed sign-ins never
shuts out a valid session or bearer token. The data dir and the files people send are private.
"""

from __future__ import annotations

import base64
import io
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from structlog.testing import capture_logs

from bruce_bot.config import ConfigError, validate
from bruce_bot.web.auth import COOKIE_NAME
from tests.conftest import make_config, running_bruce, wait_until, web_auth, web_token
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.integration.cli.test_cli import bruce, write_config

STRONG = "Zq8Xv2Lm5Rt9Wb3Nc7Kd1Hf6Jg4Ps0Ya-Eu_IoTrWqS"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def echo(anthropic_fake: FakeAnthropicServer) -> FakeAnthropicServer:
    anthropic_fake.responder = lambda body: f"You said: {last_user_text(body)}"
    return anthropic_fake


# ---- refusals at start ------------------------------------------------------------------------


async def test_a_reverse_proxy_config_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    path = write_config(tmp_path, app={"public_url": "https://bruce.example.com"})

    finished = await bruce("run", "--config", str(path), cwd=tmp_path)

    assert finished.code == 2, finished.err
    assert "app.public_url: the dashboard is meant to answer under 'bruce.example.com'" in (
        finished.err
    )
    assert "web.auth_token is empty" in finished.err and "bruce token" in finished.err
    assert not (tmp_path / "data" / "web_token").exists()  # refused before anything was made


@pytest.mark.parametrize(
    ("web", "app", "key", "why"),
    [
        ({"allowed_hosts": ["bruce.lan"]}, {}, "web.allowed_hosts[0]", "is empty"),
        ({"allowed_hosts": ["localhost", "http://nas.local:8080"]}, {}, "[1]", "is empty"),
        ({"auth_token": "none"}, {"public_url": "https://b.example"}, "app.public_url", "'none'"),
        ({"auth_token": "hunter2"}, {"public_url": "https://b.example"}, "public_url", "weak"),
    ],
    ids=["allowed-host", "allowed-url", "none", "weak"],
)
def test_a_name_beyond_loopback_needs_a_strong_token(
    web: dict[str, Any], app: dict[str, Any], key: str, why: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"web": web, "app": app})
    [problem] = caught.value.problems
    assert key in problem and why in problem and "bruce token" in problem
    assert "hunter2" not in problem


def test_loopback_names_and_a_strong_token_are_accepted() -> None:
    validate({"web": {"allowed_hosts": ["localhost:8080", "127.0.0.2"]}})
    validate({"app": {"public_url": "http://localhost:8080"}})
    config = validate(
        {"app": {"public_url": "https://bruce.example.com"}, "web": {"auth_token": STRONG}}
    )
    assert config.web.auth_token == STRONG


def test_none_is_refused_on_a_public_host() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"web": {"host": "0.0.0.0", "auth_token": "none"}})
    assert "'none' (no login) is allowed only while web.host is loopback" in caught.value.render()


# ---- the first start's token and link ---------------------------------------------------------


async def test_first_start_makes_a_private_token_and_a_link_that_signs_in_once(
    tmp_path: Path, echo: FakeAnthropicServer, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_bruce(make_config(tmp_path, echo.base_url)) as running:
        token_file = tmp_path / "web_token"
        assert mode(token_file) == 0o600
        token = web_token(running)
        assert len(token) == 43 and token_file.read_text().strip() == token
        link = running.login_url
        assert link is not None and link.startswith(f"{running.web_url}/login?token=")
        assert token not in link  # the link carries a nonce, never the API token
        printed = capsys.readouterr().out
        assert link in printed and str(token_file) in printed and token not in printed

        async with httpx.AsyncClient(base_url=str(running.web_url)) as http:
            assert (await http.get("/api/sessions")).status_code == 401
            assert (await http.get("/chat")).headers["location"].startswith("/login")

            opened = await http.get(link)
            assert opened.status_code == 303 and opened.headers["location"] == "/chat"
            assert opened.headers["referrer-policy"] == "no-referrer"
            assert COOKIE_NAME in opened.cookies
            signed_in = await http.get("/api/sessions")  # the cookie, kept by the client
            assert signed_in.status_code == 200, signed_in.text

            http.cookies.clear()
            again = await http.get(link)
            assert again.status_code == 303 and again.headers["location"] == "/login?error=link"
            assert again.headers["referrer-policy"] == "no-referrer"
            assert COOKIE_NAME not in again.cookies
            assert (await http.get("/api/sessions")).status_code == 401

            # The token itself: a script's bearer header, and the login form.
            assert (await http.get("/api/sessions", headers=web_auth(running))).status_code == 200
            form = await http.post("/login", data={"token": token})
            assert form.status_code == 303 and COOKIE_NAME in form.cookies


async def test_a_restart_reuses_the_token_and_the_old_link_grants_nothing(
    tmp_path: Path, echo: FakeAnthropicServer
) -> None:
    config = make_config(tmp_path, echo.base_url)
    async with running_bruce(config) as first:
        token, old_link = web_token(first), first.login_url
        assert old_link is not None
        async with httpx.AsyncClient(base_url=str(first.web_url)) as http:
            cookie = (await http.get(old_link)).cookies[COOKIE_NAME]
    (tmp_path / "web_token").chmod(0o644)  # loosened by hand in between

    with capture_logs() as logs:
        async with running_bruce(config) as second:
            assert web_token(second) == token
            assert second.login_url is not None and second.login_url != old_link
            async with httpx.AsyncClient(base_url=str(second.web_url)) as http:
                stale = old_link.replace(str(first.web_url), str(second.web_url))
                refused = await http.get(stale)
                assert refused.headers["location"] == "/login?error=link"
                # A browser signed in before the restart stays signed in: same token.
                kept = await http.get(
                    "/api/sessions", headers={"Cookie": f"{COOKIE_NAME}={cookie}"}
                )
                assert kept.status_code == 200
    assert mode(tmp_path / "web_token") == 0o600
    assert any(entry["event"] == "web_token_file_mode_tightened" for entry in logs)
    assert not any(entry["event"] == "web_token_created" for entry in logs)


async def test_bruce_token_show_prints_the_token_scripts_use(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    before = await bruce("token", "--show", "--config", str(path), cwd=tmp_path)
    assert before.code == 1 and "`bruce run` makes it on its first start" in before.err

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "web_token").write_text(STRONG + "\n")
    shown = await bruce("token", "--show", "--config", str(path), cwd=tmp_path)
    assert shown.code == 0 and shown.out.strip() == STRONG

    configured = write_config(tmp_path, web={"auth_token": "from-config-yml"})
    assert (await bruce("token", "--show", "--config", str(configured), cwd=tmp_path)).out == (
        "from-config-yml\n"
    )


async def test_a_configured_token_prints_no_link_and_makes_no_file(
    tmp_path: Path, echo: FakeAnthropicServer, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(tmp_path, echo.base_url, web={"auth_token": STRONG})
    async with running_bruce(config) as running:
        assert running.login_url is None
        async with httpx.AsyncClient(base_url=str(running.web_url)) as http:
            assert (await http.get("/login?token=anything")).headers["location"] == (
                "/login?error=link"
            )
    assert not (tmp_path / "web_token").exists()
    assert "/login?token=" not in capsys.readouterr().out


async def test_the_login_page_has_the_pages_security_headers(
    tmp_path: Path, echo: FakeAnthropicServer
) -> None:
    async with running_bruce(make_config(tmp_path, echo.base_url)) as running:
        async with httpx.AsyncClient(base_url=str(running.web_url)) as http:
            page = await http.get("/login")
            chat = await http.get("/chat", headers=web_auth(running))
    assert page.status_code == 200 and "Dashboard token" in page.text
    for name in ("content-security-policy", "x-content-type-options", "cache-control"):
        assert page.headers[name] == chat.headers[name], name
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


# ---- the throttle never shuts the owner out ---------------------------------------------------


async def test_a_burst_of_failed_sign_ins_never_shuts_out_a_valid_session_or_token(
    tmp_path: Path, echo: FakeAnthropicServer
) -> None:
    async with running_bruce(make_config(tmp_path, echo.base_url)) as running:
        async with httpx.AsyncClient(base_url=str(running.web_url)) as http:
            assert running.login_url is not None
            cookie = (await http.get(running.login_url)).cookies[COOKIE_NAME]
            http.cookies.clear()
            answers = [await http.post("/login", data={"token": f"guess-{n}"}) for n in range(30)]
            answers += [
                await http.get("/api/sessions", headers={"Authorization": f"Bearer g{n}"})
                for n in range(30)
            ]
            assert answers[-1].status_code == 429  # this address now waits…
            # …yet the same address with a valid session, bearer token or the form gets in.
            session = await http.get("/api/sessions", headers={"Cookie": f"{COOKIE_NAME}={cookie}"})
            assert session.status_code == 200
            bearer = await http.get("/api/sessions", headers=web_auth(running))
            assert bearer.status_code == 200
            form = await http.post("/login", data={"token": web_token(running)})
            assert form.status_code == 303 and form.headers["location"] == "/chat"


# ---- private files ----------------------------------------------------------------------------


async def test_the_data_dir_is_private_and_what_people_send_is_0600(
    tmp_path: Path, echo: FakeAnthropicServer
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    config = make_config(data, echo.base_url)
    with capture_logs() as logs:
        async with running_bruce(config) as running:
            async with httpx.AsyncClient(
                base_url=str(running.web_url), headers=web_auth(running), timeout=20
            ) as http:
                note = base64.b64encode(b"Buy milk and eggs.").decode()
                picture = io.BytesIO()
                Image.new("RGB", (64, 48), (200, 30, 30)).save(picture, "PNG")
                photo = base64.b64encode(picture.getvalue()).decode()
                files = [
                    {"name": "list.txt", "mime_type": "text/plain", "data": note},
                    {"name": "red.png", "mime_type": "image/png", "data": photo},
                ]
                posted = await http.post(
                    "/api/chat/uploads", json={"text": "read this", "files": files}
                )
                assert posted.status_code == 202, posted.text

                async def replied() -> bool:
                    listed = (await http.get("/api/chat/messages")).json()["messages"]
                    return any(m["role"] == "assistant" for m in listed)

                await wait_until(replied, 20)
    tightened = [entry for entry in logs if entry["event"] == "data_dir_mode_tightened"]
    assert [entry["path"] for entry in tightened] == [str(data)]
    for folder in (data, data / "media", data / "media" / "uploads", data / "artifacts"):
        assert mode(folder) == 0o700, folder
    files = [path for path in (data / "media").rglob("*") if path.is_file()]
    assert {path.parent.name for path in files} >= {"uploads"}, files
    assert any(path.parent.name != "uploads" for path in files), "the picture kept for the chat"
    assert all(mode(path) == 0o600 for path in files), [(p, oct(mode(p))) for p in files]
    assert all(mode(path) == 0o700 for path in (data / "media").rglob("*") if path.is_dir())


def test_the_none_opt_out_names_its_risk_in_the_warnings() -> None:
    config = validate({"web": {"auth_token": "none"}})
    [warning] = [w for w in config.warnings() if "web.auth_token" in w]
    assert "no login" in warning and "every user on this machine" in warning
    assert "none" not in config.secrets()  # the word is not a secret to scrub from every log


async def test_with_a_weak_token_the_throttle_still_comes_first(
    tmp_path: Path, echo: FakeAnthropicServer
) -> None:
    # A weak token is accepted on loopback only; there the wait is what keeps guessing slow.
    config = make_config(tmp_path, echo.base_url, web={"auth_token": "hunter2"})
    async with running_bruce(config) as running:
        async with httpx.AsyncClient(base_url=str(running.web_url)) as http:
            for n in range(5):
                wrong = await http.post("/login", data={"token": f"guess-{n}"})
                assert wrong.headers["location"] == "/login?error=1"
            held = await http.post("/login", data={"token": "hunter2"})
            assert held.status_code == 429 and "too many failed sign-ins" in held.text
