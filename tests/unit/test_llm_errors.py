"""The one mapping from a server's refusal to Bruce's errors, fed the error bodies real servers sent
(tests/fixtures/anthropic and tests/fixtures/openai, statuses as their READMEs give them), and
the shared call that reaches it from either SDK's exceptions, without an SDK."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from bruce_bot.domain import LLMResponse
from bruce_bot.llm import base
from bruce_bot.llm.call import SDKErrors, call_model
from bruce_bot.llm.errors import ErrorReply, error_for_reply

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SECRET = "sk-test-0123456789abcdef"
MODEL = "some-model"

# What each recorded error body means; the status each came with is the one its README gives.
MEANINGS: dict[tuple[type[base.LLMError], str], tuple[str, ...]] = {
    (base.LLMContextOverflowError, "context too long"): (
        "anthropic/error_prompt_too_long",
        "anthropic/error_input_and_max_tokens_exceed_context_limit",
        "anthropic/error_request_too_large",
        "anthropic/error_request_size_exceeds_context_window",
        "openai/error_llamacpp_exceed_context_size",
        "openai/error_llamacpp_context_size_exceeded_500",
        "openai/error_vllm_max_context_length",
        "openai/error_openai_context_length_exceeded",
        "openai/error_deepseek_context_length",
    ),
    (base.LLMQuotaExceededError, "no credit"): (
        "anthropic/error_credit_balance_too_low",
        "anthropic/error_billing",
        "openai/error_openai_insufficient_quota",
        "openai/error_openrouter_insufficient_credits",
    ),
    (base.LLMQuotaExceededError, "usage limit reached"): ("anthropic/error_usage_limits_reached",),
    (base.LLMAuthenticationError, "authentication failed"): (
        "anthropic/error_invalid_api_key",
        "openai/error_openai_invalid_api_key",
    ),
    (base.LLMModelNotFoundError, "model not found"): (
        "anthropic/error_model_not_found",
        "openai/error_ollama_model_not_found",
        "openai/error_vllm_model_does_not_exist",
        "openai/error_lmstudio_no_models_loaded",
    ),
    (base.LLMUnavailableError, "overloaded"): ("anthropic/error_overloaded",),
    # A tokens-per-minute 429 talks of reducing tokens, but waiting is what helps.
    (base.LLMUnavailableError, "rate limited"): ("openai/error_openai_tokens_per_min_429",),
    # Thinking rules broken: the request was wrong, not too long.
    (base.LLMRequestError, "request rejected"): (
        "anthropic/error_thinking_block_expected",
        "anthropic/error_invalid_thinking_signature",
        "anthropic/error_max_tokens_not_above_thinking_budget",
        "anthropic/error_thinking_cache_control",
        "anthropic/error_thinking_forced_tool_choice",
    ),
}


def statuses_in_readmes() -> dict[str, int]:
    """`| `error_x.json` | 400 | ...` rows of the fixture READMEs, by fixture name."""
    row = re.compile(r"^\| `(error_[a-z0-9_]+)\.json` \| (\d{3}) \|", re.MULTILINE)
    return {
        f"{vendor}/{name}": int(status)
        for vendor in ("anthropic", "openai")
        for name, status in row.findall((FIXTURES / vendor / "README.md").read_text("utf-8"))
    }


STATUS = statuses_in_readmes()
RECORDED = [
    (name, STATUS.get(name, 0), error, reason)
    for (error, reason), names in MEANINGS.items()
    for name in names
]


def body_of(name: str) -> Any:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def message_of(body: dict[str, Any]) -> str:
    error = body.get("error")
    return str((error if isinstance(error, dict) else body)["message"])


def test_every_recorded_error_body_is_mapped_here_with_the_status_it_came_with() -> None:
    kept = {
        f"{vendor}/{path.stem}"
        for vendor in ("anthropic", "openai")  # the LLM vendors' (telegram/ has its own)
        for path in (FIXTURES / vendor).glob("error_*.json")
    }

    named = [name for name, *_ in RECORDED]

    assert sorted(named) == sorted(set(named))  # each means one thing
    assert kept == set(named) == set(STATUS)


@pytest.mark.parametrize(
    ("name", "status", "error", "reason"), RECORDED, ids=[r[0] for r in RECORDED]
)
def test_a_recorded_error_body_means_what_the_server_meant(
    name: str, status: int, error: type[base.LLMError], reason: str
) -> None:
    body = body_of(name)

    mapped = error_for_reply(ErrorReply.from_body(status, body), model=MODEL, secret=SECRET)

    assert (type(mapped), mapped.reason) == (error, reason)
    if error is base.LLMAuthenticationError:
        # The server's words may quote the key: the detail only says what to check.
        assert (
            mapped.detail
            == f"HTTP {status}: llm.api_key was refused (is it right and still active?)"
        )
    elif error is not base.LLMUnavailableError:
        assert mapped.detail.startswith(f"HTTP {status}: {message_of(body)}")


@pytest.mark.parametrize(
    ("name", "status", "error", "reason"), RECORDED, ids=[r[0] for r in RECORDED]
)
def test_a_body_the_openai_sdk_unwrapped_reads_the_same(
    name: str, status: int, error: type[base.LLMError], reason: str
) -> None:
    body = body_of(name)
    unwrapped = body["error"] if isinstance(body.get("error"), dict) else body  # as the SDK does

    assert ErrorReply.from_body(status, unwrapped) == ErrorReply.from_body(status, body)


def test_an_unknown_model_names_the_model_asked_for_and_where_to_fix_it() -> None:
    reply = ErrorReply.from_body(404, body_of("anthropic/error_model_not_found"))

    mapped = error_for_reply(reply, model="opus-4")

    assert isinstance(mapped, base.LLMModelNotFoundError)
    assert mapped.model == "opus-4"
    assert "model: opus-4" in mapped.detail
    assert "(asked for 'opus-4')" in mapped.detail
    assert "llm.model" in mapped.detail


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "<html><body>502 Bad Gateway</body></html>",
            ErrorReply(502, "<html><body>502 Bad Gateway</body></html>"),
        ),
        ({"error": "model 'x' not found"}, ErrorReply(502, "model 'x' not found")),
        ({"detail": "nothing we know"}, ErrorReply(502, "Error code: 502")),
        (None, ErrorReply(502, "Error code: 502")),
        (
            {"error": {"message": "Busy", "code": 502, "type": "server_error"}},
            ErrorReply(502, "Busy", "502", "server_error"),
        ),
    ],
    ids=["plain-text", "error-as-text", "no-message", "no-body", "code-and-type"],
)
def test_error_bodies_of_every_shape_are_read(body: object, expected: ErrorReply) -> None:
    assert ErrorReply.from_body(502, body, fallback="Error code: 502") == expected


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, base.LLMRequestError),
        (401, base.LLMAuthenticationError),
        (402, base.LLMQuotaExceededError),
        (404, base.LLMModelNotFoundError),
        (413, base.LLMContextOverflowError),
        (429, base.LLMUnavailableError),
        (500, base.LLMUnavailableError),
        (529, base.LLMUnavailableError),
    ],
)
def test_the_api_key_never_reaches_an_error_detail(status: int, error: type[base.LLMError]) -> None:
    reply = ErrorReply(status, f"the key {SECRET} is not welcome here")

    mapped = error_for_reply(reply, model=MODEL, secret=SECRET)

    assert type(mapped) is error
    assert SECRET not in str(mapped)


# ---- the shared call, through exceptions shaped like both SDKs' (Stainless) ------------------


class APIError(Exception):
    pass


class APIConnectionError(APIError):
    pass


class APITimeoutError(APIConnectionError):
    pass


class APIStatusError(APIError):
    def __init__(self, status: int, body: object) -> None:
        super().__init__(f"Error code: {status}")
        self.message = f"Error code: {status}"
        self.status_code = status
        self.body = body
        self.request_id = "req_test"


SDK = SDKErrors("stainless", APIError, APITimeoutError, APIConnectionError, APIStatusError)
ANSWER = LLMResponse(text="Hello.", model=MODEL, response_id="msg_1")


async def failing(exc: Exception) -> LLMResponse:
    async def send() -> object:
        raise exc

    return await call_model(SDK, send, lambda _: ANSWER, model=MODEL, secret=SECRET)


async def test_a_refusal_reaches_the_core_mapped_and_logged_with_its_request_id() -> None:
    refusal = APIStatusError(429, body_of("openai/error_openai_insufficient_quota")["error"])

    with capture_logs() as logs, pytest.raises(base.LLMQuotaExceededError) as caught:
        await failing(refusal)

    assert caught.value.__cause__ is refusal
    (failed,) = [entry for entry in logs if entry["event"] == "llm_call_failed"]
    assert (failed["provider"], failed["status"], failed["request_id"]) == (
        "stainless",
        429,
        "req_test",
    )


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (APITimeoutError("timed out"), "timed out"),
        (APIConnectionError("connection failed"), "unreachable"),
        (APIError("the answer did not validate"), "invalid response"),
        (ValueError("Expecting value: line 1 column 1 (char 0)"), "invalid response"),
        (AttributeError("'NoneType' object has no attribute 'content'"), "invalid response"),
    ],
    ids=["timeout", "connection", "sdk-other", "not-json", "unforeseen-shape"],
)
async def test_a_call_that_got_no_usable_answer_is_unavailable(exc: Exception, reason: str) -> None:
    with pytest.raises(base.LLMUnavailableError) as caught:
        await failing(exc)

    assert caught.value.reason == reason


async def test_an_error_the_provider_raised_while_reading_passes_unchanged() -> None:
    raised = base.LLMUnavailableError("invalid response", "no choices in response 'x'")

    async def send() -> str:
        return "raw"

    def read(raw: str) -> LLMResponse:
        raise raised

    with pytest.raises(base.LLMUnavailableError) as caught:
        await call_model(SDK, send, read, model=MODEL, secret=SECRET)

    assert caught.value is raised


async def test_a_finished_call_is_logged_with_the_providers_own_fields() -> None:
    async def send() -> str:
        return "raw"

    with capture_logs() as logs:
        response = await call_model(
            SDK, send, lambda raw: ANSWER, model=MODEL, secret=SECRET, thinking=True
        )

    assert response is ANSWER
    (finished,) = [entry for entry in logs if entry["event"] == "llm_call_finished"]
    assert (finished["provider"], finished["response_id"], finished["thinking"]) == (
        "stainless",
        "msg_1",
        True,
    )
