"""The `bruce` command (docs/design.md) run as a real subprocess: check-config, run, db upgrade,
chat, token and `python -m bruce_bot`. Configuration mistakes end with exit status 2 and a list of
problems that name the keys, never with a traceback and never with a secret's value. The LLM is
the fake Anthropic server in this test's event loop, which the subprocess reaches over loopback
(hence asyncio subprocesses throughout)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bruce_bot import cli
from bruce_bot.cli import check_config
from bruce_bot.config import token_weakness
from bruce_bot.logs import scrubber
from tests.fakes.anthropic_server import FakeAnthropicServer

SCRIPT = Path(sys.executable).with_name("bruce")
SECRET = "sk-live-DoNotShow-7Qx2"
BRUCE = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "bruce_bot"]
EXPECTED_TABLES = {
    "sessions",
    "messages",
    "tool_executions",
    "session_summaries",
    "settings",
    "llm_calls",
    "alembic_version",
}


@dataclass(frozen=True)
class Finished:
    code: int
    out: str
    err: str

    def assert_no_traceback(self) -> None:
        assert "Traceback" not in self.out and "Traceback" not in self.err, self.err


def child_env() -> dict[str, str]:
    """This environment without the variables that would change which config Bruce reads."""
    env = dict(os.environ)
    for name in ("BRUCE_CONFIG", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "BRUCE_WEB_TOKEN"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def bruce(
    *args: str, cwd: Path, stdin: str | None = None, within: float = 45, command: Any = None
) -> Finished:
    process = await asyncio.create_subprocess_exec(
        *(command or BRUCE),
        *args,
        cwd=cwd,
        env=child_env(),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(
            process.communicate(stdin.encode() if stdin is not None else None), within
        )
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(
            f"bruce {' '.join(args)} did not finish within {within} s\n"
            f"stdout: {out.decode()}\nstderr: {err.decode()}"
        ) from None
    assert process.returncode is not None
    return Finished(process.returncode, out.decode(), err.decode())


def write_config(directory: Path, **sections: Any) -> Path:
    """A config file on a SQLite database in `directory`; `sections` override it."""
    raw: dict[str, Any] = {
        "app": {"data_dir": str(directory / "data"), "timezone": "Europe/Berlin"},
        "database": {"url": f"sqlite+aiosqlite:///{directory / 'data' / 'bruce.db'}"},
        "llm": {"provider": "anthropic", "api_key": "sk-test-cli-key", "max_retries": 0},
        "web": {"host": "127.0.0.1", "port": 0},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    path = directory / "config.yml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


# ---- check-config ----------------------------------------------------------------------------


async def test_check_config_with_a_valid_file_says_configuration_ok(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    result = await bruce("check-config", "--config", str(path), cwd=tmp_path)
    assert result.code == 0, result.err
    assert "configuration OK" in result.out
    assert str(path) in result.out
    assert "warning" not in result.out
    assert "sk-test-cli-key" not in result.out + result.err
    result.assert_no_traceback()


async def test_check_config_without_an_api_key_warns_naming_llm_api_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, llm={"api_key": ""})
    result = await bruce("check-config", "--config", str(path), cwd=tmp_path)
    assert result.code == 1
    assert "configuration OK" in result.out
    warning = next(line for line in result.out.splitlines() if "warning" in line)
    assert "llm.api_key" in warning
    result.assert_no_traceback()


async def test_check_config_reads_bruce_config_from_the_environment_variable(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, app={"name": "Alfred"})
    process = await asyncio.create_subprocess_exec(
        *BRUCE,
        "check-config",
        cwd=tmp_path.parent,
        env={**child_env(), "BRUCE_CONFIG": str(path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 45)
    assert process.returncode == 0, err.decode()
    assert f"configuration OK ({path})" in out.decode()


async def test_invalid_config_lists_every_problem_with_key_names_and_exits_2(
    tmp_path: Path,
) -> None:
    path = write_config(
        tmp_path, app={"timezone": "Mars/Olympus_Mons"}, llm={"modle": "claude"}, web={"prot": 1}
    )
    result = await bruce("check-config", "--config", str(path), cwd=tmp_path)
    assert result.code == 2
    result.assert_no_traceback()
    problems = [line for line in result.err.splitlines() if line.strip().startswith("- ")]
    assert len(problems) == 3, result.err
    assert any("llm.modle" in p and "did you mean 'model'" in p for p in problems)
    assert any("web.prot" in p and "did you mean 'port'" in p for p in problems)
    assert any("app.timezone" in p and "Mars/Olympus_Mons" in p for p in problems)
    assert "configuration OK" not in result.out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("llm: [unclosed\n", "YAML syntax error at line"),
        ("- just\n- a list\n", "top level must be a mapping"),
        ("llm:\n  api_key: ${BRUCE_TEST_UNSET_VARIABLE}\n", "BRUCE_TEST_UNSET_VARIABLE"),
        ("web:\n  port: eighty\n", "web.port"),
    ],
    ids=["yaml-syntax", "not-a-mapping", "missing-env", "wrong-type"],
)
async def test_broken_config_files_exit_2_with_the_reason(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "config.yml"
    path.write_text(content, encoding="utf-8")
    result = await bruce("check-config", "--config", str(path), cwd=tmp_path)
    assert result.code == 2
    assert expected in result.err
    result.assert_no_traceback()


async def test_check_config_with_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = await bruce("check-config", "--config", str(tmp_path / "nope.yml"), cwd=tmp_path)
    assert result.code == 2
    assert "file not found" in result.err
    result.assert_no_traceback()


async def test_check_config_refuses_a_weak_token_on_a_public_host_and_says_how_to_make_one(
    tmp_path: Path,
) -> None:
    weak = "changeme-changeme-changeme-changeme"
    path = write_config(tmp_path, web={"host": "0.0.0.0", "auth_token": weak})

    result = await bruce("check-config", "--config", str(path), cwd=tmp_path)

    assert result.code == 2
    result.assert_no_traceback()
    [problem] = [line for line in result.err.splitlines() if line.strip().startswith("- ")]
    assert "web.auth_token: too weak to guard web.host '0.0.0.0'" in problem
    assert "bruce token" in problem
    assert weak not in result.out + result.err


async def test_check_config_warns_about_a_weak_token_on_loopback_but_passes(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, web={"auth_token": "hunter2"})

    result = await bruce("check-config", "--config", str(path), cwd=tmp_path)

    assert result.code == 0, result.err
    assert "configuration OK" in result.out
    [warning] = [line for line in result.out.splitlines() if "warning" in line]
    assert "web.auth_token is weak" in warning and "bruce token" in warning
    assert "hunter2" not in result.out + result.err


async def test_bruce_token_prints_a_new_strong_token_that_opens_the_web_app_to_the_network(
    tmp_path: Path,
) -> None:
    first = await bruce("token", cwd=tmp_path)
    second = await bruce("token", cwd=tmp_path)

    assert first.code == 0 and second.code == 0, first.err + second.err
    token = first.out.strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token), first.out
    assert second.out.strip() != token
    assert token_weakness(token) is None
    path = write_config(tmp_path, web={"host": "0.0.0.0", "auth_token": token})
    checked = await bruce("check-config", "--config", str(path), cwd=tmp_path)
    assert checked.code == 0, checked.err
    assert "warning" not in checked.out
    assert token not in checked.out + checked.err


async def test_a_malformed_database_url_is_named_without_its_password(tmp_path: Path) -> None:
    path = write_config(tmp_path, database={"url": f"mysql://bruce:{SECRET}@db/bruce"})

    result = await bruce("check-config", "--config", str(path), cwd=tmp_path)

    assert result.code == 2
    assert "database.url: 'mysql://bruce:***@db/bruce' must start with" in result.err
    assert SECRET not in result.out + result.err


def test_the_traceback_of_an_unexpected_error_is_printed_with_secrets_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In process: a failure after the config loaded, carrying the API key and a URL password.
    path = write_config(tmp_path, llm={"api_key": SECRET})

    def broken(_path: object) -> None:
        raise RuntimeError(f"lost postgresql://bruce:hunter2-pw@db/bruce while using {SECRET}")

    monkeypatch.setattr(check_config, "resolve_path", broken)
    try:
        code = cli.main(["check-config", "--config", str(path)])
    finally:
        scrubber.set_secrets(())

    err = capsys.readouterr().err
    assert code == cli.EXIT_UNEXPECTED
    assert "bruce: unexpected error" in err
    assert "Traceback" in err and "RuntimeError: lost postgresql://bruce:***@db/bruce" in err
    assert SECRET not in err and "hunter2-pw" not in err


# ---- run -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sections", "named"),
    [
        ({"app": {"timezone": "Nowhere/Atlantis"}}, "app.timezone"),
        ({"web": {"host": "0.0.0.0"}}, "web.auth_token"),
        ({"web": {"host": "0.0.0.0", "auth_token": "password" * 5}}, "web.auth_token"),
        ({"llm": {"provider": "gemini"}}, "llm.provider"),
        ({"database": {"url": f"postgresql://bruce:{SECRET}@db/bruce"}}, "database.url"),
    ],
    ids=["timezone", "public-web-without-token", "public-web-weak-token", "provider", "db-url"],
)
async def test_run_with_an_invalid_config_exits_2_without_a_traceback(
    tmp_path: Path, sections: dict[str, Any], named: str
) -> None:
    path = write_config(tmp_path, **sections)
    result = await bruce("run", "--config", str(path), cwd=tmp_path)
    assert result.code == 2
    result.assert_no_traceback()
    assert named in result.err
    assert SECRET not in result.out + result.err and "password" * 5 not in result.err
    assert not (tmp_path / "data" / "bruce.db").exists()  # nothing was started


async def test_run_serves_the_dashboard_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    process = await asyncio.create_subprocess_exec(
        *BRUCE,
        "run",
        "--config",
        str(path),
        cwd=tmp_path,
        env=child_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("bruce run never became ready:\n" + "".join(lines))
            line = (await asyncio.wait_for(process.stdout.readline(), remaining)).decode()
            if not line:
                raise AssertionError("bruce run exited early:\n" + "".join(lines))
            lines.append(line)
            if "bruce_ready" in line:
                url = re.search(r"web=(http://[\d.]+:\d+)", line)
        async with httpx.AsyncClient(base_url=url.group(1)) as http:
            assert (await http.get("/healthz")).status_code == 200
        process.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = "".join(lines) + rest.decode()
    assert process.returncode == 0, output
    assert "bruce_stopped" in output
    assert "Traceback" not in output
    assert "sk-test-cli-key" not in output


# ---- db upgrade ------------------------------------------------------------------------------


def tables_of(database: Path) -> tuple[set[str], list[tuple[Any, ...]]]:
    with sqlite3.connect(database) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        versions = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    return names, versions


async def test_db_upgrade_creates_the_tables_and_is_idempotent(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    database = tmp_path / "data" / "bruce.db"
    assert not database.exists()

    first = await bruce("db", "upgrade", "--config", str(path), cwd=tmp_path)
    assert first.code == 0, first.err
    first.assert_no_traceback()
    assert database.exists()
    names, versions = tables_of(database)
    assert names >= EXPECTED_TABLES, EXPECTED_TABLES - names
    assert len(versions) == 1

    second = await bruce("db", "upgrade", "--config", str(path), cwd=tmp_path)
    assert second.code == 0, second.err
    second.assert_no_traceback()
    assert tables_of(database) == (names, versions)


# ---- chat ------------------------------------------------------------------------------------


async def test_chat_prints_the_reply_of_the_llm_and_exits_on_quit(tmp_path: Path) -> None:
    async with FakeAnthropicServer(responder=lambda body: "Hi! I am the fake Claude.") as fake:
        path = write_config(tmp_path, llm={"base_url": fake.base_url})
        result = await bruce("chat", "--config", str(path), cwd=tmp_path, stdin="hello\n/quit\n")
        assert result.code == 0, result.err
        result.assert_no_traceback()
        assert "Hi! I am the fake Claude." in result.out
        assert fake.requests, "the LLM was never called"
        assert "hello" in str(fake.requests[0]["messages"])
        headers = {name.lower(): value for name, value in fake.request_headers[0].items()}
        sent_key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix(
            "Bearer "
        )
        assert sent_key == "sk-test-cli-key"


async def test_chat_ends_at_end_of_input(tmp_path: Path) -> None:
    async with FakeAnthropicServer(responder=lambda body: "unused") as fake:
        path = write_config(tmp_path, llm={"base_url": fake.base_url})
        result = await bruce("chat", "--config", str(path), cwd=tmp_path, stdin="")
        assert result.code == 0, result.err
        result.assert_no_traceback()
        assert fake.requests == []


async def test_chat_with_an_invalid_config_exits_2(tmp_path: Path) -> None:
    path = write_config(tmp_path, agent={"max_turn": 3})
    result = await bruce("chat", "--config", str(path), cwd=tmp_path, stdin="hello\n")
    assert result.code == 2
    assert "agent.max_turn" in result.err and "did you mean 'max_turns'" in result.err
    result.assert_no_traceback()


# ---- entry points ----------------------------------------------------------------------------


async def test_python_m_bruce_bot_is_the_same_entry_point(tmp_path: Path) -> None:
    result = await bruce("--help", cwd=tmp_path, command=[sys.executable, "-m", "bruce_bot"])
    assert result.code == 0, result.err
    for command in ("run", "chat", "db", "check-config", "token"):
        assert command in result.out
    path = write_config(tmp_path)
    checked = await bruce(
        "check-config",
        "--config",
        str(path),
        cwd=tmp_path,
        command=[sys.executable, "-m", "bruce_bot"],
    )
    assert checked.code == 0 and "configuration OK" in checked.out


async def test_the_bruce_script_is_installed() -> None:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: install the project with pip install -e ."


# ---- pairing ---------------------------------------------------------------------------------


async def test_pairing_commands_work_on_the_database_without_the_daemon(tmp_path: Path) -> None:
    from bruce_bot.pairing import PairingService
    from bruce_bot.storage.database import Database, upgrade_schema
    from bruce_bot.storage.stores import Stores

    path = write_config(tmp_path, channels={"telegram": {"allowed_user_ids": [42]}})
    url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'bruce.db'}"
    (tmp_path / "data").mkdir()
    await upgrade_schema(url)
    database = Database(url)
    try:
        # What the Telegram channel does when a stranger writes.
        offer = await PairingService(Stores.open(database), {}).offer(
            "telegram", 6666, "Mallory", "6666"
        )
    finally:
        await database.dispose()
    assert offer.code is not None

    listed = await bruce("pairing", "list", "--config", str(path), cwd=tmp_path)
    assert listed.code == 0, listed.err
    assert "allowed (1):" in listed.out and "42" in listed.out and "config.yml" in listed.out
    assert "pending codes (1):" in listed.out and offer.code in listed.out
    assert "pairing is off" in listed.out  # telegram is not enabled in this config

    approved = await bruce(
        "pairing", "approve", offer.code.lower(), "--config", str(path), cwd=tmp_path
    )
    assert approved.code == 0, approved.err
    assert "approved telegram user 6666 — name they chose: “Mallory”" in approved.out
    with sqlite3.connect(tmp_path / "data" / "bruce.db") as connection:
        rows = connection.execute(
            "SELECT channel, user_id, approved_by FROM approved_users"
        ).fetchall()
        welcome = connection.execute(
            "SELECT content, status FROM messages WHERE role = 'assistant'"
        ).fetchall()
    assert rows == [("telegram", "6666", "cli")]  # ids are text since 0017: the digits
    assert (
        len(welcome) == 1 and welcome[0][0].startswith("You're in") and welcome[0][1] == "pending"
    )

    for args, expected in (
        (("approve", offer.code), "no pending pairing code"),
        (("deny", "nope"), "is not a pairing code"),
        (("revoke", "telegram", "42"), "channels.telegram.allowed_user_ids in config.yml"),
        (("revoke", "discord", "6666"), "was not approved"),
    ):
        refused = await bruce("pairing", *args, "--config", str(path), cwd=tmp_path)
        assert refused.code == 1 and expected in refused.out, (args, refused.out)
        refused.assert_no_traceback()
    revoked = await bruce(
        "pairing", "revoke", "telegram", "6666", "--config", str(path), cwd=tmp_path
    )
    assert revoked.code == 0 and "revoked telegram user 6666" in revoked.out
    bad = await bruce("pairing", "revoke", "fax", "1", "--config", str(path), cwd=tmp_path)
    assert bad.code == 2 and "invalid choice: 'fax'" in bad.err
