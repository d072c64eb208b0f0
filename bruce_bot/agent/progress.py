"""The short status line a live reply shows while a tool runs ("🔎 Searching the web for …").

One line per call, from the call's own arguments (cut short, on one line); a tool without a
line of its own gets a generic one naming it. When the model calls several tools at once, the
lines are shown together.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlparse

from bruce_bot.domain import ToolCall

MAX_DETAIL_CHARS = 60


def status_line(call: ToolCall) -> str:
    arguments = call.arguments or {}

    def detail(key: str) -> str:
        value = arguments.get(key)
        text = " ".join(str(value).split()) if isinstance(value, (str, int, float)) else ""
        return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"

    name = call.name
    if name == "web_search" and (query := detail("query")):
        return f"🔎 Searching the web for “{query}” …"
    if name == "web_fetch" and (url := detail("url")):
        host = urlparse(url if "//" in url else f"//{url}").hostname or url
        return f"📄 Reading {host.removeprefix('www.')} …"
    if name == "artifact_save" and (filename := detail("filename")):
        return f"💾 Saving {filename} …"
    if name == "proactive_create":
        return "⏰ Scheduling it …"
    if name in ("proactive_list", "proactive_cancel"):
        return "⏰ Checking your reminders …"
    if name == "spawn_subagent":
        return "🧑‍💻 Handing part of the work to a helper …"
    return f"⚙️ Using {name.replace('_', ' ')} …"


def status_lines(calls: Sequence[ToolCall]) -> str:
    lines = list(dict.fromkeys(status_line(call) for call in calls))  # once each, in order
    return "\n".join(lines)
