"""settings/override.py and settings/editable.py on a real SQLite store: where a value comes
from, a stored value that no longer passes validation (config.yml's then, logged), a save equal
to config.yml's, and which apply hooks a change-feed notice runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from structlog.testing import capture_logs

from bruce_bot.settings.editable import max_turns, timezone
from bruce_bot.settings.override import Current, Override, changed_elsewhere
from bruce_bot.storage.changes import EVERYTHING
from bruce_bot.storage.database import Database, upgrade_schema
from bruce_bot.storage.settings import SettingsStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SettingsStore]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}"
    await upgrade_schema(url)
    database = Database(url)
    try:
        yield SettingsStore(database.engine)
    finally:
        await database.dispose()


async def test_the_dashboard_value_wins_and_a_reset_goes_back_to_config(
    store: SettingsStore,
) -> None:
    turns = max_turns(5)
    assert await turns.current(store) == Current(5, "config")
    await turns.save(store, turns.parse(" 12 "))
    assert await store.get("agent.max_turns") == "12"  # kept as text, as before
    assert await turns.current(store) == Current(12, "dashboard")
    await turns.reset(store)
    assert await turns.current(store) == Current(5, "config")


async def test_a_stored_value_that_fails_validation_is_ignored_and_logged(
    store: SettingsStore,
) -> None:
    await store.set("agent.max_turns", "500")
    await store.set("app.timezone", "Nowhere/Atlantis")
    with capture_logs() as logs:
        assert await max_turns(5).current(store) == Current(5, "config")
        assert await timezone(ZoneInfo("UTC")).value(store) == ZoneInfo("UTC")
    assert [(e["event"], e["key"]) for e in logs] == [
        ("setting_ignored", "agent.max_turns"),
        ("setting_ignored", "app.timezone"),
    ]


@pytest.mark.parametrize("value", ["0", "51", "ten", ""])
def test_max_turns_takes_1_to_50(value: str) -> None:
    with pytest.raises(ValueError, match="from 1 to 50"):
        max_turns(5).parse(value)


@pytest.mark.parametrize("name", ["Nowhere/Atlantis", "Europe", "", "../etc"])
def test_a_timezone_must_be_one_this_system_knows(name: str) -> None:
    with pytest.raises(ValueError, match="IANA name"):
        timezone(ZoneInfo("UTC")).parse(name)


async def test_a_value_saved_equal_to_configs_follows_the_file_unless_kept(
    store: SettingsStore,
) -> None:
    follows = Override("x.follows", "yaml", str)
    await follows.save(store, "yaml")
    assert await store.get("x.follows") is None
    kept = Override("x.kept", "yaml", str, follows_equal=False)
    await kept.save(store, "yaml")
    assert await kept.current(store) == Current("yaml", "dashboard")


def test_a_notice_runs_the_hooks_it_names_each_once() -> None:
    ran: list[str] = []

    def shared() -> None:
        ran.append("shared")

    overrides = [
        Override("llm.model", "m", str, apply=shared),
        Override("llm.base_url", None, str, apply=shared),
        Override("channels.telegram.token", "t", str, apply=lambda: ran.append("token")),
        Override("agent.max_turns", 5, int),  # no hook: read where it is used
    ]
    changed_elsewhere(overrides, "llm.model")
    assert ran == ["shared"]
    changed_elsewhere(overrides, "agent.max_turns")
    changed_elsewhere(overrides, "something.else")
    assert ran == ["shared"]
    changed_elsewhere(overrides, EVERYTHING)
    assert ran == ["shared", "shared", "token"]
