"""What a person is told when a turn cannot be answered, and how often.

Each failure the core understands has one short reply that says what happened and names the fix
(the setting to check, the account to top up), never a traceback or the server's raw JSON. The
fix names where the setting really comes from (`FixHints`, settings/sources.py): a key saved
in the dashboard is checked in its Settings, with no restart; one from config.yml is checked
there (a restart reads it), and when the dashboard runs the reply says it can set one at once
instead.
While one outage lasts, a chat is told once: the same failure again in the same chat, before a
turn there has succeeded, is recorded (the messages stay in the history, the log has the ids)
but not repeated to the user. Scheduled briefings always report their failure: nobody is
waiting in the chat to have seen the first notice.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from bruce_bot.llm.base import (
    LLMAuthenticationError,
    LLMContextOverflowError,
    LLMError,
    LLMModelNotFoundError,
    LLMNotConfiguredError,
    LLMQuotaExceededError,
    LLMRequestError,
    LLMUnavailableError,
)
from bruce_bot.settings.sources import FixHints

log = structlog.get_logger(__name__)

NO_HINTS = FixHints()  # no dashboard, every setting from config.yml

# The replies without a dashboard to point to (web.enabled: false), all from config.yml.
NOT_CONFIGURED = (
    "I'm not connected to a language model yet. The owner needs to set llm.api_key (for example "
    "api_key: ${ANTHROPIC_API_KEY}) in config.yml, or point llm.base_url at an "
    "OpenAI-compatible server, and restart me."
)
AUTHENTICATION = (
    "The language model rejected my API key, so I can't answer right now. The owner needs to "
    "check llm.api_key in config.yml (is the key right and still active?) and restart me."
)
MODEL_NOT_FOUND = (
    "The language model server doesn't know the model '{model}'. The owner needs to set "
    "llm.model in config.yml to a model the server offers (on Ollama: `ollama pull {model}`, or "
    "one from `ollama list`) and restart me."
)
# With the dashboard running at {url}.
NOT_CONFIGURED_DASHBOARD = (
    "I'm not connected to a language model yet. The owner can connect one in the dashboard: "
    "open {url}/chat, choose the provider, paste the key and test it — no restart needed. "
    "Or set llm.api_key (for example api_key: ${{ANTHROPIC_API_KEY}}) in config.yml, or point "
    "llm.base_url at an OpenAI-compatible server, and restart me."
)
AUTHENTICATION_DASHBOARD = (
    "The language model rejected my API key, so I can't answer right now. The owner needs to "
    "check the API key in the dashboard's Settings (Bruce at {url}/settings): is it right and "
    "still active? A new key there applies at once, no restart needed."
)
AUTHENTICATION_CONFIG = (
    "The language model rejected my API key, so I can't answer right now. The owner needs to "
    "check llm.api_key in config.yml (is the key right and still active?) and restart me — or "
    "paste a working key in the dashboard's Settings (Bruce at {url}/settings), which applies "
    "at once, no restart needed."
)
MODEL_NOT_FOUND_DASHBOARD = (
    "The language model server doesn't know the model '{model}'. The owner needs to choose a "
    "model the server offers in the dashboard's Settings (Bruce at {url}/settings; on Ollama: "
    "`ollama pull {model}`, or one from `ollama list`). It applies at once, no restart needed."
)
MODEL_NOT_FOUND_CONFIG = (
    "The language model server doesn't know the model '{model}'. The owner needs to set "
    "llm.model in config.yml to a model the server offers (on Ollama: `ollama pull {model}`, or "
    "one from `ollama list`) and restart me — or choose one in the dashboard's Settings (Bruce "
    "at {url}/settings), which applies at once, no restart needed."
)
NO_CREDIT = (
    "The language model account has no credit left (the provider says its quota is used up). "
    "The owner needs to add credit or raise the limit with the provider; I'll answer again as "
    "soon as that's done."
)
CONTEXT_OVERFLOW = (
    "This conversation grew too long for the model. I folded the earlier messages into a "
    "summary and shortened the history, but it still didn't fit. Please send a shorter message, "
    "or /new to start afresh."
)
UNAVAILABLE = "I couldn't reach the language model ({reason}); I'll be here when it's back."
REFUSED = (
    "The language model refused the request ({reason}). The owner should check the llm settings "
    "in config.yml."
)
REFUSED_DASHBOARD = (
    "The language model refused the request ({reason}). The owner should check the language "
    "model settings in the dashboard's Settings (Bruce at {url}/settings) or in config.yml."
)
INTERNAL = (
    "Something went wrong on my side while answering. It has been logged (session {session}); "
    "please try again."
)


def not_configured(hints: FixHints) -> str:
    url = hints.dashboard_url
    return NOT_CONFIGURED_DASHBOARD.format(url=url) if url else NOT_CONFIGURED


def authentication(hints: FixHints) -> str:
    url = hints.dashboard_url
    if not url:
        return AUTHENTICATION
    text = AUTHENTICATION_DASHBOARD if hints.api_key == "dashboard" else AUTHENTICATION_CONFIG
    return text.format(url=url)


def model_not_found(model: str, hints: FixHints) -> str:
    url = hints.dashboard_url
    if not url:
        return MODEL_NOT_FOUND.format(model=model)
    text = MODEL_NOT_FOUND_DASHBOARD if hints.model == "dashboard" else MODEL_NOT_FOUND_CONFIG
    return text.format(model=model, url=url)


def refused(reason: str, hints: FixHints) -> str:
    url = hints.dashboard_url
    return (
        REFUSED_DASHBOARD.format(reason=reason, url=url) if url else REFUSED.format(reason=reason)
    )


@dataclass(frozen=True, slots=True)
class FailureNotice:
    """The reply for one failed turn; `kind` groups failures of one outage."""

    kind: str
    text: str


def notice_for(exc: Exception, session_id: int, hints: FixHints = NO_HINTS) -> FailureNotice:
    """The reply a person gets for `exc`, logged with the ids needed to find it; `hints`: where
    the settings its fix names come from."""
    if isinstance(exc, LLMNotConfiguredError):
        return FailureNotice("not_configured", not_configured(hints))
    if isinstance(exc, LLMError):
        _log_llm_failure(exc, session_id)
    if isinstance(exc, LLMUnavailableError):
        return FailureNotice(f"unavailable:{exc.reason}", UNAVAILABLE.format(reason=exc.reason))
    if isinstance(exc, LLMAuthenticationError):
        return FailureNotice("authentication", authentication(hints))
    if isinstance(exc, LLMModelNotFoundError):
        model = exc.model or "(not set)"
        return FailureNotice(f"model:{model}", model_not_found(model, hints))
    if isinstance(exc, LLMQuotaExceededError):
        return FailureNotice("no_credit", NO_CREDIT)
    if isinstance(exc, LLMContextOverflowError):
        return FailureNotice("context_overflow", CONTEXT_OVERFLOW)
    if isinstance(exc, LLMRequestError):
        return FailureNotice(f"refused:{exc.reason}", refused(exc.reason, hints))
    log.error("turn_failed", session_id=session_id, exc_info=exc)
    return FailureNotice("internal", INTERNAL.format(session=session_id))


def _log_llm_failure(exc: LLMError, session_id: int) -> None:
    if isinstance(exc, LLMUnavailableError):
        log.warning("turn_llm_unavailable", session_id=session_id, reason=exc.reason)
    else:
        log.error("turn_llm_refused", session_id=session_id, reason=exc.reason, detail=exc.detail)


class OutageMemory:
    """Which chats have already been told about the failure that is still going on."""

    def __init__(self) -> None:
        self._told: dict[int, str] = {}

    def should_tell(self, session_id: int, notice: FailureNotice) -> bool:
        if notice.kind == "internal":
            return True  # a fault of ours is not an outage: each one is told (and logged)
        if self._told.get(session_id) == notice.kind:
            log.info("failure_notice_repeated_quietly", session_id=session_id, kind=notice.kind)
            return False
        self._told[session_id] = notice.kind
        return True

    def recovered(self, session_id: int) -> None:
        self._told.pop(session_id, None)
