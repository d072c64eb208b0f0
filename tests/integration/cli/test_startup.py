"""What `bruce run` has done when it is ready: start-up does not wait for what only a later
request needs (the dashboard's JSON API, the tools' argument validation), and the garbage
collector it pauses while importing and building runs again, with those objects set aside.

The daemon is the real command (`cli.main(["run", ...])`) in a subprocess; a wrapper around
`Bruce.start` writes down its loaded modules and collector state once it is ready, then stops it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

# Runs in the subprocess: the report is written once Bruce is ready, then SIGTERM stops it.
PROBE = """
import gc, json, os, signal, sys
from bruce_bot import app, cli

start = app.Bruce.start

async def start_and_report(self, *args, **kwargs):
    await start(self, *args, **kwargs)
    report = {
        "modules": sorted(sys.modules),
        "collector_enabled": gc.isenabled(),
        "frozen_objects": gc.get_freeze_count(),
    }
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        json.dump(report, out)
    os.kill(os.getpid(), signal.SIGTERM)

app.Bruce.start = start_and_report
sys.exit(cli.main(["run", "--config", sys.argv[1]]))
"""


async def run_until_ready(tmp_path: Path) -> dict[str, Any]:
    config = {
        "app": {"data_dir": str(tmp_path / "data")},
        "web": {"host": "127.0.0.1", "port": 0},
        # Configured but never called: nothing is said to Bruce here.
        "llm": {"provider": "anthropic", "api_key": "test-key", "base_url": "http://127.0.0.1:9"},
    }
    config_path = tmp_path / "config.yml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    report_path = tmp_path / "ready.json"
    env = {k: v for k, v in os.environ.items() if k not in ("BRUCE_CONFIG", "ANTHROPIC_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROBE,
        str(config_path),
        str(report_path),
        cwd=tmp_path,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, output.decode(errors="replace")
    assert report_path.exists(), output.decode(errors="replace")
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    return report


async def test_a_ready_daemon_has_not_loaded_what_only_later_requests_need(
    tmp_path: Path,
) -> None:
    report = await run_until_ready(tmp_path)
    loaded = set(report["modules"])
    assert "bruce_bot.web.app" in loaded and "bruce_bot.agent.brain.runner" in loaded
    # The dashboard's JSON API loads on its first request, validation on a tool's first call.
    later = {"bruce_bot.web.api", "bruce_bot.web.api.openapi", "jsonschema"}
    # The tools' page and search libraries load when the model first uses them.
    later |= {"trafilatura", "ddgs"}
    # Pictures and PDFs: their libraries load with the first one a user sends.
    later |= {"PIL", "pypdf"}
    # The MCP SDK (0.7 s) loads only when mcp.servers names a server, after ready: none here.
    later |= {"mcp", "mcp_types", "bruce_bot.mcp_client.connection"}
    assert not later & loaded, sorted(later & loaded)


async def test_the_collector_runs_again_once_ready_without_walking_start_up_objects(
    tmp_path: Path,
) -> None:
    report = await run_until_ready(tmp_path)
    assert report["collector_enabled"]
    assert report["frozen_objects"] > 10_000  # modules, classes, models: set aside for good
