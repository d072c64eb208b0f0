"""Logging scrubs secrets everywhere: structlog events (in values, lists and sensitive field names),
standard-library loggers of the libraries, JSON lines when `logging.json` is on, URL passwords and
secret query parameters even when nobody configured them, and the CLI's stderr."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Iterator

import pytest
import structlog

from bruce_bot.logs import REDACTED, configure_logging, scrubbed_stderr, scrubber

BOT_TOKEN = "123456:AAFakeTelegramBotToken_xyz"
API_KEY = "sk-ant-fake-0123456789abcdef"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """configure_logging changes process-wide state; put it back for the other tests."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()
    scrubber.set_secrets(())


def test_secret_in_a_field_value_a_list_and_sensitive_field_names_is_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(secrets=[BOT_TOKEN, API_KEY])
    log = structlog.get_logger("bruce_bot.test")
    log.warning(
        "delivery_failed",
        url=f"https://api.telegram.org/bot{BOT_TOKEN}/sendMessage",
        attempts=[f"key={API_KEY}", "plain", 3],
        api_key="any-value-here",
        token="another-value",
        chat_id=42,
    )
    err = capsys.readouterr().err
    assert "delivery_failed" in err
    assert BOT_TOKEN not in err and API_KEY not in err
    assert "any-value-here" not in err and "another-value" not in err
    assert f"https://api.telegram.org/bot{REDACTED}/sendMessage" in err
    assert f"key={REDACTED}" in err
    assert "plain" in err
    assert "chat_id=42" in err


def test_secret_in_the_event_text_nested_values_and_exceptions_is_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(secrets=[BOT_TOKEN])
    log = structlog.get_logger("bruce_bot.test")
    log.info(f"calling bot{BOT_TOKEN}")
    log.info("request_sent", detail={"url": f"/bot{BOT_TOKEN}/getMe"}, pair=(BOT_TOKEN, "x"))
    try:
        raise RuntimeError(f"GET /bot{BOT_TOKEN}/getMe failed")
    except RuntimeError:
        log.exception("poll_failed")
    err = capsys.readouterr().err
    assert "request_sent" in err and "poll_failed" in err
    assert "RuntimeError" in err
    assert BOT_TOKEN not in err
    assert err.count(REDACTED) >= 4


