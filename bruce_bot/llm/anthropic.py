"""The Anthropic Messages API behind `LLMService`: the only module that imports the `anthropic` SDK.

It turns Bruce's neutral conversation into Anthropic's shape (alternating user/assistant turns,
`tool_use` and `tool_result` blocks, tool results first in their user turn), lays the prompt out
for prompt caching (below), and reads the answer. The call itself (timing, logs, the SDK's
failures mapped onto the core's errors) is `call.py`'s, shared with every provider. Retries with
exponential backoff and `retry-after` are the SDK's job (`max_retries` from the config); this
module never loops on its own.

Prompt caching. The API caches the prompt in the order tools → system → messages, up to each
block marked `cache_control` (at most 4), and a prefix is only read back if it is byte for byte
what an earlier request sent. So:
- The system holds only the stable layers: the first layer (what every conversation of this
  deployment shares: the base prompt and the tool guidelines, see `agent/context.py`) is a block
  and a breakpoint of its own, so that a changed summary or goal still reads tools and base from
  the cache; the other stable layers form a second block with the second breakpoint.
- The volatile layers (the temporal context: the time, which changes every turn) go after the
  breakpoints: as a text block at the end of the newest user turn that says something (not one
  of tool results only), so within a turn every call of the agent loop sends them unchanged.
  Only when no user turn has text do they stay in the system, after its blocks.
- In the conversation, one breakpoint marks the newest block (what the next call of the loop,
  or the next exchange, will find cached) and one the block where the previous request's newest
  breakpoint was — the conversation as it stood before the model's last answer — so a growing
  conversation reads all of it back, whatever the API's 20-block lookback would have found.
  Thinking blocks never carry one (the API refuses it); the breakpoint moves to the block before.

Calls go through the SDK's client (`AsyncAnthropic`: its retries, headers, timeouts and error
classes) on its raw path: the body is serialised once into bytes (`client.post(...,
content=...)`) rather than copied and re-serialised by the SDK, and the answer's JSON is read
into Bruce's own types rather than into the SDK's pydantic models, which cost more CPU than the
rest of the call (bench/anthropic_call.py).

Answers are read as real servers send them:
- `stop_reason` becomes a `StopReason`: end_turn and stop_sequence are end_turn, max_tokens and
  model_context_window_exceeded are max_tokens, tool_use, pause_turn and refusal keep their names;
  a missing reason is end_turn for a plain text answer, anything else (or unknown) is other.
- Text blocks are joined with `join_text_parts`, so pieces around citations read as one text.
- Thinking (`thinking`, `redacted_thinking`) never reaches the text. A response holding thinking
  blocks, and any `pause_turn` response, carries its whole content in `replay_blocks`, block by
  block as the server sent it (the fields it received, nothing added), so the assistant turn
  goes back unchanged within the turn: signatures and all.
- When the output was cut (max_tokens, or a refusal that stopped it), the last `tool_use` was being
  written: its call gets `arguments=None` (the input that arrived stays in `raw_arguments`).
- Unknown block types (a newer API) are skipped for the text (kept in `replay_blocks` when the
  turn pauses) and logged with the response id; an answer that is not a message (not JSON, no
  content list) is "invalid response".

Streaming. Given a text sink (`complete(stream=...)`) and `llm.stream` on, the request asks for
`"stream": true`; the SDK's stream reads the server-sent events and `anthropic_stream.py` puts
the message back together, read by the same code as a whole answer (so the response is the
same), while each text delta goes to the sink.

`llm.thinking` applies to the main model only (`complete(model=None)`), and only when the call's
`max_tokens` is above the thinking budget (the API requires it); `force_text` still works with it
(`tool_choice: none` is one of the two choices thinking allows).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import json
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Final, cast

import structlog

from bruce_bot.config import LLMConfig
from bruce_bot.domain import (
    ChatMessage,
    ImagePart,
    LLMResponse,
    StopReason,
    SystemPrompt,
    ToolCall,
    ToolSpec,
    Usage,
)
from bruce_bot.llm.anthropic_stream import MessageAssembler
from bruce_bot.llm.base import LLMRequest, LLMUnavailableError, TextSink
from bruce_bot.llm.call import SDKErrors, call_model
from bruce_bot.llm.errors import ErrorReply, error_for_reply
from bruce_bot.llm.text import join_text_parts

# The SDK loads its optional aiohttp transport (and with it aiohttp: ~8 MB of the daemon's
# memory) whenever aiohttp is installed, which discord.py makes it; Bruce never uses that
# transport. Marked as absent, it is skipped the way the SDK skips it without aiohttp.
# (None in sys.modules is the import system's own "not available" mark.)
_AIOHTTP_TRANSPORT = "anthropic._vendor.httpx_aiohttp"
_modules = cast("dict[str, ModuleType | None]", sys.modules)
if "anthropic" not in _modules:
    _modules.setdefault(_AIOHTTP_TRANSPORT, None)
try:
    import anthropic
except ImportError:  # an SDK that cannot do without it after all: loaded whole, as it comes
    if _AIOHTTP_TRANSPORT in _modules and _modules[_AIOHTTP_TRANSPORT] is None:
        del _modules[_AIOHTTP_TRANSPORT]
    import anthropic

log = structlog.get_logger(__name__)

_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
# Blocks that are part of an answer but not its text or its tool calls (server tools' blocks).
_NON_TEXT_TYPES = frozenset(
    {
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
# Blocks that may carry a cache breakpoint (thinking blocks may not; unknown ones are not risked).
_CACHEABLE_TYPES = frozenset(
    {
        "text",
        "image",
        "document",
        "search_result",
        "tool_use",
        "tool_result",
        "server_tool_use",
        "container_upload",
        "mcp_tool_use",
    }
)
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
}
_SDK_ERRORS = SDKErrors.of(anthropic)
# The HTTP status each error type stands for, when it comes as an event inside a stream.
_STREAM_ERROR_STATUS: Final = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "api_error": 500,
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
}
_MESSAGES_PATH: Final = "/v1/messages"
# The SDK hands the answer back as it came (not parsed into its models) for this `cast_to`.
_RAW_ANSWER: Final = anthropic.AsyncAPIResponse[bytes]


def _bytes(params: dict[str, Any]) -> bytes:
    """The request body, serialised once (the SDK sends bytes as they are)."""
    return json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode()


class AnthropicLLM:
    """Claude through `anthropic.AsyncAnthropic`, configured from the `llm` section."""

    def __init__(self, config: LLMConfig) -> None:
        self._config = config
        self._client = anthropic.AsyncAnthropic(
            api_key=config.api_key,
            base_url=config.base_url or None,
            timeout=config.timeout_seconds,
            max_retries=config.max_retries,
        )

    @property
    def model(self) -> str:
        return self._config.model

    async def complete(self, request: LLMRequest) -> LLMResponse:
        model_name = request.model or self._config.model
        output_limit = request.max_tokens or self._config.max_tokens
        thinking = self._thinking(main_model=request.model is None, output_limit=output_limit)
        params = build_request(
            request.system,
            request.messages,
            request.tools,
            model=model_name,
            max_tokens=output_limit,
            force_text=request.force_text,
            thinking=thinking,
        )
        if request.stream is not None and self._config.stream:
            return await call_model(
                _SDK_ERRORS,
                functools.partial(self._post_streaming, params, request.stream),
                from_anthropic_message,
                model=model_name,
                secret=self._config.api_key,
                thinking=thinking is not None,
                streamed=True,
            )
        return await call_model(
            _SDK_ERRORS,
            functools.partial(self._post, params),
            read_message,
            model=model_name,
            secret=self._config.api_key,
            thinking=thinking is not None,
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def _post(self, params: dict[str, Any]) -> bytes:
        """The answer's body, as received, to one Messages API request (SDK errors propagate)."""
        response = await self._client.post(
            _MESSAGES_PATH, content=_bytes(params), cast_to=_RAW_ANSWER
        )
        return await response.read()

    async def _post_streaming(self, params: dict[str, Any], sink: TextSink) -> dict[str, Any]:
        """The answer to one request with `"stream": true`, put back together from its events
        (anthropic_stream.py) while its text goes to `sink`. The SDK's stream reads the events
        (skipping pings, raising an `error` event as its status error) and hands them over as
        parsed JSON (`cast_to=object`), not as its models."""
        body = {**params, "stream": True}
        assembler = MessageAssembler()
        events = await self._client.post(
            _MESSAGES_PATH,
            content=_bytes(body),
            cast_to=object,
            stream=True,
            stream_cls=anthropic.AsyncStream[object],
        )
        try:
            async with events:
                async for event in events:
                    if text := assembler.add(event):
                        await sink(text)
        except anthropic.APIStatusError as exc:
            if exc.status_code != 200:
                raise
            # An `error` event after the 200 (overloaded mid-answer): read as its status would be.
            error = exc.body.get("error") if isinstance(exc.body, dict) else None
            kind = error.get("type") if isinstance(error, dict) else None
            status = _STREAM_ERROR_STATUS.get(str(kind), 500)
            reply = ErrorReply.from_body(status, exc.body, str(exc.message))
            raise error_for_reply(
                reply, model=str(params.get("model", "")), secret=self._config.api_key
            ) from exc
        return assembler.finished()

    def _thinking(self, *, main_model: bool, output_limit: int) -> dict[str, Any] | None:
        settings = self._config.thinking
        if not (main_model and settings.enabled):
            return None
        if output_limit <= settings.budget_tokens:
            # The API refuses max_tokens <= budget_tokens: such a short call goes without.
            log.debug(
                "llm_thinking_skipped",
                max_tokens=output_limit,
                budget_tokens=settings.budget_tokens,
            )
            return None
        return {"type": "enabled", "budget_tokens": settings.budget_tokens}


