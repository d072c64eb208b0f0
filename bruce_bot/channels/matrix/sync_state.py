"""Where the Matrix channel keeps its sync token (`next_batch`) between runs.

Channels never see the database, so the token is a small 0600 file in a private folder of the
data dir (`<data_dir>/matrix/sync.json`, written with private_files.py, replaced atomically),
together with the device id it belongs to. It is written after a sync's messages were handed to
the inbox: a crash in between makes the homeserver send them again, and the inbox stores a
message once (by its event id), so nothing is replayed to the model and nothing is lost.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from bruce_bot.private_files import write_private

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SyncState:
    user_id: str
    device_id: str
    next_batch: str
    access_token: str = ""  # of a password login: a restart keeps the device without logging in


class SyncStateFile:
    def __init__(self, path: Path | None) -> None:
        self._path = path  # None: kept in memory only (an adapter built without a data dir)
        self._memory: SyncState | None = None

    def load(self, user_id: str) -> SyncState | None:
        if self._path is None or not self._path.exists():
            return self._memory
        try:
            data = json.loads(self._path.read_text())
            state = SyncState(**data)
        except (OSError, ValueError, TypeError) as exc:
            log.warning("matrix_sync_state_unreadable", path=str(self._path), error=repr(exc))
            return None
        return state if state.user_id == user_id else None

    def save(self, state: SyncState) -> None:
        self._memory = state
        if self._path is None:
            return
        temporary = self._path.with_suffix(".tmp")
        data = {
            "user_id": state.user_id,
            "device_id": state.device_id,
            "next_batch": state.next_batch,
            "access_token": state.access_token,
        }
        write_private(temporary, json.dumps(data).encode())
        os.replace(temporary, self._path)
