"""Reading Matrix events (raw client-server JSON): which ones Bruce answers, and their text.

Pure functions on the event dicts the homeserver sent, so that nothing a homeserver or a client
writes can crash the channel: a missing or odd field reads as "not for Bruce".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ANSWERED_MSGTYPES = frozenset({"m.text"})  # m.notice is for bots: never answered (no loops)
NOT_READ_MSGTYPES = frozenset({"m.image", "m.file", "m.audio", "m.video", "m.location"})
# A reply's fallback quote ("> <@alice:x> earlier words") at the top of its body.
_FALLBACK = re.compile(r"\A(?:>[^\n]*\n)+\n?")


@dataclass(frozen=True, slots=True)
class Me:
    user_id: str
    display_name: str = ""


def content_of(event: dict[str, Any]) -> dict[str, Any]:
    content = event.get("content")
    return content if isinstance(content, dict) else {}


def is_message(event: dict[str, Any]) -> bool:
    """An `m.room.message` someone sent (not a state event, an edit, or a redacted one)."""
    if event.get("type") != "m.room.message" or "state_key" in event:
        return False
    content = content_of(event)
    relates = content.get("m.relates_to")
    if isinstance(relates, dict) and relates.get("rel_type") == "m.replace":
        return False  # an edit of an earlier message: ignored
    return isinstance(content.get("msgtype"), str) and isinstance(event.get("event_id"), str)


def replied_to(event: dict[str, Any]) -> str | None:
    relates = content_of(event).get("m.relates_to")
    if not isinstance(relates, dict):
        return None
    reply = relates.get("m.in_reply_to")
    event_id = reply.get("event_id") if isinstance(reply, dict) else None
    return event_id if isinstance(event_id, str) else None


def mentions(event: dict[str, Any], me: Me) -> bool:
    """Bruce is named: in `m.mentions`, or its user id or display name in the body."""
    content = content_of(event)
    listed = content.get("m.mentions")
    if isinstance(listed, dict):
        user_ids = listed.get("user_ids")
        if isinstance(user_ids, list) and me.user_id in user_ids:
            return True
    body = body_of(event).casefold()
    names = [me.user_id, me.display_name]
    return any(name and name.casefold() in body for name in names)


def body_of(event: dict[str, Any]) -> str:
    """The body without a reply's fallback quote."""
    body = content_of(event).get("body")
    if not isinstance(body, str):
        return ""
    return _FALLBACK.sub("", body) if replied_to(event) else body


def text_of(event: dict[str, Any], me: Me) -> str:
    """What the sender wrote to Bruce: the body without a leading mention of Bruce."""
    text = body_of(event).strip()
    for name in (me.user_id, me.display_name):
        if name and text.casefold().startswith(name.casefold()):
            text = text[len(name) :].lstrip(" :,").strip()
            break
    return text
