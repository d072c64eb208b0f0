"""Parameters and bodies, validated by their pydantic models before any query runs.

A value the model refuses is a 400 whose message names the parameter, says what it allows (read
from the model's JSON Schema, so the message and `/api/openapi.json` cannot disagree) and what
it means (the field's description), and quotes the value back.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, ValidationError
from pydantic_core import ErrorDetails

from bruce_bot.web.wire import ApiError

MAX_ID = 2**63 - 1  # SQL's 64-bit integers: a larger id would overflow the query
MAX_LIMIT = 500
M = TypeVar("M", bound=BaseModel)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _blank_is_none(value: Any) -> Any:
    return None if value == "" else value


def _flag(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE + _FALSE:
            return text in _TRUE
        raise ValueError("not a flag")
    return value


# On an optional parameter: absent and empty (`?session_id=`) are the same, no filter.
BLANK_IS_NONE = BeforeValidator(_blank_is_none)
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
OptionalId = Annotated[Id | None, BLANK_IS_NONE]
Flag = Annotated[bool, BeforeValidator(_flag)]


def limit(default: int, what: str) -> Any:
    """The `limit` field of a listing: how many rows at most, bounded by `MAX_LIMIT`."""
    return Field(default, ge=1, le=MAX_LIMIT, description=f"how many {what} at most")


def parse(model: type[M], data: Any, *, field: str = "") -> M:
    """`data` validated by `model`, or the 400 that says what is wrong with it; `field` is put
    before a name in the messages ("field " for a body)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        properties = _properties(model)
        messages = [_problem(properties, error, field) for error in exc.errors()]
        raise ApiError("; ".join(messages)) from None


@cache
def _properties(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()["properties"]


def _problem(properties: dict[str, Any], error: ErrorDetails, field: str) -> str:
    name = str(error["loc"][0]) if error["loc"] else ""
    schema = properties.get(name)
    if schema is None:
        return error["msg"]
    about = f" ({schema['description']})" if "description" in schema else ""
    if error["type"] == "platform":  # wire.PlatformName's words list the platforms
        return f"{field}'{name}': {error['msg']}"
    if error["type"] == "missing":
        return f"{field}'{name}' is required and must be {allowed(schema)}{about}"
    return f"{field}'{name}' must be {allowed(schema)}{about}, not {_shown(error['input'])}"


def allowed(schema: dict[str, Any]) -> str:
    """What a JSON Schema allows, in words: "an integer from 1 to 500", "one of a, b"."""
    kinds = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    kind = kinds[0] if kinds else schema
    if "enum" in kind:
        return "one of " + ", ".join(str(value) for value in kind["enum"])
    words = {"number": "a number", "boolean": "true or false"}
    if kind.get("type") == "integer":
        return _integer(kind.get("minimum"), kind.get("maximum"))
    if kind.get("type") == "string":
        return _string(kind.get("minLength", 0), kind.get("maxLength"), kind.get("pattern"))
    return words.get(kind.get("type", ""), "valid")


def _integer(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"an integer from {low} to {high}"
    if low is not None:
        return f"an integer of at least {low}"
    return "an integer"


def _string(shortest: int, longest: int | None, pattern: str | None) -> str:
    if pattern is not None:
        return f"a string matching {pattern}"
    text = "a non-empty string" if shortest else "a string"
    return text + (f" of at most {longest} characters" if longest is not None else "")


def _shown(value: Any) -> str:
    """A value as quoted back in an error message (cut short)."""
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "…")
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:40] + "…"
