"""How the web app speaks on the wire, in one place for every part of it: the JSON error answer
(`{"error": message}`), times as ISO-8601, and request bodies read as JSON objects with a size cap.

A handler that finds the request wrong raises `ApiError`; the app turns it into the error answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, PlainSerializer, WithJsonSchema
from pydantic_core import PydanticCustomError
from starlette.requests import Request
from starlette.responses import JSONResponse

from bruce_bot import platforms

MAX_BODY_BYTES = 1_000_000


class ErrorAnswer(BaseModel):
    """What every refusal carries: a message that says what to fix."""

    error: str


class ApiError(Exception):
    """A request the client must fix: answered with `status` and `{"error": message}`."""

    def __init__(
        self, message: str, status: int = 400, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.headers = headers  # e.g. Retry-After on a 503


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        ErrorAnswer(error=message).model_dump(mode="json"), status_code=status, headers=headers
    )


def iso(value: date | None) -> str | None:
    return value.isoformat() if value else None


# A time in an answer: serialised with `iso` (an aware time keeps its offset, "+00:00").
Time = Annotated[
    datetime,
    PlainSerializer(iso, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def _a_platform(name: str) -> str:
    try:
        platforms.get(name)
    except ValueError as exc:  # its words name the platforms
        raise PydanticCustomError("platform", str(exc)) from None
    return name


# A platform's name in a request: one of the registry's (bruce_bot/platforms.py), read when the
# request comes, so a platform registered later is accepted too.
PlatformName = Annotated[
    str,
    AfterValidator(_a_platform),
    WithJsonSchema({"type": "string", "description": "a platform: telegram, discord, ..."}),
]


async def capped_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None when it is larger than `limit` bytes (a declared length is
    believed, a chunked body is counted as it comes and not read further)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()  # extended in place: `bytes +=` copies it all on each chunk
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def json_body(request: Request, example: str, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The request's JSON object, at most `limit` bytes; `example` shows a valid body in the
    error messages."""
    body = await capped_body(request, limit)
    if body is None:
        raise ApiError(f"request body too large; the limit is {limit} bytes", 413)
    try:
        data = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(f"body must be JSON, e.g. {example}") from None
    if not isinstance(data, dict):
        raise ApiError(f"body must be a JSON object, e.g. {example}")
    return data
