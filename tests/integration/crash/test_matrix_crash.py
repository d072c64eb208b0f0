"""A SIGKILL mid-answer on Matrix: `bruce run` (its own process group) logged in to a real
Synapse (tests/integration/channels/synapse.py) through a small proxy that can hold a send,
killed while a reply in three parts is going out; after the restart every part reached the
room exactly once, and the model was asked once (the reply was stored before it was sent, and
the parts recorded sent are skipped)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.conftest import wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.channels.synapse import Synapse
from tests.integration.channels.test_matrix import (
    create_room,
    fresh,
    person,
    say,
    synapse,  # noqa: F401 (the fixture)
    wait_for_join,
    wait_for_replies,
)
from tests.integration.crash.test_restart import Daemon
from tests.integration.support import db_rows

WITHIN = 30.0
LONG_REPLY = "\n\n".join(f"Part {i}: " + "x" * 3500 for i in range(3))  # three Matrix messages


class HoldingProxy:
    """Passes every request to Synapse; while `hold` is set, a message send whose body starts
    with it waits before Synapse sees it, and `release` fails it untaken (502), as a request
    does whose client was killed."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.hold: str | None = None
        self.held = 0
        self._released = asyncio.Event()
        self._client = httpx.AsyncClient(timeout=None)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def release(self) -> None:
        self.hold = None
        self._released.set()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.hold is not None and "/send/m.room.message/" in request.path:
            text = str(json.loads(body or b"{}").get("body", ""))
            if text.startswith(self.hold):
                self.held += 1
                await self._released.wait()
                raise web.HTTPBadGateway()
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        answer = await self._client.request(
            request.method, self.upstream + request.path_qs, content=body, headers=headers
        )
        return web.Response(
            body=answer.content,
            status=answer.status_code,
            content_type=answer.headers.get("content-type", "application/json").split(";")[0],
        )

    async def __aenter__(self) -> HoldingProxy:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
        if self._runner is not None:
            await self._runner.cleanup()
        await self._client.aclose()


@pytest.fixture
async def proxy(synapse: Synapse) -> AsyncIterator[HoldingProxy]:  # noqa: F811
    async with HoldingProxy(synapse.url) as held:
        yield held


def parts_of(replies: list[dict[str, object]]) -> list[int]:
    return [int(str(r["body"]).split(":")[0].removeprefix("Part ")) for r in replies]


async def test_a_sigkill_mid_answer_on_matrix_sends_each_part_once_after_the_restart(
    tmp_path: Path,
    anthropic_fake: FakeAnthropicServer,
    synapse: Synapse,  # noqa: F811
    proxy: HoldingProxy,
) -> None:
    anthropic_fake.responder = lambda body: LONG_REPLY
    bot, alice = fresh(synapse, "bruce"), fresh(synapse, "alice")
    section = {
        "enabled": True,
        "homeserver": proxy.url,
        "user_id": bot.user_id,
        "password": bot.password,
        "allowed_user_ids": [alice.user_id],
        "streaming": False,
    }
    daemon = Daemon(tmp_path, anthropic_fake.base_url, channels={"matrix": section})
    try:
        await daemon.start()
        async with person(synapse, alice) as client:
            room = await create_room(client, [bot.user_id], direct=True)
            await wait_for_join(client, room, bot)
            proxy.hold = "Part 1:"
            await say(client, room, "Tell me the whole story")
            # Part 0 reached the room; part 1 is on its way: Bruce dies before Synapse has it.
            await wait_until(lambda: proxy.held == 1, WITHIN)
            assert parts_of(await wait_for_replies(client, room, bot, 1)) == [0]
            await daemon.kill()
            proxy.release()

            await daemon.start()

            def settled() -> bool:
                rows = db_rows(
                    daemon.data_dir, "SELECT status FROM messages WHERE role = 'assistant'"
                )
                return [tuple(row) for row in rows] == [("sent",)]

            await wait_until(settled, WITHIN)
            replies = await wait_for_replies(client, room, bot, 3)
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGTERM)
        assert await daemon.exit_code(within=20) == 0
    finally:
        await daemon.kill()
    assert parts_of(replies) == [0, 1, 2]
    assert len(anthropic_fake.requests) == 1  # the reply was stored: no second model call
    sent = db_rows(daemon.data_dir, "SELECT part FROM deliveries WHERE status = 'sent'")
    assert sorted(row[0] for row in sent) == [0, 1, 2]
