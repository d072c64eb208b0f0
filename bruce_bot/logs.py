"""Structured logging for the whole process, with secrets scrubbed everywhere.

structlog renders events (a snake_case name plus fields) readably on a console or as JSON lines
(`logging.json: true`). Standard-library loggers of the libraries (httpx, uvicorn, each
platform's SDK: bruce_bot/platforms.py) go through the same processors, so a bot token inside a
request URL or an API key in an error message is replaced by `***` before anything is written.
Besides the configured secrets, the password of any URL (`postgresql://bruce:***@db/bruce`) and
the value of a query parameter named like a secret (`?api_key=***`) are masked. The CLI sends
its own error output, tracebacks included, through the same scrubber (`scrubbed_stderr`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any, TextIO

import structlog

from bruce_bot import platforms
from bruce_bot.secret_shapes import mask_known_tokens

SENSITIVE_KEY = re.compile(r"(token|api_key|apikey|secret|password|authorization)", re.IGNORECASE)
REDACTED = "***"
# scheme://user:password@ -> scheme://user:***@ ; scheme://user@ (a token as user) -> scheme://***@
_URL_USERINFO = re.compile(
    r"(?P<scheme>(?:\b[A-Za-z][A-Za-z0-9+.-]*:)?//)(?P<userinfo>[^/\s@'\"]*)@"
)
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&][\w.-]*(?:token|key|secret|password|passwd|signature)[\w.-]*=)[^&#\s'\"]+",
    re.IGNORECASE,
)


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _password = match.group("userinfo").partition(":")
    return f"{match.group('scheme')}{user + ':' if colon else ''}{REDACTED}@"


# Chatty libraries: their INFO lines repeat request URLs (which may hold tokens) on every poll.
QUIET_LOGGERS = (
    "alembic",
    "httpx",
    "httpcore",
    "httpx2",  # the anthropic SDK's own fork of httpx: one INFO line per LLM call
    "httpcore2",
    "apscheduler",
    "aiosqlite",
    "asyncio",
)


class SecretScrubber:
    """A structlog processor that removes known secret values and sensitive fields."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.set_secrets(secrets)

    def set_secrets(self, secrets: Iterable[str]) -> None:
        self._secrets = {s for s in secrets if s}
        unique = sorted(self._secrets, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in unique)) if unique else None

    def add_secret(self, secret: str) -> None:
        """One more value to scrub: a secret stored in the database (a key saved in the
        dashboard), known only once read."""
        if len(secret) >= 4 and secret not in self._secrets:
            self.set_secrets([*self._secrets, secret])

    def scrub(self, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if self._pattern is not None:
            value = self._pattern.sub(REDACTED, value)
        value = mask_known_tokens(value)
        if "//" in value:
            value = _URL_USERINFO.sub(_mask_userinfo, value)
        if "=" in value:
            value = _SECRET_QUERY.sub(rf"\g<name>{REDACTED}", value)
        return value

    def scrub_value(self, key: str, value: Any) -> Any:
        """A field's value with secrets removed, looking inside nested lists and dicts."""
        if SENSITIVE_KEY.search(key) and value and not isinstance(value, (bool, int, float)):
            return REDACTED
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, tuple):  # exc_info tuples stay tuples
            return tuple(self.scrub_value("", item) for item in value)
        if isinstance(value, (list, set, frozenset)):
            return [self.scrub_value("", item) for item in value]
        if isinstance(value, dict):
            return {k: self.scrub_value(str(k), v) for k, v in value.items()}
        return value

    def __call__(
        self, _logger: Any, _name: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in list(event.items()):
            event[key] = self.scrub_value(key, value)
        return event


scrubber = SecretScrubber()


def _scrub_rendered(_logger: Any, _name: str, event: Any) -> Any:
    # Last line of defence: the rendered line itself (covers exceptions and positional args).
    return scrubber.scrub(event)


def configure_logging(
    level: str = "info", json_output: bool = False, secrets: Iterable[str] = ()
) -> None:
    scrubber.set_secrets(secrets)
    numeric_level = getattr(logging, level.upper(), logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        scrubber,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_output
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if json_output else _identity,
            renderer,
            _scrub_rendered,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric_level)
    sdk_loggers = [name for spec in platforms.platforms() for name in spec.loggers]
    for name in [*QUIET_LOGGERS, *sdk_loggers]:
        logging.getLogger(name).setLevel(max(numeric_level, logging.WARNING))


def _identity(_logger: Any, _name: str, event: Any) -> Any:
    return event


class ScrubbedStream:
    """A text stream that scrubs everything written to it, delegating all else to `stream`."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(scrubber.scrub(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def scrubbed_stderr() -> Iterator[None]:
    """Within the block, whatever reaches sys.stderr (prints, tracebacks, log lines) is scrubbed."""
    original = sys.stderr
    if isinstance(original, ScrubbedStream):
        yield
        return
    sys.stderr = ScrubbedStream(original)
    try:
        yield
    finally:
        sys.stderr = original
