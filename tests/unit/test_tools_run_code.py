"""tools/run_code.py on its own: code over `max_code_chars` is refused naming the key before
anything runs, a call without a conversation is refused, the tool is not offered where the
sandbox cannot run (unless the owner chose `sandbox: none` or set `enabled`), and when a run
asks the user first."""

from __future__ import annotations

from pathlib import Path

import pytest

from bruce_bot.config import RunCodeConfig
from bruce_bot.sandbox.probe import ProbeResult
from bruce_bot.tools import run_code
from bruce_bot.tools.registry import ToolContext, ToolError
from bruce_bot.tools.run_code import CodeFiles, RunCodeTool, approval_reason, run_code_enabled


def tool(tmp_path: Path, **settings: object) -> RunCodeTool:
    config = RunCodeConfig(**settings)  # type: ignore[arg-type]
    return RunCodeTool(config, tmp_path, CodeFiles(None, None, 1_000_000))


async def test_code_over_the_limit_is_refused_naming_the_key_and_nothing_runs(
    tmp_path: Path,
) -> None:
    long_code = "print(1)\n" * 2_000  # 18,000 characters
    with pytest.raises(ToolError) as refused:
        await tool(tmp_path, max_code_chars=10_000).execute(
            {"language": "python", "code": long_code}, ToolContext(session_id=1)
        )
    message = str(refused.value)
    assert "18,000 characters" in message and "10,000" in message
    assert "tools.run_code.max_code_chars" in message
    assert not (tmp_path / "workspaces").exists()  # no workspace was even made


async def test_a_call_without_a_conversation_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="needs a conversation"):
        await tool(tmp_path).execute({"language": "shell", "code": "true"}, ToolContext())


@pytest.mark.parametrize(
    ("settings", "works", "offered"),
    [
        ({}, True, True),
        ({}, False, False),  # no bubblewrap: not offered (bruce doctor says why)
        ({"enabled": False}, True, False),
        ({"enabled": True}, False, True),  # the owner insists: runs report the failure
        ({"sandbox": "none", "allow_unsandboxed": True}, False, True),
    ],
)
def test_offered_where_the_sandbox_works(
    monkeypatch: pytest.MonkeyPatch, settings: dict[str, object], works: bool, offered: bool
) -> None:
    result = ProbeResult(works, "bubblewrap (bwrap) is not installed" if not works else "ok")
    monkeypatch.setattr(run_code, "probe", lambda: result)
    assert run_code_enabled(RunCodeConfig(**settings)) is offered  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "context", "network", "asks"),
    [
        ({}, {}, False, None),
        ({}, {"untrusted_input": True, "untrusted_source": "web_fetch"}, False, "web_fetch"),
        ({}, {}, True, "network"),
        ({}, {"task_run": True}, False, "scheduled"),
        ({}, {"subagent": True}, False, "sub-agent"),
        ({"approval": "always"}, {}, False, "always"),
        ({"approval": "never"}, {}, True, None),
        ({"approval": "never"}, {"task_run": True, "subagent": True}, False, None),
        # Outside content never runs code on its own say, whatever approval says.
        (
            {"approval": "never"},
            {"untrusted_input": True, "untrusted_source": "a page"},
            False,
            "a page",
        ),
        ({"sandbox": "none", "allow_unsandboxed": True, "approval": "never"}, {}, False, "none"),
    ],
)
def test_when_a_run_asks_the_user(
    settings: dict[str, object], context: dict[str, object], network: bool, asks: str | None
) -> None:
    reason = approval_reason(RunCodeConfig(**settings), ToolContext(**context), network)  # type: ignore[arg-type]
    if asks is None:
        assert reason is None
    else:
        assert reason is not None and asks in reason
