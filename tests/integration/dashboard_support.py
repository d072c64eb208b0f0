"""What the dashboard tests share: a running Bruce whose LLM is the fake Anthropic server, with a
recording chat channel (chats in `refusing` are gone: every send fails permanently), a tool that
succeeds, a tool that fails, `artifact_save` and the memory tools — so that sessions, tool
executions, artifacts, memories and failed deliveries are all made through the real message
path."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bruce_bot.app import Bruce
from bruce_bot.channels.base import DeliveryError, InboxPort
from bruce_bot.domain import InboundMessage, OutboundMessage, SessionKey, utcnow
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.tools.artifacts import ArtifactSaveTool
from bruce_bot.tools.memory import memory_tools
from bruce_bot.tools.registry import Tool, ToolContext, ToolError, ToolRegistry
from tests.conftest import make_config, running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer, last_user_text
from tests.integration.support import AddTool

YAML_PROMPT = "You are Bruce from the YAML file. Be brief."


class ChatChannel:
    name = "chat"
    max_message_chars = 4096

    def __init__(self) -> None:
        self.inbox: InboxPort | None = None
        self.sent: list[tuple[str, str]] = []
        self.refusing: set[str] = set()

    async def start(self, inbox: InboxPort) -> None:
        self.inbox = inbox

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        if message.chat_id in self.refusing:
            raise DeliveryError("Forbidden: bot was blocked by the user", permanent=True)
        self.sent.append((message.chat_id, message.text))

    async def typing(self, chat_id: str) -> None:
        return None

    def texts(self, chat_id: str) -> list[str]:
        return [text for chat, text in self.sent if chat == chat_id]


class LookupTool(Tool):
    """Fails on purpose, saying why; the error names the query (which may hold markup)."""

    name = "lookup"
    description = "Look something up in the index."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raise ToolError(f"the index is offline; could not look up {arguments['query']}")


@dataclass
class Dashboard:
    bruce: Bruce
    fake: FakeAnthropicServer
    channel: ChatChannel

    @property
    def url(self) -> str:
        assert self.bruce.web_url is not None
        return self.bruce.web_url

    async def say(self, chat_id: str, text: str) -> None:
        assert self.channel.inbox is not None, "the channel was not started"
        message = InboundMessage("chat", chat_id, text, user_id=chat_id, user_name=chat_id)
        submission = await self.channel.inbox.submit(message)
        assert submission.accepted, submission

    async def chat(self, chat_id: str, text: str) -> str:
        """Say `text` in `chat_id` and return Bruce's reply (echoed by the fake)."""
        before = len(self.channel.texts(chat_id))
        await self.say(chat_id, text)
        await wait_until(lambda: len(self.channel.texts(chat_id)) > before)
        return self.channel.texts(chat_id)[before]

    async def use_tool(self, chat_id: str, tool: str, arguments: dict[str, Any]) -> None:
        """A turn in which the model calls `tool` once, then answers "Done."."""
        self.fake.script(tool_calls=[(tool, arguments)])
        self.fake.script("Done.")
        before = len(self.channel.texts(chat_id))
        await self.say(chat_id, f"please use {tool}")
        await wait_until(lambda: "Done." in self.channel.texts(chat_id)[before:])


async def create_task(dashboard: Dashboard, chat_id: str, **values: Any) -> Any:
    """A task made by the task service in the chat's session (`values`: title, content, ...)."""
    bruce = dashboard.bruce
    assert bruce.tasks is not None and bruce.stores is not None
    session = await bruce.stores.sessions.get_or_create(SessionKey("chat", chat_id))
    defaults: dict[str, Any] = {"mode": "message", "run_at": None, "cron": None, "timezone": None}
    return await bruce.tasks.planner.create(
        NewTask(session_id=session.id, channel="chat", chat_id=chat_id, **{**defaults, **values})
    )


@contextlib.asynccontextmanager
async def running_dashboard(
    tmp_path: Path,
    token: str,
    clock: Callable[[], datetime] = utcnow,
    **overrides: Any,
) -> AsyncIterator[Dashboard]:
    """Bruce with the dashboard on `token` and `clock`; `overrides` go into the config (e.g.
    `database`)."""
    async with FakeAnthropicServer(
        responder=lambda body: f"You said: {last_user_text(body)}"
    ) as fake:
        config = make_config(
            tmp_path,
            fake.base_url,
            web={"auth_token": token},
            **{"agent": {"system_prompt": YAML_PROMPT}, **overrides},
        )
        tools = ToolRegistry([AddTool(), LookupTool()])
        channel = ChatChannel()
        async with running_bruce(config, tools=tools, channels=[channel], clock=clock) as bruce:
            assert bruce.stores is not None
            # The artifact tool needs the stores, which exist once Bruce runs; the turn runner
            # shares this registry, so the model can call it from now on.
            tools.add(
                ArtifactSaveTool(
                    bruce.stores.artifacts,
                    config.app.data_dir / "artifacts",
                    config.app.public_url,
                    config.tools.artifacts.max_bytes,
                )
            )
            for tool in memory_tools(bruce.stores.memories):
                tools.add(tool)
            yield Dashboard(bruce, fake, channel)
