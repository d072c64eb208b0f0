"""Helpers shared by the end-to-end tests of the message path: small test tools, reading the
SQLite file Bruce writes, and picking apart the request bodies the fake LLM servers received."""

from __future__ import annotations

import asyncio
import sqlite3
import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bruce_bot.config import Config
from bruce_bot.domain import utcnow
from bruce_bot.tools.registry import Tool, ToolContext
from tests.conftest import make_config
from tests.fakes.anthropic_server import is_temporal_context

REPLY_TIMEOUT = 10.0


def untrusted_body(text: str, source: str) -> str:
    """The content of a tool result fenced as untrusted data (failing if it is not fenced)."""
    opening = f'<untrusted_content source="{source}">\n'
    assert text.startswith(opening) and text.endswith("\n</untrusted_content>"), text[:120]
    return text[len(opening) : -len("\n</untrusted_content>")]


# ---- time and waiting ----------------------------------------------------------------------


class ManualClock:
    """Bruce's clock, moved on by the test. Started well ahead of the real time (`start`), the
    scheduler's own jobs, which APScheduler runs on the real clock, lie in the future and never
    fire during a test: every firing is one the test asks for (`bruce.tasks.fire`) or one a
    start-up owes by this clock (reconcile)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start if start is not None else utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def awaiting(function: Callable[..., Any], task_name: str | None = None) -> bool:
    """Whether a task of the running loop (the one named `task_name`, if given) is suspended
    inside the coroutine function `function`.

    The proof an absence needs: "nothing was confirmed (or asked) meanwhile" holds only once the
    step that would do it has run up to where it waits; waiting a short while would only hope
    that it had. The coroutines a task awaits are followed from its outermost one."""
    code = function.__code__
    for task in asyncio.all_tasks():
        if task_name is not None and task.get_name() != task_name:
            continue
        awaited: Any = task.get_coro()
        while awaited is not None:
            if getattr(awaited, "cr_code", None) is code:
                return True
            awaited = getattr(awaited, "cr_await", None)
    return False


# ---- configs -------------------------------------------------------------------------------


def config_for(tmp_path: Path, llm_url: str | None, **overrides: Any) -> Config:
    """`make_config` without the web server (these tests talk through the console channel)."""
    return make_config(tmp_path, llm_url=llm_url, **{"web": {"enabled": False}, **overrides})


async def next_reply(replies: asyncio.Queue[str], within: float = REPLY_TIMEOUT) -> str:
    """The next text a channel delivered to the user (fails at the deadline)."""
    return await asyncio.wait_for(replies.get(), within)


# ---- the database file ---------------------------------------------------------------------


def db_rows(data_dir: Path, sql: str, *params: Any) -> list[sqlite3.Row]:
    """Rows of a query on the SQLite file Bruce writes in `data_dir` (read-only, synchronous)."""
    connection = sqlite3.connect(f"file:{data_dir / 'bruce.db'}?mode=ro", uri=True, timeout=10)
    connection.row_factory = sqlite3.Row
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def messages_of(data_dir: Path, role: str | None = None) -> list[sqlite3.Row]:
    sql = "SELECT * FROM messages"
    if role is not None:
        return db_rows(data_dir, sql + " WHERE role = ? ORDER BY id", role)
    return db_rows(data_dir, sql + " ORDER BY id")


# ---- request bodies (Anthropic's wire format) -----------------------------------------------


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def block_text(block: dict[str, Any]) -> str:
    """The text of a text block, or of a tool_result's content (string or text blocks)."""
    if block.get("type") == "text":
        return str(block.get("text", ""))
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def user_texts(body: dict[str, Any]) -> list[str]:
    """Every text block of every user turn of a request, in order, without the temporal layer
    Bruce adds to the newest one (see `system_text`)."""
    return [
        block_text(block)
        for message in body.get("messages", [])
        if message.get("role") == "user"
        for block in _blocks(message)
        if block.get("type") == "text" and not is_temporal_context(block)
    ]


def all_text(body: dict[str, Any]) -> str:
    """Everything the model was shown in the conversation (not the system prompt), joined."""
    return "\n".join(
        block_text(block)
        for message in body.get("messages", [])
        for block in _blocks(message)
        if block.get("type") in ("text", "tool_result")
    )


def last_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of the last user turn."""
    last = body["messages"][-1]
    assert last["role"] == "user", last
    return [block for block in _blocks(last) if block.get("type") == "tool_result"]


def tool_uses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool_use block the assistant turns of a request carry, in order."""
    return [
        block
        for message in body.get("messages", [])
        if message.get("role") == "assistant"
        for block in _blocks(message)
        if block.get("type") == "tool_use"
    ]


def system_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    system = body.get("system")
    if isinstance(system, str):
        return [{"type": "text", "text": system}]
    return list(system or [])


