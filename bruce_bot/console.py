"""`bruce chat`: a terminal conversation through the same inbox, agent and outbox as the chats.

It starts Bruce without the web server and with the console channel only, reads lines from
standard input in a thread (input() would block the event loop), and waits for each reply.
"""

from __future__ import annotations

import asyncio
import sys

from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.config import Config

EXIT_WORDS = frozenset({"/quit", "/exit", "quit", "exit"})
REPLY_TIMEOUT_SECONDS = 600


async def run_console(config: Config) -> int:
    from bruce_bot.app import Bruce

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
