"""`bruce pairing list | approve CODE | deny CODE | revoke CHANNEL USER_ID`: the People page of
the dashboard in a terminal (bruce_bot/pairing.py does the work).

Each command opens the database of the configuration, does its one thing and closes it, while
the daemon runs or not: the daemon asks the database about each message of someone not in
config.yml, so an approval or a revocation counts from the next message. An approved person's
"You're in" is stored here and sent by the daemon's redelivery (within a minute; at its next
start if it is not running). A refusal (a code that is malformed, used, denied or expired; a
person from config.yml) prints what to do and exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

from bruce_bot.cli.common import load
from bruce_bot.config import Config
from bruce_bot.pairing import PairingError, PairingService, platform_user_id, shown, who
from bruce_bot.parts import pairing_allowlists, pairing_enabled
from bruce_bot.settings.allowlists import Allowlists
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.stores import Stores

EXIT_REFUSED = 1


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(load(args.config, quiet=True), args))


async def _run(config: Config, args: argparse.Namespace) -> int:
    await upgrade_schema(config.database_url)
    database = Database(config.database_url)
    try:
        stores = Stores.open(database)
        allowlists = pairing_allowlists(config)
        service = PairingService(
            stores,
            allowlists,
            enabled=pairing_enabled(config),
            # The allowlists in use: a list saved in the dashboard wins over config.yml's.
            allowlist=Allowlists(allowlists, stores.settings),
        )
        command: dict[str, Callable[[], Awaitable[None]]] = {
            "list": lambda: _list(service),
            "approve": lambda: _approve(service, args.code),
            "deny": lambda: _deny(service, args.code),
            "revoke": lambda: _revoke(service, args.channel, args.user_id),
        }
        try:
            await command[args.pairing_command]()
        except PairingError as exc:
            print(f"bruce: {exc}")
            return EXIT_REFUSED
        return 0
    finally:
        await database.dispose()


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at is not None else "-"


async def _list(service: PairingService) -> None:
    people = await service.people()
    print(f"allowed ({len(people)}):")
    for person in people:
        where = "config.yml" if person.source == "config" else f"approved ({person.source})"
        since = _when(person.since)
        print(f"  {person.channel:<9} {person.label}  ({where}, since {since})")
    pending = await service.pending()
    print(f"pending codes ({len(pending)}):")
    for code in pending:
        print(
            f"  {shown(code.code)}  {code.channel:<9} {who(code.user_id, code.username, code.name)}"
            f"  (expires {_when(code.expires_at)})"
        )
    if not service.enabled:
        print("pairing is off on every enabled channel (channels.<name>.pairing)")


async def _approve(service: PairingService, code: str) -> None:
    person = await service.approve(code, by="cli")
    print(
        f"approved {person.channel} user {who(person.user_id, person.username, person.name)}: "
        "Bruce answers them from their next message; they are told in their chat."
    )


async def _deny(service: PairingService, code: str) -> None:
    pending = await service.deny(code)
    print(f"denied {shown(pending.code)} ({pending.channel} user {pending.user_id})")


async def _revoke(service: PairingService, channel: str, user_id: str) -> None:
    await service.revoke(channel, platform_user_id(user_id))
    print(f"revoked {channel} user {user_id}: Bruce no longer answers them.")
