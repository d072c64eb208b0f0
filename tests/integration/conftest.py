"""Fixtures the integration tests of several areas share: a fake Telegram Bot API and a fake
web site, each started for one test. A test file that needs a server set up otherwise (limits,
extra pages, a recording subclass) defines its own fixture of the same name, which wins."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.telegram_server import FakeTelegramServer
from tests.fakes.web_server import FakeWebServer


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer() as server:
        yield server


@pytest.fixture
async def page() -> AsyncIterator[FakeWebServer]:
    async with FakeWebServer() as server:
        yield server