def system_text(body: dict[str, Any]) -> str:
    """The effective system prompt, its layers in order: the system blocks, then the temporal
    layer, which Anthropic requests carry in the newest user turn (after the cache breakpoints,
    bruce_bot/llm/anthropic.py) rather than in `system`."""
    temporal = [
        block_text(block)
        for message in body.get("messages", [])
        for block in _blocks(message)
        if is_temporal_context(block)
    ]
    return "\n\n".join([*(block.get("text", "") for block in system_blocks(body)), *temporal])


# ---- sample files --------------------------------------------------------------------------


def text_pdf(*lines: str) -> bytes:
    """A one-page PDF whose page draws `lines` in Helvetica (what any PDF writer produces for
    plain text), with a correct cross-reference table."""
    stream = (
        "BT /F1 12 Tf 72 720 Td 14 TL "
        + " ".join(f"({line.replace('(', '[').replace(')', ']')}) '" for line in lines)
        + " ET"
    )
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


def _pdf_file(objects: dict[int, bytes]) -> bytes:
    out = bytearray(b"%PDF-1.4\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n".encode() + objects[number] + b"\nendobj\n"
    size = max(objects) + 1
    xref = len(out)
    out += f"xref\n0 {size}\n0000000000 65535 f \n".encode()
    for number in range(1, size):
        free = "0000000000 65535 f \n"  # the numbers between the page's and the forms'
        out += (f"{offsets[number]:010d} 00000 n \n" if number in offsets else free).encode()
    out += f"trailer\n<< /Size {size} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def _flate_stream(dictionary: str, content: bytes) -> bytes:
    packed = zlib.compress(content, 6)
    return (
        f"<< /Length {len(packed)} /Filter /FlateDecode {dictionary} >>\nstream\n".encode()
        + packed
        + b"\nendstream"
    )


def form_bomb_pdf(depth: int, fan_out: int, leaf_chars: int) -> bytes:
    """A one-page PDF that is a "billion laughs" for text extraction: the page draws form
    XObject 1 `fan_out` times, which draws form 2 `fan_out` times, ..., down to a form whose
    FlateDecode stream shows `leaf_chars` letters. A few kilobytes; each stream is within
    pypdf's own limits, yet reading the page's text needs gigabytes and minutes (pypdf 6.21
    stops after 5000 form invocations, by which time it holds 5000 leaves' text)."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        4: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /XObject << /X 10 0 R >> >> /Contents 5 0 R >>",
        5: _flate_stream("", b"/X Do " * fan_out),
    }
    form = "/Type /XObject /Subtype /Form /BBox [0 0 612 792]"
    for level in range(depth):
        number = 10 + level
        if level == depth - 1:
            content = b"BT /F1 12 Tf 72 720 Td (" + b"A" * leaf_chars + b") Tj ET"
            resources = "/Resources << /Font << /F1 3 0 R >> >>"
        else:
            content = b"/X Do " * fan_out
            resources = f"/Resources << /XObject << /X {number + 1} 0 R >> >>"
        objects[number] = _flate_stream(f"{form} {resources}", content)
    return _pdf_file(objects)


# ---- test tools ----------------------------------------------------------------------------


class AddTool(Tool):
    name = "add"
    description = "Add two numbers and return the sum."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        self.calls.append(arguments)
        total = arguments["a"] + arguments["b"]
        return str(int(total) if float(total).is_integer() else total)


class PriceTool(Tool):
    name = "price_of"
    description = "Look up the price of an item, in euros."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"item": {"type": "string"}},
        "required": ["item"],
    }
    PRICES: dict[str, int] = {"apple": 42, "pear": 17}  # noqa: RUF012

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return str(self.PRICES[arguments["item"]])


class BoomTool(Tool):
    name = "boom"
    description = "A tool with a bug: it always raises."
    parameters = {"type": "object", "properties": {}}  # noqa: RUF012

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raise RuntimeError("the flux capacitor is on fire")


class RendezvousTool(Tool):
    """Two calls (`who` = "a" and "b") that can only both succeed when they run at the same time:
    each announces itself, then waits for the other. Run one after the other, the first gives up
    after `patience` seconds and answers "alone"."""

    name = "rendezvous"
    description = "Meet the other caller."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"who": {"enum": ["a", "b"]}},
        "required": ["who"],
    }
    timeout_seconds = 10.0

    def __init__(self, patience: float = 3.0) -> None:
        self.patience = patience
        self.arrived = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        me = arguments["who"]
        other = "b" if me == "a" else "a"
        self.arrived[me].set()
        try:
            await asyncio.wait_for(self.arrived[other].wait(), self.patience)
        except TimeoutError:
            return f"{me}: alone"
        return f"{me}: met {other}"
