"""Tool calls and reasoning that models write into their text, turned into calls or removed.

Models served without native tool calling (or whose server's tool parser is off or failed) write
their calls into the answer's text in their training format; reasoning models write their
thinking there too. What a person reads must hold neither, so every provider passes the text
through `parse_text`, which knows these dialects:

- Hermes / Qwen2.5: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one or several,
  the last possibly unclosed (the model stopped, or its output was cut);
- Qwen3-coder: `<function=name><parameter=key>value</parameter></function>`, bare or inside
  `<tool_call>`, sometimes with a stray `</tool_call>` and no opener;
- Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (also with Python quotes) and
  the newer `[TOOL_CALLS]name[ARGS]{...}`;
- Llama 3.x: the whole answer is the call as bare JSON, `{"name": ..., "parameters": {...}}`
  (or `"arguments"`), possibly fenced in ```json, several separated by `;`, after
  `<|python_tag|>`.

A written call becomes a real call only when its name is one of the tools offered in this
request; otherwise it is removed from the text all the same (raw markup is never shown). A call
whose JSON is garbled keeps its name with `arguments=None`, so the agent loop can tell the model.
Reasoning - `<think>...</think>`, `<thinking>...</thinking>`, a lone `</think>` with the thinking
before it, an unclosed `<think>` at the end - is removed. No SDK is imported here.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# name -> JSON Schema of its parameters (used to type Qwen3-coder's text values)
OfferedTools = Mapping[str, Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class TextCall:
    """A tool call found in the text. `arguments` is None when its JSON was garbled or cut."""

    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str


@dataclass(frozen=True, slots=True)
class ParsedText:
    """The text a person reads, and the calls to offered tools written into it."""

    text: str
    calls: tuple[TextCall, ...] = ()
    # Names of calls written in markup for tools not offered (removed from the text, not run).
    ignored: tuple[str, ...] = ()
    had_markup: bool = False


# ---- reasoning -------------------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """The text without the model's thinking."""
    text = _THINK_BLOCK.sub("", text)
    # DeepSeek-R1 / Qwen3 through some servers: the opening tag is in the prompt, so the answer
    # starts with the thinking and a lone closing tag.
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    # Thinking that never ended (cut by the token limit): all of it is thinking.
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text


# ---- arguments -------------------------------------------------------------------------------


