"""Crash recovery and graceful stop of the real daemon process (`python -m bruce_bot run`), talking
to a fake Messages API in the test process and to the test through its web API. `Daemon` runs it
in its own process group, which `kill` ends with SIGKILL (test_delivery_crash.py beside it uses
it too)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import pytest
import yaml

from bruce_bot.web.login_token import read_token
from tests.conftest import deep_merge, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.crash_judge import ProcessLife
from tests.integration.support import messages_of, user_texts

SHUTDOWN_TIMEOUT = 1.0
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Daemon:
    """One `bruce run` process on a config in `tmp_path`, its output kept in files."""

    def __init__(self, tmp_path: Path, llm_url: str, **overrides: Any) -> None:
        self.tmp_path = tmp_path
        self.data_dir = tmp_path / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = tmp_path / "config.yml"
        config = {
            "app": {"data_dir": str(self.data_dir), "timezone": "UTC"},
            "database": {"url": f"sqlite+aiosqlite:///{self.data_dir / 'bruce.db'}"},
            "llm": {
                "provider": "anthropic",
                "api_key": "test-key",
                "base_url": llm_url,
                "max_retries": 0,
                "timeout_seconds": 60,
            },
            "agent": {"shutdown_timeout_seconds": SHUTDOWN_TIMEOUT},
            "brain": {"enabled": False},  # its background requests would disturb the counts
            "tools": {
                "web_search": {"enabled": False},
                "web_fetch": {"enabled": False},
                "artifacts": {"enabled": False},
                "proactive": {"enabled": False},
            },
            "web": {"host": "127.0.0.1", "port": self.port},
        }
        config = deep_merge(config, overrides)
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.process: asyncio.subprocess.Process | None = None
        self.runs = 0
        self.lives: list[ProcessLife] = []  # every start, and how it ended (crash_judge.py)

    async def start(self) -> None:
        self.runs += 1
        life = ProcessLife(f"run {self.runs}", time.time())
        self.lives.append(life)
        env = {k: v for k, v in os.environ.items() if k != "BRUCE_CONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        out, err = self._output_files()
        with out, err:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bruce_bot",
                "run",
                "--config",
                str(self.config_path),
                cwd=self.tmp_path,
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, killed as one
            )
        await wait_until(self._healthy, timeout=START_TIMEOUT, interval=0.05)
        life.ready_at = time.time()

    def _output_files(self) -> tuple[BinaryIO, BinaryIO]:
        return (
            (self.tmp_path / f"run{self.runs}.out").open("wb"),
            (self.tmp_path / f"run{self.runs}.err").open("wb"),
        )

    async def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.returncode is not None:
            raise AssertionError(
                f"bruce exited with {self.process.returncode} during start-up:\n{self.stderr()}"
            )
        try:
            async with httpx.AsyncClient(timeout=1) as client:
                response = await client.get(f"{self.url}/healthz")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    @property
    def auth(self) -> dict[str, str]:
        """The API's bearer header: the token the daemon made in its data dir on first start
        (the config sets none), as a script reads it."""
        token = read_token(self.data_dir)
        assert token, f"no dashboard token in {self.data_dir}"
        return {"Authorization": f"Bearer {token}"}

    def stderr(self) -> str:
        return (self.tmp_path / f"run{self.runs}.err").read_text(errors="replace")[-4000:]

    async def exit_code(self, within: float) -> int:
        assert self.process is not None
        return await asyncio.wait_for(self.process.wait(), within)

    async def kill(self) -> None:
        """SIGKILL to the whole process group: no clean-up code of Bruce runs."""
        if self.process is not None and self.process.returncode is None:
            life = self.lives[-1]
            life.signal, life.signalled_at = "SIGKILL", time.time()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
            life.exited_at = time.time()


@pytest.fixture
async def daemon(tmp_path: Path, anthropic_fake: FakeAnthropicServer) -> AsyncIterator[Daemon]:
    bruce = Daemon(tmp_path, anthropic_fake.base_url)
    try:
        yield bruce
    finally:
        await bruce.kill()


async def post(daemon: Daemon, text: str) -> int:
    async with httpx.AsyncClient(timeout=10, headers=daemon.auth) as client:
        response = await client.post(f"{daemon.url}/api/chat/messages", json={"text": text})
    assert response.status_code == 202, response.text
    return int(response.json()["message_id"])


async def chat_messages(daemon: Daemon, after: int = 0, wait: float = 0) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=wait + 10, headers=daemon.auth) as client:
        response = await client.get(
            f"{daemon.url}/api/chat/messages", params={"after": after, "wait": wait}
        )
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


async def test_a_message_in_flight_when_the_process_is_killed_is_answered_once_after_restart(
    daemon: Daemon, anthropic_fake: FakeAnthropicServer
) -> None:
    answering = asyncio.Event()

    async def model(body: dict[str, Any]) -> str:
        await answering.wait()  # the first process never gets an answer
        return "Milk is on your list now."

    anthropic_fake.responder = model
    try:
        await daemon.start()
        message_id = await post(daemon, "Remember the milk")
        await anthropic_fake.wait_for_requests(1, 20)
        await daemon.kill()
        assert daemon.process is not None and daemon.process.returncode == -signal.SIGKILL

        answering.set()
        await daemon.start()

        async def replied() -> list[dict[str, Any]]:
            return [m for m in await chat_messages(daemon, wait=2) if m["role"] == "assistant"]

        (reply,) = await wait_until(replied, timeout=20)
        assert reply["content"] == "Milk is on your list now."
        assert reply["id"] > message_id

        # Stop the second process cleanly, then read what it left on disk.
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGTERM)
        assert await daemon.exit_code(within=SHUTDOWN_TIMEOUT + 10) == 0
    finally:
        answering.set()

    assert len(anthropic_fake.requests) == 2
    assert user_texts(anthropic_fake.requests[1]) == ["Remember the milk"]
    (user,) = messages_of(daemon.data_dir, "user")
    assert (user["id"], user["status"]) == (message_id, "done")
    (assistant,) = messages_of(daemon.data_dir, "assistant")
    assert assistant["content"] == "Milk is on your list now."


async def test_sigterm_stops_the_daemon_within_the_shutdown_timeout_and_keeps_the_message(
    daemon: Daemon, anthropic_fake: FakeAnthropicServer
) -> None:
    never = asyncio.Event()

    async def stuck_model(body: dict[str, Any]) -> str:
        await never.wait()
        return "too late"

    anthropic_fake.responder = stuck_model
    try:
        await daemon.start()
        await post(daemon, "Are you there?")
        await anthropic_fake.wait_for_requests(1, 20)
        assert daemon.process is not None
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        assert await daemon.exit_code(within=SHUTDOWN_TIMEOUT + 10) == 0
        # The turn is given the shutdown timeout, then stopped: the process does not hang on it.
        assert time.monotonic() - started < SHUTDOWN_TIMEOUT + 5
    finally:
        never.set()
        with contextlib.suppress(Exception):
            await daemon.kill()

    (user,) = messages_of(daemon.data_dir, "user")
    assert user["status"] == "pending"  # answered on the next start, not lost
    assert messages_of(daemon.data_dir, "assistant") == []
    assert "bruce_stopped" in daemon.stderr()
