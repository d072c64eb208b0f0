"""Someone else's words inside a user's message: forwards and quotes, on any platform.

A forwarded message (Telegram's `forward_origin`, Discord's `message_snapshots`) or a quote of
another person's message reaches Bruce from the user, but its words are not the user's: a
forwarded "remind me every minute to ..." is data the user passed on, never a request. So the
channel stores such text already fenced (bruce_bot/untrusted.py, with the source "forwarded
message from …"): whatever reads the stored text later (the model, the summary) reads it as
data, even when the media step is skipped. The user's own words of the same message stay
outside the fence. The message's `extra` records under `FORWARDED` what was quoted and who it
came from as the platform reports it, and a turn that reads such a message is untrusted
(`media/preparation.py`): what it would do needs the user's confirmation.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bruce_bot.domain import Attachment
from bruce_bot.untrusted import fence as fence_untrusted

FORWARDED = "forwarded"  # key of a user message's `extra`: [Quoted.as_dict(), ...]
MAX_NAME_CHARS = 80
# The source goes into an attribute of the fence: a name must not close it or open a tag.
_NOT_IN_NAME = re.compile(r"[\"<>\r\n\t]+")

QuoteKind = Literal["forward", "quote"]


@dataclass(frozen=True, slots=True)
class Quoted:
    """Words of someone else in a message: a forward, or a quote of another's message."""

    kind: QuoteKind
    author: str  # who wrote it, as the platform names them ("" when it does not say)
    origin: dict[str, Any] = field(default_factory=dict)  # as the platform reports it

    @property
    def source(self) -> str:
        what = "forwarded message" if self.kind == "forward" else "quoted message"
        return f"{what} from {self.author}" if self.author else what

    def fence(self, text: str) -> str:
        return fence_untrusted(text.strip(), self.source)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "from": self.author, "origin": self.origin}


def clean_name(name: str) -> str:
    """A display name fit for the fence's source: one line, no quotes or tags, not too long."""
    cleaned = " ".join(_NOT_IN_NAME.sub(" ", name).split())
    return cleaned if len(cleaned) <= MAX_NAME_CHARS else cleaned[: MAX_NAME_CHARS - 1] + "…"


def metadata_of(quoted: Sequence[Quoted]) -> dict[str, Any]:
    """The `extra` entry of a message carrying `quoted` (nothing when it carries none)."""
    records: list[dict[str, Any]] = []
    for item in quoted:
        record = item.as_dict()
        if record not in records:  # an album's parts all come from one origin
            records.append(record)
    return {FORWARDED: records} if records else {}


def carries_outside_words(extra: Mapping[str, Any] | None) -> bool:
    """Whether a stored message holds someone else's words (a forward, a quote)."""
    return bool((extra or {}).get(FORWARDED))


def recorded_by_someone_else(attachments: Sequence[Attachment]) -> tuple[Attachment, ...]:
    """The files of a forwarded message: a voice note in it is someone else's recording, so
    it is read as an audio file (its transcript fenced), not as what the user said."""
    return tuple(
        dataclasses.replace(item, voice=False) if item.voice else item for item in attachments
    )
