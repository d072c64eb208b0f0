"""What a live reply shows and when (channels/live.py)."""

from __future__ import annotations

import asyncio
import time

from bruce_bot.channels.base import DeliveryError
from bruce_bot.channels.live import LiveText, Pacing
from tests.conftest import wait_until


class Screen:
    def __init__(self, *, rate_limited: int = 0, retry_after: float = 0.0) -> None:
        self.shown: list[tuple[float, str]] = []
        self._rate_limited = rate_limited
        self._retry_after = retry_after

    async def show(self, text: str) -> None:
        if self._rate_limited:
            self._rate_limited -= 1
            raise DeliveryError("429 Too Many Requests", retry_after=self._retry_after)
        self.shown.append((time.monotonic(), text))


async def test_a_burst_of_text_is_shown_at_most_once_per_interval_and_ends_complete() -> None:
    screen = Screen()
    live = LiveText(screen.show, Pacing(0.2, 4096))
    for word in ["Lisbon ", "will ", "be ", "rainy ", "all ", "week."] * 5:
        live.text(word)
        await asyncio.sleep(0)
    await wait_until(lambda: screen.shown and screen.shown[-1][1].endswith("week."))
    await live.close()
    texts = [text for _, text in screen.shown]
    assert len(texts) <= 3  # thirty pieces, a few edits
    assert texts[-1] == "Lisbon will be rainy all week." * 5
    assert len(set(texts)) == len(texts)  # never the same text twice
    gaps = [b - a for (a, _), (b, _) in zip(screen.shown, screen.shown[1:], strict=False)]
    assert all(gap >= 0.2 for gap in gaps)


async def test_a_rate_limit_is_waited_out_then_the_newest_text_is_shown() -> None:
    screen = Screen(rate_limited=1, retry_after=0.3)
    live = LiveText(screen.show, Pacing(0.0, 4096))
    started = time.monotonic()
    live.text("First")
    live.text(" and second")
    await wait_until(lambda: screen.shown)
    await live.close()
    [(at, shown)] = screen.shown
    assert shown == "First and second"
    assert at - started >= 0.3


async def test_trailing_spaces_or_a_repeated_status_never_make_an_edit() -> None:
    screen = Screen()
    live = LiveText(screen.show, Pacing(0.0, 4096))
    live.status("🔎 Searching the web for “rain” …")
    await wait_until(lambda: screen.shown)
    live.status("🔎 Searching the web for “rain” …")
    live.text("🔎 Searching the web for “rain” …   ")  # what is already shown, plus spaces
    # The showing task these woke has run to its end: it looked, and had nothing new to show.
    showing = live._task
    assert showing is not None
    await asyncio.wait_for(showing, 5)
    assert len(screen.shown) == 1
    await live.close()
    assert len(screen.shown) == 1


async def test_long_text_is_cut_to_the_limit_and_a_restart_replaces_it() -> None:
    screen = Screen()
    live = LiveText(screen.show, Pacing(0.0, 20))
    live.text("x" * 50)
    await wait_until(lambda: screen.shown)
    live.restart()
    assert live.written == ""
    live.text("Corrected.")
    await wait_until(lambda: screen.shown[-1][1] == "Corrected.")
    await live.close()
    assert screen.shown[0][1] == "x" * 18 + " …"


async def test_the_limit_is_counted_the_platforms_way() -> None:
    screen = Screen()

    def utf16(text: str) -> int:
        return len(text.encode("utf-16-le")) // 2

    live = LiveText(screen.show, Pacing(0.0, 20, length=utf16))
    live.text("😀" * 30)  # each one two UTF-16 units
    await wait_until(lambda: screen.shown)
    await live.close()
    [(_, shown)] = screen.shown
    assert utf16(shown) <= 20 and shown.endswith(" …") and shown.startswith("😀😀")


async def test_an_expiring_preview_is_shown_again_while_nothing_changes() -> None:
    screen = Screen()
    live = LiveText(screen.show, Pacing(0.0, 4096, refresh=0.05))
    live.status("⚙️ Using a slow tool …")
    await wait_until(lambda: len(screen.shown) >= 3)  # a Telegram draft would have expired
    await live.close()
    assert {text for _, text in screen.shown} == {"⚙️ Using a slow tool …"}
    assert live.shown == "⚙️ Using a slow tool …"