def parse_arguments(value: object) -> tuple[dict[str, Any] | None, str]:
    """A tool call's arguments as sent by a server: `(arguments, raw_arguments)`.

    Accepts a JSON string (the standard), an object (llama.cpp, TGI, proxies), a JSON string of
    a JSON string (double-encoded, e.g. Qwen2.5 through some servers) and Python-quoted dicts.
    `arguments` is `{}` when empty and None when they are not a JSON object. `raw_arguments` is
    a string to send back: the server's own text when it was a valid object or beyond repair,
    else the object re-encoded as JSON.
    """
    if value is None:
        return {}, ""
    if isinstance(value, Mapping):
        arguments = dict(value)
        return arguments, _dumps(arguments)
    if not isinstance(value, str):
        return None, _dumps(value)
    if not value.strip():
        return {}, value
    try:
        decoded = json.loads(value)
    except ValueError:
        lenient = _python_literal(value)
        if isinstance(lenient, dict):
            return lenient, _dumps(lenient)
        return None, value
    if isinstance(decoded, dict):
        return decoded, value
    if isinstance(decoded, str):
        inner, _ = parse_arguments(decoded)
        if inner is not None and decoded.strip():
            return inner, _dumps(inner)
    return None, value


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _python_literal(text: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _decode_value(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON (or Python-literal) value that starts at `text[start]`, and where it ends."""
    try:
        return json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        pass
    end = _matching_bracket(text, start)
    if end is None:
        return None
    value = _python_literal(text[start:end])
    return (value, end) if value is not None else None


def _matching_bracket(text: str, start: int) -> int | None:
    pairs = {"{": "}", "[": "]"}
    if start >= len(text) or text[start] not in pairs:
        return None
    stack: list[str] = []
    quote = ""
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char in "\"'":
            quote = char
        elif char in pairs:
            stack.append(pairs[char])
        elif char in "}]":
            if not stack or stack.pop() != char:
                return None
            if not stack:
                return index + 1
    return None


# ---- calls -----------------------------------------------------------------------------------

_TOOL_CALL_OPEN = "<tool_call>"
_TOOL_CALL_CLOSE = "</tool_call>"
_FUNCTION_OPEN = re.compile(r"<function=([^>\n]+)>")
_FUNCTION_CLOSE = "</function>"
_PARAMETER = re.compile(
    r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|\Z)", re.DOTALL
)
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = re.compile(r"\s*([A-Za-z0-9_.\-]+)\[ARGS\]")
_MARKERS = re.compile(r"<tool_call>|<function=[^>\n]+>|\[TOOL_CALLS\]")
_STRAY = re.compile(r"</tool_call>|</function>")
_SPECIAL_TOKENS = re.compile(r"<\|(?:python_tag|eom_id|eot_id|im_end|end)\|>")
_NAME = re.compile(r"""["']name["']\s*:\s*["']([^"'\\]+)["']""")
_FENCE = re.compile(r"\A```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\Z", re.DOTALL)
_CALL_KEYS = {"name", "arguments", "parameters", "type", "id"}


@dataclass(frozen=True, slots=True)
class _Found:
    name: str
    arguments: dict[str, Any] | None
    raw: str


def parse_text(text: str | None, offered: OfferedTools) -> ParsedText:
    """Reasoning and tool-call markup out of `text`; calls to `offered` tools kept as calls."""
    visible = strip_reasoning(text or "")
    had_markup = bool(_SPECIAL_TOKENS.search(visible))
    visible = _SPECIAL_TOKENS.sub("", visible)
    kept: list[str] = []
    found: list[_Found] = []
    position = 0
    marked = False
    while (marker := _MARKERS.search(visible, position)) is not None:
        marked = True
        kept.append(visible[position : marker.start()])
        in_marker, position = _parse_marked(visible, marker, offered)
        found.extend(in_marker)
    kept.append(visible[position:])
    remaining = "".join(kept)
    if _STRAY.search(remaining):
        had_markup = True
        remaining = _STRAY.sub("", remaining)
    if not marked:
        bare = _bare_json_calls(remaining)
        if bare is not None:
            found, remaining, marked = bare, "", True
    had_markup = had_markup or marked
    calls: list[TextCall] = []
    ignored: list[str] = []
    for call in found:
        if call.name in offered:
            calls.append(TextCall(call.name, call.arguments, call.raw))
        else:
            ignored.append(call.name)
    return ParsedText(_tidy(remaining), tuple(calls), tuple(ignored), had_markup)


def _tidy(text: str) -> str:
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _parse_marked(
    text: str, marker: re.Match[str], offered: OfferedTools
) -> tuple[list[_Found], int]:
    """The calls of the markup starting at `marker`, and where the markup ends."""
    token = marker.group(0)
    if token == _TOOL_CALL_OPEN:
        close = text.find(_TOOL_CALL_CLOSE, marker.end())
        again = text.find(_TOOL_CALL_OPEN, marker.end())
        if again >= 0 and (close < 0 or again < close):
            # Unclosed, and another call follows: this one ends where the next begins.
            return _parse_tool_call_body(text[marker.end() : again], offered), again
        end = len(text) if close < 0 else close + len(_TOOL_CALL_CLOSE)
        body = text[marker.end() : len(text) if close < 0 else close]
        return _parse_tool_call_body(body, offered), end
    if token == _MISTRAL:
        return _parse_mistral(text, marker.end())
    # A bare Qwen3-coder <function=...> block.
    close = text.find(_FUNCTION_CLOSE, marker.end())
    end = len(text) if close < 0 else close + len(_FUNCTION_CLOSE)
    block = text[marker.start() : end]
    return list(_parse_functions(block, offered)), end


def _parse_tool_call_body(body: str, offered: OfferedTools) -> list[_Found]:
    stripped = body.strip()
    if not stripped:
        return []
    if _FUNCTION_OPEN.match(stripped):
        return list(_parse_functions(stripped, offered))
    values, _ = _decode_all(stripped)
    calls = [call for value in values for call in _calls_from_json(value)]
    return calls or _garbled(stripped)


def _garbled(raw: str) -> list[_Found]:
    """A call whose JSON could not be read: its name if it can be found, no arguments."""
    named = _NAME.search(raw)
    return [_Found(named.group(1).strip(), None, raw)] if named else []


def _decode_all(text: str) -> tuple[list[Any], bool]:
    """The JSON values at the start of `text` (separated by whitespace, commas or `;`), and
    whether they were all of it."""
    values: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position] in " \t\r\n;,":
            position += 1
        if position >= len(text):
            return values, True
        decoded = _decode_value(text, position)
        if decoded is None:
            return values, False
        value, position = decoded
        values.append(value)


def _calls_from_json(value: Any) -> Iterator[_Found]:
    if isinstance(value, list):
        for item in value:
            yield from _calls_from_json(item)
        return
    call = _call_shape(value)
    if call is not None:
        yield call


def _call_shape(value: Any) -> _Found | None:
    """A call from `{"name", "arguments"|"parameters"}` or `{"type", "function": {...}}`."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict) and "name" not in value:
        return _call_shape(value["function"])
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    raw_arguments = value.get("arguments", value.get("parameters"))
    arguments, raw = parse_arguments(raw_arguments)
    return _Found(name.strip(), arguments, raw)


def _parse_functions(block: str, offered: OfferedTools) -> Iterator[_Found]:
    """Qwen3-coder calls: `<function=name><parameter=key>value</parameter>...</function>`."""
    opens = list(_FUNCTION_OPEN.finditer(block))
    for index, opened in enumerate(opens):
        name = opened.group(1).strip()
        limit = opens[index + 1].start() if index + 1 < len(opens) else len(block)
        close = block.find(_FUNCTION_CLOSE, opened.end(), limit)
        body = block[opened.end() : limit if close < 0 else close]
        if close < 0:
            # Unclosed: the output stopped inside the call, its values may be cut.
            yield _Found(name, None, body.strip())
            continue
        schema = offered.get(name) or {}
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        arguments: dict[str, Any] = {}
        for parameter in _PARAMETER.finditer(body):
            key = parameter.group(1).strip()
            kind = properties.get(key, {}).get("type") if isinstance(properties, Mapping) else None
            arguments[key] = _typed(_trim_newline(parameter.group(2)), kind)
        yield _Found(name, arguments, _dumps(arguments))


def _trim_newline(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _typed(value: str, kind: object) -> Any:
    """A Qwen3-coder parameter value as its schema type (left as text when it does not fit)."""
    text = value.strip()
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            number = float(text)
            return int(number) if number.is_integer() and "." not in text else number
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind in ("object", "array"):
            decoded = _decode_value(text, 0)
            if decoded is not None and decoded[1] == len(text):
                return decoded[0]
    except ValueError:
        pass
    return value


def _parse_mistral(text: str, start: int) -> tuple[list[_Found], int]:
    """`[TOOL_CALLS][{...}, ...]` or `[TOOL_CALLS]name[ARGS]{...}` from `start`."""
    position = start
    while position < len(text) and text[position].isspace():
        position += 1
    if position < len(text) and text[position] in "[{":
        decoded = _decode_value(text, position)
        if decoded is None:
            return _garbled(text[position:]), len(text)
        value, end = decoded
        calls = list(_calls_from_json(value))
        return (calls or _garbled(text[position:end])), end
    named = _MISTRAL_ARGS.match(text, position)
    if named is None:
        return [], position
    name = named.group(1)
    args_at = named.end()
    while args_at < len(text) and text[args_at].isspace():
        args_at += 1
    decoded = _decode_value(text, args_at)
    if decoded is None:
        return [_Found(name, None, text[args_at:].strip())], len(text)
    value, end = decoded
    arguments, raw = parse_arguments(value)
    return [_Found(name, arguments, raw)], end


def _bare_json_calls(text: str) -> list[_Found] | None:
    """Llama 3.x: the whole answer is the call (or calls) as JSON, or None if it is not."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith(("{", "[")):
        return None
    values, complete = _decode_all(body)
    if not complete:
        # Garbled JSON that still reads as a call (a name and its arguments).
        if re.match(r"""\{\s*["']name["']\s*:""", body) and re.search(
            r"""["'](?:arguments|parameters)["']\s*:""", body
        ):
            return _garbled(body)
        return None
    items = [item for value in values for item in (value if isinstance(value, list) else [value])]
    if not items or not all(_is_call_object(item) for item in items):
        return None
    return [call for item in items for call in _calls_from_json(item)]


def _is_call_object(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if set(item) <= {"type", "function", "id"} and isinstance(item.get("function"), dict):
        return _is_call_object(item["function"])
    if not isinstance(item.get("name"), str) or not set(item) <= _CALL_KEYS:
        return False
    arguments = item.get("arguments", item.get("parameters"))
    return ("arguments" in item or "parameters" in item) and isinstance(
        arguments, dict | str | type(None)
    )
