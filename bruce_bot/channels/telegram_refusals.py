"""When to tell a sender, once more, that Bruce will not answer them.

A stranger (or an anonymous admin) who writes ten times gets one polite reply, not ten: one an
hour per sender, on the channel's injected clock. The log forgets senders once their hour is
over, so it stays as small as the number of recent strangers.
"""

from __future__ import annotations

from collections.abc import Callable

INTERVAL_SECONDS = 3600.0


class RefusalLog:
    def __init__(self, clock: Callable[[], float], interval: float = INTERVAL_SECONDS) -> None:
        self._clock = clock
        self._interval = interval
        self._refused_at: dict[int, float] = {}

    def due(self, sender_id: int) -> bool:
        """True (and noted) when `sender_id` was not refused within the interval."""
        now = self._clock()
        last = self._refused_at.get(sender_id)
        if last is not None and now - last < self._interval:
            return False
        self._refused_at = {
            sid: at for sid, at in self._refused_at.items() if now - at < self._interval
        }
        self._refused_at[sender_id] = now
        return True
