"""A SIGKILL mid-answer on Slack: `bruce run` (its own process group) on the fake Slack over
Socket Mode, killed while a reply in three parts is being sent; after the restart every part
reached the DM exactly once, and the model was asked once (the reply was stored before it was
sent, and the parts recorded sent are skipped)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.slack_server import FakeSlackServer, _params
from tests.integration.crash.test_restart import Daemon
from tests.integration.support import db_rows

OWNER = FakeSlackServer.USER_ID
DM = FakeSlackServer.DM_CHANNEL
WITHIN = 30.0
LONG_REPLY = "\n\n".join(f"Part {i}: " + "x" * 3000 for i in range(3))  # three Slack messages


class SlackHoldingAPart(FakeSlackServer):
    """While `hold` is set, a `chat.postMessage` whose text starts with it waits before Slack
    takes it; `release` lets it fail untaken (502), as a request does whose client was killed."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: str | None = None
        self.held = 0
        self._released = asyncio.Event()

    def release(self) -> None:
        self.hold = None
        self._released.set()

    async def _web_api(self, request: web.Request) -> web.Response:
        if self.hold is not None and request.match_info["method"] == "chat.postMessage":
            text = str((await _params(request)).get("text") or "")
            if text.startswith(self.hold):
                self.held += 1
                await self._notify()
                await self._released.wait()
                raise web.HTTPBadGateway()
        return await super()._web_api(request)


@pytest.fixture
async def slack() -> AsyncIterator[SlackHoldingAPart]:
    server = SlackHoldingAPart()
    async with server:
        try:
            yield server
        finally:
            server.release()


@pytest.fixture
async def daemon(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, slack: SlackHoldingAPart
) -> AsyncIterator[Daemon]:
    section: dict[str, Any] = {
        "enabled": True,
        "bot_token": FakeSlackServer.BOT_TOKEN,
        "app_token": FakeSlackServer.APP_TOKEN,
        "api_base_url": slack.api_base_url,
        "allowed_user_ids": [OWNER],
        "streaming": False,
    }
    bruce = Daemon(tmp_path, anthropic_fake.base_url, channels={"slack": section})
    try:
        yield bruce
    finally:
        await bruce.kill()


def parts_received(slack: FakeSlackServer) -> list[int]:
    return [int(text.split(":")[0].removeprefix("Part ")) for text in slack.texts(DM)]


async def test_a_sigkill_mid_answer_on_slack_sends_each_part_once_after_the_restart(
    daemon: Daemon, anthropic_fake: FakeAnthropicServer, slack: SlackHoldingAPart
) -> None:
    anthropic_fake.responder = lambda body: LONG_REPLY
    slack.hold = "Part 1:"
    await daemon.start()
    await slack.wait_for_connection(within=WITHIN)
    await slack.inject_message(OWNER, DM, "Tell me the whole story")
    # Part 0 reached the DM; part 1 is on its way: Bruce dies before Slack takes it.
    await slack.wait_for(lambda: slack.held == 1, within=WITHIN)
    assert parts_received(slack) == [0]
    await daemon.kill()
    slack.release()

    await daemon.start()

    def settled() -> bool:
        rows = db_rows(daemon.data_dir, "SELECT status FROM messages WHERE role = 'assistant'")
        return [tuple(row) for row in rows] == [("sent",)]

    await wait_until(settled, WITHIN)
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGTERM)
    assert await daemon.exit_code(within=20) == 0

    assert parts_received(slack) == [0, 1, 2]
    assert len(anthropic_fake.requests) == 1  # the reply was stored: no second model call
    sent = db_rows(daemon.data_dir, "SELECT part FROM deliveries WHERE status = 'sent'")
    assert sorted(row[0] for row in sent) == [0, 1, 2]
