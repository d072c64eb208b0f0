"""`/api/mcp`: the MCP servers of `mcp.servers`, each with its transport, its state (starting,
ready, failed, restarting, disabled), the last error (with the tail of a stdio server's stderr)
and its tools as the model sees them: name, description, offered or why not. Read only.

What a server wrote (its error, its stderr, its tools' descriptions) is outside text that may
quote a token it was given: it goes through the log scrubber (the configured secrets, among them
every server's `env` and `headers` values, URL passwords, secret query parameters) and the
secret-shape masking (`secret_shapes.py`: keys it was never given in config.yml) first."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from bruce_bot.logs import SecretScrubber, scrubber
from bruce_bot.secret_shapes import mask_secret_shapes
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams


class McpToolAnswer(BaseModel):
    name: str = Field(description="as the model sees it: <server>__<tool>")
    server_tool: str = Field(description="as the server names it")
    description: str
    offered: bool
    reason: str = Field(description="why it is not offered (denied, not allowed, name taken)")


class McpServerAnswer(BaseModel):
    name: str
    transport: Literal["stdio", "streamable_http", "sse"]
    state: Literal["starting", "ready", "failed", "restarting", "disabled"]
    last_error: str
    allow_in_tasks: bool
    tools: list[McpToolAnswer]


class McpAnswer(BaseModel):
    servers: list[McpServerAnswer]


async def mcp_servers(call: Call[NoParams, None]) -> McpAnswer:
    manager = call.context.mcp
    if manager is None:
        return McpAnswer(servers=[])
    configured = SecretScrubber(call.context.secrets)

    def clean(text: str) -> str:
        return str(mask_secret_shapes(scrubber.scrub(configured.scrub(text))))

    return McpAnswer(
        servers=[
            McpServerAnswer(
                name=status.name,
                transport=status.transport,
                state=status.state,
                last_error=clean(status.last_error),
                allow_in_tasks=status.allow_in_tasks,
                tools=[
                    McpToolAnswer(
                        name=tool.name,
                        server_tool=tool.server_tool,
                        description=clean(tool.description),
                        offered=tool.offered,
                        reason=tool.reason,
                    )
                    for tool in status.tools
                ],
            )
            for status in manager.statuses()
        ]
    )


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/mcp",
        mcp_servers,
        McpAnswer,
        "The MCP servers: state, last error and tools (offered or not)",
    ),
)
