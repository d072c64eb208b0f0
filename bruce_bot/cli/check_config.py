"""`bruce check-config`: is the configuration valid? A summary of what it sets up (LLM, database,
channels) and its warnings; exit status 1 when no LLM is configured. An invalid configuration
is reported by `main` (exit status 2)."""

from __future__ import annotations

import argparse

from bruce_bot.config import load_config, resolve_path
from bruce_bot.logs import scrubber


def run(args: argparse.Namespace) -> int:
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
