"""Albums: the photos (or videos, files) a person sends at once reach Bruce as one message.

Telegram delivers each part of an album as its own update with the same `media_group_id`;
usually one part, most often the first, carries the caption. Nothing says how many parts there
are (a client adds parts as they finish uploading), and the Bot API can split them between
getUpdates answers or webhook posts.

The design has to respect how intake is made durable (telegram_intake.py):
updates are handled one at a time, in order, and one is confirmed to Telegram only after its
handler returned. So a handler can never wait for a later part (that part is only fetched once
the handler returned: a deadlock), and a caption must be stored by the handler of its own part
(once that handler returned, the part is confirmed and Telegram will not send it again).

So there is no waiting and no timer. The book learns of parts as early as the channel sees
them: the whole raw getUpdates batch (before any of it is handled) and every update put into
the queue (webhook posts that arrived meanwhile). When a part is handled:

- a part without a caption is passed over when a part with a caption that was not read yet is
  known (it comes later in the same batch, and carries this one);
- otherwise the part, with every known part of the album not read yet, becomes ONE message for
  the inbox, stored before the part is confirmed: their captions, a note of the parts known so
  far ("[album of 3 photos]") and their pictures and files (`attachments`); the parts it took
  are then passed over in silence;
- parts with nothing Bruce can read (videos without a caption) get ONE notice per album.

When the parts arrive split, a part that arrives after the album was answered becomes a
message of its own ("[another part of the same album]"): the user's words and pictures are
never dropped. The book keeps the last albums only
(`capacity`); it lives in memory, and after a restart a redelivered part is answered again only
if the inbox has not stored it (the inbox drops duplicates by message id).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from bruce_bot.channels.forwards import Quoted
from bruce_bot.domain import Attachment

DEFAULT_CAPACITY = 256
_PLURALS = {"photo": "photos", "video": "videos", "file": "files", "audio file": "audio files"}


@dataclass(frozen=True, slots=True)
class AlbumPart:
    """One part of an album, as the channel read it."""

    conversation: str  # the session's chat id (a forum topic has its own)
    album: str  # the media_group_id
    message_id: int
    kind: str  # "photo", "video", "file", "audio file"
    caption: str | None = None  # the words to read, None when the part has none
    attachment: Attachment | None = None  # its file, when Bruce can read that kind
    quoted: tuple[Quoted, ...] = ()  # a forwarded part: whose it is (its caption is fenced)


@dataclass(frozen=True, slots=True)
class AlbumTurn:
    """What to do with the part being handled: submit `text`, send the notice, or nothing."""

    action: Literal["submit", "notice", "skip"]
    text: str = ""
    attachments: tuple[Attachment, ...] = ()
    quoted: tuple[Quoted, ...] = ()  # the forwarded parts' origins


@dataclass(slots=True)
class _Album:
    parts: dict[int, AlbumPart] = field(default_factory=dict)
    read: set[int] = field(default_factory=set)  # parts submitted
    answered: bool = False
    noticed: bool = False


class AlbumBook:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._albums: OrderedDict[tuple[str, str], _Album] = OrderedDict()

    def expect(self, part: AlbumPart) -> None:
        """A part is on its way (seen in a batch or in the queue); it will be handled later."""
        self._album(part).parts.setdefault(part.message_id, part)

    def take(self, part: AlbumPart) -> AlbumTurn:
        """The part is being handled now (it was addressed to the bot by an allowed sender)."""
        album = self._album(part)
        album.parts.setdefault(part.message_id, part)
        if part.message_id in album.read:
            return AlbumTurn("skip")
        unread = [
            known for _, known in sorted(album.parts.items()) if known.message_id not in album.read
        ]
        if not part.caption and any(known.caption for known in unread):
            return AlbumTurn("skip")  # the caption is in a part handled later: it takes this one
        album.read.update(known.message_id for known in unread)
        captions = "\n\n".join(known.caption for known in unread if known.caption)
        attachments = tuple(known.attachment for known in unread if known.attachment)
        quoted = tuple(origin for known in unread for origin in known.quoted)
        if not captions and not attachments:
            if album.noticed or album.answered:
                return AlbumTurn("skip")
            album.noticed = True
            return AlbumTurn("notice")
        answered_before, album.answered = album.answered, True
        text = f"{captions}\n\n{_describe(album, answered_before)}".strip()
        return AlbumTurn("submit", text, attachments, quoted)

    def _album(self, part: AlbumPart) -> _Album:
        key = (part.conversation, part.album)
        album = self._albums.get(key)
        if album is None:
            album = self._albums[key] = _Album()
            while len(self._albums) > self._capacity:
                self._albums.popitem(last=False)
        return album


def _describe(album: _Album, late: bool) -> str:
    """ "[album of 2 photos and 1 video]"; a caption that came after the album was answered
    belongs to "[another part of the same album]"."""
    if late:
        return "[another part of the same album]"
    counts: dict[str, int] = {}
    for part in album.parts.values():
        counts[part.kind] = counts.get(part.kind, 0) + 1
    if len(album.parts) == 1:
        return f"[a {next(iter(counts))} from an album]"
    described = [
        f"{count} {_PLURALS.get(kind, kind) if count > 1 else kind}"
        for kind, count in counts.items()
    ]
    if len(described) > 1:
        return f"[album of {', '.join(described[:-1])} and {described[-1]}]"
    return f"[album of {described[0]}]"
