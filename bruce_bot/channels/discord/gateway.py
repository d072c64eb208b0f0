"""The discord.py client Bruce runs, and the guard around what the gateway sends it.

The client asks for the intents Bruce needs (Message Content is privileged: switched on in the
developer portal), keeps no message cache, never pings anyone, and leaves 429 waits longer than
a minute to the outbox. Its REST base and gateway point at the configured URLs (a test's fake)
or at Discord's own. Gateway events discord.py cannot parse are logged and skipped instead of
ending the session; edits are not parsed at all; and fields Discord leaves out in practice,
though discord.py requires them, are filled in first so the message is not lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import discord
import structlog
import yarl

from bruce_bot.config import DiscordConfig

log = structlog.get_logger(__name__)

MAX_RATE_LIMIT_WAIT_SECONDS = 60.0  # longer 429 waits come back to the outbox as retry_after

# discord.py's own defaults, kept so that a config without overrides points back at Discord.
DEFAULT_API_BASE_URL = discord.http.Route.BASE
DEFAULT_GATEWAY_URL = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY

# Close codes after which reconnecting cannot help (bad token, sharding, intents).
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})

# Parsers whose failure leaves the session unusable: let them end the client (and restart it).
_UNGUARDED_EVENTS = frozenset({"READY", "RESUMED"})
# An edit is not a new message (and Discord's partial updates, e.g. a link preview arriving, carry
# no author or content): Bruce has no use for them, so they are not parsed at all.
_IGNORED_EVENTS = frozenset({"MESSAGE_UPDATE"})
# Fields discord.py requires but Discord sometimes leaves out, which would lose the whole message:
# a reply to a forward carries snapshots without `type` (discord/discord-api-docs#7814), and a
# poll's text "should always be non-null ... but please do not depend on that" (Discord's docs).
_SNAPSHOT_DEFAULTS: dict[str, Any] = {
    "type": 0,
    "content": "",
    "embeds": [],
    "attachments": [],
    "edited_timestamp": None,
}


def point_library_at(config: DiscordConfig) -> None:
    """Aim discord.py's REST base and gateway at the configured URLs (or Discord's own).

    discord.py reads both from class attributes, so this is process-wide. That is acceptable
    because a Bruce process runs exactly one Discord client (one bot token, one adapter); the
    values are set in `start`, before each login, from this adapter's config.
    """
    discord.http.Route.BASE = config.api_base_url or DEFAULT_API_BASE_URL
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = (
        yarl.URL(config.gateway_url) if config.gateway_url else DEFAULT_GATEWAY_URL
    )


def new_client() -> discord.Client:
    """A client with Bruce's intents and manners, its gateway parsers guarded."""
    # Bruce has no voice: skip discord.py's start-up warnings about missing voice libraries.
    discord.VoiceClient.warn_nacl = False
    discord.VoiceClient.warn_dave = False
    client = discord.Client(
        intents=_intents(),
        max_messages=None,  # Bruce keeps its own history; no message cache needed
        # A model's answer must never ping @everyone, roles or users.
        allowed_mentions=discord.AllowedMentions.none(),
        max_ratelimit_timeout=MAX_RATE_LIMIT_WAIT_SECONDS,
    )
    _guard_parsers(client)
    return client


def _intents() -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = True  # privileged: switched on in the developer portal
    intents.dm_messages = True
    intents.guild_messages = True
    return intents


def _guard_parsers(client: discord.Client) -> None:
    """Keep one malformed gateway event from ending the whole session.

    discord.py lets an exception raised while parsing a gateway event end `client.start()`;
    wrapping its parsers logs and skips the event instead. (`_connection.parsers` is internal:
    if it ever disappears the supervisor's restart still covers a crash.)
    """
    parsers = getattr(getattr(client, "_connection", None), "parsers", None)
    if not isinstance(parsers, dict):
        log.debug("discord_parsers_not_guarded")
        return
    for event, parse in list(parsers.items()):
        if event in _IGNORED_EVENTS:
            parsers[event] = _ignored(event)
        elif event == "MESSAGE_CREATE":
            parsers[event] = _guarded(event, _completing(parse))
        elif event not in _UNGUARDED_EVENTS:
            parsers[event] = _guarded(event, parse)


def _ids_of(data: Any) -> dict[str, Any]:
    """The ids that find a gateway event's message again (for the logs)."""
    if not isinstance(data, dict):
        return {}
    return {"message_id": data.get("id"), "channel_id": data.get("channel_id")}


def _guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    def parse_or_skip(data: Any) -> None:
        try:
            parse(data)
        except Exception as exc:
            log.warning(
                "discord_event_malformed", gateway_event=event, error=repr(exc), **_ids_of(data)
            )

    return parse_or_skip


def _ignored(event: str) -> Callable[[Any], None]:
    def skip(data: Any) -> None:
        log.debug("discord_event_ignored", gateway_event=event, **_ids_of(data))

    return skip


def _completing(parse: Callable[[Any], None]) -> Callable[[Any], None]:
    """`parse` of a MESSAGE_CREATE whose optional-in-practice fields are filled in first."""

    def parse_completed(data: Any) -> None:
        if isinstance(data, dict):
            for message in (data, data.get("referenced_message")):
                if isinstance(message, dict):
                    _complete_snapshots(message)
                    _complete_poll(message.get("poll"))
        parse(data)

    return parse_completed


def _complete_poll(poll: Any) -> None:
    if not isinstance(poll, dict):
        return
    media = [poll.get("question")]
    answers = poll.get("answers")
    if isinstance(answers, list):
        media += [answer.get("poll_media") for answer in answers if isinstance(answer, dict)]
    for item in media:
        if isinstance(item, dict):
            item.setdefault("text", "")


def _complete_snapshots(message: dict[str, Any]) -> None:
    snapshots = message.get("message_snapshots")
    if not isinstance(snapshots, list):
        return
    for snapshot in snapshots:
        inner = snapshot.get("message") if isinstance(snapshot, dict) else None
        if not isinstance(inner, dict):
            continue
        for key, default in _SNAPSHOT_DEFAULTS.items():
            if key not in inner:
                inner[key] = list(default) if isinstance(default, list) else default
        inner.setdefault("timestamp", message.get("timestamp"))
