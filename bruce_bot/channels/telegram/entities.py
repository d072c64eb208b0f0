"""Reading a Telegram message's entities: commands and mentions of the bot.

Telegram counts entity offsets and lengths in UTF-16 code units, so an emoji before a mention
counts twice; every slice here goes through UTF-16, the way PTB's `Message.parse_entity` does.
Entities are read by their `type`, `offset`, `length` (and `user` for a text_mention), so PTB's
`MessageEntity` works as well as any other object of that shape.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any, Protocol


class Entity(Protocol):
    type: Any
    offset: int
    length: int


def entity_text(text: str, entity: Entity) -> str:
    """The text an entity covers."""
    units = text.encode("utf-16-le")
    start, end = entity.offset * 2, (entity.offset + entity.length) * 2
    return units[start:end].decode("utf-16-le", "replace")


def command_of(
    text: str | None, entities: Sequence[Entity], known: Collection[str]
) -> tuple[str | None, str]:
    """(known command name or None, the bot it names or "") of a message that starts with a
    bot_command entity; commands without that entity are plain text."""
    if not text:
        return None, ""
    entity = next((e for e in entities if e.type == "bot_command" and e.offset == 0), None)
    if entity is None:
        return None, ""
    name, _, target = entity_text(text, entity).lstrip("/").partition("@")
    name = name.lower()
    return (name if name in known else None), target


def mentions_of_bot(
    text: str | None, entities: Sequence[Entity], username: str, bot_id: int
) -> list[Entity]:
    """The entities that name the bot: "@username" mentions and text_mentions of its id."""
    if not text:
        return []
    mine = f"@{username}".lower()
    found: list[Entity] = []
    for entity in entities:
        if entity.type == "mention" and entity_text(text, entity).lower() == mine:
            found.append(entity)
        elif entity.type == "text_mention":
            user = getattr(entity, "user", None)
            if user is not None and user.id == bot_id:
                found.append(entity)
    return found


def without_bot_mentions(text: str, entities: Sequence[Entity], username: str, bot_id: int) -> str:
    """The text without "@bruce_bot" (a text_mention is the user's own words: it stays); the
    text unchanged when the mention is all there is."""
    spans = [
        (entity.offset, entity.offset + entity.length)
        for entity in mentions_of_bot(text, entities, username, bot_id)
        if entity.type == "mention"
    ]
    if not spans:
        return text
    units = text.encode("utf-16-le")
    kept: list[bytes] = []
    position = 0
    for start, end in sorted(spans):
        kept.append(units[position * 2 : start * 2])
        position = max(position, end)
    kept.append(units[position * 2 :])
    cleaned = re.sub(r"[ \t]{2,}", " ", b"".join(kept).decode("utf-16-le", "replace")).strip()
    return cleaned or text
