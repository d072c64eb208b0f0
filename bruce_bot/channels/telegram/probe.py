"""Telegram's side of `bruce doctor`: one `getMe` through python-telegram-bot with the configured
token and base URL, answering with the bot's @name or a `ProbeError` that names the key."""

from __future__ import annotations

from telegram import Bot
from telegram.error import InvalidToken, NetworkError, TelegramError, TimedOut
from telegram.request import HTTPXRequest

from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import TelegramConfig
from bruce_bot.platforms import BotIdentity

DEFAULT_BASE_URL = "https://api.telegram.org/bot"


async def identify(config: TelegramConfig, timeout_seconds: float) -> BotIdentity:
    """The bot the token belongs to, with its t.me link (the platform registry's probe)."""
    name = await telegram_bot_name(config, timeout_seconds)
    return BotIdentity(name, f"https://t.me/{name.removeprefix('@')}")


async def telegram_bot_name(config: TelegramConfig, timeout_seconds: float) -> str:
    """`@username` of the bot the token belongs to; ProbeError when Telegram says no."""
    base_url = config.base_url.rstrip("/") if config.base_url else DEFAULT_BASE_URL
    request = HTTPXRequest(
        connect_timeout=timeout_seconds,
        read_timeout=timeout_seconds,
        write_timeout=timeout_seconds,
        pool_timeout=timeout_seconds,
    )
    bot = Bot(config.token, base_url=base_url, request=request)
    try:
        async with bot:  # `initialize` is the getMe call
            return f"@{bot.username}"
    except InvalidToken as exc:  # its message quotes the token: not shown
        raise ProbeError(
            "Telegram refused the token (401 Unauthorized)",
            "set channels.telegram.token to the token @BotFather gave you",
        ) from exc
    except TimedOut as exc:
        raise ProbeError(
            f"Telegram did not answer within {timeout_seconds:g} s",
            "check the network (or channels.telegram.base_url)",
        ) from exc
    except NetworkError as exc:
        raise ProbeError(
            f"Telegram unreachable: {exc.message}",
            "check the network (or channels.telegram.base_url)",
        ) from exc
    except TelegramError as exc:
        raise ProbeError(
            f"Telegram answered getMe with an error: {exc.message}",
            "check channels.telegram.token and channels.telegram.base_url",
        ) from exc
