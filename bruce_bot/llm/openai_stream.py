"""A streamed chat completion put back together: the chunks in, the completion out (no SDK).

With `stream: true` an OpenAI-compatible server sends `chat.completion.chunk`s: `delta.content`
pieces, `delta.tool_calls` fragments (the first of a call with its `index`, `id` and
`function.name`, later ones adding to `function.arguments`), a `finish_reason` on the last
choice chunk, and, with `stream_options.include_usage`, a last chunk without choices that holds
the `usage`. Servers differ in small ways, all taken here: Ollama sends each call whole in one
fragment and often no usage; llama.cpp and vLLM stream `reasoning_content` (never shown); some
servers leave out a fragment's `index` (the call's `id`, else the order, tells the calls apart);
usage may come on the last choice chunk instead. `CompletionAssembler` rebuilds the completion
the non-streaming call would have returned, as plain data, for `openai.py` to read the same way.

`VisibleText` decides what of the streamed content a user may see while it arrives: reasoning
in `<think>` tags and tool calls written into the text (models without native tool calling)
are held back; the final answer, read whole, is the authority either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Where text stops being shown while it streams: tool calls written as text.
_MARKUP_STARTS = ("<tool_call", "<function", "<|", "[TOOL_CALLS]", "<invoke")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


@dataclass(slots=True)
class _Call:
    id: str = ""
    type: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class CompletionAssembler:
    """Feed it each chunk (`add`); `completion()` is the answer as one completion's data."""

    def __init__(self) -> None:
        self.id = ""
        self.model = ""
        self.created = 0
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._finish: str | None = None
        self._usage: Any = None

    def add(self, chunk: Any) -> str:
        """Take one chunk; returns the content it added ("" when none)."""
        self.id = self.id or str(getattr(chunk, "id", "") or "")
        self.model = self.model or str(getattr(chunk, "model", "") or "")
        self.created = self.created or int(getattr(chunk, "created", 0) or 0)
        if (usage := getattr(chunk, "usage", None)) is not None:
            self._usage = usage
        added = ""
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) not in (0, None):
                continue  # n > 1 is never asked for: only the first choice is the answer
            if (finish := getattr(choice, "finish_reason", None)) is not None:
                self._finish = str(finish)
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            if isinstance(content := getattr(delta, "content", None), str) and content:
                self._content.append(content)
                added += content
            if isinstance(refusal := getattr(delta, "refusal", None), str) and refusal:
                self._refusal.append(refusal)
            for fragment in getattr(delta, "tool_calls", None) or ():
                self._fragment(fragment)
        return added

    def _fragment(self, fragment: Any) -> None:
        index = getattr(fragment, "index", None)
        call_id = getattr(fragment, "id", None)
        call = self._by_index.get(index) if isinstance(index, int) else None
        if call is None and isinstance(call_id, str) and call_id:
            call = next((c for c in self._calls if c.id == call_id), None)
        if call is None:
            if not isinstance(index, int) and not call_id and self._calls:
                call = self._calls[-1]  # neither index nor id: more of the call being written
            else:
                call = _Call()
                self._calls.append(call)
                if isinstance(index, int):
                    self._by_index[index] = call
        if isinstance(call_id, str) and call_id and not call.id:
            call.id = call_id
        if isinstance(kind := getattr(fragment, "type", None), str):
            call.type = kind
        function = getattr(fragment, "function", None)
        if function is None:
            return
        if isinstance(name := getattr(function, "name", None), str) and name:
            call.name = call.name or name
        arguments = getattr(function, "arguments", None)
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif arguments is not None:
            call.arguments.append(arguments)  # an object (llama.cpp): read as the whole does

    def completion(self) -> dict[str, Any]:
        """The completion's data, shaped as the non-streaming answer."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._content) if self._content or not self._calls else None,
            "refusal": "".join(self._refusal) or None,
        }
        if self._calls:
            message["tool_calls"] = [_call_data(call) for call in self._calls]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": _plain(self._usage),
        }


def _call_data(call: _Call) -> dict[str, Any]:
    pieces = call.arguments
    arguments: Any = "".join(pieces) if all(isinstance(p, str) for p in pieces) else pieces[-1]
    data: dict[str, Any] = {"id": call.id, "function": {"name": call.name, "arguments": arguments}}
    if call.type is not None:
        data["type"] = call.type
    return data


def _plain(value: Any) -> Any:
    """A chunk's usage (an SDK model, or data) as plain data."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _plain(dump())
    return _plain(vars(value)) if hasattr(value, "__dict__") else None


class VisibleText:
    """What of the streamed content may be shown: `add` returns the newly visible part."""

    def __init__(self) -> None:
        self._raw = ""
        self._shown = 0  # characters of the visible text handed out so far
        self._stopped = False

    def add(self, piece: str) -> str:
        if self._stopped:
            return ""
        self._raw += piece
        visible = self._visible()
        if visible is None or len(visible) <= self._shown:
            return ""
        new, self._shown = visible[self._shown :], len(visible)
        return new

    def _visible(self) -> str | None:
        text = self._raw
        stripped = text.lstrip()
        if stripped.startswith(_THINK_OPEN) or (
            stripped and _THINK_OPEN.startswith(stripped) and len(stripped) < len(_THINK_OPEN)
        ):
            end = text.find(_THINK_CLOSE)
            if end < 0:
                return None  # still reasoning (or maybe about to): nothing to show yet
            text = text[end + len(_THINK_CLOSE) :].lstrip()
        cut = min((i for s in _MARKUP_STARTS if (i := text.find(s)) >= 0), default=-1)
        if cut >= 0:
            self._stopped = True
            text = text[:cut]
        # A trailing "<" might open markup: held back until the next piece says what it is.
        held = text.rfind("<")
        if not self._stopped and held >= 0 and ">" not in text[held:] and len(text) - held < 16:
            text = text[:held]
        return text
