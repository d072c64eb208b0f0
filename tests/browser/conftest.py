"""Headless Chromium for the dashboard tests (Debian's chromium, installed by `make test`).

The flags keep Chromium from reaching out to Google's services, which this machine's closed
network would refuse many times over at every start.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary: install it (apt-get install chromium, or `make test`) to run the "
    "browser tests",
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    playwright = await async_playwright().start()
    try:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()
    finally:
        await playwright.stop()
