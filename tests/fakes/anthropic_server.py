"""A local fake of Anthropic's Messages API (`POST /v1/messages`) for tests and benchmarks.

Point the real SDK at it: `anthropic.AsyncAnthropic(api_key="test", base_url=server.base_url)`, or
set `llm.base_url` to `server.base_url`. Each request is answered by the next scripted reply, else
by the `responder`, else with a 400 that says nothing was scripted::

    async with FakeAnthropicServer() as server:
        server.script("Hello!")                                   # a text answer (end_turn)
        server.script(["Part one.", "Part two."])                 # two text blocks
        server.script(tool_calls=[("web_search", {"query": "x"})])  # a tool_use (id toolu_fake0001)
        server.script(error=529, retry_after=0.01, times=3)       # overloaded, three times
        server.script("slow", delay_seconds=0.5)                  # think for half a second first
        server.script("42", thinking="Let me add it up.")         # a signed thinking block first
        server.script(tool_calls=[("write", {})], stop_reason="max_tokens")  # a cut tool_use
        server.replay(FIXTURES_DIR / "pause_turn_web_search.json")  # a recorded body, as captured
        server.replay(FIXTURES_DIR / "error_prompt_too_long.json", status=400)
        server.replay("<html>502 Bad Gateway</html>", content_type="text/html")  # raw bytes
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
model answers in text, `NO_TOOLS_TEXT` if the reply had none).

Prompt caching is simulated and reported the way the API reports it (4 characters a token):
- The prompt is read in cache order — tools, then system, then messages — and each block with
  `cache_control` (at most 4, else a 400) caches the prefix up to and including it, per model.
- `cache_read_input_tokens` is the longest cached prefix found: at a breakpoint, or at one of the
  20 block boundaries before it (the API's lookback); only prefixes an earlier request wrote at
  a breakpoint are there to be found. `cache_creation_input_tokens` is what this request wrote
  beyond that, up to its last breakpoint; `input_tokens` is the rest (after the last breakpoint,
  at least 1), so the three add up to the prompt. The `cache_creation` breakdown by TTL is sent
  too.
- A prefix shorter than the model's minimum is neither written nor read. The fake's default
  minimum is 0 tokens, so tiny test prompts cache; `cache_minimum_tokens="per-model"` applies the
  API's documented minimums (`minimum_cacheable_tokens`: 1024 for Sonnet and older Opus, 2048
  for Haiku 3 and 3.5, 4096 for Haiku 4.5 and Opus 4.5/4.6).
- Entries live 5 minutes (`cache_control.ttl` "1h": an hour) from their last use, on the
  injected `clock` (seconds; default `time.monotonic`); a read or a breakpoint that matches
  refreshes them.
- Changing `tool_choice` or the `thinking` settings invalidates the cached messages, not the
  cached tools and system (as the API documents); changing a tool invalidates everything.

Extended thinking, as the real API does it (error wordings are the API's, as captured):
- A scripted `thinking` (or `redacted_thinking`) block is only sent when the request enables
  thinking, first in the content, with a `signature` (or `data`) the fake issues. Thinking blocks
  in recorded bodies replayed with `replay()` count as issued too.
- A request is refused when a thinking block comes back changed (its signature unknown, or its
  text not the one signed), a redacted block's data is unknown, a thinking block carries
  `cache_control`, `max_tokens` is not above `thinking.budget_tokens` (or the budget is under
  1024), `tool_choice` forces tool use, `temperature` is not 1, or, while the current turn is in a
  tool loop (its messages after the last user message without tool results hold a
  `tool_use`), the turn's first assistant message does not begin with a thinking block.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from tests.fakes.scripted_server import (
    HTTPAnswer,
    Responder,
    ScriptedJSONServer,
    estimate_tokens,
)
from tests.fakes.sse import anthropic_frames, send_frames

# Recorded Anthropic bodies (their origins are in the folder's README.md).
FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic"

# (name, input) or (name, input, id)
ScriptedToolCall = tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
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
    413: "Request exceeds the maximum size",
    429: "Number of request tokens has exceeded your per-minute rate limit.",
    500: "Internal server error",
    529: "Overloaded",
}
# The keys the fake takes by default: the ones the suite's and the benchmarks' configs carry
# (tests/conftest.py `make_config`: "test-key"; the SDK-level tests' "test", "sk-ant-test"...;
# cluster_support.py's "key-<process>"). Any other key is refused as the API refuses it (401
# authentication_error "invalid x-api-key", error_invalid_api_key.json); a test of its own key
# passes `api_keys`.
DEFAULT_API_KEYS = frozenset(
    {
        "test-key", "test", "sk-ant-test", "sk-ant-secret", "sk-ant-old-0000", "sk-test",
        "sk-test-cli-key", "k", "k-1", "x", "any-value-here", "bench-key", "soak-test-key",
        "sk-ant-api03-test-0123456789abcdef", "sk-test-0123456789abcdef",
        "sk-ant-yaml-0123456789abcd", "sk-dashboard-secret-5678", "key-a", "key-b", "key-c",
    }
)  # fmt: skip
# The models the fake serves by default: Anthropic's model ids and aliases (docs.claude.com,
# "Models overview") and those of Bruce's defaults. Any other is refused as the API refuses it
# (404 not_found_error "model: <name>", error_model_not_found.json).
DEFAULT_MODELS = frozenset(
    {
        "claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-5", "claude-opus-4-5-20251101",
        "claude-haiku-4-5", "claude-haiku-4-5-20251001", "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929", "claude-opus-4-1", "claude-opus-4-1-20250805",
        "claude-opus-4-0", "claude-opus-4-20250514", "claude-sonnet-4-0",
        "claude-sonnet-4-20250514", "claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219",
        "claude-3-5-haiku-latest", "claude-3-5-haiku-20241022", "claude-3-haiku-20240307",
    }
)  # fmt: skip
# The context window of every model listed (tokens, at the fake's 4 characters a token).
DEFAULT_CONTEXT_WINDOW = 200_000
# The answer when a reply scripted with tool calls only meets `tool_choice: none`.
NO_TOOLS_TEXT = "(fake) Tools are switched off, so here is my answer in words."
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_MAX_CACHE_BREAKPOINTS = 4
_CACHE_LOOKBACK_BLOCKS = 20
CACHE_TTL_SECONDS: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
# The minimum cacheable prompt by model, from Anthropic's prompt-caching docs (as quoted in
# anthropics/anthropic-sdk-python#1194); other models: 1024 (Sonnet 4.x/3.7, Opus 4/4.1).
_CACHE_MINIMUMS: tuple[tuple[str, int], ...] = (
    ("opus-4-5", 4096),
    ("opus-4-6", 4096),
    ("haiku-4-5", 4096),
    ("3-5-haiku", 2048),
    ("3-haiku", 2048),
    ("haiku-3", 2048),
)
_THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
_THINKING_TYPES = ("thinking", "redacted_thinking")
# Block types a request may carry besides text, tool_use and tool_result (server tools' blocks
# come back in assistant turns, e.g. after a pause_turn).
_OTHER_BLOCK_TYPES = frozenset(
    {
        "image",
        "document",
        "search_result",
        *_THINKING_TYPES,
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "container_upload",
        "mcp_tool_use",
        "mcp_tool_result",
    }
)


@dataclass(frozen=True, slots=True)
class AnthropicReply:
    """One scripted answer: a message (text and/or tool calls) or, with `error`, an HTTP error.

    With `raw`, the body is sent as given (a recorded body; `str`/`bytes` go out verbatim with
    `content_type`) and with `status`, instead of a message built from the other fields.
    """

    text: str | Sequence[str] = ""  # a sequence: one text block each
    tool_calls: Sequence[ScriptedToolCall] = ()
    stop_reason: str | None = None  # default: "tool_use" with tool calls, else "end_turn"
    usage: Mapping[str, int] | None = None  # overrides the estimated/simulated usage fields
    model: str | None = None  # default: the requested model
    error: int | None = None  # an HTTP status, e.g. 529, 429, 401, 400
    error_type: str | None = None  # default from the status, e.g. "overloaded_error"
    error_message: str | None = None
    retry_after: float | None = None  # sent as the `retry-after` header (seconds)
    delay_seconds: float | None = None  # default: the server's delay_seconds
    thinking: str | None = None  # a signed thinking block first (when the request thinks)
    redacted_thinking: bool = False  # a redacted_thinking block first (when the request thinks)
    blocks: Sequence[Mapping[str, Any]] = ()  # more content blocks, as given, after the text
    stop_details: Mapping[str, Any] | None = None  # e.g. a refusal's category
    raw: Any = None  # a whole body: a dict or list (sent as JSON), or str/bytes (verbatim)
    status: int = 200  # the HTTP status of a `raw` body
    content_type: str = "application/json"  # of a `raw` str/bytes body


@dataclass(frozen=True, slots=True)
class _VerbatimAnswer(HTTPAnswer):
    """An answer whose body bytes go out as they are (not necessarily JSON)."""

    payload: bytes = b""
    content_type: str = "application/json"
    extra: Mapping[str, str] = field(default_factory=dict)


def minimum_cacheable_tokens(model: str) -> int:
    """The shortest prompt prefix the API caches for `model`, in tokens."""
    return next((tokens for part, tokens in _CACHE_MINIMUMS if part in model), 1024)


@dataclass(frozen=True, slots=True)
class _CacheLayout:
    """A request's prompt in cache order: one segment per tool or block (without its
    `cache_control`), the position just after each breakpoint with its TTL, where the messages
    begin, and the settings whose change invalidates cached messages (tool choice, thinking)."""

    segments: list[Any]
    breakpoints: list[tuple[int, str]]
    messages_start: int
    message_settings: dict[str, Any]  # what else the cached messages depend on


def load_fixture(name: str) -> Any:
    """A recorded body from `tests/fixtures/anthropic/`, parsed."""
    return json.loads((FIXTURES_DIR / name).read_text(encoding="utf-8"))


class FakeAnthropicServer(ScriptedJSONServer[AnthropicReply]):
    """Speaks `POST /v1/messages`; `base_url` is the root URL the SDK expects."""

    route = "/v1/messages"

    def __init__(
        self,
        *,
        responder: Responder[AnthropicReply] | None = None,
        delay_seconds: float = 0.0,
        validate: bool = True,
        cache_minimum_tokens: int | Literal["per-model"] = 0,
        clock: Callable[[], float] = time.monotonic,
        api_keys: Collection[str] | None = DEFAULT_API_KEYS,
        models: Collection[str] | None = DEFAULT_MODELS,
        context_window: int | None = DEFAULT_CONTEXT_WINDOW,
    ) -> None:
        super().__init__(responder=responder, delay_seconds=delay_seconds, validate=validate)
        # What the API refuses before any script or responder is asked (None: anything goes).
        # Sets: a test may add its own (`server.models.add("claude-next")`).
        self.api_keys: set[str] | None = None if api_keys is None else set(api_keys)
        self.known_models: set[str] | None = None if models is None else set(models)
        self.context_window = context_window
        self._ids = itertools.count(1)
        self.cache_minimum_tokens = cache_minimum_tokens
        self._clock = clock
        self._cache: dict[str, tuple[float, float]] = {}  # prefix digest -> (expires at, ttl)
        self._pruned_at = float("-inf")
        self._signatures: dict[str, str] = {}  # signature -> the thinking text it signed
        self._redacted: set[str] = set()  # redacted_thinking data issued

    def script(
        self,
        text: str | Sequence[str] = "",
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
        thinking: str | None = None,
        redacted_thinking: bool = False,
        blocks: Sequence[Mapping[str, Any]] = (),
        stop_details: Mapping[str, Any] | None = None,
        times: int = 1,
    ) -> AnthropicReply:
        """Queue a reply for the next `times` requests; returns it."""
        reply = AnthropicReply(
            text=text if isinstance(text, str) else tuple(text),
            tool_calls=tuple(tool_calls),
            stop_reason=stop_reason,
            usage=usage,
            model=model,
            error=error,
            error_type=error_type,
            error_message=error_message,
            retry_after=retry_after,
            delay_seconds=delay_seconds,
            thinking=thinking,
            redacted_thinking=redacted_thinking,
            blocks=tuple(blocks),
            stop_details=stop_details,
        )
        self.enqueue(reply, times=times)
        return reply

    def replay(
        self,
        source: os.PathLike[str] | Mapping[str, Any] | Sequence[Any] | str | bytes,
        *,
        status: int = 200,
        content_type: str = "application/json",
        retry_after: float | None = None,
        delay_seconds: float | None = None,
        times: int = 1,
    ) -> AnthropicReply:
        """Queue a body to be sent as captured: a path (a JSON file, e.g. a fixture), a parsed
        body, or `str`/`bytes` sent verbatim. Thinking blocks in it count as issued by the fake,
        so sending them back unchanged passes the signature check."""
        raw: Any = source
        if isinstance(source, os.PathLike) and Path(source).suffix == ".sse":
            # A recorded event stream: sent as it is, whatever the request asked.
            raw, content_type = Path(source).read_bytes(), "text/event-stream"
        elif isinstance(source, os.PathLike):
            raw = json.loads(Path(source).read_text(encoding="utf-8"))
        reply = AnthropicReply(
            raw=copy.deepcopy(raw),
            status=status,
            content_type=content_type,
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
        headers = {"request-id": request_id}
        if reply.retry_after is not None:
            headers["retry-after"] = _seconds(reply.retry_after)
        if reply.raw is not None:
            return self._render_raw(reply, headers)
        if reply.error is not None:
            answer = self._error(
                reply.error,
                reply.error_message or ERROR_MESSAGES.get(reply.error, "error"),
                reply.error_type,
            )
            return HTTPAnswer(answer.status, answer.body, {**answer.headers, **headers})

        tool_calls = reply.tool_calls
        texts = [reply.text] if isinstance(reply.text, str) else list(reply.text)
        texts = [text for text in texts if text]
        if _tools_switched_off(body):
            # With tool_choice none the model cannot call tools: it answers in words.
            tool_calls = ()
            texts = texts or [NO_TOOLS_TEXT]
        content: list[dict[str, Any]] = []
        if _thinking_enabled(body):
            # Like the real model: no thinking blocks unless the request asks for thinking.
            if reply.thinking is not None:
                content.append(self._issue_thinking(reply.thinking))
            if reply.redacted_thinking:
                content.append(self._issue_redacted())
        content.extend({"type": "text", "text": text} for text in texts)
        content.extend(copy.deepcopy(dict(block)) for block in reply.blocks)
        for call in tool_calls:
            name, arguments = call[0], call[1]
            call_id = call[2] if len(call) > 2 else f"toolu_fake{next(self._ids):04d}"
            content.append(
                {"type": "tool_use", "id": call_id, "name": name, "input": dict(arguments)}
            )
        usage = self._usage(body, content)
        if reply.usage:
            usage.update(reply.usage)
        message: dict[str, Any] = {
            "id": f"msg_fake{len(self.requests):06d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or body.get("model", ""),
            "content": content,
            "stop_reason": reply.stop_reason or ("tool_use" if tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        }
        if reply.stop_details is not None:
            message["stop_details"] = dict(reply.stop_details)
        return HTTPAnswer(200, message, headers)

    def _render_raw(self, reply: AnthropicReply, headers: dict[str, str]) -> HTTPAnswer:
        raw = reply.raw
        if isinstance(raw, dict):
            body = copy.deepcopy(raw)
            self._register(body)
            return HTTPAnswer(reply.status, body, headers)
        if isinstance(raw, str):
            payload = raw.encode()
        elif isinstance(raw, bytes):
            payload = raw
        else:
            payload = json.dumps(raw).encode()
        return _VerbatimAnswer(
            reply.status, {}, headers, payload=payload, content_type=reply.content_type
        )

    def _issue_thinking(self, thinking: str) -> dict[str, Any]:
        digest = hashlib.sha256(f"{next(self._ids)}:{thinking}".encode()).hexdigest()
        signature = f"EfakeSig{digest}"
        self._signatures[signature] = thinking
        return {"type": "thinking", "thinking": thinking, "signature": signature}

    def _issue_redacted(self) -> dict[str, Any]:
        data = f"EfakeRedacted{hashlib.sha256(str(next(self._ids)).encode()).hexdigest()}"
        self._redacted.add(data)
        return {"type": "redacted_thinking", "data": data}

    def _register(self, body: dict[str, Any]) -> None:
        """Thinking blocks of a replayed body count as issued by this server."""
        content = body.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "thinking" and isinstance(block.get("signature"), str):
                self._signatures[block["signature"]] = str(block.get("thinking", ""))
            elif block.get("type") == "redacted_thinking" and isinstance(block.get("data"), str):
                self._redacted.add(block["data"])

    def _key_of(self, headers: Mapping[str, str]) -> str:
        # The SDK sends `x-api-key`, or (anthropic 2.x) the key as `Authorization: Bearer`.
        bearer = headers.get("Authorization", "")
        return headers.get("x-api-key") or bearer.removeprefix("Bearer ").strip()

    def _wrong_key(self, key: str) -> HTTPAnswer:
        return self._error(401, ERROR_MESSAGES[401])

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

    def _usage(self, body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
        """Token counts, with prompt caching simulated from the request's breakpoints."""
        layout = _cache_layout(body)
        digests = _prefix_digests(layout, str(body.get("model", "")))
        sizes = [_segment_tokens(segment) for segment in layout.segments]
        ends = list(itertools.accumulate(sizes, initial=0))  # ends[n]: tokens of segments[:n]
        now = self._clock()
        self._forget_expired(now)
        minimum = self._minimum(str(body.get("model", "")))

        def cached(digest: str) -> bool:
            return self._cache.get(digest, (0.0, 0.0))[0] > now

        read_at = 0
        for breakpoint_at, _ in layout.breakpoints:
            lookback = range(breakpoint_at, max(0, breakpoint_at - _CACHE_LOOKBACK_BLOCKS), -1)
            found = next((end for end in lookback if cached(digests[end])), 0)
            read_at = max(read_at, found)
        if read_at:
            expires, ttl = self._cache[digests[read_at]]
            self._cache[digests[read_at]] = (max(expires, now + ttl), ttl)
        written_at = read_at
        written_by_ttl = dict.fromkeys(CACHE_TTL_SECONDS, 0)
        for breakpoint_at, ttl in layout.breakpoints:
            if ends[breakpoint_at] < minimum:
                continue  # too short to cache: nothing written, nothing to read later
            seconds = CACHE_TTL_SECONDS[ttl]
            if breakpoint_at > written_at:
                written_by_ttl[ttl] += ends[breakpoint_at] - ends[written_at]
                written_at = breakpoint_at
            expires, _ = self._cache.get(digests[breakpoint_at], (0.0, seconds))
            self._cache[digests[breakpoint_at]] = (max(expires, now + seconds), seconds)
        read = ends[read_at]
        written = ends[written_at] - read
        return {
            "input_tokens": max(1, ends[-1] - read - written),  # at least the turn's framing
            "output_tokens": estimate_tokens(content),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
            "cache_creation": {
                "ephemeral_5m_input_tokens": written_by_ttl["5m"],
                "ephemeral_1h_input_tokens": written_by_ttl["1h"],
            },
        }

    def _minimum(self, model: str) -> int:
        if self.cache_minimum_tokens == "per-model":
            return minimum_cacheable_tokens(model)
        return self.cache_minimum_tokens

    def _forget_expired(self, now: float) -> None:
        """Drop expired entries, at most once a clock second (a long soak makes many)."""
        if now - self._pruned_at < 1.0:
            return
        self._pruned_at = now
        expired = [digest for digest, (expires, _) in self._cache.items() if expires <= now]
        for digest in expired:
            del self._cache[digest]

    # ---- serving -----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        # As the base class does, but a verbatim answer keeps its own bytes and content type.
        try:
            body = await request.json()
        except ValueError:
            body = None
        async with self._received:
            self.requests.append(body if isinstance(body, dict) else {})
            self.request_headers.append(dict(request.headers))
            self._received.notify_all()
        refusal = self._refusal(request.headers, body)
        answer = refusal if refusal is not None else await self._answer(body)
        if (
            isinstance(body, dict)
            and body.get("stream") is True
            and not isinstance(answer, _VerbatimAnswer)
            and answer.status == 200
        ):
            # Asked as a stream: the same answer, as the events the API sends for it.
            return await send_frames(
                request,
                anthropic_frames(answer.body),
                headers=answer.headers,
                pause_seconds=self.stream_pause_seconds,
            )
        if isinstance(answer, _VerbatimAnswer):
            return web.Response(
                body=answer.payload,
                status=answer.status,
                headers=dict(answer.headers),
                content_type=answer.content_type,
            )
        return web.json_response(answer.body, status=answer.status, headers=dict(answer.headers))

    # ---- the API's rules ---------------------------------------------------------------------

    def _refusal(self, headers: Mapping[str, str], body: Any) -> HTTPAnswer | None:
        """What the API answers before the model sees the request: a key it does not know
        (401), a model it does not serve (404), a prompt longer than the context window (400),
        in that order, with the API's bodies (tests/fixtures/anthropic/error_*.json)."""
        if self.api_keys is not None and self._key_of(headers) not in self.api_keys:
            return self._error(401, ERROR_MESSAGES[401])
        if not isinstance(body, dict):
            return None
        model = body.get("model")
        if self.known_models is not None and isinstance(model, str):
            if model not in self.known_models:
                return self._error(404, f"model: {model}")
        if self.context_window is not None and isinstance(body.get("messages"), list):
            prompt = prompt_tokens(body)
            window = self.context_window
            if prompt > window:
                return self._error(400, f"prompt is too long: {prompt} tokens > {window} maximum")
            max_tokens = body.get("max_tokens")
            if isinstance(max_tokens, int) and prompt + max_tokens > window:
                return self._error(
                    400,
                    f"input length and `max_tokens` exceed context limit: {prompt} + "
                    f"{max_tokens} > {window}, decrease input length or `max_tokens` and try "
                    "again",
                )
        return None

    def _check(self, body: dict[str, Any]) -> HTTPAnswer | None:
        problem = _problem_with(body)
        if problem is None:
            problem = self._thinking_problem(body)
        return None if problem is None else self._error(400, problem)

    def _thinking_problem(self, body: dict[str, Any]) -> str | None:
        thinking = body.get("thinking")
        if thinking is not None:
            if not isinstance(thinking, dict) or thinking.get("type") not in (
                "enabled",
                "disabled",
                "adaptive",
            ):
                return (
                    "thinking: Input tag does not match any of the expected tags: 'enabled', "
                    "'disabled', 'adaptive'"
                )
            if thinking["type"] == "enabled":
                budget = thinking.get("budget_tokens")
                if not isinstance(budget, int):
                    return "thinking.enabled.budget_tokens: Field required"
                if budget < 1024:
                    return (
                        "thinking.enabled.budget_tokens: Input should be greater than or "
                        "equal to 1024"
                    )
                if body["max_tokens"] <= budget:
                    return (
                        "`max_tokens` must be greater than `thinking.budget_tokens`. Please "
                        f"consult our documentation at {_THINKING_DOCS}"
                        "#max-tokens-and-context-window-size"
                    )
        if _thinking_enabled(body):
            choice = body.get("tool_choice")
            if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
                return "Thinking may not be enabled when tool_choice forces tool use."
            temperature = body.get("temperature")
            if temperature is not None and temperature != 1:
                return (
                    "`temperature` may only be set to 1 when thinking is enabled. Please consult "
                    f"our documentation at {_THINKING_DOCS}"
                    "#important-considerations-when-using-extended-thinking"
                )
            if (problem := _tool_loop_thinking_problem(body["messages"])) is not None:
                return problem
        for index, message in enumerate(body["messages"]):
            content = message.get("content")
            for block_index, block in enumerate(content if isinstance(content, list) else []):
                kind = block.get("type")
                if kind not in _THINKING_TYPES:
                    continue
                where = f"messages.{index}.content.{block_index}"
                if "cache_control" in block:
                    return f"{where}.{kind}.cache_control: Extra inputs are not permitted"
                if kind == "thinking":
                    signature = block.get("signature")
                    signed = self._signatures.get(signature) if isinstance(signature, str) else None
                    if signed is None or signed != block.get("thinking"):
                        return f"{where}: Invalid `signature` in `thinking` block"
                elif block.get("data") not in self._redacted:
                    # Not seen captured; worded like the signature error.
                    return f"{where}: Invalid `data` in `redacted_thinking` block"
        return None