def test_stdlib_library_loggers_are_scrubbed(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(secrets=[BOT_TOKEN])
    logging.getLogger("httpx").warning(f"GET https://api.telegram.org/bot{BOT_TOKEN}/getMe")
    logging.getLogger("telegram.ext").error("HTTP Request: POST %s", f"/bot{BOT_TOKEN}/getUpdates")
    err = capsys.readouterr().err
    assert f"https://api.telegram.org/bot{REDACTED}/getMe" in err
    assert f"/bot{REDACTED}/getUpdates" in err
    assert BOT_TOKEN not in err


def test_a_token_nobody_told_the_scrubber_of_is_hidden_by_its_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging()  # no configured secret: a token a library printed, or a stray one
    slack, app = "xoxb-1234567890-0987654321-AbCdEfGhIjKl", "xapp-1-A0123456789-abcdef"
    logging.getLogger("slack_sdk").warning("POST with %s", f"Authorization: Bearer {slack}")
    structlog.get_logger("bruce_bot.test").warning("odd", detail=f"app={app}; session=42")
    err = capsys.readouterr().err
    assert slack not in err and app not in err
    assert "session=42" in err  # an id is no token


def test_chatty_library_info_lines_are_hidden_at_info_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", secrets=[BOT_TOKEN])
    logging.getLogger("httpx").info("HTTP Request: GET /getUpdates 200 OK")
    logging.getLogger("bruce_bot.something").info("ours_visible")
    err = capsys.readouterr().err
    assert "getUpdates" not in err
    assert "ours_visible" in err


def test_json_output_is_one_object_per_line_with_the_event_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("info", json_output=True, secrets=[API_KEY])
    log = structlog.get_logger("bruce_bot.test")
    log.info("turn_finished", session_id=7, note=f"key {API_KEY}")
    log.warning("delivery_failed", password="hunter2-secret")
    logging.getLogger("httpx").warning("GET %s", f"https://x.example/?key={API_KEY}")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("tool_failed", tool="web_fetch")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is a JSON object on its own
    assert [e["event"] for e in events] == [
        "turn_finished",
        "delivery_failed",
        f"GET https://x.example/?key={REDACTED}",
        "tool_failed",
    ]
    assert events[0]["session_id"] == 7
    assert events[0]["note"] == f"key {REDACTED}"
    assert events[0]["level"] == "info"
    assert "timestamp" in events[0]
    assert events[1]["password"] == REDACTED
    assert "ValueError: boom" in events[3]["exception"]
    assert API_KEY not in err and "hunter2-secret" not in err


def test_debug_events_are_filtered_at_info_level(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    log = structlog.get_logger("bruce_bot.test")
    log.debug("too_detailed")
    log.info("worth_seeing")
    err = capsys.readouterr().err
    assert "too_detailed" not in err
    assert "worth_seeing" in err


def test_secret_nested_in_dicts_is_redacted_even_when_json_would_escape_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    password = 'pa"ss\\w\u00f6rd-123'  # JSON escapes the quote, backslash and ö
    configure_logging(json_output=True, secrets=[password])
    structlog.get_logger("bruce_bot.test").error(
        "database_unreachable",
        detail={"dsn": f"postgresql://bruce:{password}@db/bruce", "auth": {"token": "t-123"}},
        attempts=[{"error": f"bad password {password}"}],
    )
    event = json.loads(capsys.readouterr().err)
    assert event["detail"]["dsn"] == f"postgresql://bruce:{REDACTED}@db/bruce"
    assert event["detail"]["auth"]["token"] == REDACTED
    assert event["attempts"] == [{"error": f"bad password {REDACTED}"}]


def test_exc_info_passed_explicitly_still_renders_the_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json_output=True, secrets=[API_KEY])
    try:
        raise KeyError(API_KEY)
    except KeyError as exc:
        caught = exc
    structlog.get_logger("bruce_bot.test").error(
        "lookup_failed", exc_info=(type(caught), caught, caught.__traceback__)
    )
    event = json.loads(capsys.readouterr().err)
    assert "KeyError" in event["exception"]
    assert API_KEY not in event["exception"]


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "connect postgresql://bruce:pw-9Zq@db:5432/bruce failed",
            "postgresql://bruce:***@db:5432",
        ),
        ("GET https://ghp_tokenAsUser9Zq@git.example/x", "https://***@git.example/x"),
        ("GET https://api.example/v1?q=news&api_key=pw-9Zq&n=3", "?q=news&api_key=***&n=3"),
        ("GET https://hooks.example/x?access_token=pw-9Zq", "?access_token=***"),
    ],
    ids=["url-password", "url-user-token", "query-key", "query-token"],
)
def test_url_passwords_and_secret_query_parameters_are_masked_without_being_configured(
    capsys: pytest.CaptureFixture[str], line: str, shown: str
) -> None:
    configure_logging()
    logging.getLogger("httpx").warning(line)
    structlog.get_logger("bruce_bot.test").warning("request_failed", detail=line)
    err = capsys.readouterr().err
    assert "pw-9Zq" not in err and "ghp_tokenAsUser9Zq" not in err
    assert err.count(shown) == 2


def test_text_without_secrets_is_left_alone() -> None:
    text = "see https://example.com/a?q=1&page=2 and http://127.0.0.1:8080/ (user@example.com)"
    assert scrubber.scrub(text) == text


def test_whatever_reaches_stderr_inside_scrubbed_stderr_is_scrubbed_then_stderr_is_restored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scrubber.set_secrets([API_KEY])
    original = sys.stderr
    with scrubbed_stderr():
        print(f"bruce: cannot start: the key {API_KEY} was refused", file=sys.stderr)
        try:
            raise RuntimeError(f"postgresql://bruce:hunter2-secret@db/bruce {API_KEY}")
        except RuntimeError:
            traceback.print_exc()
    assert sys.stderr is original
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError" in err
    assert f"the key {REDACTED} was refused" in err
    assert "postgresql://bruce:***@db/bruce" in err
    assert API_KEY not in err and "hunter2-secret" not in err
