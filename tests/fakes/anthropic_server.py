"""A local fake of Anthropic's Messages API (`POST /v1/messages`) for tests and benchmarks.

Point the real SDK at it: `anthropic.AsyncAnthropic(api_key="test", base_url=server.base_url)`, or
set `llm.base_url` to `server.base_url`. Each request is answered by the next scripted reply, else
by the `responder`, else with a 400 that says nothing was scripted::

    async with FakeAnthropicServer() as server:
        server.script("Hello!")                                   # a text answer (end_turn)
        server.script(tool_calls=[("web_search", {"query": "x"})])  # a tool_use (id toolu_fake0001)
        server.script(error=529, retry_after=0.01, times=3)       # overloaded, three times
        server.script("slow", delay_seconds=0.5)                  # think for half a second first
        ...
        assert server.requests[1]["messages"][-1]["content"][0]["type"] == "tool_result"

    # One answer per request, e.g. for end-to-end runs:
    FakeAnthropicServer(responder=lambda body: f"echo: {last_user_text(body)}")

A responder returns an `AnthropicReply` or a string (a text answer); it may be async. Every
request body is kept in `server.requests` (headers in `server.request_headers`); wait for them with
`await server.wait_for_requests(n)`. Like the real API, the fake refuses (400) requests that break
its rules (empty text blocks, `tool_use` without a matching `tool_result` next, `tool_result` not
first, more than 4 `cache_control` blocks, tool blocks without `tools`...); pass `validate=False`
to switch that off. With `tool_choice: {"type": "none"}` scripted tool calls are dropped (the
model answers in text, `NO_TOOLS_TEXT` if the reply had none). It also
simulates prompt caching: a prefix up to a `cache_control` breakpoint that an earlier request
wrote is reported as `cache_read_input_tokens` (4 characters a token, no minimum length).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.fakes.scripted_server import (
    HTTPAnswer,
    Responder,
    ScriptedJSONServer,
    estimate_tokens,
)

# (name, input) or (name, input, id)
ScriptedToolCall = tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
ERROR_MESSAGES: dict[int, str] = {
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    429: "Number of request tokens has exceeded your per-minute rate limit.",
    500: "Internal server error",
    529: "Overloaded",
}
# The answer when a reply scripted with tool calls only meets `tool_choice: none`.
NO_TOOLS_TEXT = "(fake) Tools are switched off, so here is my answer in words."
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_MAX_CACHE_BREAKPOINTS = 4
_CACHE_LOOKBACK_BLOCKS = 20


@dataclass(frozen=True, slots=True)
class AnthropicReply:
    """One scripted answer: a message (text and/or tool calls) or, with `error`, an HTTP error."""

    text: str = ""
    tool_calls: Sequence[ScriptedToolCall] = ()
    stop_reason: str | None = None  # default: "tool_use" with tool calls, else "end_turn"
    usage: Mapping[str, int] | None = None  # overrides the estimated/simulated usage fields
    model: str | None = None  # default: the requested model
    error: int | None = None  # an HTTP status, e.g. 529, 429, 401, 400
    error_type: str | None = None  # default from the status, e.g. "overloaded_error"
    error_message: str | None = None
    retry_after: float | None = None  # sent as the `retry-after` header (seconds)
    delay_seconds: float | None = None  # default: the server's delay_seconds


class FakeAnthropicServer(ScriptedJSONServer[AnthropicReply]):
    """Speaks `POST /v1/messages`; `base_url` is the root URL the SDK expects."""

    route = "/v1/messages"

    def __init__(
        self,
        *,
        responder: Responder[AnthropicReply] | None = None,
        delay_seconds: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__(responder=responder, delay_seconds=delay_seconds, validate=validate)
        self._ids = itertools.count(1)
        self._cached_prefixes: set[str] = set()

    def script(
        self,
        text: str = "",
        *,
        tool_calls: Sequence[ScriptedToolCall] = (),
        stop_reason: str | None = None,
        usage: Mapping[str, int] | None = None,
        model: str | None = None,
        error: int | None = None,
        error_type: str | None = None,
        error_message: str | None = None,
        retry_after: float | None = None,
        delay_seconds: float | None = None,
        times: int = 1,
    ) -> AnthropicReply:
        """Queue a reply for the next `times` requests; returns it."""
        reply = AnthropicReply(
            text=text,
            tool_calls=tuple(tool_calls),
            stop_reason=stop_reason,
            usage=usage,
            model=model,
            error=error,
            error_type=error_type,
            error_message=error_message,
            retry_after=retry_after,
            delay_seconds=delay_seconds,
        )
        self.enqueue(reply, times=times)
        return reply

    # ---- answers -----------------------------------------------------------------------------

    def _render(self, reply: AnthropicReply | str, body: dict[str, Any]) -> HTTPAnswer:
        if isinstance(reply, str):
            reply = AnthropicReply(text=reply)
        request_id = f"req_fake{len(self.requests):06d}"
        if reply.error is not None:
            answer = self._error(
                reply.error,
                reply.error_message or ERROR_MESSAGES.get(reply.error, "error"),
                reply.error_type,
            )
            headers = dict(answer.headers)
            if reply.retry_after is not None:
                headers["retry-after"] = _seconds(reply.retry_after)
            return HTTPAnswer(answer.status, answer.body, headers)

        tool_calls = reply.tool_calls
        text = reply.text
        if _tools_switched_off(body):
            # With tool_choice none the model cannot call tools: it answers in words.
            tool_calls = ()
            text = text or NO_TOOLS_TEXT
        content: list[dict[str, Any]] = []
        if text:
            content.append({"type": "text", "text": text})
        for call in tool_calls:
            name, arguments = call[0], call[1]
            call_id = call[2] if len(call) > 2 else f"toolu_fake{next(self._ids):04d}"
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
        usage = self._usage(body, content)
        if reply.usage:
            usage.update(reply.usage)
        message = {
            "id": f"msg_fake{len(self.requests):06d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or body.get("model", ""),
            "content": content,
            "stop_reason": reply.stop_reason or ("tool_use" if tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        }
        return HTTPAnswer(200, message, {"request-id": request_id})

    def _error(self, status: int, message: str, error_type: str | None = None) -> HTTPAnswer:
        kind = error_type or ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        request_id = f"req_fake{len(self.requests):06d}"
        body = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": request_id,
        }
        return HTTPAnswer(status, body, {"request-id": request_id})

    def _usage(self, body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, int]:
        """Token counts, with prompt caching simulated from the request's breakpoints."""
        segments, breakpoints = _prompt_segments(body)
        digests = _prefix_digests(segments)
        total = estimate_tokens(segments)
        read_at = 0
        for breakpoint_at in breakpoints:
            for end in range(breakpoint_at, max(0, breakpoint_at - _CACHE_LOOKBACK_BLOCKS), -1):
                if digests[end] in self._cached_prefixes:
                    read_at = max(read_at, end)
                    break
        written_at = 0
        for breakpoint_at in breakpoints:
            if digests[breakpoint_at] not in self._cached_prefixes:
                self._cached_prefixes.add(digests[breakpoint_at])
                written_at = max(written_at, breakpoint_at)
        read = estimate_tokens(segments[:read_at]) if read_at else 0
        written = estimate_tokens(segments[:written_at]) - read if written_at > read_at else 0
        return {
            "input_tokens": max(1, total - read - written),
            "output_tokens": estimate_tokens(content),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }

    # ---- the API's rules ---------------------------------------------------------------------

    def _check(self, body: dict[str, Any]) -> HTTPAnswer | None:
        problem = _problem_with(body)
        return None if problem is None else self._error(400, problem)


