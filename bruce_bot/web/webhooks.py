"""Routes a chat platform posts to (Slack's Events API: `POST /slack/events`), without the web
part knowing the platform: an adapter that takes webhooks says where (`webhook_path`) and
answers the raw request itself (`receive_webhook`, which checks the platform's signature).

The routes are made from the channel map the outbox shares, once, when the app is built; each
request asks the map for the platform's adapter of the moment (a token saved in the dashboard
replaces it). The paths are open (no dashboard login: the platform signs its requests), and a
body is read up to `MAX_BODY_BYTES`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol, runtime_checkable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bruce_bot.web.wire import MAX_BODY_BYTES, capped_body

# The webhook paths the auth gate leaves open (web/auth.py); a route is made only for those an
# enabled adapter asks for.
WEBHOOK_PATHS = ("/slack/events",)


@runtime_checkable
class WebhookReceiver(Protocol):
    """A channel adapter a platform posts to."""

    @property
    def webhook_path(self) -> str | None: ...

    def receive_webhook(
        self, body: bytes, headers: Mapping[str, str]
    ) -> Awaitable[tuple[int, str, bytes]]:
        """(status, content type, body) to answer the platform with."""
        ...


def webhook_routes(channels: Mapping[str, Any]) -> list[Route]:
    routes: list[Route] = []
    for name, adapter in channels.items():
        path = adapter.webhook_path if isinstance(adapter, WebhookReceiver) else None
        if path in WEBHOOK_PATHS:
            routes.append(Route(path, _endpoint(channels, name), methods=["POST"]))
    return routes


def _endpoint(channels: Mapping[str, Any], name: str) -> Any:
    async def receive(request: Request) -> Response:
        adapter = channels.get(name)
        if not isinstance(adapter, WebhookReceiver) or adapter.webhook_path is None:
            return PlainTextResponse(f"{name} takes no webhooks now", status_code=404)
        body = await capped_body(request, MAX_BODY_BYTES)
        if body is None:
            return PlainTextResponse("request body too large", status_code=413)
        status, content_type, answer = await adapter.receive_webhook(body, request.headers)
        return Response(answer, status_code=status, media_type=content_type)

    return receive
