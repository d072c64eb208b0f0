"""`/chat/stream`: the chat page's live replies as server-sent events (channels/web/channel.py).

The page opens it with an `EventSource` next to its long poll: while Bruce writes an answer, each
`live` event carries the text so far (or a tool's status line), and `done` ends it; the stored
reply still arrives through `/api/chat/messages`. It sits with the page, behind the same login,
rather than under `/api/` (whose routes are JSON operations described by `/api/openapi.json`).
A comment line every few seconds keeps proxies from closing an idle stream; the stream ends when
Bruce stops (the browser reconnects by itself) and after a while in any case, so that no
connection is held forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from bruce_bot.channels.web.channel import WebChannel

STREAM_PATH = "/chat/stream"
DEFAULT_CHAT_ID = "dashboard"
MAX_CHAT_ID_CHARS = 64
KEEPALIVE_SECONDS = 15.0
MAX_STREAM_SECONDS = 600.0  # then the browser's EventSource opens a new one
RECONNECT_MS = 2000


def chat_stream_routes(channel: WebChannel | None) -> list[BaseRoute]:
    if channel is None:
        return []

    async def stream(request: Request) -> Response:
        chat_id = request.query_params.get("chat_id") or DEFAULT_CHAT_ID
        if len(chat_id) > MAX_CHAT_ID_CHARS:
            return PlainTextResponse(
                f"chat_id is at most {MAX_CHAT_ID_CHARS} characters", status_code=400
            )
        return StreamingResponse(
            _events(channel, chat_id),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return [Route(STREAM_PATH, stream, methods=["GET"])]


async def _events(channel: WebChannel, chat_id: str) -> AsyncIterator[str]:
    ends_at = time.monotonic() + MAX_STREAM_SECONDS
    with channel.listen(chat_id) as queue:
        yield f"retry: {RECONNECT_MS}\n: live replies of {json.dumps(chat_id)}\n\n"
        while not channel.stopping.is_set() and time.monotonic() < ends_at:
            next_event = asyncio.ensure_future(queue.get())
            stopping = asyncio.ensure_future(channel.stopping.wait())
            try:
                done, _ = await asyncio.wait(
                    {next_event, stopping},
                    timeout=KEEPALIVE_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for waiter in (next_event, stopping):
                    if not waiter.done():
                        waiter.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await waiter
            if next_event in done:
                event = next_event.result()
                yield f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
            elif not done:
                yield ": keep-alive\n\n"
