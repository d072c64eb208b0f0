"""run_code end to end, with the real bubblewrap: a computation through the real Telegram
library against the fake platform, a CSV the user sent read and a PNG the code wrote sent back
as a document, a run that must ask and has nobody to ask refused, and an escape corpus against
the real daemon process (`bruce run`) where every attempt fails and the daemon stays healthy: a
canary secret in the daemon's environment and in its config never shows in any output."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from bruce_bot.sandbox import network
from bruce_bot.sandbox.probe import probe
from tests.conftest import make_config, running_bruce, wait_until, web_client
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.telegram_server import FakeTelegramServer, load_fixture
from tests.integration.crash.test_restart import Daemon, chat_messages, post
from tests.integration.support import db_rows

pytestmark = pytest.mark.skipif(not probe().works, reason=f"no sandbox: {probe().detail}")

ALICE = FakeTelegramServer.user(1001, "Alice", "alice")
TELOXIDE_USER = 250918540
WITHIN = 20.0
CANARY = "canary-7f3a9c-do-not-leak"
CONFIG_CANARY = "brave-canary-5d1e8b"


def tool_result_text(body: dict[str, Any]) -> str:
    blocks = body["messages"][-1]["content"]
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return "(no tool result)"
    content = results[-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def echo_tool_result(body: dict[str, Any]) -> str:
    """The model's answer: the tool's result, as it read it."""
    return "RESULT:\n" + tool_result_text(body)


def on_telegram(tmp_path: Path, telegram: FakeTelegramServer, llm: FakeAnthropicServer,
                **run_code: Any) -> Any:  # fmt: skip
    channel = {
        "enabled": True,
        "token": telegram.token,
        "base_url": telegram.base_url,
        "allowed_user_ids": [ALICE.id],
    }
    return make_config(
        tmp_path,
        llm.base_url,
        web={"enabled": False},
        channels={"telegram": channel},
        tools={"run_code": {"timeout_seconds": 10, **run_code}},
    )


async def test_a_computation_returns_its_output_and_is_audited(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    code = "print(sum(i * i for i in range(101)))"
    anthropic_fake.script(tool_calls=[("run_code", {"language": "python", "code": code})])
    anthropic_fake.responder = echo_tool_result
    async with FakeTelegramServer() as telegram:
        async with running_bruce(on_telegram(tmp_path, telegram, anthropic_fake)):
            telegram.private_text(ALICE, "what is the sum of the squares up to 100?")
            [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
    assert "exit code: 0" in reply.plain and "338350" in reply.plain
    [row] = db_rows(tmp_path, "SELECT input, details FROM tool_executions")
    assert json.loads(row["input"])["code"] == code
    details = json.loads(row["details"])
    assert details["exit_code"] == 0 and details["output_bytes"] == len("338350\n")
    assert details["approval"] == {"asked": False}
    assert details["duration_ms"] > 0


def png_writer() -> str:
    """Python (standard library only) that plots the CSV's values as a one-row PNG."""
    return (
        "import csv, struct, zlib\n"
        "rows = list(csv.DictReader(open('/workspace/in/sales.csv')))\n"
        "values = [int(r['amount']) for r in rows]\n"
        "print('total', sum(values))\n"
        "width, height = len(values), 1\n"
        "raw = b''.join(b'\\x00' + bytes(min(255, v) for v in values) for _ in range(height))\n"
        "def chunk(kind, data):\n"
        "    body = kind + data\n"
        "    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))\n"
        "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height,"
        " 8, 0, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n"
        "open('/workspace/out/plot.png', 'wb').write(png)\n"
    )


