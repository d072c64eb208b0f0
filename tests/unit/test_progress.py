"""agent/progress.py on its own: the status line a live reply shows while a tool runs."""

from __future__ import annotations

from bruce_bot.agent.progress import status_line, status_lines
from bruce_bot.domain import ToolCall


def test_status_lines_name_what_the_tool_is_doing() -> None:
    search = ToolCall("1", "web_search", {"query": "rain in   Lisbon\nthis week"})
    fetch = ToolCall("2", "web_fetch", {"url": "https://www.example.com/weather?id=3"})
    save = ToolCall("3", "artifact_save", {"filename": "report.html", "content": "<html>"})
    other = ToolCall("4", "get_user_country", {})
    assert status_line(search) == "🔎 Searching the web for “rain in Lisbon this week” …"
    assert status_line(fetch) == "📄 Reading example.com …"
    assert status_line(save) == "💾 Saving report.html …"
    assert status_line(other) == "⚙️ Using get user country …"
    assert status_lines([search, search, save]).splitlines() == [
        status_line(search),
        status_line(save),
    ]
