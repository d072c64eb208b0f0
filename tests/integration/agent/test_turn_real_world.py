"""How a turn ends when the model's answer is not the happy shape: cut by the token limit,
paused, refused, or refused by the server because the prompt does not fit. Through a real channel,
Bruce's real Anthropic provider (the anthropic SDK) against the fake Messages API, and the SQLite
file on disk. Each test checks what the user sees, and that the next plain message is answered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bruce_bot.agent.context_budget import CUT_NOTE
from bruce_bot.agent.failures import AUTHENTICATION, CONTEXT_OVERFLOW, MODEL_NOT_FOUND, NO_CREDIT
from bruce_bot.agent.loop import CONTINUE_NOTE, CUT_MARK, NO_FINAL_TEXT, REFUSAL_REPLY
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import running_bruce
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer, last_user_text
from tests.fakes.openai_server import FakeOpenAIServer, OpenAIReply
from tests.integration.support import (
    AddTool,
    block_text,
    config_for,
    db_rows,
    last_tool_results,
    messages_of,
    next_reply,
    user_texts,
)

OVERFLOW_MESSAGE = "prompt is too long: 212345 tokens > 200000 maximum"
MAIN_MODEL = "claude-opus-4-6"
BACKGROUND_MODEL = "claude-haiku-4-5"


async def follow_up_is_answered(console: ConsoleChannel, fake: FakeAnthropicServer) -> None:
    fake.script("Still here.")
    assert await console.say("Are you still there?")
    assert await next_reply(console.replies) == "Still here."


def artifact_files(data_dir: Path) -> list[Path]:
    root = data_dir / "artifacts"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# ---- max_tokens -----------------------------------------------------------------------------


async def test_a_tool_call_cut_by_max_tokens_is_not_run_and_the_retry_gets_more_room(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    half_page = {"filename": "report.html", "title": "Report", "content": "<h1>Repo"}
    whole_page = {"filename": "report.html", "title": "Report", "content": "<h1>Report</h1>"}
    anthropic_fake.script(tool_calls=[("artifact_save", half_page)], stop_reason="max_tokens")
    anthropic_fake.script(tool_calls=[("artifact_save", whole_page)])
    anthropic_fake.script("Saved the report.")
    console = ConsoleChannel()
    config = config_for(tmp_path, anthropic_fake.base_url, llm={"max_tokens": 1000})
    async with running_bruce(config, channels=[console]):
        assert await console.say("Write me a report.")
        assert await next_reply(console.replies) == "Saved the report."
        await follow_up_is_answered(console, anthropic_fake)

    first, second, third = anthropic_fake.requests[:3]
    (unrun,) = last_tool_results(second)
    assert unrun["is_error"] is True
    assert "Not run" in block_text(unrun) and "twice the room" in block_text(unrun)
    assert first["max_tokens"] == 1000 and second["max_tokens"] == 2000
    # Only the complete call ran: one file, with the whole content.
    (saved,) = artifact_files(tmp_path)
    assert saved.read_text(encoding="utf-8") == "<h1>Report</h1>"
    rows = db_rows(tmp_path, "SELECT tool_name FROM tool_executions")
    assert [r["tool_name"] for r in rows] == ["artifact_save"]
    assert not last_tool_results(third)[0].get("is_error")


async def test_a_text_answer_cut_by_max_tokens_is_continued_once(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("The three steps are: first, mix", stop_reason="max_tokens")
    anthropic_fake.script("the flour; then bake.")
    console = ConsoleChannel()
    async with running_bruce(config_for(tmp_path, anthropic_fake.base_url), channels=[console]):
        assert await console.say("How do I bake bread?")
        reply = await next_reply(console.replies)
        assert reply == "The three steps are: first, mix the flour; then bake."
        await follow_up_is_answered(console, anthropic_fake)

    assert last_user_text(anthropic_fake.requests[1]) == CONTINUE_NOTE
    stored = [m["content"] for m in messages_of(tmp_path, "assistant")]
    assert stored[0] == reply


async def test_an_answer_still_cut_after_the_continuation_is_sent_marked_as_cut(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("Chapter one is long.", stop_reason="max_tokens")
    anthropic_fake.script("Chapter two is longer", stop_reason="max_tokens")
    console = ConsoleChannel()
    async with running_bruce(config_for(tmp_path, anthropic_fake.base_url), channels=[console]):
        assert await console.say("Tell me the whole saga.")
        reply = await next_reply(console.replies)
        await follow_up_is_answered(console, anthropic_fake)

    assert reply == "Chapter one is long.\n\nChapter two is longer" + CUT_MARK
    assert len(anthropic_fake.requests) == 3  # two for the saga, one for the follow-up


# ---- pause_turn and refusal --------------------------------------------------------------------


async def test_a_paused_turn_is_continued_and_its_parts_read_as_one_answer(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("Let me look into that.", stop_reason="pause_turn")
    anthropic_fake.script("It opens at nine.")
    console = ConsoleChannel()
    async with running_bruce(config_for(tmp_path, anthropic_fake.base_url), channels=[console]):
        assert await console.say("When does the museum open?")
        assert await next_reply(console.replies) == "Let me look into that.\n\nIt opens at nine."
        await follow_up_is_answered(console, anthropic_fake)

    # The paused content went back as the last (assistant) turn, so the model could go on.
    resumed = anthropic_fake.requests[1]
    assert resumed["messages"][-1]["role"] == "assistant"
    assert resumed["messages"][-1]["content"][0]["text"] == "Let me look into that."


async def test_a_refusal_is_told_plainly_and_the_next_message_is_answered(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("", stop_reason="refusal")
    console = ConsoleChannel()
    async with running_bruce(config_for(tmp_path, anthropic_fake.base_url), channels=[console]):
        assert await console.say("Something the model will not do.")
        assert await next_reply(console.replies) == REFUSAL_REPLY
        await follow_up_is_answered(console, anthropic_fake)


# ---- context overflow ------------------------------------------------------------------------


def window_of(max_chars: int, answer: str = "Short answer.") -> Any:
    """A model that answers 400 'prompt is too long' when the request is over `max_chars`."""

    def model(body: dict[str, Any]) -> AnthropicReply | str:
        if body["model"] == BACKGROUND_MODEL:
            return "The user talked about many long things."
        size = sum(len(str(m["content"])) for m in body["messages"])
        if size > max_chars:
            return AnthropicReply(error=400, error_message=OVERFLOW_MESSAGE)
        return answer

    return model


async def test_a_prompt_too_long_is_folded_shortened_and_answered_and_the_chat_goes_on(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.responder = window_of(9_000)
    console = ConsoleChannel()
    config = config_for(
        tmp_path,
        anthropic_fake.base_url,
        llm={"model": MAIN_MODEL, "background_model": BACKGROUND_MODEL},
        agent={"summary_keep_messages": 2},
    )
    async with running_bruce(config, channels=[console]):
        for n in range(4):
            assert await console.say(f"Long story {n}: " + "blah " * 500)
            await next_reply(console.replies)
        assert await console.say("And what do you make of it?")
        assert await next_reply(console.replies) == "Short answer."
        assert await console.say("Thanks!")
        assert await next_reply(console.replies) == "Short answer."

    summaries = db_rows(tmp_path, "SELECT content FROM session_summaries")
    assert summaries and "many long things" in summaries[-1]["content"]
    replies = [m["content"] for m in messages_of(tmp_path, "assistant")]
    assert CONTEXT_OVERFLOW not in replies
    assert all("Something went wrong" not in r for r in replies)


async def test_a_prompt_that_never_fits_gets_one_clear_notice_and_the_next_message_works(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    def model(body: dict[str, Any]) -> AnthropicReply | str:
        if body["model"] == BACKGROUND_MODEL:
            return "Summary."
        if "boulder" in last_user_text(body):
            return AnthropicReply(error=400, error_message=OVERFLOW_MESSAGE)
        return "Fine again."

    anthropic_fake.responder = model
    console = ConsoleChannel()
    config = config_for(
        tmp_path,
        anthropic_fake.base_url,
        llm={"model": MAIN_MODEL, "background_model": BACKGROUND_MODEL},
    )
    async with running_bruce(config, channels=[console]):
        assert await console.say("A boulder of a message.")
        assert await next_reply(console.replies) == CONTEXT_OVERFLOW
        assert await console.say("Something small.")
        assert await next_reply(console.replies) == "Fine again."
    # The message that never fitted is kept, marked, and shown to the model as a stub only.
    assert [r["status"] for r in messages_of(tmp_path, "user")] == ["too_long", "done"]


async def test_a_message_bigger_than_the_window_is_cut_for_the_model_with_a_note(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script("I read the beginning of it.")
    console = ConsoleChannel()
    config = config_for(
        tmp_path,
        anthropic_fake.base_url,
        llm={"context_window": 8192, "max_tokens": 1024},
    )
    document = "A very long pasted document. " * 1000  # 29000 characters
    async with running_bruce(config, channels=[console]):
        assert await console.say(document)
        assert await next_reply(console.replies) == "I read the beginning of it."
        await follow_up_is_answered(console, anthropic_fake)

    sent = user_texts(anthropic_fake.requests[0])[-1]
    assert sent.startswith("A very long pasted document.")
    assert CUT_NOTE.split("{cut}")[1].strip()[:30] in sent
    assert len(sent) < 8192 * 3
    # The stored message stays whole.
    assert messages_of(tmp_path, "user")[0]["content"] == document


# ---- errors that name the fix, once per outage --------------------------------------------------


async def test_a_rejected_key_is_told_once_per_outage_naming_llm_api_key(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(error=401, times=2)
    console = ConsoleChannel()
    async with running_bruce(config_for(tmp_path, anthropic_fake.base_url), channels=[console]):
        assert await console.say("Hello?")
        assert await next_reply(console.replies) == AUTHENTICATION
        assert "llm.api_key" in AUTHENTICATION
        assert await console.say("Hello again?")
        await anthropic_fake.wait_for_requests(2)
        # The second failure is not repeated to the chat; the key is fixed, the chat goes on.
        await follow_up_is_answered(console, anthropic_fake)
    assert console.replies.empty()
    user_rows = messages_of(tmp_path, "user")
    assert [r["status"] for r in user_rows] == ["failed", "failed", "done"]


async def test_an_unknown_model_is_named_in_the_reply(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    # Nothing scripted: the fake refuses a model it does not serve with the API's 404.
    console = ConsoleChannel()
    config = config_for(tmp_path, anthropic_fake.base_url, llm={"model": "claude-nope"})
    async with running_bruce(config, channels=[console]):
        assert await console.say("Hi")
        reply = await next_reply(console.replies)
    assert reply == MODEL_NOT_FOUND.format(model="claude-nope")
    assert "llm.model" in reply


async def test_an_account_without_credit_says_so(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    anthropic_fake.script(
        error=400,
        error_message=(
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
            "Billing to upgrade or purchase credits."
        ),
    )
    console = ConsoleChannel()
    async with running_bruce(config_for(tmp_path, anthropic_fake.base_url), channels=[console]):
        assert await console.say("Hi")
        assert await next_reply(console.replies) == NO_CREDIT
        await follow_up_is_answered(console, anthropic_fake)


# ---- a forced final answer still ends in text ------------------------------------------------


async def test_a_server_that_ignores_tool_choice_none_still_ends_in_a_text_answer(
    tmp_path: Path,
) -> None:
    async with FakeOpenAIServer() as fake:

        def tool_hungry(body: dict[str, Any]) -> OpenAIReply:
            return OpenAIReply(tool_calls=[("add", {"a": 1, "b": 1})])

        fake.responder = tool_hungry
        console = ConsoleChannel()
        config = config_for(
            tmp_path,
            fake.base_url,
            llm={"provider": "openai", "model": "llama3.1"},
            agent={"max_turns": 2},
        )
        async with running_bruce(config, tools=ToolRegistry([AddTool()]), channels=[console]):
            assert await console.say("Keep adding.")
            reply = await asyncio.wait_for(console.replies.get(), 10)
        assert fake.requests[-1].get("tool_choice") == "none"
    assert reply == NO_FINAL_TEXT
    rows = db_rows(tmp_path, "SELECT turn FROM tool_executions ORDER BY id")
    assert [r["turn"] for r in rows] == [1, 2]  # the forced call's tool call was not run
