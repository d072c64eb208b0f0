"""The machinery the fake LLM servers share: an aiohttp server on 127.0.0.1 that answers one JSON
route from a queue of scripted replies.

A subclass names its route and turns its own reply dataclass into an HTTP answer (`_render`), and
may check requests the way the real API does (`_check`). This base records every request body and
its headers, falls back to a `responder` callable when the queue is empty, can delay answers to
simulate a slow model, and lets tests wait for N requests with a deadline instead of sleeping.
See `anthropic_server.py` and `openai_server.py` for the scripting API.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from aiohttp import web

from tests.fakes.sse import send_frames

ReplyT = TypeVar("ReplyT")

# `(request_body) -> reply`, where the reply is the fake's reply dataclass or a plain string (a
# text answer); it may also be a coroutine function, e.g. one that waits for an event.
Responder = Callable[[dict[str, Any]], ReplyT | str | Awaitable[ReplyT | str]]


@dataclass(frozen=True, slots=True)
class HTTPAnswer:
    """What the fake sends back for one request."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    sse: bytes | None = None  # a recorded event stream sent as it is, instead of `body`


class ScriptedJSONServer(Generic[ReplyT]):
    """Answers `POST <route>` from `_queue`, else from `responder`, else with a 400 that says so."""

    route: str = "/"
    path_prefix: str = ""  # appended to the root URL to give `base_url`
    models_route: str = "/v1/models"  # the model list (Anthropic's and OpenAI's path)

    def __init__(
        self,
        *,
        responder: Responder[ReplyT] | None = None,
        delay_seconds: float = 0.0,
        validate: bool = True,
    ) -> None:
        self.responder = responder
        self.delay_seconds = delay_seconds
        self.validate = validate
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self._queue: deque[ReplyT] = deque()
        self._received = asyncio.Condition()
        self._stopping = asyncio.Event()  # cuts delays short, so stop() never waits on them
        self.stream_pause_seconds = 0.0  # between the frames of a streamed answer
        self._runner: web.AppRunner | None = None
        self._root_url = ""
        # When set, a request with another key is refused with the provider's 401 (as the real
        # API words it); None: any key goes.
        self.api_key: str | None = None
        # What `GET <prefix>/models` lists (the OpenAI-compatible model list local servers
        # serve too).
        self.models: list[str] = ["fake-model"]
        self.models_request_headers: list[dict[str, str]] = []  # of each model list asked

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> str:
        """Listen on a free port of 127.0.0.1; returns `base_url`."""
        self._stopping.clear()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(self.route, self._handle)
        app.router.add_get(self.models_route, self._list_models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self._root_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        if not self._root_url:
            raise RuntimeError("the fake server is not started")
        return self._root_url + self.path_prefix

    # ---- scripting ---------------------------------------------------------------------------

    def enqueue(self, reply: ReplyT, *, times: int = 1) -> None:
        """Answer the next `times` requests with `reply` (after anything queued before)."""
        self._queue.extend([reply] * times)

    @property
    def pending(self) -> int:
        """Scripted replies not used yet (a test can assert all were consumed)."""
        return len(self._queue)

    async def wait_for_requests(self, count: int, within_seconds: float = 5.0) -> None:
        """Return once `count` requests have arrived; TimeoutError after `within_seconds`."""
        async with asyncio.timeout(within_seconds), self._received:
            await self._received.wait_for(lambda: len(self.requests) >= count)

    # ---- subclass hooks ----------------------------------------------------------------------

    def _render(self, reply: ReplyT | str, body: dict[str, Any]) -> HTTPAnswer:
        raise NotImplementedError

    def _check(self, body: dict[str, Any]) -> HTTPAnswer | None:
        """An error answer when the real API would refuse `body`, else None."""
        return None

    def _error(self, status: int, message: str) -> HTTPAnswer:
        raise NotImplementedError

    def _key_of(self, headers: Mapping[str, str]) -> str:
        """The API key a request carries, read as the real API reads it."""
        return ""

    def _wrong_key(self, key: str) -> HTTPAnswer:
        return self._error(401, "invalid api key")

    def _delay_of(self, reply: ReplyT | str) -> float | None:
        return getattr(reply, "delay_seconds", None)

    # ---- serving -----------------------------------------------------------------------------

    def _refusal_of_key(self, request: web.Request) -> HTTPAnswer | None:
        key = self._key_of(request.headers)
        return None if self.api_key is None or key == self.api_key else self._wrong_key(key)

    async def _list_models(self, request: web.Request) -> web.Response:
        self.models_request_headers.append(dict(request.headers))
        if (refusal := self._refusal_of_key(request)) is not None:
            return web.json_response(refusal.body, status=refusal.status)
        data = [
            {"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
            for name in self.models
        ]
        return web.json_response({"object": "list", "data": data})

    async def _handle(self, request: web.Request) -> web.Response:
        if (refusal := self._refusal_of_key(request)) is not None:
            async with self._received:
                self.requests.append({})
                self.request_headers.append(dict(request.headers))
                self._received.notify_all()
            return web.json_response(
                refusal.body, status=refusal.status, headers=dict(refusal.headers)
            )
        try:
            body = await request.json()
        except ValueError:
            body = None
        async with self._received:
            self.requests.append(body if isinstance(body, dict) else {})
            self.request_headers.append(dict(request.headers))
            self._received.notify_all()
        answer = await self._answer(body)
        if answer.sse is not None:  # a recorded stream, sent as it is
            return web.Response(
                body=answer.sse,
                status=answer.status,
                headers=dict(answer.headers),
                content_type="text/event-stream",
            )
        if isinstance(body, dict) and body.get("stream") is True and answer.status == 200:
            frames = self._stream_frames(answer.body, body)
            if frames is not None:  # asked as a stream: the same answer, as the API streams it
                return await send_frames(
                    request, frames, headers=answer.headers, pause_seconds=self.stream_pause_seconds
                )
        return web.json_response(answer.body, status=answer.status, headers=dict(answer.headers))

    def _stream_frames(self, answer: dict[str, Any], body: dict[str, Any]) -> list[bytes] | None:
        """The server-sent events of `answer` for a request that asked for a stream (None:
        this fake cannot stream, the answer goes out whole)."""
        return None

    async def _answer(self, body: Any) -> HTTPAnswer:
        if not isinstance(body, dict):
            return self._error(400, "The request body is not a valid JSON object.")
        if self.validate and (refusal := self._check(body)) is not None:
            return refusal
        reply: ReplyT | str
        if self._queue:
            reply = self._queue.popleft()
        elif self.responder is not None:
            produced = self.responder(body)
            reply = await produced if inspect.isawaitable(produced) else produced
        else:
            return self._error(
                400,
                f"fake server: request #{len(self.requests)} arrived with nothing scripted and "
                "no responder",
            )
        delay = self._delay_of(reply)
        delay = self.delay_seconds if delay is None else delay
        if delay > 0:
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
            except TimeoutError:
                pass
        return self._render(reply, body)


def estimate_tokens(value: Any) -> int:
    """A rough token count (4 characters a token) for fake usage figures."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(text) // 4)
