"""`bruce doctor` run as a real subprocess against the fake LLM, Telegram and Discord servers: a
healthy setup passes every check with exit status 0, and each broken part (a refused key, an
unreachable Telegram, a taken port, a corrupt SQLite file) fails its own check, names the key or
file, says how to fix it and makes the exit status 1, never with a traceback."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import create_async_engine

from bruce_bot.cli.doctor import (
    MAX_CLOCK_SKEW_SECONDS,
    clock_check,
    disk_check,
    revision_check,
)
from bruce_bot.storage.database import SCHEMA_HEAD
from bruce_bot.storage.settings import SettingsStore
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegramServer
from tests.integration.cli.test_cli import Finished, bruce, write_config
from tests.integration.postgres.server import postgres_server, postgres_url  # noqa: F401 (fixtures)

SECRET_KEY = "sk-test-cli-key"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def lines_of(result: Finished, name: str) -> list[str]:
    """The report's lines (and their fix lines) for the check called `name`."""
    lines = result.out.splitlines()
    found: list[str] = []
    for index, line in enumerate(lines):
        if line[2:].startswith(f"{name}:"):
            found.append(line)
            if index + 1 < len(lines) and lines[index + 1].startswith("    fix:"):
                found.append(lines[index + 1])
    return found


def status_of(result: Finished, name: str) -> str:
    found = [line for line in lines_of(result, name) if not line.startswith("    ")]
    assert found, f"no {name} check in:\n{result.out}"
    return found[0][0]


@pytest.fixture
async def services() -> AsyncIterator[
    tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
]:
    async with (
        FakeAnthropicServer(responder=lambda body: "ok") as llm,
        FakeTelegramServer() as telegram,
        FakeDiscordServer() as discord,
    ):
        yield llm, telegram, discord


def healthy_config(
    directory: Path,
    llm: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    discord: FakeDiscordServer,
    **sections: Any,
) -> Path:
    base: dict[str, Any] = {
        "llm": {"base_url": llm.base_url},
        "channels": {
            "telegram": {
                "enabled": True,
                "token": telegram.token,
                "base_url": telegram.base_url,
                "allowed_user_ids": [42],
            },
            "discord": discord.discord_config(allowed_user_ids=[42]),
        },
        "web": {"host": "127.0.0.1", "port": free_port()},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return write_config(directory, **base)


def with_tokens(
    directory: Path,
    services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer],
    telegram_token: str,
    discord_token: str,
) -> Path:
    """The healthy config with these Telegram and Discord tokens in config.yml."""
    llm, telegram, discord = services
    return healthy_config(
        directory,
        llm,
        telegram,
        discord,
        channels={
            "telegram": {"enabled": True, "token": telegram_token, "base_url": telegram.base_url},
            "discord": {**discord.discord_config(allowed_user_ids=[42]), "token": discord_token},
        },
    )


async def test_doctor_passes_every_check_of_a_healthy_setup(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    llm, telegram, discord = services
    path = healthy_config(tmp_path, llm, telegram, discord)
    upgraded = await bruce("db", "upgrade", "--config", str(path), cwd=tmp_path)
    assert upgraded.code == 0, upgraded.err

    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)

    assert result.code == 0, result.out + result.err
    for name in ("config", "database", "migrations", "disk", "llm", "clock", "telegram"):
        assert status_of(result, name) == "✓", result.out
    assert status_of(result, "discord") == "✓" and status_of(result, "web") == "✓"
    assert f"@{BOT_USERNAME}" in "\n".join(lines_of(result, "telegram"))
    assert "all checks passed" in result.out
    assert llm.requests and llm.requests[0]["max_tokens"] == 1  # one tiny call
    assert ("GET", "/users/@me") in discord.rest_requests
    assert SECRET_KEY not in result.out + result.err
    result.assert_no_traceback()

    as_json = await bruce("doctor", "--json", "--config", str(path), cwd=tmp_path)
    report = json.loads(as_json.out)
    assert as_json.code == 0 and report["ok"] is True
    assert {check["name"] for check in report["checks"]} >= {"llm", "telegram", "discord", "web"}
    assert all(check["status"] != "fail" for check in report["checks"])


