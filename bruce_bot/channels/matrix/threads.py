"""Matrix threads (`m.thread`) as sessions: the chat id of a thread, and a reply's relation.

A message in a thread (content `m.relates_to` with `rel_type: m.thread`, `event_id` the thread
root) is its own session: its chat id is the room id and the root joined by THREAD_SEPARATOR
(room ids and event ids never hold a space). Everything else in a room is the room's session,
replies to Bruce included. A reply into a thread carries the thread relation with
`is_falling_back` and an `m.in_reply_to` of the root, as the spec asks of clients that reply in
a thread without quoting (so clients without threads still show it as a reply).
"""

from __future__ import annotations

from typing import Any

THREAD_SEPARATOR = " "


def thread_root(content: dict[str, Any]) -> str | None:
    """The root event id of the thread the message is in, or None outside a thread."""
    relates = content.get("m.relates_to")
    if not isinstance(relates, dict) or relates.get("rel_type") != "m.thread":
        return None
    root = relates.get("event_id")
    return root if isinstance(root, str) and root else None


def chat_id(room_id: str, root: str | None) -> str:
    return f"{room_id}{THREAD_SEPARATOR}{root}" if root else room_id


def split(chat: str) -> tuple[str, str | None]:
    """(room id, thread root or None) of a chat id made by `chat_id`."""
    room_id, _, root = chat.partition(THREAD_SEPARATOR)
    return room_id, root or None


def in_thread(content: dict[str, Any], root: str | None) -> dict[str, Any]:
    """`content` with the thread relation when `root` is set (unchanged otherwise)."""
    if not root:
        return content
    relates = {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": root},
    }
    return {**content, "m.relates_to": relates}
