"""The approval port (tools/approval.py, agent/asking.py) end to end, with any tool that asks:
the question's buttons and the waiting line, a message meanwhile answered after the waiting turn,
a stranger's press refused, a second press running nothing twice, an expiry reaching the model
as a denial and a later press saying so, and the dashboard listing and answering a waiting run.
The tool is a small one of this test's (`AskingTool`) asking where run_code would; run_code's
own approvals, with the real sandbox (denial, briefing, sub-agent, crash, web chat, Discord),
are in test_run_code_approvals.py. Real python-telegram-bot inside a running Bruce against the
fake Bot API, the real Anthropic provider against the fake Messages API, the real web_fetch
against a local page, the dashboard's API over HTTP and the SQLite file. Nothing sleeps for a
fixed time: every wait is for a condition."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import httpx

from bruce_bot.agent.asking import APPROVED, EXPIRED, WAITING_LINE, spoken
from bruce_bot.app import Bruce
from bruce_bot.channels.policy import PRESS_NOT_ALLOWED
from bruce_bot.tools.approval import ApprovalRequest, Approver, Verdict
from bruce_bot.tools.registry import Tool, ToolContext, ToolError
from tests.conftest import make_config, running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage
from tests.fakes.web_server import FakeWebServer
from tests.integration.support import block_text, db_rows, last_tool_results, tool_uses

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
MALLORY = FakeTelegramServer.user(6666, "Mallory", "mallory")
WITHIN = 15.0
CODE = "print(6 * 7)"


class AskingTool(Tool):
    """Runs nothing real: it asks first where run_code would (after outside content, in a
    briefing), and records what ran and the verdicts it got."""

    name = "compute"
    description = "Run a short computation."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string"}},
        "required": ["code"],
    }
    confirms_itself = True
    timeout_seconds = 60.0

    def __init__(self) -> None:
        self.approver: Approver | None = None
        self.runs: list[str] = []
        self.verdicts: list[Verdict] = []

    def use_approver(self, approver: Approver) -> None:
        self.approver = approver

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        code = arguments["code"]
        if context.untrusted_input or context.task_run:
            assert self.approver is not None
            reason = (
                f"this turn read outside content ({context.untrusted_source})"
                if context.untrusted_input
                else "it runs in a scheduled briefing"
            )
            origin = f"{context.turn_key}|{self.name}|{code}"
            verdict = await self.approver.ask(
                context, ApprovalRequest(self.name, code, reason, origin)
            )
            self.verdicts.append(verdict)
            if not verdict.approved:
                raise ToolError(f"not run: {verdict.why}")
        self.runs.append(code)
        return "42"


@contextlib.asynccontextmanager
async def bruce_on_telegram(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    llm: FakeAnthropicServer,
    *,
    streaming: bool = False,
    approval_timeout: float = 300.0,
) -> AsyncIterator[tuple[Bruce, AskingTool]]:
    channel = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id],
        "streaming": streaming,
    }
    tools = {
        "web_fetch": {"allow_private_addresses": True},  # the page is on 127.0.0.1
        "web_search": {"enabled": False},
        "run_code": {"approval_timeout_seconds": approval_timeout},
    }
    config = make_config(tmp_path, llm.base_url, channels={"telegram": channel}, tools=tools)
    async with running_bruce(config) as bruce:
        assert bruce.parts is not None and bruce.parts.approver is not None
        tool = AskingTool()
        bruce.parts.tools.add(tool)
        tool.use_approver(bruce.parts.approver)
        yield bruce, tool


async def question_after_a_page(
    telegram: FakeTelegramServer, llm: FakeAnthropicServer, page: FakeWebServer, answer: str
) -> SentMessage:
    """Alice asks; the model reads a page, then wants to compute. Returns Bruce's question."""
    llm.script(tool_calls=[("web_fetch", {"url": f"{page.url}/article"})])
    llm.script(tool_calls=[("compute", {"code": CODE})])
    llm.script(answer)
    before = len(telegram.sent_to(ALICE.id))
    telegram.private_text(ALICE, "Read this article and compute the answer.")
    sent = await telegram.wait_for_messages(ALICE.id, before + 1, WITHIN)
    question = sent[before]
    assert question.plain.startswith("⏳ Waiting for your approval")
    return question


async def answered(telegram: FakeTelegramServer, query_id: str) -> str:
    await telegram.wait_for(lambda: query_id in telegram.callback_answers, WITHIN)
    return telegram.callback_answers[query_id]


def questions(data_dir: Path) -> list[Any]:
    return db_rows(data_dir, "SELECT * FROM pending_actions ORDER BY id")


def compute_result(llm: FakeAnthropicServer) -> dict[str, Any]:
    """The compute call's result as the model read it (the request after the call)."""
    for body in llm.requests:
        ids = {use["id"] for use in tool_uses(body) if use["name"] == "compute"}
        for result in last_tool_results(body) if body["messages"][-1]["role"] == "user" else []:
            if result["tool_use_id"] in ids:
                return result
    raise AssertionError("the model never saw the compute call's result")