async def test_a_refused_key_fails_the_llm_check_with_the_servers_words_and_names_llm_api_key(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    llm, telegram, discord = services
    llm.script(error=401, error_message="invalid x-api-key", times=3)
    path = healthy_config(tmp_path, llm, telegram, discord)

    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)

    assert result.code == 1
    assert status_of(result, "llm") == "✗"
    llm_lines = "\n".join(lines_of(result, "llm"))
    assert "invalid x-api-key" in llm_lines
    assert "fix:" in llm_lines and "llm.api_key" in llm_lines
    assert status_of(result, "telegram") == "✓"  # the others are still checked
    assert "1 check(s) failed" in result.out
    assert SECRET_KEY not in result.out + result.err
    result.assert_no_traceback()


async def test_an_unreachable_telegram_fails_its_check_and_says_to_check_the_network(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    llm, telegram, discord = services
    nowhere = f"http://127.0.0.1:{free_port()}/bot"  # nothing listens there
    path = healthy_config(
        tmp_path,
        llm,
        telegram,
        discord,
        channels={
            "telegram": {"enabled": True, "token": "123:ABC", "base_url": nowhere},
            "discord": discord.discord_config(allowed_user_ids=[42]),
        },
    )

    result = await bruce("doctor", "--config", str(path), cwd=tmp_path, within=40)

    assert result.code == 1
    assert status_of(result, "telegram") == "✗"
    telegram_lines = "\n".join(lines_of(result, "telegram"))
    assert "unreachable" in telegram_lines.lower()
    assert "channels.telegram.base_url" in telegram_lines
    assert status_of(result, "discord") == "✓"
    result.assert_no_traceback()


async def test_a_wrong_telegram_token_names_the_token_key(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    path = with_tokens(tmp_path, services, "999:WRONG", "not-it")

    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)

    assert result.code == 1
    assert "channels.telegram.token" in "\n".join(lines_of(result, "telegram"))
    assert "channels.discord.token" in "\n".join(lines_of(result, "discord"))
    assert "999:WRONG" not in result.out + result.err and "not-it" not in result.out
    result.assert_no_traceback()


async def test_a_platform_enabled_without_a_token_is_a_warning_pointing_at_settings(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    path = with_tokens(tmp_path, services, "", "")

    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)

    for channel in ("telegram", "discord"):
        assert status_of(result, channel) == "!"
        assert "Settings" in "\n".join(lines_of(result, channel))
    result.assert_no_traceback()


async def test_doctor_checks_the_llm_and_the_token_saved_in_the_dashboard(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    # config.yml names a dead server and no Telegram token; the dashboard saved working ones.
    # The daemon runs with the saved values, so the doctor must check those.
    llm, telegram, discord = services
    path = healthy_config(
        tmp_path,
        llm,
        telegram,
        discord,
        channels={"telegram": {"enabled": True, "token": "", "base_url": telegram.base_url}},
    )
    dead_llm = path.read_text().replace(llm.base_url, f"http://127.0.0.1:{free_port()}")
    path.write_text(dead_llm)
    upgraded = await bruce("db", "upgrade", "--config", str(path), cwd=tmp_path)
    assert upgraded.code == 0, upgraded.err
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'data' / 'bruce.db'}")
    store = SettingsStore(engine)
    await store.set("llm.base_url", llm.base_url)
    await store.set("llm.api_key", "sk-dashboard-secret-5678")
    await store.set("channels.telegram.token", telegram.token)
    await engine.dispose()

    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)

    assert status_of(result, "llm") == "✓", result.out
    assert status_of(result, "telegram") == "✓" and f"@{BOT_USERNAME}" in result.out
    settings = "\n".join(lines_of(result, "settings"))
    assert "llm.base_url" in settings and "channels.telegram.token" in settings
    assert "sk-dashboard-secret-5678" not in result.out + result.err
    assert llm.requests[0]["max_tokens"] == 1
    result.assert_no_traceback()


