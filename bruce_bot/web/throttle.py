"""Throttling of failed sign-ins: wrong tokens at the login form and wrong bearer tokens.

Each client address may fail a few times (`PER_ADDRESS.free_failures`); from then on it must
wait before its next attempt is even looked at, twice as long after each further failure (1 s,
2 s, 4 s … up to 15 minutes). Attempts during the wait are refused unread (429 with
`Retry-After`), so guessing is as slow as the waits, however fast the requests come. A success
clears the address. A second, looser limit counts failures from all addresses together (many
addresses guessing at once); addresses that signed in successfully recently are not held by it,
so the owner stays able to sign in while strangers are being slowed. Nothing is logged per
attempt: one `web_auth_throttled` line when a wait begins, with the count of failures and of
the attempts refused during the previous wait.

The address is the socket peer as uvicorn reports it; uvicorn replaces it by the last address of
`X-Forwarded-For` only when the peer is loopback (its `forwarded_allow_ips` default), which is
what a reverse proxy on the same machine sends. The state lives in this process's memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

GLOBAL = "*"  # the key of the all-addresses record


@dataclass(frozen=True, slots=True)
class Backoff:
    free_failures: int  # failures before the first wait
    first_wait: float  # seconds; doubled after each further failure
    max_wait: float
    forget_after: float  # seconds without a failure after which the count starts over


PER_ADDRESS = Backoff(free_failures=5, first_wait=1.0, max_wait=900.0, forget_after=3600.0)
ALL_ADDRESSES = Backoff(free_failures=100, first_wait=1.0, max_wait=60.0, forget_after=900.0)
TRUSTED_FOR = 86_400.0  # a successful sign-in exempts its address from the global limit this long
MAX_ADDRESSES = 10_000  # records kept; the oldest go first (the global limit still counts)


@dataclass(slots=True)
class _Record:
    failures: int = 0
    last_failure: float = 0.0
    blocked_until: float = 0.0
    refused: int = 0  # attempts refused during the current wait


@dataclass(frozen=True, slots=True)
class Refusal:
    """An attempt that must not be evaluated: wait `retry_after` seconds (whole, at least 1)."""

    retry_after: int
    everyone: bool  # the all-addresses limit, not this address's own


class AuthThrottle:
    def __init__(
        self,
        clock: Callable[[], float],
        per_address: Backoff = PER_ADDRESS,
        all_addresses: Backoff = ALL_ADDRESSES,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        self._clock = clock
        self._per_address = per_address
        self._all = all_addresses
        self._max_addresses = max_addresses
        self._records: dict[str, _Record] = {}  # oldest failure first
        self._global = _Record()
        self._trusted: dict[str, float] = {}  # address → time of its last success

    def check(self, address: str) -> Refusal | None:
        """Whether an attempt from `address` may be evaluated now (None) or must wait."""
        now = self._clock()
        record = self._records.get(address)
        if record is not None and record.blocked_until > now:
            record.refused += 1
            return Refusal(_whole(record.blocked_until - now), everyone=False)
        if self._global.blocked_until > now and not self._is_trusted(address, now):
            self._global.refused += 1
            return Refusal(_whole(self._global.blocked_until - now), everyone=True)
        return None

    def failed(self, address: str) -> None:
        now = self._clock()
        record = self._records.pop(address, None) or _Record()
        self._records[address] = record  # now the newest
        self._count(record, self._per_address, now, address)
        self._count(self._global, self._all, now, GLOBAL)
        self._prune(now)

    def succeeded(self, address: str) -> None:
        self._records.pop(address, None)
        self._trusted.pop(address, None)
        self._trusted[address] = self._clock()
        while len(self._trusted) > self._max_addresses:
            del self._trusted[next(iter(self._trusted))]

    def _count(self, record: _Record, backoff: Backoff, now: float, address: str) -> None:
        if now - record.last_failure > backoff.forget_after:
            record.failures = 0
        record.failures += 1
        record.last_failure = now
        over = record.failures - backoff.free_failures
        if over < 0:
            return
        wait = min(backoff.first_wait * 2.0 ** min(over, 60), backoff.max_wait)
        record.blocked_until = now + wait
        log.warning(
            "web_auth_throttled",
            client=address,
            failures=record.failures,
            wait_seconds=wait,
            refused_while_waiting=record.refused,
        )
        record.refused = 0

    def _is_trusted(self, address: str, now: float) -> bool:
        since = self._trusted.get(address)
        return since is not None and now - since < TRUSTED_FOR

    def _prune(self, now: float) -> None:
        forget = self._per_address.forget_after
        while self._records:
            address, oldest = next(iter(self._records.items()))
            stale = now - oldest.last_failure > forget and oldest.blocked_until <= now
            if not stale and len(self._records) <= self._max_addresses:
                return
            del self._records[address]


def _whole(seconds: float) -> int:
    return max(1, math.ceil(seconds))
