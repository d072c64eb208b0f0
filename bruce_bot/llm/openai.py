"""OpenAI-compatible chat completions behind `LLMService`: the only module that imports `openai`.

One provider serves OpenAI itself and every server that speaks its `/v1/chat/completions` dialect
(Ollama, vLLM, llama.cpp, LM Studio, gateways): `llm.base_url` picks the server, and a local one
needs no key. The system prompt becomes one `system` message, tool calls travel as `tool_calls`
with JSON-string arguments, and tool results as one `tool` message each. Retries are the SDK's
job (`max_retries`); the call and its failures (servers word them in many ways: `errors.py`) are
`call.py`'s, shared with every provider.

Answers are read as servers really send them, not as the spec says:

- tool calls with arguments as an object or double-encoded, without `type`, with missing or
  empty ids (a fresh id each), ids repeated within one answer (DeepSeek, GLM, gateways: every
  call is kept, the repeats get a suffix, `call_0` then `call_0_2`), or without a name (skipped,
  logged). The id is the one the next request pairs the call's result with; an id an earlier
  answer of the conversation already used (turn-scoped ids such as Kimi's `list_dir:0`) is
  suffixed the same way in the request, call and result alike;
- tool calls written into the text by models without native tool calling (`tool_markup`): a
  call only when the answer carries no native call, `llm.text_tool_calls` allows it for the
  model (`text_calls.py`), the markup is the answer's tail, outside code, and names offered
  tools; otherwise the text is shown as written, markup included;
- reasoning as `<think>` in the text (removed) or in `reasoning_content` / `reasoning` fields
  (ignored: never shown, never sent back);
- `finish_reason: "stop"` (or none) with tool calls, `"tool_calls"` without any, a `tool_choice:
  "none"` the server ignored, a `refusal`, no `usage`.

Streaming. Given a text sink (`complete(stream=...)`) and `llm.stream` on, the completion is
asked with `stream: true` and put back together from its chunks (`openai_stream.py`), then read
by the same code as a whole answer; the visible text goes to the sink as it arrives. A server
that refuses the streamed request (a 400 naming `stream` or `stream_options`) is asked whole
at once, and from then on.

`finish_reason` maps onto `StopReason`: stop → end_turn, length → max_tokens, tool_calls →
tool_use, content_filter (or a `refusal`) → refusal. A missing finish_reason means end_turn
(llama-cpp-python, LocalAI and several gateways omit it on complete answers); a value nobody
documents means other. Arguments the model garbled arrive as a `ToolCall` with `arguments=None`
and the raw text kept, so the agent loop can tell the model.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlparse

import openai
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
from bruce_bot.llm.base import LLMRequest, LLMRequestError, LLMUnavailableError, TextSink
from bruce_bot.llm.call import SDKErrors, call_model
from bruce_bot.llm.openai_stream import CompletionAssembler, VisibleText
from bruce_bot.llm.text import join_text_parts
from bruce_bot.llm.text_calls import NativeToolModels, reads_text_calls
from bruce_bot.llm.tool_markup import parse_arguments, parse_text, visible_text

log = structlog.get_logger(__name__)

# Without llm.api_key (Ollama, vLLM) the SDK still insists on a non-empty key.
PLACEHOLDER_API_KEY = "not-needed"
_SDK_ERRORS = SDKErrors.of(openai)

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "end_turn": "end_turn",
    "eos": "end_turn",
    "stop_sequence": "end_turn",
    "length": "max_tokens",
    "max_tokens": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "tool_use": "tool_use",
    "content_filter": "refusal",
    "refusal": "refusal",
}


class OpenAICompatibleLLM:
    """A chat model behind an OpenAI-compatible API, configured from the `llm` section."""

    def __init__(self, config: LLMConfig, native_models: NativeToolModels | None = None) -> None:
        self._config = config
        # Models seen calling tools natively (`llm.text_tool_calls: auto`); the factory passes
        # the process-wide record, a provider built alone keeps its own.
        self._native_models = native_models or NativeToolModels()
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or PLACEHOLDER_API_KEY,
            base_url=config.base_url or None,
            timeout=config.timeout_seconds,
            max_retries=config.max_retries,
        )
        # OpenAI's own API rejects `max_tokens` for its reasoning models and wants
        # `max_completion_tokens`; local servers (Ollama, vLLM) have long accepted `max_tokens`.
        self._max_tokens_param = (
            "max_completion_tokens" if _is_openai_platform(config.base_url) else "max_tokens"
        )
        self._streams = True  # until the server refuses a streamed request

    @property
    def model(self) -> str:
        return self._config.model

    async def complete(self, request: LLMRequest) -> LLMResponse:
        model_name = request.model or self._config.model
        tools, force_text = request.tools, request.force_text
        params: dict[str, Any] = {
            "model": model_name,
            "messages": to_openai_messages(request.system, request.messages),
            self._max_tokens_param: request.max_tokens or self._config.max_tokens,
        }
        if tools:
            params["tools"] = to_openai_tools(tools)
            if force_text:
                params["tool_choice"] = "none"

        read = functools.partial(self._read, tools=tools, force_text=force_text, model=model_name)
        if request.stream is not None and self._config.stream and self._streams:
            try:
                return await call_model(
                    _SDK_ERRORS,
                    functools.partial(self._streamed, params, request.stream),
                    read,
                    model=model_name,
                    secret=self._config.api_key,
                    streamed=True,
                )
            except LLMRequestError as exc:
                if type(exc) is not LLMRequestError or "stream" not in exc.detail.lower():
                    raise
                # A server that refuses to stream (or `stream_options`): asked whole from now on.
                log.warning("llm_stream_refused", provider="openai", detail=exc.detail)
                self._streams = False
        return await call_model(
            _SDK_ERRORS,
            functools.partial(self._client.chat.completions.create, **params),
            read,
            model=model_name,
            secret=self._config.api_key,
        )

    async def aclose(self) -> None:
        await self._client.close()

    def _read(
        self,
        completion: openai.types.chat.ChatCompletion,
        *,
        tools: Sequence[ToolSpec],
        force_text: bool,
        model: str,
    ) -> LLMResponse:
        base_url = self._config.base_url
        text_calls = reads_text_calls(
            self._config.text_tool_calls, self._native_models, base_url, model
        )
        response = from_openai_completion(
            completion, tools, force_text=force_text, text_calls=text_calls
        )
        if _has_native_calls(completion):
            self._native_models.record(base_url, model)
        return response

    async def _streamed(
        self, params: dict[str, Any], sink: TextSink
    ) -> openai.types.chat.ChatCompletion:
        """The completion for `params` asked as a stream (openai_stream.py puts it back
        together), its visible text going to `sink` as it arrives. `include_usage` asks for the
        usage in a last chunk; servers that do not send it leave the usage at zero."""
        assembler = CompletionAssembler()
        visible = VisibleText()
        chunks = await self._client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        async with chunks:
            async for chunk in chunks:
                if (piece := assembler.add(chunk)) and (shown := visible.add(piece)):
                    await sink(shown)
        # Built the SDK's loose way (no validation), as it builds a whole answer it received.
        return openai.types.chat.ChatCompletion.construct(**assembler.completion())


def _is_openai_platform(base_url: str | None) -> bool:
    if not base_url:
        return True
    host = urlparse(base_url).hostname or ""
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


# ---- requests --------------------------------------------------------------------------------


def to_openai_messages(
    system: SystemPrompt, messages: Sequence[ChatMessage]
) -> list[dict[str, Any]]:
    """The system message, then each entry: tool results become `tool` messages (before any
    user text, since they must directly follow the assistant's `tool_calls`).

    The volatile layers (the temporal context, which changes every turn) go at the end of the
    newest user message with text, not in the system message: servers reuse the computation of
    an unchanged prompt prefix (OpenAI's prompt caching, llama.cpp's and vLLM's prefix caches),
    and a time at the top would change the whole prompt on every turn. Every call of one turn's
    tool loop sends it in the same place. Without such a message it stays in the system."""
    volatile = "\n\n".join(part for part in system.volatile if part).strip()
    anchor = _newest_user_text(messages) if volatile else None
    stable = system.text if anchor is None else "\n\n".join(p for p in system.stable if p)
    out: list[dict[str, Any]] = []
    if stable.strip():
        out.append({"role": "system", "content": stable})
    used: set[str] = set()  # every call id of the request so far
    renamed: dict[str, str] = {}  # the last assistant message's ids as sent
    for index, message in enumerate(messages):
        if message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                renamed = _request_ids(message.tool_calls, used)
                entry["tool_calls"] = [
                    _tool_call_param(call, renamed[call.id]) for call in message.tool_calls
                ]
            elif not message.text.strip():
                continue
            out.append(entry)
            continue
        for result in message.tool_results:
            content = f"Error: {result.content}" if result.is_error else result.content
            call_id = renamed.get(result.call_id, result.call_id)
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if message.text.strip() or message.images:
            text = f"{message.text}\n\n{volatile}" if index == anchor else message.text
            out.append({"role": "user", "content": _user_content(text, message.images)})
    return out


def _user_content(text: str, images: Sequence[ImagePart]) -> str | list[dict[str, Any]]:
    """A plain string, or, with pictures, content parts: the text, then each picture as an
    `image_url` data URL (what vision models behind OpenAI-compatible servers accept)."""
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    for image in images:
        data = base64.b64encode(image.data).decode("ascii")
        url = f"data:{image.media_type};base64,{data}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _newest_user_text(messages: Sequence[ChatMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "assistant" and (message.text.strip() or message.images):
            return index
    return None


def _request_ids(calls: Sequence[ToolCall], used: set[str]) -> dict[str, str]:
    """Each call's id as sent in this request: its own, or, when an earlier answer of the
    conversation used it (ids a server counts per answer), the first free suffix. Strict servers
    (DeepSeek) refuse a request in which one id appears twice."""
    sent: dict[str, str] = {}
    for call in calls:
        call_id = _free_id(call.id, used) if call.id in used else call.id
        used.add(call_id)
        sent.setdefault(call.id, call_id)
    return sent


def _free_id(call_id: str, used: set[str]) -> str:
    number = 2
    while f"{call_id}_{number}" in used:
        number += 1
    return f"{call_id}_{number}"


def _tool_call_param(call: ToolCall, call_id: str) -> dict[str, Any]:
    arguments = call.raw_arguments or json.dumps(
        call.arguments if call.arguments is not None else {}, ensure_ascii=False
    )
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


# ---- answers ---------------------------------------------------------------------------------


def from_openai_completion(
    completion: openai.types.chat.ChatCompletion,
    tools: Sequence[ToolSpec] = (),
    *,
    force_text: bool = False,
    text_calls: bool = True,
) -> LLMResponse:
    """Bruce's view of one completion (see the module docstring for what is tolerated).
    `text_calls` False: the text is never read for calls (`llm.text_tool_calls`)."""
    response_id = str(getattr(completion, "id", "") or "")
    choices = getattr(completion, "choices", None)
    if not choices:
        raise LLMUnavailableError("invalid response", f"no choices in response {response_id!r}")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise LLMUnavailableError("invalid response", f"no message in response {response_id!r}")

    content = _content_text(getattr(message, "content", None))
    calls = _native_calls(getattr(message, "tool_calls", None), response_id)
    if calls or not text_calls:
        text = _text_without_calls(content, response_id, native=bool(calls))
    else:
        text, calls = _text_and_its_calls(content, tools, response_id)
    calls = _with_unique_ids(calls, response_id)

    text, calls, stop_reason = _settled(
        text,
        calls,
        finish=getattr(choice, "finish_reason", None),
        refusal=getattr(message, "refusal", None),
        force_text=force_text,
        response_id=response_id,
    )
    return LLMResponse(
        text=text,
        tool_calls=tuple(calls),
        stop_reason=stop_reason,
        usage=_usage(getattr(completion, "usage", None)),
        model=str(getattr(completion, "model", "") or ""),
        response_id=response_id,
    )


def _text_without_calls(content: str, response_id: str, *, native: bool) -> str:
    # Next to native calls, markup in the text is the model quoting or echoing: never run.
    text = visible_text(content)
    if _MARKUP_HINT.search(text):
        log.info(
            "llm_tool_markup_not_run",
            provider="openai",
            response_id=response_id,
            reason="native tool calls in the answer" if native else "text tool calls off",
        )
    return text


def _text_and_its_calls(
    content: str, tools: Sequence[ToolSpec], response_id: str
) -> tuple[str, list[ToolCall]]:
    """The calls a server without native tool calling wrote as markup in its text."""
    parsed = parse_text(content, {tool.name: tool.parameters for tool in tools})
    calls = [ToolCall("", c.name, c.arguments, c.raw_arguments) for c in parsed.calls]
    if parsed.calls:
        log.info(
            "llm_tool_markup_in_text",
            provider="openai",
            response_id=response_id,
            calls=[call.name for call in parsed.calls],
        )
    elif parsed.had_markup:
        log.info(
            "llm_tool_markup_not_run",
            provider="openai",
            response_id=response_id,
            reason=parsed.refused,
            not_offered=list(parsed.ignored),
        )
    return parsed.text, calls


# Only for the log: text that holds what looks like tool-call markup.
_MARKUP_HINT = re.compile(r"<tool_call>|<function=|\[TOOL_CALLS\]")


def _has_native_calls(completion: object) -> bool:
    """Whether the server returned a native tool call (with a name) in this completion."""
    choices = getattr(completion, "choices", None) or ()
    message = getattr(choices[0], "message", None) if choices else None
    for tool_call in getattr(message, "tool_calls", None) or ():
        name = getattr(getattr(tool_call, "function", None), "name", None)
        if isinstance(name, str) and name.strip():
            return True
    return False


def _settled(
    text: str,
    calls: list[ToolCall],
    *,
    finish: object,
    refusal: object,
    force_text: bool,
    response_id: str,
) -> tuple[str, list[ToolCall], StopReason]:
    """The answer's text, the calls to run and why it stopped, from what the server said."""
    if isinstance(refusal, str) and refusal.strip():
        text = join_text_parts([text, refusal.strip()]) if text else refusal.strip()
        return text, _dropped(calls, response_id, "refusal"), "refusal"
    if finish == "content_filter":
        return text, _dropped(calls, response_id, "content_filter"), "refusal"
    if calls and force_text:
        # tool_choice "none" was sent and ignored: the answer must be the text.
        return text, _dropped(calls, response_id, "tool_choice none"), "end_turn"
    if calls and finish == "length":
        # The output was cut: the last call's arguments may be incomplete even if they parse.
        return text, [*calls[:-1], dataclasses.replace(calls[-1], arguments=None)], "max_tokens"
    if calls:
        return text, calls, "tool_use"
    if finish is None:
        return text, calls, "end_turn"
    stop_reason = _FINISH_REASONS.get(str(finish), "other")
    # "tool_calls" with no call at all (vLLM, gateways) is a text answer.
    return text, calls, "end_turn" if stop_reason == "tool_use" else stop_reason


def _content_text(content: object) -> str:
    """`message.content` as text: a string, or a list of parts (Mistral, some gateways)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else getattr(part, "type", None)
            value = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            if kind == "text" and isinstance(value, str):
                parts.append(value)
        return "".join(parts)
    return ""


def _native_calls(tool_calls: Iterable[Any] | None, response_id: str) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for tool_call in tool_calls or ():
        function = getattr(tool_call, "function", None)
        name = getattr(function, "name", None)
        if not isinstance(name, str) or not name.strip():
            log.warning(
                "llm_tool_call_skipped",
                provider="openai",
                response_id=response_id,
                reason="the call names no function",
                type=getattr(tool_call, "type", None),
            )
            continue
        arguments, raw = parse_arguments(getattr(function, "arguments", None))
        call_id = getattr(tool_call, "id", None)
        calls.append(
            ToolCall(
                id=call_id.strip() if isinstance(call_id, str) else "",
                name=name.strip(),
                arguments=arguments,
                raw_arguments=raw,
            )
        )
    return calls


def _with_unique_ids(calls: list[ToolCall], response_id: str = "") -> list[ToolCall]:
    """Each call with an id of its own, every call kept: a missing or empty id gets a fresh one,
    a repeated id the first free suffix (`call_0`, `call_0_2`, ...; the same answer always gets
    the same ids). The id is the one sent back with the call and its result, so they pair."""
    taken = {call.id for call in calls if call.id}
    seen: set[str] = set()
    unique: list[ToolCall] = []
    repeated: list[str] = []
    for call in calls:
        call_id = call.id
        if not call_id:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
        elif call_id in seen:
            repeated.append(call_id)
            call_id = _free_id(call_id, taken | seen)
        seen.add(call_id)
        unique.append(call if call_id == call.id else dataclasses.replace(call, id=call_id))
    if repeated:
        log.info(
            "llm_tool_call_ids_repeated",
            provider="openai",
            response_id=response_id,
            ids=sorted(set(repeated)),
            calls=len(calls),
        )
    return unique


def _dropped(calls: list[ToolCall], response_id: str, why: str) -> list[ToolCall]:
    if calls:
        log.warning(
            "llm_tool_calls_dropped",
            provider="openai",
            response_id=response_id,
            reason=why,
            names=[call.name for call in calls],
        )
    return []


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        input_tokens=_int(getattr(usage, "prompt_tokens", 0)),
        output_tokens=_int(getattr(usage, "completion_tokens", 0)),
        cache_read_tokens=_int(getattr(details, "cached_tokens", 0)) if details else 0,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
