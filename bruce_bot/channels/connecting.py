"""A platform's start-up wait, shared by the adapters that connect in the background: start
returns once the connection is up, or after a bounded wait, so a platform that is down never
holds Bruce's start-up (it keeps trying in the background)."""

from __future__ import annotations

import asyncio

import structlog

log = structlog.get_logger(__name__)


async def wait_connected(
    runner: asyncio.Task[None], connected: asyncio.Event, seconds: float, platform: str
) -> None:
    """Wait until `connected` is set, `runner` ends, or `seconds` passed; the last
    is logged as `<platform>_not_connected_yet`."""
    waiting = asyncio.create_task(connected.wait())
    try:
        await asyncio.wait({waiting, runner}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if not connected.is_set() and not runner.done():
        log.warning(
            f"{platform}_not_connected_yet",
            waited_seconds=seconds,
            hint=f"Bruce runs without {platform.capitalize()} for now and keeps trying in the "
            "background",
        )
