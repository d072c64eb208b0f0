"""Server-sent event streams as the real LLM APIs send them, for the fake servers.

A fake answers a request with `"stream": true` by turning the answer it would have sent whole
into the events the real API streams for it (`anthropic_frames`, `openai_frames`), written one
by one (`send_frames`) with a pause between them when asked. The wire formats follow the
recordings in tests/fixtures/anthropic/stream_*.sse and tests/fixtures/openai/stream_*.sse:

- Anthropic: `event: <type>` and `data: <json>` lines per event; `message_start` with empty
  content and the input usage, per block `content_block_start` (text "" / thinking "" with
  signature "" / tool_use with input {}), deltas (`text_delta`, `thinking_delta` then one
  `signature_delta`, `input_json_delta` pieces, the first one empty), `content_block_stop`, a
  `ping` after the first block starts, `message_delta` with the stop reason and the output
  usage, `message_stop`.
- OpenAI-compatible: `data: <json>` chunks (`chat.completion.chunk`), the first with the role,
  content pieces, per tool call a first fragment with index, id, type and name and then
  argument pieces, a chunk with the finish_reason, with `stream_options.include_usage` a last
  chunk without choices holding the usage, and `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aiohttp import web

PIECE_CHARS = 12  # how much text one delta carries (the real APIs send a few tokens)


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _event(name: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _data(data: Mapping[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


def anthropic_frames(message: Mapping[str, Any]) -> list[bytes]:
    """The event stream of a whole Messages API answer."""
    usage = dict(message.get("usage") or {})
    start = {
        **{key: value for key, value in message.items() if key not in ("content", "usage")},
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    frames = [_event("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message.get("content") or []):
        frames.extend(_anthropic_block(index, block))
        if index == 0:
            frames.append(_event("ping", {"type": "ping"}))
    frames.append(
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": message.get("stop_reason"),
                    "stop_sequence": message.get("stop_sequence"),
                },
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            },
        )
    )
    frames.append(_event("message_stop", {"type": "message_stop"}))
    return frames


def _anthropic_block(index: int, block: Mapping[str, Any]) -> list[bytes]:
    kind = block.get("type")

    def delta(body: dict[str, Any]) -> bytes:
        return _event(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": body}
        )

    deltas: list[bytes] = []
    if kind == "text":
        opened: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": p}) for p in pieces(block.get("text", ""))]
    elif kind == "thinking":
        opened = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            delta({"type": "thinking_delta", "thinking": p})
            for p in pieces(block.get("thinking", ""))
        ]
        deltas.append(delta({"type": "signature_delta", "signature": block.get("signature", "")}))
    elif kind == "tool_use":
        opened = {key: value for key, value in block.items() if key != "input"} | {"input": {}}
        raw = json.dumps(block.get("input", {}), ensure_ascii=False)
        deltas = [delta({"type": "input_json_delta", "partial_json": ""})]
        deltas.extend(delta({"type": "input_json_delta", "partial_json": p}) for p in pieces(raw))
    else:  # redacted thinking, server tool results: sent whole in their start event
        opened = dict(block)
    start = {"type": "content_block_start", "index": index, "content_block": opened}
    stop = {"type": "content_block_stop", "index": index}
    return [_event("content_block_start", start), *deltas, _event("content_block_stop", stop)]


def openai_frames(completion: Mapping[str, Any], *, include_usage: bool) -> list[bytes]:
    """The chunk stream of a whole chat completion."""
    head = {
        key: completion.get(key) for key in ("id", "created", "model", "system_fingerprint")
    } | {"object": "chat.completion.chunk"}
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            body["usage"] = None
        return _data(body)

    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    content = message.get("content")
    if isinstance(content, str):
        frames.extend(chunk({"content": p}) for p in pieces(content))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        first = {
            "index": index,
            "id": call.get("id"),
            "type": call.get("type", "function"),
            "function": {"name": function.get("name"), "arguments": ""},
        }
        frames.append(chunk({"tool_calls": [first]}))
        arguments = function.get("arguments") or ""
        frames.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in pieces(arguments if isinstance(arguments, str) else json.dumps(arguments))
        )
    frames.append(chunk({}, choice.get("finish_reason")))
    if include_usage:
        frames.append(_data({**head, "choices": [], "usage": completion.get("usage")}))
    frames.append(_data("[DONE]"))
    return frames


async def send_frames(
    request: web.Request,
    frames: Sequence[bytes],
    *,
    headers: Mapping[str, str] | None = None,
    pause_seconds: float = 0.0,
) -> web.StreamResponse:
    """Write `frames` as a `text/event-stream` answer, one at a time."""
    response = web.StreamResponse(
        status=200,
        headers={
            **(headers or {}),
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
        },
    )
    await response.prepare(request)
    for frame in frames:
        await response.write(frame)
        # Each frame its own write: the client sees the stream arrive in pieces.
        await asyncio.sleep(pause_seconds)
    await response.write_eof()
    return response
