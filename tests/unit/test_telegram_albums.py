"""channels/telegram/albums.py on its own: an album's parts gathered into one message, carried
by its caption."""

from __future__ import annotations

from bruce_bot.channels.telegram.albums import AlbumBook, AlbumPart
from bruce_bot.domain import Attachment


def picture(n: int) -> Attachment:
    return Attachment("image", f"file-{n}")


def test_an_album_without_words_is_submitted_whole_by_its_first_part() -> None:
    book = AlbumBook()
    parts = [AlbumPart("1", "g", n, "photo", None, picture(n)) for n in (10, 11, 12)]
    for part in parts:
        book.expect(part)
    first = book.take(parts[0])
    assert first.action == "submit" and first.text == "[album of 3 photos]"
    assert first.attachments == (picture(10), picture(11), picture(12))
    assert [book.take(part).action for part in parts[1:]] == ["skip", "skip"]
    late = book.take(AlbumPart("1", "g", 13, "photo", None, picture(13)))
    assert (late.text, late.attachments) == ("[another part of the same album]", (picture(13),))


def test_album_parts_wait_for_their_caption_and_videos_alone_get_one_notice() -> None:
    book = AlbumBook()
    parts = [
        AlbumPart("1", "g", 10, "photo", None, picture(10)),
        AlbumPart("1", "g", 11, "photo", "which one?", picture(11)),
    ]
    for part in parts:
        book.expect(part)
    assert book.take(parts[0]).action == "skip"  # the caption comes later and carries it
    turn = book.take(parts[1])
    assert turn.text == "which one?\n\n[album of 2 photos]"
    assert turn.attachments == (picture(10), picture(11))
    videos = [AlbumPart("1", "v", n, "video") for n in (20, 21)]
    for part in videos:
        book.expect(part)
    assert [book.take(part).action for part in videos] == ["notice", "skip"]