def _thinking_enabled(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _tool_loop_thinking_problem(messages: list[dict[str, Any]]) -> str | None:
    """With thinking on, a turn in a tool loop must begin with the thinking it was given."""

    def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
        content = message.get("content")
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        return content if isinstance(content, list) else []

    turn_start = 0
    for index, message in enumerate(messages):
        # A user message with tool results goes on with the turn, even with text beside them.
        if message.get("role") == "user" and all(
            block.get("type") != "tool_result" for block in blocks(message)
        ):
            turn_start = index + 1
    turn = list(enumerate(messages))[turn_start:]
    assistants = [(index, message) for index, message in turn if message["role"] == "assistant"]
    in_tool_loop = any(
        block.get("type") == "tool_use" for _, message in assistants for block in blocks(message)
    )
    if not in_tool_loop:
        return None
    index, first = assistants[0]
    found = (blocks(first) or [{"type": "nothing"}])[0].get("type")
    if found in _THINKING_TYPES:
        return None
    return (
        f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        f"`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
        "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
        "recommend you include thinking blocks from previous turns. To avoid this requirement, "
        f"disable `thinking`. Please consult our documentation at {_THINKING_DOCS}"
    )


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
    breakpoints = _cache_layout(body).breakpoints
    if len(breakpoints) > _MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(breakpoints)}."
        )
    ttls = [ttl for _, ttl in breakpoints]
    if "1h" in ttls and "5m" in ttls[: len(ttls) - ttls[::-1].index("1h")]:
        return (
            "A cache_control with ttl='1h' must not come after one with ttl='5m' (tools, then "
            "system, then messages)."
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
        elif kind == "image":
            problem = _image_problem(f"{where}.content.{index}.image", block.get("source"))
            if problem:
                return problem
        elif kind not in _OTHER_BLOCK_TYPES:
            return f"{where}.content.{index}: unknown content block type {kind!r}"
    return None


IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # of the base64 text, as the API counts
MAX_IMAGE_EDGE = 8000


def _image_problem(where: str, source: Any) -> str | None:
    """An image block's source as the Messages API checks it: base64 of a JPEG/PNG/GIF/WebP,
    of the type it claims, at most 5 MB and 8000 px per edge."""
    if not isinstance(source, dict) or source.get("type") != "base64":
        return f"{where}.source: Input tag does not match any of the expected tags"
    media_type, data = source.get("media_type"), source.get("data")
    if media_type not in IMAGE_MEDIA_TYPES:
        return f"{where}.source.base64.media_type: Input should be {', '.join(IMAGE_MEDIA_TYPES)}"
    if not isinstance(data, str) or not data:
        return f"{where}.source.base64.data: Field required"
    if len(data) > MAX_IMAGE_BYTES:
        return (
            f"{where}.source.base64: image exceeds 5 MB maximum: {len(data)} bytes > 5242880 bytes"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return f"{where}.source.base64.data: invalid base64 data"
    signatures = {
        "image/jpeg": (b"\xff\xd8\xff",),
        "image/png": (b"\x89PNG\r\n\x1a\n",),
        "image/gif": (b"GIF87a", b"GIF89a"),
        "image/webp": (b"RIFF",),
    }
    if not raw.startswith(signatures[media_type]):
        return (
            f"{where}.source.base64.data: Image does not match the provided media type {media_type}"
        )
    return None


def images_of(body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(media type, decoded bytes) of every image block of the request's user turns."""
    return [
        (block["source"]["media_type"], base64.b64decode(block["source"]["data"]))
        for message in body.get("messages", [])
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    ]


def _cache_layout(body: dict[str, Any]) -> _CacheLayout:
    segments: list[Any] = []
    breakpoints: list[tuple[int, str]] = []

    def add(item: Any, prefix: str) -> None:
        if isinstance(item, dict):
            plain = {key: value for key, value in item.items() if key != "cache_control"}
            segments.append([prefix, plain])
            control = item.get("cache_control")
            if control is not None:
                ttl = control.get("ttl", "5m") if isinstance(control, dict) else "5m"
                breakpoints.append((len(segments), ttl if ttl in CACHE_TTL_SECONDS else "5m"))
        else:
            segments.append([prefix, item])

    for tool in body.get("tools") or []:
        add(tool, "tool")
    system = body.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        add(block, "system")
    messages_start = len(segments)
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or []:
            add(block, str(message.get("role")))
    settings = {"tool_choice": body.get("tool_choice"), "thinking": body.get("thinking")}
    return _CacheLayout(segments, breakpoints, messages_start, settings)


def _prefix_digests(layout: _CacheLayout, model: str) -> list[str]:
    """digests[n] identifies segments[:n] for `model`. The settings that invalidate cached
    messages (tool choice, thinking) count for the prefixes that reach into the messages.

    Each segment counts as it was sent, key order included (no `sort_keys`): the API caches
    the exact prompt, so a prefix whose keys come in another order from one request to the
    next (a tool schema rebuilt from a set, a dict merged the other way) is a cache miss there,
    and here."""
    running = hashlib.sha256(model.encode())
    digests = [running.hexdigest()]
    for index, segment in enumerate(layout.segments):
        if index == layout.messages_start:
            running.update(json.dumps(layout.message_settings).encode())
        running.update(json.dumps(segment, ensure_ascii=False).encode())
        digests.append(running.hexdigest())
    return digests


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt's length in the fake's tokens (4 characters a token): what the usage fields
    add up to, and what the context window is checked against."""
    return sum(_segment_tokens(segment) for segment in _cache_layout(body).segments)


def _segment_tokens(segment: Any) -> int:
    return max(1, len(json.dumps(segment, ensure_ascii=False)) // 4)


def _tools_switched_off(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, dict) and choice.get("type") == "none"


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def is_temporal_context(block: Any) -> bool:
    """Bruce's temporal layer, which its requests carry at the end of the newest user turn that
    says something (after the cache breakpoints, bruce_bot/llm/anthropic.py): not the user's
    words."""
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and str(block.get("text", "")).startswith("<temporal_context>")
    )


def last_user_text(body: dict[str, Any]) -> str:
    """What the user wrote in the last user turn of a request body (for echo responders)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [
            block.get("text", "")
            for block in content or []
            if block.get("type") == "text" and not is_temporal_context(block)
        ]
        if texts:
            return "\n".join(texts)
    return ""
