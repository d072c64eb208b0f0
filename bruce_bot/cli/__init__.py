"""The `bruce` command: run, chat, db upgrade/check, check-config, doctor, token, pairing (the CLI
contract, docs/design.md; `bruce pairing` is pairing_cli.py).

Every command loads the configuration first; an invalid one is printed as a list of problems
(key, what is wrong, fix) with exit status 2, never as a traceback, and never with the value of a
key that may hold a secret. Everything the command writes to stderr, the traceback of an
unexpected error included, goes through the log scrubber, so configured secrets and URL passwords
come out as `***`. `bruce doctor` checks everything Bruce depends on (`checkup.py`): exit
status 0 when nothing failed, 1 otherwise. `bruce token` prints a new random token for
`web.auth_token`; `bruce token --show` prints the one the dashboard takes (config.yml's, else the
one Bruce made in the data dir on its first start), for scripts' `Authorization: Bearer` header.

`bruce run` imports and builds Bruce with Python's cyclic garbage collector paused: that creates
some 200,000 objects that live as long as the process (modules, classes, models), and each
collection would walk them all again, for nothing. Once the parts are built, before anything
starts (no message, no reply is handled with the collector off), `gc.freeze` sets those objects
aside, so later collections skip them too: a full collection over them takes about 0.1 s, a pause
that would otherwise recur under load. The few thousand objects the imports and the schema
upgrade left as garbage (about 1 MB) stay with them; collecting them first would cost that same
0.1 s on the way to ready.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import secrets
import sys
import traceback
from collections.abc import Sequence

from bruce_bot.config import Config, ConfigError, load_config, resolve_path
from bruce_bot.logs import configure_logging, scrubbed_stderr, scrubber

EXIT_UNEXPECTED = 1
EXIT_CONFIG = 2
EXIT_STARTUP = 3
TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, 256 bits


def _load(path: str | None, quiet: bool = False) -> Config:
    config = load_config(path)
    # In the console chat, routine log lines would drown the conversation.
    level = config.logging.level
    if quiet and level in ("debug", "info"):
        level = "warning"
    configure_logging(level, config.logging.json_output, config.secrets())
    return config


def _cmd_run(args: argparse.Namespace) -> int:
    import structlog

    from bruce_bot.app import Bruce, StartupError

    config = _load(args.config)
    log = structlog.get_logger("bruce_bot.cli")
    for warning in config.warnings():
        log.warning("config_warning", problem=warning)
    try:
        asyncio.run(Bruce(config).run_until_signal(built=_resume_collector))
    except StartupError as exc:
        print(f"bruce: cannot start: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    except KeyboardInterrupt:
        pass
    finally:
        gc.enable()
    return 0


def _resume_collector() -> None:
    """Bruce is built: the collector paused by `main` resumes (see the module's docstring)."""
    gc.freeze()
    gc.enable()


def _cmd_chat(args: argparse.Namespace) -> int:
    from bruce_bot.app import StartupError
    from bruce_bot.console import run_console

    config = _load(args.config, quiet=True)
    try:
        return asyncio.run(run_console(config))
    except StartupError as exc:
        print(f"bruce: cannot start: {exc}", file=sys.stderr)
        return EXIT_STARTUP


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from bruce_bot.storage.database import upgrade_schema

    config = _load(args.config)
    asyncio.run(upgrade_schema(config.database_url))
    print(f"database is up to date: {config.database_url.split('@')[-1]}")
    return 0


def _cmd_db_check(args: argparse.Namespace) -> int:
    from bruce_bot.doctor import find_problems
    from bruce_bot.storage.database import upgrade_schema

    config = _load(args.config)
    asyncio.run(upgrade_schema(config.database_url))
    problems = asyncio.run(find_problems(config))
    where = config.database_url.split("@")[-1]
    if not problems:
        print(f"no problems found in {where}")
        return 0
    print(f"{len(problems)} row(s) need a look in {where}:")
    for problem in problems:
        print(f"  {problem}")
    return 1


def _cmd_pairing(args: argparse.Namespace) -> int:
    from bruce_bot import pairing_cli

    return pairing_cli.run(_load(args.config, quiet=True), args)


def _cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from bruce_bot.checkup import config_failure, examine

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        report = config_failure(exc)
    else:
        # Only errors: a refused probe is reported as a check, not as a log line too.
        configure_logging("error", config.logging.json_output, config.secrets())
        report = examine(config, resolve_path(args.config))
    # A server's error may quote a token or key back: configured secrets are printed as ***.
    if args.json:
        print(scrubber.scrub(json.dumps(report.as_json(), ensure_ascii=False, indent=2)))
    else:
        for check in report.checks:
            print(scrubber.scrub(check.render()))
        failed = sum(check.status == "fail" for check in report.checks)
        print("all checks passed" if report.ok else f"{failed} check(s) failed")
    return 0 if report.ok else 1


def _cmd_token(args: argparse.Namespace) -> int:
    if not args.show:
        print(secrets.token_urlsafe(TOKEN_BYTES))
        return 0
    from bruce_bot.web.login_token import read_token, token_path

    config = load_config(args.config)
    web = config.web
    if web.login_disabled:
        print("bruce: web.auth_token is 'none': the dashboard takes no token", file=sys.stderr)
        return 1
    if web.auth_token:
        print(web.auth_token)
        return 0
    data_dir = config.app.data_dir
    token = read_token(data_dir)
    if token is None:
        print(
            f"bruce: no dashboard token yet in {token_path(data_dir)}: `bruce run` makes it on "
            "its first start (or set web.auth_token in config.yml)",
            file=sys.stderr,
        )
        return 1
    print(token)
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    scrubber.set_secrets(config.secrets())
    source = resolve_path(args.config)
    print(f"configuration OK ({source or 'built-in defaults'})")
    warnings = config.warnings()
    for warning in warnings:
        print(f"  warning: {warning}")
    print(f"  llm: {config.llm.provider} / {config.llm.model}")
    print(f"  database: {config.database_url.split('@')[-1]}")
    channels = [spec.name for spec, _ in config.channels.enabled()]
    if config.web.enabled:
        channels.append(f"web on {config.web.host}:{config.web.port}")
    print(f"  channels: {', '.join(channels) or 'none'}")
    return 1 if not config.llm.is_configured else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bruce", description="Bruce, your self-hosted AI assistant."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def with_config(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument(
            "--config",
            metavar="PATH",
            help="YAML config (default: $BRUCE_CONFIG, ./config.yml, built-in defaults)",
        )
        return sub

    with_config(commands.add_parser("run", help="start the daemon")).set_defaults(handler=_cmd_run)
    with_config(commands.add_parser("chat", help="talk to Bruce in this terminal")).set_defaults(
        handler=_cmd_chat
    )
    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    with_config(db_commands.add_parser("upgrade", help="apply pending migrations")).set_defaults(
        handler=_cmd_db_upgrade
    )
    with_config(
        db_commands.add_parser("check", help="report rows Bruce cannot use (after a crash or edit)")
    ).set_defaults(handler=_cmd_db_check)
    with_config(
        commands.add_parser("check-config", help="validate the configuration and exit")
    ).set_defaults(handler=_cmd_check_config)
    from bruce_bot.pairing_cli import add_commands as add_pairing_commands

    add_pairing_commands(commands, with_config, _cmd_pairing)
    doctor = with_config(
        commands.add_parser("doctor", help="check config, database, LLM, channels, port, clock")
    )
    doctor.add_argument("--json", action="store_true", help="the report as JSON, for machines")
    doctor.set_defaults(handler=_cmd_doctor)
    token = with_config(
        commands.add_parser("token", help="print a new random token for web.auth_token and exit")
    )
    token.add_argument(
        "--show",
        action="store_true",
        help="print the token the dashboard takes now (config.yml's, else the one in the data dir)",
    )
    token.set_defaults(handler=_cmd_token)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.handler is _cmd_run:
        gc.disable()  # until Bruce is built: `_resume_collector`
    with scrubbed_stderr():
        try:
            return int(args.handler(args))
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