def build_request(
    system: SystemPrompt,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec] = (),
    *,
    model: str,
    max_tokens: int,
    force_text: bool = False,
    thinking: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Messages API request body, laid out for prompt caching (see the module docstring)."""
    turns = to_anthropic_messages(messages)
    volatile = "\n\n".join(part for part in system.volatile if part)
    anchor = _volatile_anchor(turns) if volatile.strip() else None
    if anchor is not None:
        # After every breakpoint of that turn: its own last block carries one if it is the newest.
        turns[anchor]["content"].append({"type": "text", "text": volatile})
    params: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": turns}
    system_blocks = to_anthropic_system(system, with_volatile=anchor is None)
    if system_blocks:
        params["system"] = system_blocks
    if tools:
        # Declared even when forcing text: the history may hold tool_use blocks.
        params["tools"] = to_anthropic_tools(tools)
        if force_text:
            params["tool_choice"] = {"type": "none"}
    if thinking is not None:
        params["thinking"] = thinking
    return params


def to_anthropic_system(
    system: SystemPrompt, *, with_volatile: bool = True
) -> list[dict[str, Any]]:
    """The stable layers as up to two cached blocks: the first layer, then the others; then,
    `with_volatile`, the volatile layers in a last block without a breakpoint."""
    stable = [part for part in system.stable if part.strip()]
    groups = [stable[:1], stable[1:]]
    blocks = [
        {"type": "text", "text": "\n\n".join(group), "cache_control": dict(_EPHEMERAL)}
        for group in groups
        if group
    ]
    volatile = "\n\n".join(part for part in system.volatile if part)
    if with_volatile and volatile.strip():
        blocks.append({"type": "text", "text": volatile})
    return blocks


def to_anthropic_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Translate neutral messages into alternating Anthropic turns with block content.

    Consecutive messages of one role are merged into one turn; within a user turn the
    `tool_result` blocks come first, as the API requires. Empty text is dropped. An assistant
    message with `replay_blocks` is sent as those blocks (copies, in their order). Two blocks
    carry the conversation's cache breakpoints: the newest one that may (never a thinking
    block), and the one that was the newest before the model's last answer.
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        blocks = _blocks_of(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": message.role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # A stable sort: tool results first, the rest keeps its order.
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    _mark_cache_breakpoints(turns)
    return turns


def _blocks_of(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "assistant" and message.replay_blocks:
        # As the server sent them: thinking signatures must come back unchanged. A shallow copy
        # is enough, as only a `cache_control` key is ever added, at the top of a block.
        return [dict(block) for block in message.replay_blocks]
    blocks: list[dict[str, Any]] = []
    for result in message.tool_results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
        if result.content:
            block["content"] = result.content
        if result.is_error:
            block["is_error"] = True
        blocks.append(block)
    # Pictures before the words about them, as Anthropic advises.
    blocks += [_image_block(image) for image in message.images]
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": call.arguments if call.arguments is not None else {},
            }
        )
    return blocks


def _image_block(image: ImagePart) -> dict[str, Any]:
    data = base64.b64encode(image.data).decode("ascii")
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type, "data": data},
    }


def _mark_cache_breakpoints(turns: list[dict[str, Any]]) -> None:
    """The newest cacheable block, and the newest one before the last assistant turn: the
    previous request ended there (the one before the model's last answer), so what it cached
    is found again however many blocks that answer added."""
    marked = [_newest_cacheable(turns)]
    last_answer = next(
        (index for index in range(len(turns) - 1, -1, -1) if turns[index]["role"] == "assistant"),
        None,
    )
    if last_answer is not None:
        marked.append(_newest_cacheable(turns[:last_answer]))
    for block in marked:
        if block is not None:
            block["cache_control"] = dict(_EPHEMERAL)


def _newest_cacheable(turns: list[dict[str, Any]]) -> dict[str, Any] | None:
    for turn in reversed(turns):
        for block in reversed(turn["content"]):
            if _accepts_cache_control(block):
                return block
    return None


def _volatile_anchor(turns: list[dict[str, Any]]) -> int | None:
    """The newest user turn that says something besides tool results: the one the current
    turn of the conversation began with (calls of the agent loop only add tool rounds after it)."""
    for index in range(len(turns) - 1, -1, -1):
        turn = turns[index]
        if turn["role"] == "user" and any(b["type"] != "tool_result" for b in turn["content"]):
            return index
    return None


def _accepts_cache_control(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if not isinstance(kind, str):
        return False
    if kind == "text":
        return isinstance(block.get("text"), str) and bool(block["text"].strip())
    return kind in _CACHEABLE_TYPES or (kind.endswith("_tool_result") and kind != "tool_result")


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in tools
    ]


def read_message(body: bytes) -> LLMResponse:
    """The core's view of a Messages API answer's body; a body that is not JSON raises
    ValueError, which `call.py` reports as an invalid response."""
    return from_anthropic_message(json.loads(body))


def from_anthropic_message(message: object) -> LLMResponse:
    """The core's view of a Messages API answer (parsed JSON); `LLMUnavailableError` if it is
    not one."""
    if not isinstance(message, dict):
        raise LLMUnavailableError(
            "invalid response", f"expected a message, got {type(message).__name__}"
        )
    response_id = _string(message.get("id"))
    content = message.get("content")
    if not isinstance(content, list):
        raise LLMUnavailableError("invalid response", f"message {response_id} has no content")

    texts: list[str] = []
    calls: list[ToolCall] = []
    skipped: list[str] = []
    thinking = False
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and (call := _tool_call(block)) is not None:
            calls.append(call)
        elif kind in _NON_TEXT_TYPES:
            thinking = thinking or kind in _THINKING_TYPES
        else:
            skipped.append(str(kind))

    raw_reason = message.get("stop_reason")
    raw_reason = raw_reason if isinstance(raw_reason, str) else None
    stop_reason = normalise_stop_reason(
        raw_reason, has_text=bool(texts), has_tool_calls=bool(calls)
    )
    if stop_reason == "other":
        log.info("llm_unusual_stop_reason", response_id=response_id, stop_reason=raw_reason)
    if stop_reason in ("max_tokens", "refusal") and calls:
        # The output stopped while the last call's input was being written: never run it as is.
        calls[-1] = dataclasses.replace(calls[-1], arguments=None)
    replay: tuple[dict[str, Any], ...] = ()
    if thinking or stop_reason == "pause_turn":
        # Parsed from this answer's own bytes: nothing else holds these dicts.
        replay = tuple(block for block in content if isinstance(block, dict))
    if skipped:
        log.warning(
            "llm_blocks_skipped",
            provider="anthropic",
            response_id=response_id,
            block_types=skipped,
            kept_for_replay=bool(replay),
        )
    return LLMResponse(
        text=join_text_parts(texts),
        tool_calls=tuple(calls),
        stop_reason=stop_reason,
        usage=_usage_of(message.get("usage")),
        model=_string(message.get("model")),
        response_id=response_id,
        replay_blocks=replay,
    )


def normalise_stop_reason(
    reason: str | None, *, has_text: bool, has_tool_calls: bool
) -> StopReason:
    """Anthropic's `stop_reason` in the core's words (see the module docstring)."""
    if reason is None:
        # Some gateways leave it out of a finished answer; a call without a reason is not trusted.
        return "end_turn" if has_text and not has_tool_calls else "other"
    return _STOP_REASONS.get(reason, "other")


def _tool_call(block: dict[str, Any]) -> ToolCall | None:
    call_id, name = block.get("id"), block.get("name")
    if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
        return None  # no id to answer or no tool to run: not a usable call
    arguments = block.get("input")
    try:
        raw = json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        raw = str(arguments)
    return ToolCall(
        id=call_id,
        name=name,
        # A copy: the block itself may go back to the API in `replay_blocks`, as it came.
        arguments=copy.deepcopy(arguments) if isinstance(arguments, dict) else None,
        raw_arguments=raw,
    )


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _usage_of(usage: object) -> Usage:
    def count(name: str) -> int:
        value = usage.get(name) if isinstance(usage, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return Usage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_read_tokens=count("cache_read_input_tokens"),
        cache_write_tokens=count("cache_creation_input_tokens"),
    )
