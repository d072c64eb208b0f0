"""Reading Slack's events: which are for Bruce, where the answer goes, and what they say.

Bruce reads a direct message (`message` with `channel_type: im`), a mention in a channel
(`app_mention`) and, in a thread Bruce has answered in, the messages that follow without a
mention (`message` with a `thread_ts`; whether Bruce is in that thread is the channel's to
know). A channel message that mentions Bruce comes twice, as `app_mention` and as `message`:
the mention is the one read. Messages from bots (Bruce's own included), edits
(`message_changed`), deletions and other notices (joins, topic changes) are not answered; a
message with files (`file_share`) or sent to the channel from a thread (`thread_broadcast`) is.

Slack writes `&`, `<` and `>` as entities and wraps links and mentions in `<...>`; the text
handed to the model is plain: entities decoded, `<url|label>` as "label (url)", `<@U123>` as
"@U123", `<#C1|general>` as "#general", `<!here>` as "@here", Bruce's own mention removed.
No SDK here: the events are the JSON Slack sends (the same over Socket Mode and the Events API).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bruce_bot.channels.slack.address import SlackAddress

ANSWERED_SUBTYPES = (None, "file_share", "thread_broadcast")
DIRECT_TYPES = ("im",)
_ENTITY = re.compile(r"<([^<>]+)>")


@dataclass(frozen=True, slots=True)
class Me:
    """Bruce's bot user and bot ids in the workspace (from `auth.test`)."""

    user_id: str
    bot_id: str = ""

    @property
    def mention(self) -> str:
        return f"<@{self.user_id}>"


@dataclass(frozen=True, slots=True)
class Incoming:
    """An event addressed to Bruce, read. `needs_thread`: a thread message without a mention,
    answered only when Bruce is in that thread."""

    address: SlackAddress
    user_id: str
    user_name: str
    ts: str
    text: str
    direct: bool
    files: tuple[dict[str, Any], ...]
    needs_thread: bool = False


def from_a_person(event: dict[str, Any], me: Me) -> bool:
    user = event.get("user")
    if not isinstance(user, str) or not user or user == me.user_id:
        return False
    if event.get("bot_id") or event.get("bot_profile") or event.get("subtype") == "bot_message":
        return False
    return event.get("subtype") in ANSWERED_SUBTYPES


def read(event: dict[str, Any], me: Me) -> Incoming | None:
    """The event as Bruce reads it, or None when it is not for Bruce (see the docstring)."""
    kind, channel, ts = event.get("type"), event.get("channel"), event.get("ts")
    if kind not in ("message", "app_mention") or not from_a_person(event, me):
        return None
    if not isinstance(channel, str) or not isinstance(ts, str):
        return None
    thread = event.get("thread_ts") if isinstance(event.get("thread_ts"), str) else None
    raw = str(event.get("text") or "")
    direct = kind == "message" and event.get("channel_type") in DIRECT_TYPES
    files = tuple(item for item in event.get("files") or () if isinstance(item, dict))
    needs_thread = False
    if kind == "message" and not direct:
        if thread is None or me.mention in raw:
            return None  # top level without a mention, or the app_mention brings it
        needs_thread = True
    # In a channel a top-level mention starts a thread on that very message.
    address = SlackAddress(channel, thread if direct else (thread or ts))
    text = plain_text(raw, me)
    name = _name_of(event)
    return Incoming(address, event["user"], name, ts, text, direct, files, needs_thread)


def _name_of(event: dict[str, Any]) -> str:
    """The sender's name when Slack sent their profile with the message (it often does)."""
    profile = event.get("user_profile")
    if not isinstance(profile, dict):
        return ""
    for key in ("display_name", "real_name", "name"):
        if isinstance(profile.get(key), str) and profile[key].strip():
            return str(profile[key]).strip()
    return ""


def plain_text(text: str, me: Me) -> str:
    """Slack's text as plain text (see the docstring)."""
    text = text.replace(me.mention, " ")
    text = _ENTITY.sub(lambda m: _entity(m[1]), text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _entity(inner: str) -> str:
    target, _, label = inner.partition("|")
    if target.startswith("@"):
        return f"@{label or target[1:]}"
    if target.startswith("#"):
        return f"#{label or target[1:]}"
    if target.startswith("!"):
        name = target[1:].split("^")[0]
        return f"@{label or name}" if name in ("here", "channel", "everyone") else label or ""
    if label and label != target.removeprefix("mailto:"):
        return f"{label} ({target})"
    return target.removeprefix("mailto:")
