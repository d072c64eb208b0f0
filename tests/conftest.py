"""Shared test helpers: configs on temporary SQLite files, a running Bruce, waiting on conditions,
and a real PostgreSQL server with a fresh database per test
(`tests/integration/postgres/server.py`).

Tests wait for conditions with a deadline (`wait_until`), never for fixed sleeps. The dashboard
always has a login (a token Bruce makes when config.yml sets none): `web_client`, `web_auth` and
`web_token` sign a test's requests as a script would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import httpx
import pytest

from bruce_bot.app import Bruce
from bruce_bot.config import Config, validate
from bruce_bot.web.login_token import read_token
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.postgres.server import postgres_server, postgres_url  # noqa: F401 (fixtures)


def _sleep_on_select(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


# `make test-clock` runs the suite under libfaketime with the monotonic clock left real. Debian's
# libfaketime 0.9.10 then breaks Python 3.11's time.sleep (clock_nanosleep with an absolute
# monotonic deadline fails with EINVAL, wolfcw/libfaketime#426), which subprocess's wait(timeout)
# uses: sleep on select's relative timeout instead. Only under faketime; nothing else changes.
if (
    "faketime" in os.environ.get("LD_PRELOAD", "")
    and os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1"
):
    time.sleep = _sleep_on_select


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def make_config(data_dir: Path, llm_url: str | None = None, **overrides: Any) -> Config:
    """A config on a fresh SQLite file in `data_dir`, web on a free loopback port."""
    raw: dict[str, Any] = {
        "app": {"data_dir": str(data_dir), "timezone": "America/Sao_Paulo"},
        "database": {"url": f"sqlite+aiosqlite:///{data_dir / 'bruce.db'}"},
        "web": {"host": "127.0.0.1", "port": 0},
        "llm": {
            "provider": "anthropic",
            "api_key": "test-key",
            "max_retries": 0,
            "timeout_seconds": 10,
        },
        "agent": {"shutdown_timeout_seconds": 5},
        # Off unless a test turns it on: its background requests would disturb request counts.
        "brain": {"enabled": False},
    }
    if llm_url:
        raw["llm"]["base_url"] = llm_url
    return validate(deep_merge(raw, overrides))


# `timeout` is a polling deadline, not a cancellation scope.
async def wait_until(
    predicate: Callable[[], Any | Awaitable[Any]],
    timeout: float = 10.0,  # noqa: ASYNC109
    interval: float = 0.01,
) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy, or fail at the
    deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


def clock_from(start: datetime) -> Callable[[], datetime]:
    """A clock for `Bruce(clock=...)` that reads `start` now and runs on at the real pace. It
    advances on the monotonic clock, so the wall clock's date and time of day never show."""
    origin = time.monotonic()
    return lambda: start + timedelta(seconds=time.monotonic() - origin)


def days_ahead_at(hour: int, minute: int = 0, zone: tzinfo = UTC, days: int = 2) -> datetime:
    """`hour:minute` in `zone`, `days` days after today: a fixed time of day that is still ahead
    of the real clock, so that APScheduler (which reads the real one) fires nothing planned from
    it during a test."""
    day = datetime.now(zone).date() + timedelta(days=days)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)


def web_token(bruce: Bruce) -> str:
    """The token Bruce's dashboard takes: config.yml's, else the one it made in its data dir on
    its first start (what a script reads, like `bruce token --show`)."""
    token = bruce.config.web.auth_token or read_token(bruce.config.app.data_dir)
    assert token, "this Bruce's dashboard has no token (web.auth_token: none?)"
    return token


def web_auth(bruce: Bruce) -> dict[str, str]:
    """The `Authorization` header a script sends to Bruce's API."""
    return {"Authorization": f"Bearer {web_token(bruce)}"}


def web_client(bruce: Bruce, **kwargs: Any) -> httpx.AsyncClient:
    """An HTTP client of Bruce's dashboard that signs its requests with the bearer token."""
    assert bruce.web_url is not None, "the web server is not running"
    headers = {**web_auth(bruce), **kwargs.pop("headers", {})}
    return httpx.AsyncClient(base_url=bruce.web_url, headers=headers, **kwargs)


@contextlib.asynccontextmanager
async def running_bruce(config: Config, **kwargs: Any) -> AsyncIterator[Bruce]:
    bruce = Bruce(config, **kwargs)
    await bruce.start()
    try:
        yield bruce
    finally:
        await bruce.stop()


@pytest.fixture
async def anthropic_fake() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as server:
        yield server
