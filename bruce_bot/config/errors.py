"""A configuration's problems in words: `ConfigError`, one line per problem naming the key, the bad
value and the fix ("did you mean ...?"). A value that may be a secret is never shown: keys named
like a token, key, secret or password are named without their value, a value (or a key name)
shaped like a token is hidden under any key (`secret_shapes.py`), and the password of a URL
(`postgresql://bruce:***@host/db`) is masked."""

from __future__ import annotations

import difflib
import re
from typing import Any, get_args, get_origin

from pydantic import (
    BaseModel,
)
from pydantic_core import ErrorDetails

from bruce_bot.config.schema import Config
from bruce_bot.secret_shapes import HIDDEN_SHAPE, looks_secret


class ConfigError(Exception):
    """An invalid configuration; `problems` holds one human-readable line per problem."""

    def __init__(self, problems: list[str], source: str = "configuration") -> None:
        self.problems = problems
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"Invalid {self.source}:"]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)


def _model_for(location: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Config
    keyed = False  # the part before was a mapping of names to sections (mcp.servers)
    for part in location[:-1]:
        if keyed:
            keyed = False
            continue
        if model is None or not isinstance(part, str):
            return None
        field = model.model_fields.get(part)
        annotation = field.annotation if field else None
        if get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
            keyed = True
        model = (
            annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else None
        )
    return model


# Key names whose values may be secrets: a part of the name (split at "_", "-", ".") among these.
_SECRET_KEY_PARTS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "pw"})
_URL_USERINFO = re.compile(r"(?P<scheme>(?:\b[A-Za-z][A-Za-z0-9+.-]*:)?//)(?P<userinfo>[^/\s@]*)@")
HIDDEN = "(value hidden: it may be a secret)"


def is_secret_key(name: str) -> bool:
    """Whether a key named `name` may hold a secret (auth_token, brave_api_key, password...)."""
    return any(part in _SECRET_KEY_PARTS for part in re.split(r"[_\-.]", name.lower()))


def mask_url_userinfo(text: str) -> str:
    """`postgresql://bruce:pw@host/db` -> `postgresql://bruce:***@host/db` (a lone user: `***@`)."""

    def mask(match: re.Match[str]) -> str:
        user, colon, _password = match.group("userinfo").partition(":")
        return f"{match.group('scheme')}{user + ':' if colon else ''}***@"

    return _URL_USERINFO.sub(mask, text)


def _redacted(value: Any) -> Any:
    """`value` with URL passwords masked and values under secret-named keys hidden."""
    if isinstance(value, str):
        return mask_url_userinfo(value)
    if isinstance(value, dict):
        return {
            k: "***" if is_secret_key(str(k)) and v not in (None, "") else _redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_redacted(item) for item in value]
    return value


def _key_of(location: tuple[Any, ...]) -> str:
    key = ""
    for part in location:
        if isinstance(part, str) and looks_secret(part):
            part = "(key name hidden: it looks like a secret)"  # a token pasted as a key
        key += f"[{part}]" if isinstance(part, int) else f"{'.' if key else ''}{part}"
    return key


def _holds_secret_shape(value: Any) -> bool:
    if isinstance(value, str):
        return looks_secret(value)
    if isinstance(value, dict):
        return any(_holds_secret_shape(k) or _holds_secret_shape(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_secret_shape(item) for item in value)
    return False


def _shown(location: tuple[Any, ...], value: Any) -> str:
    """How a bad value appears in an error: its repr, unless it may be a secret (by the key's
    name, or by its own shape whatever the key: a token pasted into `web.port`)."""
    names = [part for part in location if isinstance(part, str)]
    if names and is_secret_key(names[-1]):
        return HIDDEN
    redacted = _redacted(value)
    if _holds_secret_shape(redacted):
        return HIDDEN_SHAPE
    return repr(redacted)


def describe(error: ErrorDetails) -> str:
    location = tuple(error["loc"])
    key = _key_of(location)
    value = error.get("input")
    shown = _shown(location, value)
    kind = error["type"]
    if kind == "extra_forbidden":
        model = _model_for(location)
        known = sorted(
            (field.alias or name) for name, field in (model.model_fields.items() if model else [])
        )
        guess = difflib.get_close_matches(str(location[-1]), known, n=1)
        hint = f"did you mean '{guess[0]}'?" if guess else f"known keys here: {', '.join(known)}"
        return f"{key}: unknown key; {hint}"
    message = mask_url_userinfo(error["msg"].removeprefix("Value error, "))
    if looks_secret(message):  # a validator's own words may quote the value
        message = "is not valid here"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"{key}: {shown} is not allowed; use one of {expected}"
    if kind in {"model_type", "dict_type"}:
        return (
            f"{key}: {shown} has the wrong type; expected a section of indented `key: value` lines"
        )
    if kind in {"int_parsing", "float_parsing", "bool_parsing", "list_type", "string_type"}:
        return f"{key}: {shown} has the wrong type; {message.lower()}"
    if isinstance(value, dict):  # a check across a whole section: the message names the keys
        return f"{key}: {message}"
    return (
        f"{key}: {shown} {message}" if kind == "value_error" else f"{key}: {message} (got {shown})"
    )
