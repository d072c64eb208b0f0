"""`bruce chat`: a terminal conversation through the same inbox, agent and outbox as the chats.

It starts Bruce without the web server and with the console channel only (channels/console/,
the channel this conversation goes through), reads lines from standard input in a thread
(input() would block the event loop), and waits for each reply.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from bruce_bot.app import Bruce, StartupError
from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.cli.common import EXIT_STARTUP, load
from bruce_bot.config import Config

EXIT_WORDS = frozenset({"/quit", "/exit", "quit", "exit"})
REPLY_TIMEOUT_SECONDS = 600


def run(args: argparse.Namespace) -> int:
    config = load(args.config, quiet=True)
    try:
        return asyncio.run(converse(config))
    except StartupError as exc:
        print(f"bruce: cannot start: {exc}", file=sys.stderr)
        return EXIT_STARTUP


async def converse(config: Config) -> int:
    """Bruce started for this terminal only; each line read is a message, each reply printed
    (by the console channel) before the next line is read, until /quit or the end of input."""
    console_config = config.model_copy(
        update={"web": config.web.model_copy(update={"enabled": False})}
    )
    channel = ConsoleChannel()
    bruce = Bruce(console_config, channels=[channel])
    await bruce.start()
    print(f"{config.app.name} is listening. Type a message, or /quit to leave.", flush=True)
    try:
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:  # end of input
                break
            text = line.rstrip("\n")
            if text.strip() in EXIT_WORDS:
                break
            if await channel.say(text):
                try:
                    await asyncio.wait_for(channel.replies.get(), REPLY_TIMEOUT_SECONDS)
                except TimeoutError:
                    print("(no reply yet; it will appear when it arrives)", flush=True)
    finally:
        await bruce.stop()
    return 0