def _problem_with(body: dict[str, Any]) -> str | None:
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        return "max_tokens: Input should be a valid integer greater than or equal to 1"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if (problem := _system_problem(body.get("system"))) is not None:
        return problem
    if (problem := _tools_problem(body.get("tools"))) is not None:
        return problem
    if (problem := _tool_choice_problem(body)) is not None:
        return problem
    if not body.get("tools") and any(
        isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result")
        for message in messages
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for block in message["content"]
    ):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    pending_ids: list[str] = []  # tool_use ids of the previous assistant turn
    for index, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        if not isinstance(content, list):
            return f"messages.{index}.content: Input should be a valid list"
        if not content and not (index == len(messages) - 1 and message["role"] == "assistant"):
            return (
                f"messages.{index}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        if (problem := _blocks_problem(f"messages.{index}", content)) is not None:
            return problem
        if pending_ids:
            leading = list(itertools.takewhile(lambda b: b.get("type") == "tool_result", content))
            answered = {block.get("tool_use_id") for block in leading}
            missing = [tool_id for tool_id in pending_ids if tool_id not in answered]
            if message["role"] != "user" or missing:
                return (
                    f"messages.{index - 1}: `tool_use` ids were found without `tool_result` "
                    f"blocks immediately after: {', '.join(missing or pending_ids)}. Each "
                    "`tool_use` block must have a corresponding `tool_result` block in the next "
                    "message."
                )
            if any(block.get("type") == "tool_result" for block in content[len(leading) :]):
                return (
                    f"messages.{index}: Did not find {len(pending_ids)} tool_result block(s) at "
                    "the beginning of this message. Messages following tool_use blocks must "
                    "begin with a matching number of tool_result blocks."
                )
        for block_index, block in enumerate(content):
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in pending_ids:
                return (
                    f"messages.{index}.content.{block_index}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` block "
                    "must have a corresponding `tool_use` block in the previous message."
                )
        pending_ids = [
            block.get("id", "")
            for block in content
            if message["role"] == "assistant" and block.get("type") == "tool_use"
        ]
    _, breakpoints = _prompt_segments(body)
    if len(breakpoints) > _MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(breakpoints)}."
        )
    return None


