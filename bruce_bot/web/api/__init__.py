"""The dashboard's JSON API (docs/design.md), one module per resource: the chat, sessions (one in
detail, deleting one) and their messages with their tool calls, scheduled tasks, artifacts,
what Bruce remembers about people, the logs (tool calls, failed deliveries), editable settings,
who may talk on the chat platforms (allowlists, pairing), the platforms' tokens and logins,
token usage, signed-in browsers and the MCP servers with their tools;
`/api/openapi.json` describes them all.

Every route sits behind the app's auth middleware and is an `Endpoint` value: its parameters,
body and answer are pydantic models. Parameters are validated before any query runs (a bad one
is a 400 whose message names it and what it allows) and every listing has a bounded `limit`.
Times are ISO-8601 in UTC; the pages show them in `app.timezone`, which the answers that need it
carry as `timezone`.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from bruce_bot.web.api import (
    allowlists,
    approvals,
    artifacts,
    channel_logins,
    channel_tests,
    chat,
    llm_settings,
    logs,
    mcp_servers,
    memories,
    people,
    platforms,
    session_detail,
    sessions,
    settings,
    task_writes,
    tasks,
    usage,
    web_sessions,
)
from bruce_bot.web.api.endpoint import Endpoint
from bruce_bot.web.api.openapi import with_openapi
from bruce_bot.web.api.params import MAX_LIMIT
from bruce_bot.web.api.usage import usage_days
from bruce_bot.web.auth import WebAuth
from bruce_bot.web.context import WebContext

__all__ = ["ENDPOINTS", "MAX_LIMIT", "api_routes", "usage_days"]

ENDPOINTS: tuple[Endpoint, ...] = with_openapi(
    (
        *chat.ENDPOINTS,
        *sessions.ENDPOINTS,
        *session_detail.ENDPOINTS,
        *tasks.ENDPOINTS,
        *task_writes.ENDPOINTS,
        *artifacts.ENDPOINTS,
        *memories.ENDPOINTS,
        *logs.ENDPOINTS,
        *settings.ENDPOINTS,
        *llm_settings.ENDPOINTS,
        *channel_tests.ENDPOINTS,
        *channel_logins.ENDPOINTS,
        *allowlists.ENDPOINTS,
        *mcp_servers.ENDPOINTS,
        *people.ENDPOINTS,
        *platforms.ENDPOINTS,
        *usage.ENDPOINTS,
        *web_sessions.ENDPOINTS,
        *approvals.ENDPOINTS,
    )
)


def api_routes(context: WebContext, auth: WebAuth) -> list[BaseRoute]:
    return [endpoint.route(context, auth) for endpoint in ENDPOINTS]
