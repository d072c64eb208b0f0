"""The `run_code` tool: Python or shell the model wrote, run in a bubblewrap sandbox.

Each run works in the session's workspace (`<data_dir>/workspaces/<session id>`, /workspace in
the sandbox), with the files the user sent in the session in /workspace/in; the regular files the
run leaves directly in /workspace/out go back to the chat as documents (saved as artifacts,
tools/code_files.py). The result the model reads: the exit code, stdout and stderr (each cut to
`tools.run_code.max_output_chars`, saying how much was cut), the duration and the files the run
created. Code that does not compile, exits non-zero or runs out of time is such a result; code
over `max_code_chars` is refused naming the limit; a sandbox that does not start is an error
result with bubblewrap's reason (logged with it too).

The tool asks the user itself (`confirms_itself`) through an injected `Approver`
(tools/approval.py), when `tools.run_code.approval` says so: `risky` (default) asks when the turn
read outside content, the code asks for the network, it runs in a scheduled task or a
sub-agent, or without a sandbox (`sandbox: none`, which always asks); `always` asks every time,
`never` never (but without a sandbox). A run that must ask and has nobody to ask is refused.
Every run's details (exit code, duration, output size, files, and whether it asked, who
answered and when) go into the audit log's `details` (`ToolOutput.details`). Workspaces
untouched for `workspace_retention_days` are deleted (checked at most hourly, from here); a
deleted session's go with it (web/api/session_detail.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import structlog

from bruce_bot.config import RunCodeConfig
from bruce_bot.domain import OutboundFile
from bruce_bot.sandbox import runner, workspace
from bruce_bot.sandbox.limits import Limits, sandbox_owner
from bruce_bot.sandbox.probe import probe
from bruce_bot.sandbox.runner import RunOutcome, RunRequest
from bruce_bot.storage.messages import MessageStore
from bruce_bot.tools.approval import ApprovalRequest, Approver, Verdict
from bruce_bot.tools.code_files import OutputSaver, session_inputs
from bruce_bot.tools.proactive import call_origin
from bruce_bot.tools.registry import Tool, ToolContext, ToolError, ToolOutput

log = structlog.get_logger(__name__)

RUN_CODE_TOOL = "run_code"
MAX_OUT_FILES = 10
MAX_LISTED = 30
SWEEP_EVERY_SECONDS = 3600.0


def run_code_enabled(config: RunCodeConfig) -> bool:
    """Offered: as configured, else where the sandbox works (or runs go unsandboxed)."""
    if config.enabled is not None:
        return config.enabled
    return config.sandbox == "none" or probe().works


@dataclass(frozen=True, slots=True)
class CodeFiles:
    """Where files come from and go: the session's messages (in), the artifacts (out)."""

    messages: MessageStore | None
    saver: OutputSaver | None  # None: artifacts are off, out/ files are only listed
    max_bytes: int  # the largest file copied in or sent back


def approval_reason(config: RunCodeConfig, context: ToolContext, network: bool) -> str | None:
    """Why this run must wait for the user, or None when it need not."""
    if config.sandbox == "none":
        return "the code would run without a sandbox (tools.run_code.sandbox: none)"
    # Outside content never runs code on its own say: `approval: never` spares the user's own
    # turns the question, not a turn that read a page, a document or a tool's answer.
    untrusted = None
    if context.untrusted_input:
        what = context.untrusted_source or "outside content"
        untrusted = f"this turn read {what}, which may have asked for it"
    if config.approval == "never":
        return untrusted
    if config.approval == "always":
        return "every run asks first (tools.run_code.approval: always)"
    reasons = [untrusted] if untrusted else []
    if network:
        reasons.append("it asks for the network")
    if context.task_run:
        reasons.append("it runs in a scheduled task, with nobody watching")
    if context.subagent:
        reasons.append("a sub-agent wants to run it")
    return "; ".join(reasons) or None


def _size(count: int) -> str:
    return f"{count:,} bytes"


def _stream(name: str, text: str, cut: int, cap: int) -> str:
    if not text and not cut:
        return f"{name}: (empty)"
    body = f"{name}:\n{text}"
    if cut:
        body += (
            f"\n[{name} cut: {_size(cut)} more not shown; the limit is {cap:,} "
            "(tools.run_code.max_output_chars): print less, or write to /workspace/out]"
        )
    return body


