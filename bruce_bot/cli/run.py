"""`bruce run`: the daemon, until SIGTERM or Ctrl-C.

It imports and builds Bruce with Python's cyclic garbage collector paused: that creates some
200,000 objects that live as long as the process (modules, classes, models), and each collection
would walk them all again, for nothing. Once the parts are built, before anything starts (no
message, no reply is handled with the collector off), `gc.freeze` sets those objects aside, so
later collections skip them too: a full collection over them takes about 0.1 s, a pause that
would otherwise recur under load. The few thousand objects the imports and the schema upgrade
left as garbage (about 1 MB) stay with them; collecting them first would cost that same 0.1 s on
the way to ready.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys

import structlog

from bruce_bot.cli.common import EXIT_STARTUP, load

log = structlog.get_logger(__name__)


def run(args: argparse.Namespace) -> int:
    gc.disable()  # until Bruce is built: `_resume_collector`
    try:
        return _run(args)
    finally:
        gc.enable()


def _run(args: argparse.Namespace) -> int:
    # Imported here, with the collector paused: most of those long-lived objects come from it.
    from bruce_bot.app import Bruce, StartupError

    config = load(args.config)
    for warning in config.warnings():
        log.warning("config_warning", problem=warning)
    try:
        asyncio.run(Bruce(config).run_until_signal(built=_resume_collector))
    except StartupError as exc:
        print(f"bruce: cannot start: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    except KeyboardInterrupt:
        pass
    return 0


def _resume_collector() -> None:
    """Bruce is built: the collector paused by `run` resumes (see the module's docstring)."""
    gc.freeze()
    gc.enable()
