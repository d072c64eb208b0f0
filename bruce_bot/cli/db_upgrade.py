"""`bruce db upgrade`: apply the schema migrations the database lacks (Alembic), then exit.

`bruce run` does the same on its way up; this is for doing it before, or from a deploy script.
"""

from __future__ import annotations

import argparse
import asyncio

from bruce_bot.cli.common import load
from bruce_bot.storage.database import upgrade_schema


def run(args: argparse.Namespace) -> int:
    config = load(args.config)
    asyncio.run(upgrade_schema(config.database_url))
    print(f"database is up to date: {config.database_url.split('@')[-1]}")
    return 0