async def test_a_csv_the_user_sent_is_read_and_the_png_written_comes_back_as_a_document(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    csv_data = b"month,amount\njan,10\nfeb,20\nmar,12\n"
    message = load_fixture("built_document_pdf_private")
    message["document"] = {
        "file_name": "sales.csv",
        "mime_type": "text/csv",
        "file_id": "BQACAgIAAxkBAAIDZmVcsv001",
        "file_unique_id": "AgADcsv001",
        "file_size": len(csv_data),
    }
    message["caption"] = "plot this"
    anthropic_fake.script(tool_calls=[("run_code", {"language": "python", "code": png_writer()})])
    anthropic_fake.responder = echo_tool_result
    async with FakeTelegramServer() as telegram:
        telegram.add_file(message["document"]["file_id"], csv_data, "documents/file_9.csv")
        # A document is outside content: even with approval `never` the run waits for Run
        # (what a document says never runs code without the user).
        config = on_telegram(tmp_path, telegram, anthropic_fake, approval="never")
        async with running_bruce(config):
            telegram.replay(message, ids={TELOXIDE_USER: ALICE.id})
            [question] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
            assert question.plain.startswith("⏳ Waiting for your approval"), question.plain
            assert [b["text"] for b in question.buttons] == ["Run", "Deny"]
            assert not telegram.documents.get(ALICE.id)  # nothing ran before the press
            query = telegram.press(question, ALICE, "Run")
            await telegram.wait_for(lambda: query in telegram.callback_answers, WITHIN)
            await telegram.wait_for(lambda: telegram.documents.get(ALICE.id), WITHIN)
            sent = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
            reply = sent[-1]
    assert "total 42" in reply.plain, reply.plain
    assert "out/plot.png" in reply.plain and "sent to the user" in reply.plain
    [document] = telegram.documents[ALICE.id]
    assert document.filename == "plot.png"
    assert document.data.startswith(b"\x89PNG\r\n\x1a\n")
    # The workspace keeps the user's file and the output for the next run.
    workspace = tmp_path / "workspaces"
    [session] = list(workspace.iterdir())
    assert (session / "in" / "sales.csv").read_bytes() == csv_data
    assert (session / "out" / "plot.png").read_bytes() == document.data


async def test_a_run_that_asks_for_the_network_waits_and_a_denial_runs_nothing(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    marker = tmp_path / "workspaces"
    code = "open('/workspace/ran', 'w').write('yes')"
    call = {"language": "python", "code": code, "network": True}
    anthropic_fake.script(tool_calls=[("run_code", call)])
    anthropic_fake.responder = echo_tool_result
    async with FakeTelegramServer() as telegram:
        async with running_bruce(on_telegram(tmp_path, telegram, anthropic_fake)):
            telegram.private_text(ALICE, "fetch the page with python")
            [question] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
            assert code in question.plain and "asks for the network" in question.plain
            query = telegram.press(question, ALICE, "Deny")
            await telegram.wait_for(lambda: query in telegram.callback_answers, WITHIN)
            *_, reply = await telegram.wait_for_messages(ALICE.id, 3, WITHIN)
    assert "did not run" in reply.plain and "asks for the network" in reply.plain
    assert f"denied by telegram:{ALICE.id}" in reply.plain
    assert not list(marker.glob("*/ran"))
    [row] = db_rows(tmp_path, "SELECT error, details FROM tool_executions")
    assert row["error"] and json.loads(row["details"])["approval"]["asked"] is True


async def test_a_sandbox_that_does_not_start_is_reported_with_bubblewraps_reason(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bwrap that fails as it does where user namespaces are off: the run is an error result
    with bubblewrap's words, logged once, nothing ran, and the next message is answered."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    failing = bin_dir / "bwrap"
    failing.write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    failing.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code = "open('/workspace/ran', 'w').write('yes')"
    anthropic_fake.script(tool_calls=[("run_code", {"language": "python", "code": code})])
    anthropic_fake.responder = echo_tool_result
    async with FakeTelegramServer() as telegram:
        config = on_telegram(tmp_path, telegram, anthropic_fake, enabled=True)
        with capture_logs() as logs:
            async with running_bruce(config):
                telegram.private_text(ALICE, "run it")
                [reply] = await telegram.wait_for_messages(ALICE.id, 1, WITHIN)
                anthropic_fake.script("Still here.")
                telegram.private_text(ALICE, "are you there?")
                second = await telegram.wait_for_messages(ALICE.id, 2, WITHIN)
    assert "the sandbox did not start" in reply.plain
    assert "setting up uid map: Permission denied" in reply.plain and "bruce doctor" in reply.plain
    assert second[1].plain == "Still here."
    failures = [entry for entry in logs if entry["event"] == "sandbox_failed_to_start"]
    assert len(failures) == 1 and "uid map" in failures[0]["error"]
    assert not list((tmp_path / "workspaces").glob("*/ran"))
    [row] = db_rows(tmp_path, "SELECT error, details FROM tool_executions")
    assert row["error"] and "uid map" in json.loads(row["details"])["failure"]


async def test_the_session_detail_lists_its_runs_and_deleting_it_removes_the_workspace(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    code = "open('/workspace/out/answer.txt', 'w').write('42'); print('written')"
    anthropic_fake.script(tool_calls=[("run_code", {"language": "python", "code": code})])
    anthropic_fake.script("Done: answer.txt.")
    config = make_config(tmp_path, anthropic_fake.base_url, tools={"run_code": {"enabled": True}})
    async with running_bruce(config) as bruce, web_client(bruce) as http:
        posted = await http.post("/api/chat/messages", json={"text": "write the answer down"})
        assert posted.status_code == 202

        async def answered() -> bool:
            listed = (await http.get("/api/chat/messages")).json()["messages"]
            return any(m["content"] == "Done: answer.txt." for m in listed)

        await wait_until(answered, WITHIN)
        [session] = db_rows(tmp_path, "SELECT id FROM sessions WHERE channel = 'web'")
        root = tmp_path / "workspaces" / str(session["id"])
        assert (root / "out" / "answer.txt").read_text() == "42"
        detail = (await http.get(f"/api/sessions/{session['id']}")).json()
        [run] = detail["code_runs"]
        assert run["language"] == "python" and run["code"] == code
        assert run["outcome"] == "ok" and run["exit_code"] == 0
        assert "out/answer.txt" in run["files"] and run["sent"] == ["answer.txt"]
        assert run["approval"] == {"asked": False}
        deleted = await http.delete(
            f"/api/sessions/{session['id']}", headers={"Content-Type": "application/json"}
        )
        assert deleted.status_code == 200, deleted.text
        assert not root.exists()


# ---- the escape corpus, against `bruce run` -------------------------------------------------


class Canary:
    """A TCP server on the host's loopback that counts who connects."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Canary:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.write(f"{CANARY}\n".encode())
            await writer.drain()
            writer.close()

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def sandboxed_daemon(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Daemon]:
    monkeypatch.setenv("BRUCE_TEST_CANARY", CANARY)
    daemon = Daemon(
        tmp_path,
        anthropic_fake.base_url,
        tools={
            "run_code": {
                "approval": "never",
                "timeout_seconds": 4,
                "workspace_mb": 20,
                "memory_mb": 256,
                "max_processes": 64,
                "max_output_chars": 2000,
            },
            "web_search": {"brave_api_key": CONFIG_CANARY},
        },
    )
    anthropic_fake.responder = echo_tool_result
    try:
        await daemon.start()
        yield daemon
    finally:
        await daemon.kill()


async def attempt(
    daemon: Daemon, llm: FakeAnthropicServer, language: str, code: str, **extra: Any
) -> str:
    """One turn whose model runs `code`; returns the reply (the tool's result)."""
    before = [m["id"] for m in await chat_messages(daemon)]
    llm.script(tool_calls=[("run_code", {"language": language, "code": code, **extra})])
    await post(daemon, f"try: {code[:40]}")

    async def replied() -> str | None:
        for message in await chat_messages(daemon, wait=1):
            if message["role"] == "assistant" and message["id"] not in before:
                return str(message["content"])
        return None

    reply: str = await wait_until(replied, timeout=WITHIN)
    async with httpx.AsyncClient(timeout=5) as client:  # the daemon is still healthy
        assert (await client.get(f"{daemon.url}/healthz")).status_code == 200
    return reply


def processes_with(argument: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if argument.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def no_stray_sleepers() -> Iterator[str]:
    argument = "987654"
    yield argument
    assert processes_with(f"sleep\x00{argument}") == []


async def test_escapes_fail_and_leak_nothing(
    sandboxed_daemon: Daemon,
    anthropic_fake: FakeAnthropicServer,
    tmp_path: Path,
    no_stray_sleepers: str,
) -> None:
    daemon, llm = sandboxed_daemon, anthropic_fake
    replies: list[str] = []

    async def run(language: str, code: str, **extra: Any) -> str:
        reply = await attempt(daemon, llm, language, code, **extra)
        replies.append(reply)
        with (tmp_path / "replies.txt").open("a", encoding="utf-8") as log:
            log.write(f"=== {code}\n{reply}\n")
        return reply

    database, config = daemon.data_dir / "bruce.db", daemon.config_path
    reply = await run("shell", f"cat {database} | head -c 100; cat {config}; ls {daemon.data_dir}")
    assert reply.count("No such file or directory") == 3, reply
    reply = await run("shell", "cat /proc/1/environ; echo; env; cat /proc/self/environ")
    assert "PATH=" in reply and "BRUCE_TEST_CANARY" not in reply
    reply = await run("python", "import os; print(sorted(os.environ))")
    assert "HOME" in reply and "BRUCE_TEST_CANARY" not in reply
    reply = await run("shell", "cat /etc/shadow; ls /root /home")
    assert "No such file" in reply
    outside = tmp_path / "escaped"
    reply = await run(
        "shell",
        f"touch {outside}; touch /usr/x; touch /etc/x; touch /x; mkdir /tmp/ok && echo tmp-ok",
    )
    assert not outside.exists() and "tmp-ok" in reply
    assert "Read-only file system" in reply or "Permission denied" in reply
    # Links planted in out/: Bruce reads out/ without following them.
    reply = await run(
        "shell",
        f"ln -s /etc/passwd out/passwd.txt; ln -s {config} out/config.txt; "
        "ln -s / out/root; mkfifo out/pipe.txt; echo planted",
    )
    assert "planted" in reply and "symbolic link: not followed" in reply
    assert "not a regular file" in reply
    async with Canary() as canary:
        connect = (
            "import socket\n"
            f"for host in ('127.0.0.1', '10.0.2.2'):\n"
            "    try:\n"
            f"        s = socket.create_connection((host, {canary.port}), timeout=2)\n"
            "        print('connected', host, s.recv(100))\n"
            "    except OSError as e:\n"
            "        print('refused', host, e)\n"
        )
        reply = await run("python", connect)
        assert reply.count("\nrefused ") == 2 and "connected" not in reply, reply
        if network.available():  # slirp4netns: the network, the host's loopback refused
            reply = await run("python", connect, network=True)
            assert reply.count("\nrefused ") == 2 and "connected" not in reply, reply
        assert canary.connections == 0
    reply = await run("shell", "bomb() { bomb | bomb & }; bomb; sleep 1; echo survived")
    assert "Cannot fork" in reply, reply  # it met the limit (ended, or killed at the time limit)
    # The limit itself, counted: forks until the kernel refuses one, however loaded the machine
    # (other tests' sandboxes run as the same user, so the count may stop below the limit).
    reply = await run(
        "python",
        "import os, time\n"
        "made = 0\n"
        "try:\n"
        "    while made < 1000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        made += 1\n"
        "except OSError as error:\n"
        "    print('refused after', made, type(error).__name__)\n",
    )
    refused = re.search(r"refused after (\d+) BlockingIOError", reply)
    assert refused and int(refused.group(1)) < 64, reply  # max_processes held
    reply = await run("python", "x = bytearray(2 * 1024 ** 3); print('allocated')")
    assert "MemoryError" in reply and "\nallocated" not in reply
    reply = await run("python", "while True: pass")
    assert "killed: still running after 4 s" in reply
    reply = await run("python", "import sys; sys.stdout.write('x' * 100_000_000)")
    assert "[stdout cut: 99,998,000 bytes more not shown; the limit is 2,000" in reply
    reply = await run(
        "python",
        "for i in range(10):\n"
        "    with open(f'fill{i}', 'wb') as f:\n"
        "        f.write(b'0' * 15 * 1024 * 1024)\n"
        "print('filled')",
    )
    # The workspace is measured as the run goes: a fast writer may finish (and print) between
    # two looks, but it is still told of the limit and its files are gone.
    assert "killed: the workspace went over 20 MB" in reply, reply
    assert "files this run made were deleted" in reply, reply
    workspace = next((daemon.data_dir / "workspaces").iterdir())
    assert sum(p.stat().st_size for p in workspace.rglob("*") if p.is_file()) < 40 * 1024**2
    reply = await run("shell", f"sleep {no_stray_sleepers} & echo started-$!")
    assert "started-" in reply
    await wait_until(lambda: not processes_with(f"sleep\x00{no_stray_sleepers}"), timeout=5)
    # No document went out, and no secret showed anywhere.
    everything = "\n".join(replies) + json.dumps(
        [dict(r) for r in db_rows(daemon.data_dir, "SELECT * FROM tool_executions")], default=str
    )
    assert CANARY not in everything and CONFIG_CANARY not in everything
    assert "root:x:0:0:root:/root" not in everything  # the host's passwd
    assert processes_with(f"sleep\x00{no_stray_sleepers}") == []


def test_sandbox_none_without_allow_unsandboxed_is_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text("tools:\n  run_code:\n    sandbox: none\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "BRUCE_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-m", "bruce_bot", "check-config", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "tools.run_code.allow_unsandboxed" in output and "Traceback" not in output


def test_doctor_says_why_the_sandbox_cannot_run_and_how_to_fix_it(tmp_path: Path) -> None:
    """No bwrap on the PATH: run_code is not offered, and doctor names the package."""
    config = tmp_path / "config.yml"
    config.write_text(
        f"app:\n  data_dir: {tmp_path / 'data'}\nllm:\n  api_key: k\n  base_url: http://127.0.0.1:9\n"
        "web:\n  enabled: false\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("BRUCE_CONFIG", "PATH")}
    env["PATH"] = str(tmp_path / "empty")  # no bubblewrap there
    done = subprocess.run(
        [sys.executable, "-m", "bruce_bot", "doctor", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
    )
    report = json.loads(done.stdout)
    [sandbox] = [check for check in report["checks"] if check["name"] == "sandbox"]
    assert sandbox["status"] == "warn"
    assert "run_code is not offered: bubblewrap (bwrap) is not installed" in sandbox["detail"]
    assert "apt install bubblewrap" in sandbox["fix"]
