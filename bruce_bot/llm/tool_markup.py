"""Tool calls and reasoning that models write into their text: calls when they are the answer.

Models served without native tool calling (or whose server's tool parser is off or failed) write
their calls into the answer's text in their training format; reasoning models write their
thinking there too. The OpenAI-compatible provider passes the text through `parse_text` (or,
when the text is not read for calls, `visible_text`), which knows these dialects:

- Hermes / Qwen2.5: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one or several,
  the last possibly unclosed (the model stopped, or its output was cut);
- Qwen3-coder: `<function=name><parameter=key>value</parameter></function>`, bare or inside
  `<tool_call>`, sometimes with a stray `</tool_call>` and no opener;
- Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (also with Python quotes) and
  the newer `[TOOL_CALLS]name[ARGS]{...}`;
- Llama 3.x: the whole answer is the call as bare JSON, `{"name": ..., "parameters": {...}}`
  (or `"arguments"`, or `{"type": "function", "function": {...}}`), several separated by `;`,
  after `<|python_tag|>`.

Markup is a call only when it is the answer: a model that explains a page may quote that page's
example calls, and a quote must never act. So `parse_text` takes written calls only when

- the markup is the whole answer or its tail (prose, then the calls, then nothing but
  whitespace), and it is the first markup in the answer (an answer that shows markup mid-prose
  is talking about markup, so its tail is not taken either);
- it does not start inside a fenced (```` ``` ````, `~~~`) or inline (`` ` ``) code span, a
  Markdown block quote (`> `) or an HTML `<code>`, `<pre>`, `<blockquote>` or `<q>`;
- every call in it names a tool offered in this request;
- bare JSON (Llama) is the whole answer, unfenced.

Otherwise nothing is a call and the text is shown as it is, markup included (`ParsedText.refused`
says why, for the log). Whether the text is read for calls at all is the provider's decision
(`text_calls.py`: never next to native calls, never for a model seen calling natively).
A call whose JSON is garbled keeps its name with `arguments=None`, so the agent loop can tell the
model. Reasoning - `<think>...</think>`, `<thinking>...</thinking>`, a lone `</think>` with the
thinking before it, an unclosed `<think>` at the end - is removed, and so are the chat
template's special tokens (`<|python_tag|>`, `<|eot_id|>`, ...). No SDK is imported here.
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
    """The text a person reads, and the calls to offered tools written as its tail."""

    text: str
    calls: tuple[TextCall, ...] = ()
    # Names in the tail markup of tools not offered (the whole tail then stays text, unrun).
    ignored: tuple[str, ...] = ()
    had_markup: bool = False
    # Why markup in the text was not taken as calls ("" when it was, or there was none).
    refused: str = ""


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
_CALL_KEYS = {"name", "arguments", "parameters", "type", "id"}


@dataclass(frozen=True, slots=True)
class _Found:
    name: str
    arguments: dict[str, Any] | None
    raw: str


def visible_text(text: str | None) -> str:
    """What a person reads of an answer whose text is not read for calls: the reasoning and the
    template's special tokens removed, everything else (markup included) as written."""
    return _tidy(_SPECIAL_TOKENS.sub("", strip_reasoning(text or "")))


def parse_text(text: str | None, offered: OfferedTools) -> ParsedText:
    """The answer's text and the calls written as its tail (see the module docstring)."""
    raw = _SPECIAL_TOKENS.sub("", strip_reasoning(text or ""))
    shown = _tidy(raw)
    marker = _MARKERS.search(raw)
    if marker is None:
        bare = _bare_json_calls(raw)
        if bare is None:
            return ParsedText(shown)
        found, start = bare, 0
    elif quoted := _quoted(raw, marker.start()):
        return ParsedText(shown, had_markup=True, refused=quoted)
    else:
        tail = _tail_calls(raw, marker.start(), offered)
        if tail is None:
            return ParsedText(shown, had_markup=True, refused="not at the end of the answer")
        found, start = tail, marker.start()
    ignored = tuple(call.name for call in found if call.name not in offered)
    if ignored:
        return ParsedText(shown, (), ignored, True, "names a tool not offered")
    if not found:
        return ParsedText(shown, had_markup=True, refused="holds no call")
    calls = tuple(TextCall(call.name, call.arguments, call.raw) for call in found)
    return ParsedText(_tidy(raw[:start]), calls, (), True)


def _tail_calls(text: str, start: int, offered: OfferedTools) -> list[_Found] | None:
    """The calls of the markup from `start` when it runs to the end of `text` (whitespace and
    stray closing tags aside), else None: markup followed by prose is not a call."""
    found: list[_Found] = []
    position = start
    while True:
        marker = _MARKERS.match(text, position)
        if marker is None:
            return None
        calls, position = _parse_marked(text, marker, offered)
        found.extend(calls)
        while True:
            stripped = len(text) - len(text[position:].lstrip())
            stray = _STRAY.match(text, stripped)
            position = stray.end() if stray else stripped
            if stray is None:
                break
        if position >= len(text):
            return found


_FENCE_LINE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})(.*)$", re.MULTILINE)
_BACKTICKS = re.compile(r"`+")
_HTML_QUOTE = re.compile(r"<(/?)(code|pre|blockquote|q)\b[^>]*>", re.IGNORECASE)


def _quoted(text: str, position: int) -> str:
    """Why the markup at `position` is a quote ("" when it is not): inside code, a Markdown
    block quote (`> ` on its line) or an HTML `<code>`, `<pre>`, `<blockquote>` or `<q>`."""
    if _in_code(text, position):
        return "inside a code block"
    line = text[text.rfind("\n", 0, position) + 1 : position]
    if line.lstrip().startswith(">"):
        return "inside a quote"
    depth = 0
    for tag in _HTML_QUOTE.finditer(text, 0, position):
        depth = max(0, depth - 1) if tag.group(1) else depth + 1
    return "inside a quote" if depth else ""


def _in_code(text: str, position: int) -> bool:
    """Whether `position` lies inside a fenced code block or an inline code span (Markdown's
    rules, simplified: a fence closes on a line of its own, inline spans end at a blank line).
    An unmatched backtick counts as code: a quote is never taken for a call."""
    before = text[:position]
    fence = ""
    after_fence = 0
    for line in _FENCE_LINE.finditer(before):
        run, rest = line.group(1), line.group(2)
        if not fence:
            fence, after_fence = run, line.end()
        elif run[0] == fence[0] and len(run) >= len(fence) and not rest.strip():
            fence, after_fence = "", line.end()
    if fence:
        return True
    paragraph = before[after_fence:]
    blank = paragraph.rfind("\n\n")
    if blank >= 0:
        paragraph = paragraph[blank:]
    opened = 0
    for run in _BACKTICKS.finditer(paragraph):
        length = len(run.group(0))
        if not opened:
            opened = length
        elif length == opened:
            opened = 0
    return opened > 0


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
    """Llama 3.x: the whole answer is the call (or calls) as JSON, or None if it is not (JSON
    in a code fence is shown, not run: it is how a model quotes)."""
    body = text.strip()
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
