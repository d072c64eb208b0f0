"""A bounded memory of things an adapter has seen lately (message ids, pressed buttons).

Platforms send some events twice and point at messages Bruce sent before; an adapter remembers
the last few thousand of them here, and the oldest are forgotten first, so memory stays flat
however long Bruce runs. No SDK import: keys are plain ints, strings or tuples of them.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)

DEFAULT_SIZE = 2000


class Recent(Generic[Key]):
    """The last `size` keys added; adding one again makes it the newest."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._keys: dict[Key, None] = {}

    def add(self, key: Key) -> None:
        self._keys.pop(key, None)
        self._keys[key] = None
        if len(self._keys) > self._size:
            del self._keys[next(iter(self._keys))]

    def discard(self, key: Key) -> None:
        self._keys.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)
