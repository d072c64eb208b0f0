"""Socket Mode: Bruce opens a WebSocket to Slack (`apps.connections.open` with the app-level
token) and Slack sends each event and interaction over it as an envelope to acknowledge.

An event's envelope is acknowledged only after the intake (intake.py) stored its message, or
decided it was not for Bruce; while the database cannot take it, or while Bruce is stopping, it
is left unacknowledged and Slack sends it again (with `retry_attempt`), and the inbox stores it
once. An interaction (a button press) is acknowledged at once, as Slack wants within three
seconds, then answered. The WebSocket URL is asked for here first, so an app token Slack
refuses is reported once (slack_sdk's own loop would retry it forever); after that slack_sdk
reconnects by itself (Slack's `disconnect` notices, a dropped connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import structlog
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from bruce_bot.channels.held import unavailable
from bruce_bot.channels.slack.intake import Intake, NotTaken

log = structlog.get_logger(__name__)


class SocketIntake:
    """One Socket Mode connection feeding `intake`."""

    def __init__(self, app_token: str, web: AsyncWebClient, intake: Intake) -> None:
        self._app_token = app_token
        self._web = web
        self._intake = intake
        self._client: SocketModeClient | None = None
        self._pressing: set[asyncio.Task[None]] = set()

    async def connect(self) -> None:
        """Open the connection; raises slack_sdk's SlackApiError when Slack refuses the app
        token (then nothing keeps retrying)."""
        client = SocketModeClient(
            app_token=self._app_token,
            web_client=self._web,
            logger=logging.getLogger("slack_sdk.socket_mode"),
        )
        self._client = client
        client.socket_mode_request_listeners.append(self._on_request)  # type: ignore[arg-type]
        try:
            client.wss_uri = await client.issue_new_wss_url()
        except BaseException:
            await self.close()
            raise
        await client.connect()

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        for task in list(self._pressing):
            task.cancel()

    async def _on_request(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        if request.type == "events_api":
            if await self._event(request):
                await _ack(client, request)
            return
        await _ack(client, request)  # interactions and anything else: at once
        if request.type == "interactive" and isinstance(request.payload, dict):
            task = asyncio.create_task(self._press(request.payload))
            self._pressing.add(task)
            task.add_done_callback(self._pressing.discard)

    async def _event(self, request: SocketModeRequest) -> bool:
        """Whether the envelope may be acknowledged (see the module docstring)."""
        payload: Any = request.payload
        try:
            await self._intake.event(payload if isinstance(payload, dict) else {})
        except NotTaken as exc:
            log.info("slack_event_not_taken", envelope_id=request.envelope_id, reason=str(exc))
            return False
        except Exception as exc:
            reason = unavailable(exc)
            if reason is not None:
                log.warning(
                    "slack_event_not_stored",
                    envelope_id=request.envelope_id,
                    reason=reason,
                    hint="not acknowledged: Slack sends it again",
                )
                return False
            log.exception("slack_event_failed", envelope_id=request.envelope_id, error=repr(exc))
        return True

    async def _press(self, payload: dict[str, Any]) -> None:
        try:
            await self._intake.press(payload)
        except Exception as exc:
            log.exception("slack_press_failed", error=repr(exc))


async def _ack(client: SocketModeClient, request: SocketModeRequest) -> None:
    try:
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
    except Exception as exc:  # the connection went: Slack sends it again
        log.info("slack_ack_failed", envelope_id=request.envelope_id, error=repr(exc))
