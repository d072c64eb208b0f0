"""A local fake of the OpenAI chat completions API (`POST /v1/chat/completions`) for tests and
benchmarks; it stands for OpenAI, Ollama and vLLM alike.

Point the real SDK at it: `openai.AsyncOpenAI(api_key="x", base_url=server.base_url)` (the
`base_url` already ends in `/v1`), or set `llm.provider: openai` and `llm.base_url` to it. Each
request is answered by the next scripted reply, else by the `responder`, else with a 400 that says
nothing was scripted::

    async with FakeOpenAIServer() as server:
        server.script("Hello!")                                      # finish_reason "stop"
        server.script(tool_calls=[("web_search", {"query": "x"})])  # id call_fake0001
        server.script(tool_calls=[("web_search", '{"query": ')])     # arguments sent verbatim
        server.script(raw_arguments="{bad json")                     # same, for tool "web_search"
        server.script(error=429, retry_after=0.01)                   # rate limited once
        ...
        assert server.requests[1]["messages"][-1]["role"] == "tool"

    FakeOpenAIServer(responder=lambda body: f"echo: {last_user_text(body)}")

Bodies recorded from real servers replay as captured (nothing added, nothing checked), and errors
can take the shape each server gives them::

    server.replay(FIXTURES / "ollama_llama32_json_in_content.json")   # a 200 body from a file
    server.replay({"error": {...}}, status=400)                        # or a dict, any status
    server.script(error=400, error_message="...", error_shape="llamacpp")

A responder returns an `OpenAIReply` or a string (a text answer); it may be async. Every request
body is kept in `server.requests` (headers in `server.request_headers`); wait for them with
`await server.wait_for_requests(n)`. Like the real API, the fake refuses (400) an empty `tools`
list, `tool_choice` without tools, `tool` messages that answer no preceding `tool_calls`,
assistant `tool_calls` left unanswered, and, as DeepSeek does (craft-ai-agents/craft-agents-oss
issue #630), a call id used twice in one request; pass `validate=False` to switch that off. With
`tool_choice: "none"` scripted tool calls are dropped (the model answers in text, `NO_TOOLS_TEXT`
if the reply had none), as OpenAI does. Servers that ignore `tool_choice` (Ollama, some vLLM
versions) are played by `script(..., ignores_tool_choice=True)`, by a responder (it sees the
request and its reply is sent as it returns it) and by replayed bodies (sent as captured).
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from tests.fakes.scripted_server import (
    HTTPAnswer,
    Responder,
    ScriptedJSONServer,
    estimate_tokens,
)
from tests.fakes.sse import openai_frames

# (name, arguments) or (name, arguments, id); arguments as a dict, or a string sent verbatim.
ScriptedToolCall = tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str]

# The answer when a reply scripted with tool calls only meets `tool_choice: "none"`.
NO_TOOLS_TEXT = "(fake) Tools are switched off, so here is my answer in words."

# status → (type, code, message), as OpenAI words them
ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: {key}."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: ("invalid_request_error", "model_not_found", "The model `{model}` does not exist."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}

# How each server wraps an error (see `_error_body`): OpenAI and gateways nest
# {message, type, param, code}; vLLM (before 0.9) sends it flat with "object": "error" and the
# status as code; llama.cpp nests {code: <status>, message, type}; Ollama nests OpenAI's shape
# with type "api_error"; LM Studio nests {message, type, param} without code.
ErrorShape = Literal["openai", "vllm", "llamacpp", "ollama", "lmstudio"]


@dataclass(frozen=True, slots=True)
class OpenAIReply:
    """One scripted answer: a message (text and/or tool calls) or, with `error`, an HTTP error."""

    text: str | None = None
    tool_calls: Sequence[ScriptedToolCall] = ()
    finish_reason: str | None = None  # default: "tool_calls" with tool calls, else "stop"
    usage: Mapping[str, Any] | None = None  # overrides the estimated usage fields
    model: str | None = None  # default: the requested model
    error: int | None = None  # an HTTP status, e.g. 429, 401, 500
    error_type: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    error_shape: ErrorShape = "openai"
    retry_after: float | None = None  # sent as the `retry-after` header (seconds)
    delay_seconds: float | None = None  # default: the server's delay_seconds
    raw: Mapping[str, Any] | None = None  # a recorded body, sent as is with `status`
    raw_stream: bytes | None = None  # a recorded event stream (`.sse`), sent as is
    status: int = 200
    ignores_tool_choice: bool = False  # tool calls even with tool_choice "none"


class FakeOpenAIServer(ScriptedJSONServer[OpenAIReply]):
    """Speaks `POST /v1/chat/completions`; `base_url` ends in `/v1` as the SDK expects."""

    route = "/v1/chat/completions"
    path_prefix = "/v1"

    def __init__(
        self,
        *,
        responder: Responder[OpenAIReply] | None = None,
        delay_seconds: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__(responder=responder, delay_seconds=delay_seconds, validate=validate)
        self._ids = itertools.count(1)

    @property
    def responder(self) -> Responder[OpenAIReply] | None:
        return self._responder

    @responder.setter
    def responder(self, responder: Responder[OpenAIReply] | None) -> None:
        # A responder sees the request (tool_choice included): its replies go out as returned.
        self._responder = None if responder is None else _as_returned(responder)

    def script(
        self,
        text: str | None = None,
        *,
        tool_calls: Sequence[ScriptedToolCall] = (),
        raw_arguments: str | None = None,
        tool_name: str = "web_search",
        finish_reason: str | None = None,
        usage: Mapping[str, Any] | None = None,
        model: str | None = None,
        error: int | None = None,
        error_type: str | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
        error_shape: ErrorShape = "openai",
        retry_after: float | None = None,
        delay_seconds: float | None = None,
        ignores_tool_choice: bool = False,
        times: int = 1,
    ) -> OpenAIReply:
        """Queue a reply for the next `times` requests; returns it.

        `raw_arguments` adds one call of `tool_name` whose arguments string is sent as is (e.g.
        malformed JSON, as small local models produce).
        """
        calls = list(tool_calls)
        if raw_arguments is not None:
            calls.append((tool_name, raw_arguments))
        reply = OpenAIReply(
            text=text,
            tool_calls=tuple(calls),
            finish_reason=finish_reason,
            usage=usage,
            model=model,
            error=error,
            error_type=error_type,
            error_code=error_code,
            error_message=error_message,
            error_shape=error_shape,
            retry_after=retry_after,
            delay_seconds=delay_seconds,
            ignores_tool_choice=ignores_tool_choice,
        )
        self.enqueue(reply, times=times)
        return reply

    def replay(
        self,
        body: Mapping[str, Any] | str | Path,
        *,
        status: int = 200,
        retry_after: float | None = None,
        delay_seconds: float | None = None,
        times: int = 1,
    ) -> OpenAIReply:
        """Queue a recorded body (a dict, or the path of a JSON file, or of a recorded event
        stream `.sse`) sent exactly as captured."""
        if isinstance(body, Path) and body.suffix == ".sse":
            reply = OpenAIReply(
                raw_stream=body.read_bytes(), retry_after=retry_after, delay_seconds=delay_seconds
            )
            self.enqueue(reply, times=times)
            return reply
        if not isinstance(body, Mapping):
            body = json.loads(Path(body).read_text(encoding="utf-8"))
        reply = OpenAIReply(
            raw=body, status=status, retry_after=retry_after, delay_seconds=delay_seconds
        )
        self.enqueue(reply, times=times)
        return reply

    # ---- answers -----------------------------------------------------------------------------

    def _render(self, reply: OpenAIReply | str, body: dict[str, Any]) -> HTTPAnswer:
        if isinstance(reply, str):
            reply = OpenAIReply(text=reply)
        model = reply.model or str(body.get("model", ""))
        if reply.raw_stream is not None:
            return HTTPAnswer(
                200, {}, {"x-request-id": f"req_fake{len(self.requests):06d}"}, sse=reply.raw_stream
            )
        if reply.raw is not None:
            headers = {"x-request-id": f"req_fake{len(self.requests):06d}"}
            if reply.retry_after is not None:
                headers["retry-after"] = _seconds(reply.retry_after)
            return HTTPAnswer(reply.status, dict(reply.raw), headers)
        if reply.error is not None:
            kind, code, message = ERRORS.get(
                reply.error,
                ("server_error" if reply.error >= 500 else "invalid_request_error", None, "Error."),
            )
            answer = self._error(
                reply.error,
                reply.error_message or message.format(model=model, key="sk-fake***"),
                reply.error_type or kind,
                reply.error_code or code,
                shape=reply.error_shape,
            )
            headers = dict(answer.headers)
            if reply.retry_after is not None:
                headers["retry-after"] = _seconds(reply.retry_after)
            return HTTPAnswer(answer.status, answer.body, headers)

        scripted_calls = reply.tool_calls
        text = reply.text
        if body.get("tool_choice") == "none" and not reply.ignores_tool_choice:
            # With tool_choice "none" the model cannot call tools: it answers in words.
            scripted_calls = ()
            text = text or NO_TOOLS_TEXT
        tool_calls = []
        for call in scripted_calls:
            name, arguments = call[0], call[1]
            call_id = call[2] if len(call) > 2 else f"call_fake{next(self._ids):04d}"
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text if text is not None or tool_calls else "",
            "refusal": None,
        }
        if tool_calls:
            message["tool_calls"] = tool_calls
        prompt_tokens = estimate_tokens([body.get("messages"), body.get("tools")])
        completion_tokens = estimate_tokens([text or "", tool_calls])
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        if reply.usage:
            usage.update(reply.usage)
        completion = {
            "id": f"chatcmpl-fake{len(self.requests):06d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.finish_reason
                    or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "usage": usage,
            "system_fingerprint": "fp_fake",
        }
        return HTTPAnswer(200, completion, {"x-request-id": f"req_fake{len(self.requests):06d}"})

    def _stream_frames(self, answer: dict[str, Any], body: dict[str, Any]) -> list[bytes] | None:
        if not isinstance(answer.get("choices"), list):
            return None  # not a completion (an error body): it goes out whole
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return openai_frames(answer, include_usage=include_usage)

    def _error(
        self,
        status: int,
        message: str,
        error_type: str | None = None,
        code: str | None = None,
        *,
        shape: ErrorShape = "openai",
    ) -> HTTPAnswer:
        body = _error_body(shape, status, message, error_type, code)
        return HTTPAnswer(status, body, {"x-request-id": f"req_fake{len(self.requests):06d}"})

    # ---- the API's rules ---------------------------------------------------------------------

    def _key_of(self, headers: Mapping[str, str]) -> str:
        return headers.get("Authorization", "").removeprefix("Bearer ")

    def _wrong_key(self, key: str) -> HTTPAnswer:
        # OpenAI shows the key's first and last four characters.
        shown = f"{key[:3]}*{key[-4:]}" if len(key) > 8 else key
        _, code, message = ERRORS[401]
        return self._error(
            401,
            message.format(key=shown) + " You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            code,
        )

    def _check(self, body: dict[str, Any]) -> HTTPAnswer | None:
        problem = _problem_with(body)
        return None if problem is None else self._error(400, problem)


def _as_returned(responder: Responder[OpenAIReply]) -> Responder[OpenAIReply]:
    def mark(reply: OpenAIReply | str) -> OpenAIReply | str:
        if isinstance(reply, OpenAIReply):
            return dataclasses.replace(reply, ignores_tool_choice=True)
        return reply

    def answer(body: dict[str, Any]) -> Any:
        produced = responder(body)
        if inspect.isawaitable(produced):

            async def later() -> OpenAIReply | str:
                return mark(await produced)

            return later()
        return mark(produced)

    return answer


def _error_body(
    shape: ErrorShape, status: int, message: str, error_type: str | None, code: str | None
) -> dict[str, Any]:
    if shape == "vllm":
        kind = error_type or ("NotFoundError" if status == 404 else "BadRequestError")
        return {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    if shape == "llamacpp":
        kind = error_type or ("server_error" if status >= 500 else "invalid_request_error")
        return {"error": {"code": status, "message": message, "type": kind}}
    if shape == "ollama":
        return {
            "error": {
                "message": message,
                "type": error_type or "api_error",
                "param": None,
                "code": code,
            }
        }
    if shape == "lmstudio":
        kind = error_type or "invalid_request_error"
        return {"error": {"message": message, "type": kind, "param": code}}
    return {
        "error": {
            "message": message,
            "type": error_type or "invalid_request_error",
            "param": None,
            "code": code,
        }
    }


def _problem_with(body: dict[str, Any]) -> str | None:
    if not body.get("model"):
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    if "tools" in body and not body["tools"]:
        return "[] is too short - 'tools'"
    if "tool_choice" in body and not body.get("tools"):
        return (
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified."
        )
    unanswered: list[str] = []  # tool_call ids of the last assistant message not yet answered
    call_ids: set[str] = set()  # every call id of the request
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', " + (
                "'user', 'tool', 'function' and 'developer'."
            )
        if role == "tool":
            if message.get("tool_call_id") not in unanswered:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceeding message with 'tool_calls'. (messages.[{index}].role)"
                )
            unanswered.remove(message["tool_call_id"])
            if not isinstance(message.get("content"), str | list):
                return f"Invalid type for 'messages[{index}].content'."
            continue
        if unanswered:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(unanswered)}"
            )
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if message.get("content") is None and not calls:
                return (
                    f"Invalid value for 'messages[{index}].content': expected a string, got null."
                )
            for call in calls:
                function = call.get("function") or {}
                if call.get("type") != "function" or not call.get("id"):
                    return f"Missing required parameter: 'messages[{index}].tool_calls[0].id'."
                if not isinstance(function.get("arguments"), str):
                    return (
                        f"Invalid type for 'messages[{index}].tool_calls[0].function.arguments': "
                        "expected a string."
                    )
                if call["id"] in call_ids:
                    return f"Duplicate value for 'tool_call_id' of {call['id']} in message[{index}]"
                call_ids.add(call["id"])
            unanswered = [call["id"] for call in calls]
        elif message.get("content") is None:
            return f"Invalid value for 'messages[{index}].content': expected a string, got null."
        elif isinstance(message.get("content"), list):
            problem = _content_parts_problem(index, message["content"])
            if problem:
                return problem
    if unanswered:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            f"{', '.join(unanswered)}"
        )
    return None


def _content_parts_problem(index: int, parts: list[Any]) -> str | None:
    """User content parts as OpenAI checks them: text parts and `image_url` parts whose URL is
    an http(s) address or a base64 data URL of a JPEG, PNG, GIF or WebP image."""
    for number, part in enumerate(parts):
        where = f"messages[{index}].content[{number}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                return f"Missing required parameter: '{where}.text'."
        elif kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if not isinstance(url, str):
                return f"Missing required parameter: '{where}.image_url.url'."
            if url.startswith("data:"):
                header, _, data = url.partition(",")
                media_type = header[len("data:") :].removesuffix(";base64")
                if media_type not in ("image/jpeg", "image/png", "image/gif", "image/webp"):
                    return f"Invalid MIME type. Only image types are supported. ({where})"
                try:
                    base64.b64decode(data, validate=True)
                except ValueError:
                    return f"Invalid base64 image_url. ({where})"
            elif not url.startswith(("http://", "https://")):
                return f"Invalid image URL: '{where}.image_url.url'."
        else:
            return f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url'..."
    return None


def images_of(body: dict[str, Any]) -> list[bytes]:
    """The decoded images (data URLs) of every user message of a request, in order."""
    found: list[bytes] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for part in content:
            url = (part.get("image_url") or {}).get("url", "") if isinstance(part, dict) else ""
            if url.startswith("data:"):
                found.append(base64.b64decode(url.partition(",")[2]))
    return found


@dataclass(frozen=True, slots=True)
class Transcription:
    """One request to the fake transcription endpoint, as received."""

    file_name: str
    content_type: str
    data: bytes
    model: str
    language: str | None
    response_format: str | None


class FakeTranscriptionServer:
    """`POST /v1/audio/transcriptions` as OpenAI's Whisper API (and faster-whisper-server,
    whisper.cpp's server) serve it: multipart form with `file`, `model` and optional
    `language`/`response_format`; answers `{"text": ...}` (or the bare text for
    `response_format=text`). `transcript` is what it "hears"; `down()` makes it answer 503 as
    a server that is starting or overloaded; `requests` keeps every upload."""

    def __init__(self, transcript: str = "") -> None:
        self.transcript = transcript
        self.requests: list[Transcription] = []
        self._down = False
        self._refusal: tuple[int, str] | None = None
        self._runner: web.AppRunner | None = None
        self._root_url = ""

    async def __aenter__(self) -> FakeTranscriptionServer:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._root_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        """What `transcription.base_url` should be."""
        return self._root_url + "/v1"

    def down(self, is_down: bool = True) -> None:
        self._down = is_down

    def refuse(self, status: int, message: str) -> None:
        """Answer every upload with this error, in OpenAI's error shape (e.g. 400 "Invalid file
        format." for a file it cannot decode)."""
        self._refusal = (status, message)

    async def _handle(self, request: web.Request) -> web.Response:
        if self._down:
            return web.json_response(
                {"error": {"message": "Service Unavailable", "type": "server_error"}}, status=503
            )
        form = await request.post()
        if self._refusal is not None:
            status, message = self._refusal
            error = {"message": message, "type": "invalid_request_error", "param": None}
            return web.json_response({"error": error}, status=status)
        upload = form.get("file")
        model = form.get("model")
        if not isinstance(upload, web.FileField) or not isinstance(model, str) or not model:
            return web.json_response(
                {"error": {"message": "file and model are required", "type": "invalid_request"}},
                status=400,
            )
        language = form.get("language")
        response_format = form.get("response_format")
        self.requests.append(
            Transcription(
                upload.filename,
                upload.content_type,
                upload.file.read(),
                model,
                language if isinstance(language, str) else None,
                response_format if isinstance(response_format, str) else None,
            )
        )
        if response_format == "text":
            return web.Response(text=self.transcript)
        return web.json_response({"text": self.transcript})


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of a request body (for echo responders)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(
            part.get("text", "") for part in content or [] if part.get("type") == "text"
        )
    return ""
