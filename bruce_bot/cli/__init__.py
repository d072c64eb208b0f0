"""The `bruce` command: run, chat, db upgrade/check, check-config, doctor, token, pairing (the CLI
contract, docs/design.md).

This module is the parser and `main`; each command's work is a module of this package, imported
only when that command runs (`bruce --help` or `bruce token` does not load the database, the
LLM clients or the checks): `run.py` (the daemon), `chat.py` (a conversation in this terminal),
`db_upgrade.py` and `db_check.py` (`bruce db ...`; the check reports rows Bruce cannot use),
`check_config.py`, `doctor.py` (everything Bruce depends on, each check with a fix: exit status
0 when nothing failed, 1 otherwise), `token.py` and `pairing.py` (`bruce pairing ...`, the People
page in a terminal). Each exposes `run(args) -> int`, the exit status.

Every command loads the configuration first; an invalid one is printed as a list of problems
(key, what is wrong, fix) with exit status 2, never as a traceback, and never with the value of a
key that may hold a secret. Everything the command writes to stderr, the traceback of an
unexpected error included, goes through the log scrubber, so configured secrets and URL passwords
come out as `***`.

Nothing outside this package imports it (tests/unit/test_architecture.py): the daemon never
depends on its command line.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from bruce_bot import platforms
from bruce_bot.cli.common import EXIT_CONFIG, EXIT_STARTUP, EXIT_UNEXPECTED
from bruce_bot.config import ConfigError
from bruce_bot.logs import scrubbed_stderr

__all__ = ["EXIT_CONFIG", "EXIT_STARTUP", "EXIT_UNEXPECTED", "build_parser", "main"]

if TYPE_CHECKING:  # generic in the stubs only
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bruce", description="Bruce, your self-hosted AI assistant."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _command(commands, "run", "run", help="start the daemon")
    _command(commands, "chat", "chat", help="talk to Bruce in this terminal")
    _db_commands(commands)
    _command(commands, "check-config", "check_config", help="validate the configuration and exit")
    _pairing_commands(commands)
    doctor = _command(
        commands, "doctor", "doctor", help="check config, database, LLM, channels, port, clock"
    )
    doctor.add_argument("--json", action="store_true", help="the report as JSON, for machines")
    token = _command(
        commands, "token", "token", help="print a new random token for web.auth_token and exit"
    )
    token.add_argument(
        "--show",
        action="store_true",
        help="print the token the dashboard takes now (config.yml's, else the one in the data dir)",
    )
    return parser


def _command(commands: Commands, name: str, module: str, *, help: str) -> argparse.ArgumentParser:
    """A command (with --config) whose work is `run` in this package's `module`."""
    sub = commands.add_parser(name, help=help)
    sub.add_argument(
        "--config",
        metavar="PATH",
        help="YAML config (default: $BRUCE_CONFIG, ./config.yml, built-in defaults)",
    )
    sub.set_defaults(module=module)
    return sub


def _db_commands(commands: Commands) -> None:
    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    _command(db_commands, "upgrade", "db_upgrade", help="apply pending migrations")
    check = "report rows Bruce cannot use (after a crash or edit)"
    _command(db_commands, "check", "db_check", help=check)


def _pairing_commands(commands: Commands) -> None:
    """`bruce pairing list | approve | deny | revoke` (cli/pairing.py)."""
    pairing = commands.add_parser(
        "pairing", help="let people in on Telegram/Discord: pairing codes and who is allowed"
    )
    sub = pairing.add_subparsers(dest="pairing_command", required=True)
    _command(sub, "list", "pairing", help="who is allowed, and the codes waiting")
    approve = _command(sub, "approve", "pairing", help="let the holder of a code in")
    approve.add_argument("code", help="the code the person was given, e.g. K7QM-X3PA")
    deny = _command(sub, "deny", "pairing", help="throw a code away, letting nobody in")
    deny.add_argument("code")
    revoke = _command(sub, "revoke", "pairing", help="shut an approved person out again")
    revoke.add_argument("channel", choices=platforms.names())
    revoke.add_argument(
        "user_id",
        help="their user id (`bruce pairing list`): a number, or a Matrix or Slack id",
    )


def _handler(module: str) -> Callable[[argparse.Namespace], int]:
    """The command's work, imported now: only the command that runs loads what it needs."""
    command = importlib.import_module(f"{__name__}.{module}")
    handler: Callable[[argparse.Namespace], int] = command.run
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with scrubbed_stderr():
        try:
            return int(_handler(args.module)(args))
        except ConfigError as exc:
            print(exc.render(), file=sys.stderr)
            print(
                "Fix the configuration and try again (bruce check-config validates it).",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        except Exception:
            print(
                f"bruce: unexpected error (secrets are shown as ***):\n{traceback.format_exc()}",
                file=sys.stderr,
            )
            return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