class RunCodeTool(Tool):
    name = RUN_CODE_TOOL
    effect = "outward"
    confirms_itself = True  # it asks the user itself (its Approver), with the code shown
    # Its own limits bound a run (wall time, approval wait); the registry's is only a backstop.
    timeout_seconds = 86_400.0 + 900.0
    max_output_chars = 500_000
    description = (
        "Run Python 3 or POSIX shell code in an isolated sandbox and get its exit code, stdout, "
        "stderr and the files it created. Use it to compute, convert files and check data. "
        "The working directory /workspace persists across runs in this conversation; files the "
        "user sent are in /workspace/in; files you write directly in /workspace/out are sent "
        "to the user as documents (PNG, PDF, CSV...). No network unless network is true. "
        "Python has only the standard library unless told otherwise (no pip). "
        "Print results you need; output is cut at a limit."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "language": {"type": "string", "enum": ["python", "shell"]},
            "code": {"type": "string", "minLength": 1},
            "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 600},
            "network": {"type": "boolean", "description": "internet access (asks the user)"},
        },
        "required": ["language", "code"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        config: RunCodeConfig,
        data_dir: Path,
        files: CodeFiles,
        approver: Approver | None = None,
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        self.files = files
        # Asks the user before a run that must ask (agent/asking.py); None: such a run is refused.
        self.approver = approver
        self._locks: dict[int, asyncio.Lock] = {}
        self._next_sweep = 0.0

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        config = self.config
        code: str = arguments["code"]
        if len(code) > config.max_code_chars:
            raise ToolError(
                f"the code is {len(code):,} characters, over the limit of "
                f"{config.max_code_chars:,} (tools.run_code.max_code_chars); write shorter "
                "code, or have it read its data from a file in /workspace"
            )
        if context.session_id is None:
            raise ToolError("run_code needs a conversation (its workspace); this call has none")
        network = bool(arguments.get("network", False))
        details: dict[str, Any] = {
            "language": arguments["language"],
            "network": network,
            "sandbox": config.sandbox,
            "approval": {"asked": False},
        }
        reason = approval_reason(config, context, network)
        if reason is not None:
            verdict = await self._ask(context, arguments, reason, details)
            if verdict is None or not verdict.approved:
                why = verdict.why if verdict else "nobody can be asked here"
                return self._refused(reason, why, details)
        lock = self._locks.setdefault(context.session_id, asyncio.Lock())
        async with lock:  # two runs at once would mix up one workspace's files
            return await self._run(arguments, context.session_id, network, details)

    async def _ask(
        self,
        context: ToolContext,
        arguments: Mapping[str, Any],
        reason: str,
        details: dict[str, Any],
    ) -> Verdict | None:
        details["approval"] = {"asked": True, "reason": reason}
        if self.approver is None:
            return None
        network = " with network access" if arguments.get("network") else ""
        shown = f"{arguments['language']} code{network}:\n{arguments['code']}"
        origin = call_origin(context, self.name, dict(arguments)) or ""
        verdict = await self.approver.ask(
            context, ApprovalRequest(self.name, shown, reason, origin)
        )
        details["approval"].update(
            approved=verdict.approved,
            by=verdict.by,
            at=verdict.at.isoformat() if verdict.at else None,
            why=verdict.why,
        )
        log.info("code_approval", approved=verdict.approved, by=verdict.by, why=verdict.why)
        return verdict

    def _refused(self, reason: str, why: str, details: dict[str, Any]) -> ToolOutput:
        text = (
            f"the code did not run: it needs the user's approval ({reason}) and {why}. "
            "Nothing ran; tell the user, or do without running code."
        )
        return ToolOutput(text, is_error=True, details=json.dumps(details))

    async def _run(
        self, arguments: Mapping[str, Any], session_id: int, network: bool, details: dict[str, Any]
    ) -> ToolOutput:
        config = self.config
        timeout = min(int(arguments.get("timeout_seconds") or config.timeout_seconds),
                      config.timeout_seconds)  # fmt: skip
        limits = Limits(
            timeout_seconds=float(timeout),
            memory_mb=config.memory_mb,
            max_processes=config.max_processes,
            max_output_chars=config.max_output_chars,
            workspace_mb=config.workspace_mb,
        )
        await self._sweep_if_due()
        root = workspace.workspace_dir(self.data_dir, session_id)
        await self._copy_in(root, session_id)
        outcome = await runner.run(
            RunRequest(
                language=arguments["language"],
                code=arguments["code"],
                root=root,
                limits=limits,
                network=network,
                python_env=config.python_env,
                sandboxed=config.sandbox != "none",
            )
        )
        details.update(
            exit_code=outcome.exit_code,
            duration_ms=round(outcome.duration * 1000, 1),
            output_bytes=outcome.output_bytes,
            killed_for=outcome.killed_for or None,
        )
        if not outcome.started:
            details["failure"] = outcome.failure
            text = (
                f"the sandbox did not start, so the code did not run: {outcome.failure}. "
                "Tell the user; `bruce doctor` on the server says how to fix it."
            )
            return ToolOutput(text, is_error=True, details=json.dumps(details))
        sent, notes = await self._send_out(root, session_id, outcome)
        details["files"] = list(outcome.created[:MAX_LISTED])
        details["sent"] = [file.filename for file in sent]
        text = self._describe(outcome, limits, notes)
        return ToolOutput(text, untrusted=network, files=tuple(sent), details=json.dumps(details))

    async def _sweep_if_due(self) -> None:
        """Workspaces untouched for `workspace_retention_days` go (at most once an hour)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY_SECONDS
        days = self.config.workspace_retention_days
        removed = await asyncio.to_thread(workspace.sweep, self.data_dir, days)
        if removed:
            log.info("workspaces_swept", removed=removed, retention_days=days)

    async def _copy_in(self, root: Path, session_id: int) -> None:
        if self.files.messages is None:
            return
        inputs = await session_inputs(
            self.files.messages, self.data_dir, session_id, self.files.max_bytes
        )
        owner = sandbox_owner()
        await asyncio.to_thread(workspace.prepare, root, owner)
        if inputs:
            await asyncio.to_thread(workspace.copy_in, root, inputs, owner)

    async def _send_out(
        self, root: Path, session_id: int, outcome: RunOutcome
    ) -> tuple[list[OutboundFile], dict[str, str]]:
        """The out/ files saved as artifacts, and a note per file created."""
        out_files = await asyncio.to_thread(
            workspace.read_out, root, outcome.created, self.files.max_bytes, MAX_OUT_FILES
        )
        sent: list[OutboundFile] = []
        notes: dict[str, str] = {}
        for file in out_files:
            key = f"{workspace.OUT_DIR}/{file.name}"
            if file.problem:
                notes[key] = file.problem
                continue
            if self.files.saver is None:
                notes[key] = "not sent: artifacts are off (tools.artifacts.enabled)"
                continue
            saved = await self.files.saver.save(session_id, file)
            if saved is not None:
                sent.append(saved)
                notes[key] = f"{_size(file.size)}, sent to the user as {saved.filename}"
        return sent, notes

    def _describe(self, outcome: RunOutcome, limits: Limits, notes: dict[str, str]) -> str:
        if outcome.killed_for == "timeout":
            status = (
                f"killed: still running after {limits.timeout_seconds:g} s, the time limit "
                "(tools.run_code.timeout_seconds); every process of the run was ended"
            )
        elif outcome.killed_for == "workspace":
            status = (
                f"killed: the workspace went over {limits.workspace_mb} MB "
                f"(tools.run_code.workspace_mb); the {outcome.removed} files this run made "
                "were deleted"
            )
        else:
            status = f"exit code: {outcome.exit_code}"
        cap = limits.max_output_chars
        parts = [
            status,
            f"duration: {outcome.duration:.2f} s",
            _stream("stdout", outcome.stdout, outcome.stdout_cut, cap),
            _stream("stderr", outcome.stderr, outcome.stderr_cut, cap),
        ]
        created = [path for path in outcome.created if not path.startswith(f"{workspace.IN_DIR}/")]
        if created:
            listed = [
                f"- {path}" + (f" ({notes[path]})" if path in notes else "")
                for path in created[:MAX_LISTED]
            ]
            if len(created) > MAX_LISTED:
                listed.append(f"- and {len(created) - MAX_LISTED} more")
            parts.append("files created or changed:\n" + "\n".join(listed))
        else:
            parts.append("files created or changed: none")
        return "\n".join(parts)
