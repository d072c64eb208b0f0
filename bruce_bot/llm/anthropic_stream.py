"""A streamed Messages API answer put back together: the events in, the message out (no SDK).

With `"stream": true` the API sends server-sent events instead of one message: `message_start`
(the message with empty content), for each block `content_block_start`, deltas and
`content_block_stop`, then `message_delta` (the stop reason and the final usage) and
`message_stop`, with `ping`s anywhere. `MessageAssembler` rebuilds from them the very message
the non-streaming call would have returned, so that `anthropic.py` reads both the same way:
text from `text_delta`s, a tool's input from its `input_json_delta` pieces (parsed when its block
stops: `{}` when none came), thinking from `thinking_delta`s and its `signature_delta`,
citations from `citations_delta`s. A block's fields are those the server sent in its start
event plus what the deltas added, nothing else, so a thinking block goes back to the API as it
was signed. Unknown events and deltas (a newer API) are ignored; `error` events are raised by the
SDK's stream before they get here.
"""

from __future__ import annotations

import json
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class MessageAssembler:
    """Feed it each event's data (`add`); `message` is the answer so far, whole at the end."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}  # a tool_use block's input, as its pieces came

    def add(self, event: object) -> str:
        """Take one event; returns the answer text it added ("" when none)."""
        if not isinstance(event, dict):
            return ""
        kind = event.get("type")
        if kind == "message_start":
            started = event.get("message")
            self.message = dict(started) if isinstance(started, dict) else {}
            self.message["content"] = []
        elif kind == "content_block_start":
            block = event.get("content_block")
            index = event.get("index")
            if isinstance(block, dict) and isinstance(index, int):
                self._blocks[index] = dict(block)
                if block.get("type") in ("tool_use", "server_tool_use", "mcp_tool_use"):
                    self._json[index] = []
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    return str(block["text"])
        elif kind == "content_block_delta":
            return self._delta(event.get("index"), event.get("delta"))
        elif kind == "content_block_stop":
            self._stop(event.get("index"))
        elif kind == "message_delta":
            self._message_delta(event)
        return ""

    def finished(self) -> dict[str, Any]:
        """The whole message: blocks in their index order (any still open closed now)."""
        for index in list(self._json):
            self._stop(index)
        self.message["content"] = [self._blocks[index] for index in sorted(self._blocks)]
        return self.message

    def _delta(self, index: object, delta: object) -> str:
        if not isinstance(index, int) or not isinstance(delta, dict):
            return ""
        block = self._blocks.get(index)
        if block is None:
            return ""
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(text := delta.get("text"), str):
            block["text"] = str(block.get("text") or "") + text
            return text
        if kind == "input_json_delta" and isinstance(piece := delta.get("partial_json"), str):
            self._json.setdefault(index, []).append(piece)
        elif kind == "thinking_delta" and isinstance(thinking := delta.get("thinking"), str):
            block["thinking"] = str(block.get("thinking") or "") + thinking
        elif kind == "signature_delta" and isinstance(signature := delta.get("signature"), str):
            block["signature"] = str(block.get("signature") or "") + signature
        elif kind == "citations_delta" and (citation := delta.get("citation")) is not None:
            citations = block.get("citations")
            block["citations"] = [*(citations if isinstance(citations, list) else []), citation]
        return ""

    def _stop(self, index: object) -> None:
        if not isinstance(index, int) or index not in self._json:
            return
        raw = "".join(self._json.pop(index))
        block = self._blocks[index]
        if not raw.strip():
            return  # no input streamed: the start event's (usually `{}`) stands
        try:
            block["input"] = json.loads(raw)
        except ValueError:
            # Cut by max_tokens mid-input: what arrived is kept for the log and the loop.
            log.info("llm_stream_tool_input_incomplete", chars=len(raw))
            block["input"] = raw

    def _message_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, dict):
            for key, value in delta.items():
                if value is not None or key not in self.message:
                    self.message[key] = value
        usage = event.get("usage")
        if isinstance(usage, dict):
            # Counts here are cumulative: they replace message_start's, the rest stay.
            merged = dict(self.message.get("usage") or {})
            merged.update({key: value for key, value in usage.items() if value is not None})
            self.message["usage"] = merged
