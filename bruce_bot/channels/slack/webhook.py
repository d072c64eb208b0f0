"""The Events API: Slack POSTs events and interactions to `/slack/events` on Bruce's web server.

Each request's `X-Slack-Signature` is checked with the app's signing secret
(slack_sdk.signature.SignatureVerifier: an HMAC of the timestamp and the body, refused when
older than five minutes): a bad or stale one gets 401 and nothing is read. `url_verification`
(when the Request URL is saved in the app's settings) is answered with its challenge. An
`event_callback` is handed to the intake (intake.py) and answered 200 once its message is
stored; while the database cannot take it, or Bruce is stopping, the answer is 503 so that
Slack retries (with `X-Slack-Retry-Num`). A retry of an event already taken in is answered 200
at once, and the inbox stores a message once in any case. An interaction (the form field
`payload`) is answered 200 at once and handled after, as Slack wants an answer within three
seconds. The web part routes the request here without knowing Slack (web/webhooks.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

import structlog
from slack_sdk.signature import Clock, SignatureVerifier

from bruce_bot.channels.held import unavailable
from bruce_bot.channels.recent import Recent
from bruce_bot.channels.slack.intake import Intake, NotTaken

log = structlog.get_logger(__name__)

EVENTS_PATH = "/slack/events"
Answer = tuple[int, str, bytes]  # status, content type, body
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def _text(status: int, text: str) -> Answer:
    return status, TEXT, text.encode()


class EventsEndpoint:
    def __init__(self, signing_secret: str, intake: Intake, clock: Clock | None = None) -> None:
        self._verifier = SignatureVerifier(signing_secret, clock or Clock())
        self._intake = intake
        self._taken: Recent[str] = Recent()  # event ids taken in
        self._pressing: set[asyncio.Task[None]] = set()

    async def receive(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        try:
            valid = self._verifier.is_valid_request(body, dict(headers))
        except ValueError:  # a timestamp that is not a number
            valid = False
        if not valid:
            log.warning("slack_signature_refused", retry=headers.get("x-slack-retry-num"))
            return _text(401, "invalid signature")
        content_type = headers.get("content-type", "")
        try:
            if content_type.startswith("application/x-www-form-urlencoded"):
                return self._interaction(body)
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return _text(400, "the body is not what Slack sends")
        if not isinstance(payload, dict):
            return _text(400, "the body is not what Slack sends")
        if payload.get("type") == "url_verification":
            challenge = json.dumps({"challenge": payload.get("challenge", "")})
            return 200, JSON, challenge.encode()
        if payload.get("type") != "event_callback":
            return _text(200, "")
        return await self._event(payload, headers)

    async def _event(self, payload: dict[str, Any], headers: Mapping[str, str]) -> Answer:
        event_id = str(payload.get("event_id") or "")
        if event_id and event_id in self._taken:
            log.info(
                "slack_event_repeated", event_id=event_id, retry=headers.get("x-slack-retry-num")
            )
            return _text(200, "")
        try:
            await self._intake.event(payload)
        except NotTaken as exc:
            log.info("slack_event_not_taken", event_id=event_id, reason=str(exc))
            return _text(503, "not taken in now: send it again")
        except Exception as exc:
            reason = unavailable(exc)
            if reason is None:
                log.exception("slack_event_failed", event_id=event_id, error=repr(exc))
                return _text(200, "")  # a bug: Slack sending it again would not help
            log.warning("slack_event_not_stored", event_id=event_id, reason=reason)
            return _text(503, "cannot store it now: send it again")
        if event_id:
            self._taken.add(event_id)
        return _text(200, "")

    def _interaction(self, body: bytes) -> Answer:
        fields = parse_qs(body.decode())
        payload = json.loads((fields.get("payload") or ["{}"])[0])
        if isinstance(payload, dict):
            task = asyncio.create_task(self._press(payload))
            self._pressing.add(task)
            task.add_done_callback(self._pressing.discard)
        return _text(200, "")

    async def _press(self, payload: dict[str, Any]) -> None:
        try:
            await self._intake.press(payload)
        except Exception as exc:
            log.exception("slack_press_failed", error=repr(exc))

    def close(self) -> None:
        for task in list(self._pressing):
            task.cancel()