async def test_after_a_page_the_run_waits_for_run_and_runs_once(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    anthropic_fake: FakeAnthropicServer,
    page: FakeWebServer,
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake, streaming=True) as (_, tool):
        question = await question_after_a_page(telegram, anthropic_fake, page, "It is 42.")
        # The whole code, why it asks, and the two buttons.
        assert CODE in question.plain and "web_fetch" in question.plain
        (row,) = questions(tmp_path)
        assert row["status"] == "asking" and row["arguments"] == CODE
        assert question.buttons == [
            {"text": "Run", "callback_data": f"code-run:{row['id']}"},
            {"text": "Deny", "callback_data": f"code-deny:{row['id']}"},
        ]
        # The turn shows that it waits.
        await telegram.wait_for(
            lambda: WAITING_LINE in [d.plain for d in telegram.drafts.get(ALICE.id, [])], WITHIN
        )
        assert tool.runs == []
        # A message meanwhile is answered after the waiting turn.
        anthropic_fake.script("You're welcome.")
        telegram.private_text(ALICE, "Thanks in advance!")
        # A stranger's press is refused and changes nothing.
        stranger = telegram.press(question, MALLORY, "Run")
        assert await answered(telegram, stranger) == PRESS_NOT_ALLOWED
        assert questions(tmp_path)[0]["status"] == "asking" and tool.runs == []

        query = telegram.press(question, ALICE, "Run")
        assert await answered(telegram, query) == ""
        sent = await telegram.wait_for_messages(ALICE.id, 4, WITHIN)
        texts = [m.plain for m in sent]
        assert APPROVED in texts and "It is 42." in texts and "You're welcome." in texts
        assert texts.index("It is 42.") < texts.index("You're welcome.")
        assert question.buttons == []  # taken off the question
        # Pressed again (a client that has not redrawn yet): nothing runs twice.
        again = telegram.press(question, ALICE, data=f"code-run:{row['id']}")
        await answered(telegram, again)
    assert tool.runs == [CODE]
    (verdict,) = tool.verdicts
    assert verdict.approved and verdict.by == f"telegram:{ALICE.id}" and verdict.at is not None
    (row,) = questions(tmp_path)
    assert row["status"] == "approved" and row["result"] == f"telegram:{ALICE.id}"
    assert row["resolved_at"] is not None
    assert block_text(compute_result(anthropic_fake)) == "42"


async def test_no_answer_expires_as_a_denial_and_a_later_press_says_so(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    anthropic_fake: FakeAnthropicServer,
    page: FakeWebServer,
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake, approval_timeout=1.0) as (
        _,
        tool,
    ):
        question = await question_after_a_page(
            telegram, anthropic_fake, page, "Nobody answered, so it did not run."
        )
        assert "within 1 second" in question.plain
        sent = await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
        assert sent[1].plain == "Nobody answered, so it did not run."
        assert questions(tmp_path)[0]["status"] == "expired"
        query = telegram.press(question, ALICE, "Run")
        assert await answered(telegram, query) == ""
        sent = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
        assert sent[2].plain == EXPIRED.format(timeout=spoken(1.0))
    assert tool.runs == []
    result = compute_result(anthropic_fake)
    assert result.get("is_error") is True
    assert block_text(result) == "Error: not run: no answer within 1 s"


async def test_the_dashboard_lists_a_waiting_run_and_can_answer_it(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    anthropic_fake: FakeAnthropicServer,
    page: FakeWebServer,
) -> None:
    async with bruce_on_telegram(tmp_path, telegram, anthropic_fake) as (bruce, tool):
        await question_after_a_page(telegram, anthropic_fake, page, "It is 42.")
        async with web_client(bruce) as client:
            listed = (await client.get("/api/approvals")).json()["approvals"]
            (waiting,) = listed
            assert waiting["shown"] == CODE and waiting["tool"] == "compute"
            assert waiting["channel"] == "telegram" and "web_fetch" in waiting["reason"]
            refused = await client.post(f"/api/approvals/{waiting['id']}", json={"decision": "x"})
            assert refused.status_code == 400
            answer = await client.post(f"/api/approvals/{waiting['id']}", json={"decision": "run"})
            assert answer.status_code == 200 and answer.json()["reply"] == APPROVED
            await wait_until(lambda: "It is 42." in telegram.texts_to(ALICE.id), WITHIN)
            assert (await client.get("/api/approvals")).json()["approvals"] == []
            again = await client.post(f"/api/approvals/{waiting['id']}", json={"decision": "deny"})
            assert again.status_code == 409
        async with httpx.AsyncClient(base_url=str(bruce.web_url)) as stranger:
            assert (await stranger.get("/api/approvals")).status_code == 401
    assert tool.runs == [CODE]
    assert tool.verdicts[0].by == "dashboard"