async def test_a_port_taken_by_another_program_fails_the_web_check_but_bruce_there_passes(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    llm, telegram, discord = services
    other = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = other.sockets[0].getsockname()[1]
    try:
        path = healthy_config(tmp_path, llm, telegram, discord, web={"port": port})
        result = await bruce("doctor", "--config", str(path), cwd=tmp_path)
    finally:
        other.close()
        await other.wait_closed()
    assert result.code == 1
    assert status_of(result, "web") == "✗"
    web_lines = "\n".join(lines_of(result, "web"))
    assert f"127.0.0.1:{port} is taken" in web_lines and "web.port" in web_lines

    # The same port held by something whose /healthz answers as Bruce's does: Bruce runs there.
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        result = await bruce("doctor", "--config", str(path), cwd=tmp_path)
    finally:
        await runner.cleanup()
    assert status_of(result, "web") == "✓"
    assert "already running" in "\n".join(lines_of(result, "web"))


async def test_a_corrupt_sqlite_file_fails_the_database_check_and_says_to_restore_it(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    llm, telegram, discord = services
    path = healthy_config(tmp_path, llm, telegram, discord)
    database = tmp_path / "data" / "bruce.db"
    database.parent.mkdir(parents=True, exist_ok=True)
    database.write_bytes(b"this is not a database, it was overwritten by accident\n" * 200)

    result = await bruce("doctor", "--json", "--config", str(path), cwd=tmp_path)

    assert result.code == 1
    report = json.loads(result.out)
    check = next(check for check in report["checks"] if check["name"] == "database")
    assert check["status"] == "fail"
    assert str(database) in check["detail"] and "not a database" in check["detail"]
    assert "backup" in check["fix"]
    assert database.read_bytes().startswith(b"this is not a database")  # left as it was


async def test_an_invalid_config_is_one_failed_check_naming_the_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, app={"timezone": "Mars/Olympus_Mons"})
    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)
    assert result.code == 1
    assert status_of(result, "config") == "✗"
    assert "app.timezone" in result.out
    result.assert_no_traceback()


def test_the_clock_check_warns_above_the_allowed_skew_and_passes_below() -> None:
    date = "Tue, 01 Dec 2026 19:00:00 GMT"
    server_time = 1796151600.0  # that instant
    assert clock_check(date, server_time + 2, "the LLM server").status == "ok"
    behind = clock_check(date, server_time - MAX_CLOCK_SKEW_SECONDS - 90, "the LLM server")
    assert behind.status == "warn" and "behind" in behind.detail and "NTP" in behind.fix
    assert clock_check(None, server_time, "the LLM server").status == "warn"


async def test_doctor_checks_a_postgresql_database_and_names_database_url_when_unreachable(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 (the fixture)
    services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer],
) -> None:
    llm, telegram, discord = services
    path = healthy_config(tmp_path, llm, telegram, discord, database={"url": postgres_url})
    assert (await bruce("db", "upgrade", "--config", str(path), cwd=tmp_path)).code == 0

    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)
    assert result.code == 0, result.out
    assert status_of(result, "database") == "✓" and status_of(result, "migrations") == "✓"

    nowhere = f"postgresql+asyncpg://bruce:pw@127.0.0.1:{free_port()}/bruce"
    path = healthy_config(tmp_path, llm, telegram, discord, database={"url": nowhere})
    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)
    assert result.code == 1 and status_of(result, "database") == "✗"
    assert "database.url" in "\n".join(lines_of(result, "database"))
    assert ":pw@" not in result.out
    result.assert_no_traceback()


async def test_an_unreachable_transcription_endpoint_fails_its_check(
    tmp_path: Path, services: tuple[FakeAnthropicServer, FakeTelegramServer, FakeDiscordServer]
) -> None:
    llm, telegram, discord = services
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    path = healthy_config(
        tmp_path, llm, telegram, discord, transcription={"base_url": nowhere, "api_key": "k-1"}
    )
    result = await bruce("doctor", "--config", str(path), cwd=tmp_path)
    assert result.code == 1 and status_of(result, "transcription") == "✗"
    assert "transcription.base_url" in "\n".join(lines_of(result, "transcription"))


async def test_little_free_disk_space_is_a_warning_that_says_how_much_is_left(
    tmp_path: Path,
) -> None:
    [plenty] = await disk_check(tmp_path / "data", minimum=1)
    assert plenty.status == "ok" and "free in" in plenty.detail
    [short] = await disk_check(tmp_path / "data", minimum=10**18)  # more than any disk has
    assert short.status == "warn" and short.detail.startswith("only ")
    assert "app.data_dir" in short.fix


def test_an_older_schema_warns_to_upgrade_and_a_newer_one_fails() -> None:
    assert revision_check(SCHEMA_HEAD).status == "ok"
    older = revision_check("0001")
    assert older.status == "warn" and "bruce db upgrade" in older.fix
    assert revision_check("9999").status == "fail"
    assert revision_check(None).status == "warn"
