"""Rolling summaries end to end: a long conversation through a real channel, Bruce's real Anthropic
provider against the fake Messages API, and the SQLite file on disk. The prompt must stay bounded
however long the conversation, whether or not the background model manages to summarise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer
from tests.integration.support import (
    config_for,
    db_rows,
    messages_of,
    next_reply,
    system_text,
    user_texts,
)

MAIN_MODEL = "claude-opus-4-6"
BACKGROUND_MODEL = "claude-haiku-4-5"
HISTORY_MAX = 6
KEEP = 2


def summary_config(tmp_path: Path, fake: FakeAnthropicServer) -> Any:
    return config_for(
        tmp_path,
        fake.base_url,
        llm={"model": MAIN_MODEL, "background_model": BACKGROUND_MODEL},
        agent={"history_max_messages": HISTORY_MAX, "summary_keep_messages": KEEP},
    )


def agent_requests(fake: FakeAnthropicServer) -> list[dict[str, Any]]:
    return [body for body in fake.requests if body["model"] == MAIN_MODEL]


def summary_requests(fake: FakeAnthropicServer) -> list[dict[str, Any]]:
    return [body for body in fake.requests if body["model"] == BACKGROUND_MODEL]


def summaries(data_dir: Path) -> list[Any]:
    return db_rows(data_dir, "SELECT * FROM session_summaries ORDER BY id")


def assert_bounded(body: dict[str, Any]) -> None:
    """The conversation sent is at most `history_max_messages` long and starts with the user, as
    the Messages API requires."""
    assert len(body["messages"]) <= HISTORY_MAX, [m["role"] for m in body["messages"]]
    assert body["messages"][0]["role"] == "user", [m["role"] for m in body["messages"]]


async def test_a_long_conversation_is_folded_into_a_summary_by_the_background_model(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    folds = 0

    def model(body: dict[str, Any]) -> str:
        nonlocal folds
        if body["model"] == BACKGROUND_MODEL:
            folds += 1
            return f"Summary {folds}: Ana is planning a trip to Lisbon."
        return f"ack: {user_texts(body)[-1]}"

    anthropic_fake.responder = model
    console = ConsoleChannel()
    async with running_bruce(
        summary_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ):
        for i in range(1, 5):
            assert await console.say(f"message {i}")
            assert await next_reply(console.replies) == f"ack: message {i}"
        # Four exchanges outgrow the six-message budget: the older ones are folded.
        (summary,) = await wait_until(lambda: summaries(tmp_path))
        assert summary["content"] == "Summary 1: Ana is planning a trip to Lisbon."
        rows = messages_of(tmp_path)
        assert [r["content"] for r in rows[-KEEP:]] == ["message 4", "ack: message 4"]
        assert summary["covers_until_message_id"] == rows[-KEEP - 1]["id"]

        (fold_request,) = summary_requests(anthropic_fake)
        assert "tools" not in fold_request
        folded = "\n".join(user_texts(fold_request))
        assert all(f"message {i}" in folded for i in (1, 2, 3))
        assert "message 4" not in folded  # kept verbatim instead

        assert await console.say("message 5")
        assert await next_reply(console.replies) == "ack: message 5"
        after_fold = agent_requests(anthropic_fake)[-1]
        assert "<conversation_context>" in system_text(after_fold)
        assert "Summary 1: Ana is planning a trip to Lisbon." in system_text(after_fold)
        assert user_texts(after_fold) == ["message 4", "message 5"]

        for i in range(6, 13):
            assert await console.say(f"message {i}")
            assert await next_reply(console.replies) == f"ack: message {i}"

    for body in agent_requests(anthropic_fake):
        assert_bounded(body)
    # Later folds merge the previous summary with the next messages.
    assert len(summary_requests(anthropic_fake)) >= 2
    assert "Summary 1: Ana is planning a trip to Lisbon." in "\n".join(
        user_texts(summary_requests(anthropic_fake)[1])
    )
    calls = db_rows(
        tmp_path, "SELECT purpose, model, error FROM llm_calls WHERE purpose = 'summary'"
    )
    assert calls and all((c["model"], c["error"]) == (BACKGROUND_MODEL, None) for c in calls)


async def test_when_summaries_fail_the_user_is_still_answered_and_the_prompt_stays_bounded(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    def model(body: dict[str, Any]) -> AnthropicReply | str:
        if body["model"] == BACKGROUND_MODEL:
            return AnthropicReply(error=500)
        return f"ack: {user_texts(body)[-1]}"

    anthropic_fake.responder = model
    console = ConsoleChannel()
    async with running_bruce(
        summary_config(tmp_path, anthropic_fake), tools=ToolRegistry([]), channels=[console]
    ):
        for i in range(1, 11):
            assert await console.say(f"message {i}")
            assert await next_reply(console.replies) == f"ack: message {i}"

    assert summary_requests(anthropic_fake)  # it was tried...
    assert summaries(tmp_path) == []  # ...and failed
    failed = db_rows(tmp_path, "SELECT error FROM llm_calls WHERE purpose = 'summary'")
    assert failed and all(row["error"] for row in failed)
    for body in agent_requests(anthropic_fake):
        assert_bounded(body)
    assert user_texts(agent_requests(anthropic_fake)[-1])[-1] == "message 10"
    assert all(m["status"] == "done" for m in messages_of(tmp_path, "user"))