def _system_problem(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return None
    if not isinstance(system, list):
        return "system: Input should be a valid string or list"
    for index, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            return f"system.{index}: Input tag does not match the expected tag 'text'"
        if not block.get("text"):
            return "system: text content blocks must be non-empty"
    return None


def _tools_problem(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not _TOOL_NAME.match(str(tool.get("name", ""))):
            return (
                f"tools.{index}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
            )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{index}.custom.input_schema.type: Input should be 'object'"
    return None


def _tool_choice_problem(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if choice is None:
        return None
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        return "tool_choice: Input tag does not match any of 'auto', 'any', 'tool', 'none'"
    if not body.get("tools"):
        return "tool_choice may only be specified while providing tools."
    return None


def _blocks_problem(where: str, content: list[Any]) -> str | None:
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            return f"{where}.content.{index}: Input should be a valid dictionary"
        kind = block.get("type")
        if kind == "text":
            if not block.get("text"):
                return "messages: text content blocks must be non-empty"
            if not str(block["text"]).strip():
                return "messages: text content blocks must contain non-whitespace text"
        elif kind == "tool_use":
            if (
                not block.get("id")
                or not block.get("name")
                or not isinstance(block.get("input"), dict)
            ):
                return f"{where}.content.{index}.tool_use: id, name and input are required"
        elif kind == "tool_result":
            if not block.get("tool_use_id"):
                return f"{where}.content.{index}.tool_result.tool_use_id: Field required"
        elif kind not in ("image", "document", "thinking", "redacted_thinking"):
            return f"{where}.content.{index}: unknown content block type {kind!r}"
    return None


def _prompt_segments(body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """The prompt in cache order (tools, system, messages) as segments without cache_control,
    and the positions just after each segment that carried a breakpoint."""
    segments: list[Any] = []
    breakpoints: list[int] = []

    def add(item: Any, prefix: str) -> None:
        if isinstance(item, dict):
            plain = {key: value for key, value in item.items() if key != "cache_control"}
            segments.append([prefix, plain])
            if "cache_control" in item:
                breakpoints.append(len(segments))
        else:
            segments.append([prefix, item])

    for tool in body.get("tools") or []:
        add(tool, "tool")
    system = body.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        add(block, "system")
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or []:
            add(block, str(message.get("role")))
    return segments, breakpoints


def _prefix_digests(segments: list[Any]) -> list[str]:
    """digests[n] identifies segments[:n]."""
    running = hashlib.sha256()
    digests = [running.hexdigest()]
    for segment in segments:
        running.update(json.dumps(segment, sort_keys=True).encode())
        digests.append(running.hexdigest())
    return digests


def _tools_switched_off(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, dict) and choice.get("type") == "none"


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user turn of a request body (for echo responders)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [block.get("text", "") for block in content or [] if block.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return ""
