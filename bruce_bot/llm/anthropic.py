"""The Anthropic Messages API behind `LLMService`: the only module that imports the `anthropic` SDK.

It turns Bruce's neutral conversation into Anthropic's shape (alternating user/assistant turns,
`tool_use` and `tool_result` blocks, tool results first in their user turn), marks two prompt-cache
breakpoints (the stable system layers, and the end of the conversation so the agent loop's growing
prefix is reused from one call to the next), and reads the answer. The call itself (timing, logs,
the SDK's failures mapped onto the core's errors) is `call.py`'s, shared with every provider.
Retries with exponential backoff and `retry-after` are the SDK's job (`max_retries` from the
config); this module never loops on its own.

Answers are read as real servers send them:
- `stop_reason` becomes a `StopReason`: end_turn and stop_sequence are end_turn, max_tokens and
  model_context_window_exceeded are max_tokens, tool_use, pause_turn and refusal keep their names;
  a missing reason is end_turn for a plain text answer, anything else (or unknown) is other.
- Text blocks are joined with `join_text_parts`, so pieces around citations read as one text.
- Thinking (`thinking`, `redacted_thinking`) never reaches the text. A response holding thinking
  blocks, and any `pause_turn` response, carries its whole content in `replay_blocks`, block by
  block as the server sent it (the SDK's `to_dict()`: the fields it received, nothing added), so
  the assistant turn goes back unchanged within the turn: signatures and all.
- When the output was cut (max_tokens, or a refusal that stopped it), the last `tool_use` was being
  written: its call gets `arguments=None` (the input that arrived stays in `raw_arguments`).
- Unknown block types (a newer API) are skipped for the text (kept in `replay_blocks` when the
  turn pauses) and logged with the response id; an answer the SDK cannot read is "invalid
  response".

`llm.thinking` applies to the main model only (`complete(model=None)`), and only when the call's
`max_tokens` is above the thinking budget (the API requires it); `force_text` still works with it
(`tool_choice: none` is one of the two choices thinking allows).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Any

import anthropic
import structlog

from bruce_bot.config import LLMConfig
from bruce_bot.domain import (
    ChatMessage,
    LLMResponse,
    StopReason,
    SystemPrompt,
    ToolCall,
    ToolSpec,
    Usage,
)
from bruce_bot.llm.base import LLMUnavailableError
from bruce_bot.llm.call import SDKErrors, call_model
from bruce_bot.llm.text import join_text_parts

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

    async def complete(
        self,
        system: SystemPrompt,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        force_text: bool = False,
    ) -> LLMResponse:
        model_name = model or self._config.model
        output_limit = max_tokens or self._config.max_tokens
        params: dict[str, Any] = {
            "model": model_name,
            "max_tokens": output_limit,
            "messages": to_anthropic_messages(messages),
        }
        system_blocks = to_anthropic_system(system)
        if system_blocks:
            params["system"] = system_blocks
        if tools:
            # Declared even when forcing text: the history may hold tool_use blocks.
            params["tools"] = to_anthropic_tools(tools)
            if force_text:
                params["tool_choice"] = {"type": "none"}
        thinking = self._thinking(main_model=model is None, output_limit=output_limit)
        if thinking is not None:
            params["thinking"] = thinking

        return await call_model(
            _SDK_ERRORS,
            functools.partial(self._client.messages.create, **params),
            from_anthropic_message,
            model=model_name,
            secret=self._config.api_key,
            thinking=thinking is not None,
        )

    async def aclose(self) -> None:
        await self._client.close()

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


def to_anthropic_system(system: SystemPrompt) -> list[dict[str, Any]]:
    """Two text blocks: the stable layers (a cache breakpoint), then the volatile ones."""
    blocks: list[dict[str, Any]] = []
    stable = "\n\n".join(part for part in system.stable if part)
    volatile = "\n\n".join(part for part in system.volatile if part)
    if stable.strip():
        blocks.append({"type": "text", "text": stable, "cache_control": dict(_EPHEMERAL)})
    if volatile.strip():
        blocks.append({"type": "text", "text": volatile})
    return blocks


def to_anthropic_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Translate neutral messages into alternating Anthropic turns with block content.

    Consecutive messages of one role are merged into one turn; within a user turn the
    `tool_result` blocks come first, as the API requires. Empty text is dropped. An assistant
    message with `replay_blocks` is sent as those blocks (copies, in their order). The last block
    that may carry one (never a thinking block) holds the conversation's cache breakpoint.
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
    _mark_cache_breakpoint(turns)
    return turns


def _blocks_of(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "assistant" and message.replay_blocks:
        # As the server sent them: thinking signatures must come back unchanged.
        return [copy.deepcopy(dict(block)) for block in message.replay_blocks]
    blocks: list[dict[str, Any]] = []
    for result in message.tool_results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
        if result.content:
            block["content"] = result.content
        if result.is_error:
            block["is_error"] = True
        blocks.append(block)
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


def _mark_cache_breakpoint(turns: list[dict[str, Any]]) -> None:
    for turn in reversed(turns):
        for block in reversed(turn["content"]):
            if _accepts_cache_control(block):
                block["cache_control"] = dict(_EPHEMERAL)
                return


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


def from_anthropic_message(message: object) -> LLMResponse:
    """The core's view of a Messages API answer; `LLMUnavailableError` if it is not one."""
    if not isinstance(message, anthropic.types.Message):
        raise LLMUnavailableError(
            "invalid response", f"expected a message, got {type(message).__name__}"
        )
    response_id = message.id if isinstance(message.id, str) else ""
    content: object = message.content
    if not isinstance(content, list):
        raise LLMUnavailableError("invalid response", f"message {response_id} has no content")

    texts: list[str] = []
    calls: list[ToolCall] = []
    skipped: list[str] = []
    thinking = False
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text" and isinstance(getattr(block, "text", None), str):
            texts.append(block.text)
        elif kind == "tool_use" and (call := _tool_call(block)) is not None:
            calls.append(call)
        elif kind in _NON_TEXT_TYPES:
            thinking = thinking or kind in _THINKING_TYPES
        else:
            skipped.append(str(kind))

    raw_reason = message.stop_reason if isinstance(message.stop_reason, str) else None
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
        replay = tuple(block for block in map(_as_received, content) if block is not None)
    if skipped:
        log.warning(
            "llm_blocks_skipped",
            provider="anthropic",
            response_id=response_id,
            block_types=skipped,
            kept_for_replay=bool(replay),
        )
    model = message.model if isinstance(message.model, str) else ""
    return LLMResponse(
        text=join_text_parts(texts),
        tool_calls=tuple(calls),
        stop_reason=stop_reason,
        usage=_usage_of(message.usage),
        model=model,
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


def _tool_call(block: object) -> ToolCall | None:
    call_id, name = getattr(block, "id", None), getattr(block, "name", None)
    if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
        return None  # no id to answer or no tool to run: not a usable call
    arguments = getattr(block, "input", None)
    try:
        raw = json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        raw = str(arguments)
    return ToolCall(
        id=call_id,
        name=name,
        arguments=copy.deepcopy(arguments) if isinstance(arguments, dict) else None,
        raw_arguments=raw,
    )


def _as_received(block: object) -> dict[str, Any] | None:
    """A content block as the server sent it: the fields it received, under the API's names."""
    if isinstance(block, anthropic.BaseModel):
        return block.to_dict(mode="json", warnings=False)
    if isinstance(block, dict):
        return copy.deepcopy(block)
    return None


def _usage_of(usage: object) -> Usage:
    def count(name: str) -> int:
        value = getattr(usage, name, None)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return Usage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_read_tokens=count("cache_read_input_tokens"),
        cache_write_tokens=count("cache_creation_input_tokens"),
    )
