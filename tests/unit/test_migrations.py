"""The schema is defined once: models, migrations and the start-up fast paths agree.

Two ways build a database: alembic running every migration (any existing file, PostgreSQL),
and `fresh_schema.create_if_empty` for a new SQLite file. Both must give the same tables,
columns, keys, indexes, triggers and virtual tables (the memories' full-text index, which no
model describes), or the next migration would meet two different databases."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from bruce_bot.storage.database import SCHEMA_HEAD, _alembic_config, upgrade_schema
from bruce_bot.storage.fresh_schema import create_if_empty
from bruce_bot.storage.fulltext import FTS_TABLE, SQLITE_FTS_TABLES, described_by_models
from bruce_bot.storage.models import Base
from bruce_bot.storage.pairing import PairingStore


def migrated_by_alembic(path: Path, revision: str = "head") -> Path:
    command.upgrade(_alembic_config(f"sqlite+aiosqlite:///{path}"), revision)
    return path


def _statement(sql: str | None) -> str:
    return " ".join((sql or "").split())


def schema_of(path: Path) -> dict[str, object]:
    """Everything SQLite knows about each table, in an order that does not depend on how the
    CREATE statement listed its constraints; a virtual table with the statement that made it,
    and the triggers under the key `(triggers)`."""
    with sqlite3.connect(path) as connection:
        tables = sorted(
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        )
        schema: dict[str, object] = {}
        for table in tables:
            indexes = []
            for _, name, unique, origin, partial in connection.execute(
                f"PRAGMA index_list('{table}')"
            ):
                columns = [row[2] for row in connection.execute(f"PRAGMA index_info('{name}')")]
                shown = name if origin == "c" else origin  # autoindexes are named by SQLite
                indexes.append((shown, unique, partial, columns))
            schema[table] = {
                "columns": list(connection.execute(f"PRAGMA table_xinfo('{table}')")),
                "foreign_keys": sorted(
                    row[2:] for row in connection.execute(f"PRAGMA foreign_key_list('{table}')")
                ),
                "indexes": sorted(indexes, key=repr),
            }
        for name, sql in connection.execute(
            "SELECT name, sql FROM sqlite_master "
            "WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        ):
            schema[name] = {**schema[name], "virtual": _statement(sql)}  # type: ignore[dict-item]
        schema["(triggers)"] = sorted(
            (name, table, _statement(sql))
            for name, table, sql in connection.execute(
                "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'"
            )
        )
    return schema


def test_schema_head_constant_matches_the_newest_migration(tmp_path: Path) -> None:
    config = _alembic_config(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_HEAD


def test_migrations_create_exactly_the_tables_of_the_models(tmp_path: Path) -> None:
    database = migrated_by_alembic(tmp_path / "bruce.db")
    schema = schema_of(database)
    tables = set(schema) - {"alembic_version", "(triggers)"}
    assert tables == set(Base.metadata.tables) | SQLITE_FTS_TABLES
    assert {"sessions", "messages", "tool_executions", "session_summaries", "memories"} <= tables
    assert "fts5" in str(schema[FTS_TABLE])
    assert [trigger[0] for trigger in schema["(triggers)"]] == [  # type: ignore[union-attr]
        "memories_fts_delete",
        "memories_fts_insert",
        "memories_fts_update",
    ]
    engine = create_engine(f"sqlite:///{database}")
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "include_object": described_by_models}
        )
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == []


def test_a_new_database_gets_the_same_schema_as_the_migrations_give(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    asyncio.run(upgrade_schema(f"sqlite+aiosqlite:///{fresh}"))
    migrated = migrated_by_alembic(tmp_path / "migrated.db")
    assert schema_of(fresh) == schema_of(migrated)
    with sqlite3.connect(fresh) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (SCHEMA_HEAD,)
        ]
    # alembic agrees the fresh database is current: upgrading it changes nothing
    migrated_by_alembic(fresh)
    assert schema_of(fresh) == schema_of(migrated)


def test_an_older_database_is_upgraded_by_the_migrations_not_recreated(tmp_path: Path) -> None:
    database = migrated_by_alembic(tmp_path / "bruce.db", "0001")
    with sqlite3.connect(database) as connection:
        connection.execute(
            "INSERT INTO sessions (channel, chat_id, kind, active_skills, "
            "context_start_message_id, created_at) VALUES ('web', 'c1', 'main', '[]', 0, "
            "'2026-01-01 00:00:00')"
        )
    asyncio.run(upgrade_schema(f"sqlite+aiosqlite:///{database}"))
    assert schema_of(database) == schema_of(migrated_by_alembic(tmp_path / "new.db"))
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT chat_id FROM sessions").fetchall() == [("c1",)]


def test_a_file_with_tables_but_no_version_is_left_to_alembic(tmp_path: Path) -> None:
    database = tmp_path / "bruce.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE something_else (x INTEGER)")
    assert not create_if_empty(database, SCHEMA_HEAD, busy_timeout_s=1)
    with sqlite3.connect(database) as connection:
        names = [row[0] for row in connection.execute("SELECT name FROM sqlite_master")]
    assert names == ["something_else"]


def test_two_processes_creating_one_new_file_at_once_create_it_once(tmp_path: Path) -> None:
    database = tmp_path / "bruce.db"
    start = threading.Barrier(4)
    results: list[bool] = []

    def create() -> None:
        start.wait()
        results.append(create_if_empty(database, SCHEMA_HEAD, busy_timeout_s=10))

    threads = [threading.Thread(target=create) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, False, False, True]
    assert schema_of(database) == schema_of(migrated_by_alembic(tmp_path / "migrated.db"))


def test_a_file_that_is_not_sqlite_is_not_touched(tmp_path: Path) -> None:
    database = tmp_path / "bruce.db"
    database.write_bytes(b"this is not a database, it is a shopping list\n" * 100)
    assert not create_if_empty(database, SCHEMA_HEAD, busy_timeout_s=1)
    assert database.read_bytes().startswith(b"this is not a database")


def test_the_full_text_index_follows_the_memories_on_both_ways(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    asyncio.run(upgrade_schema(f"sqlite+aiosqlite:///{fresh}"))
    for database in (fresh, migrated_by_alembic(tmp_path / "migrated.db")):
        with sqlite3.connect(database) as connection:
            connection.execute(
                "INSERT INTO memories (owner, content, tags, created_at, updated_at) VALUES "
                "('telegram:1', 'Vegetarian since 2019', '[\"diet\"]', '2026-01-01', "
                "'2026-01-01')"
            )
            found = f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?"
            assert connection.execute(found, ('"vegetarian"',)).fetchall() == [(1,)]
            assert connection.execute(found, ('"diet"',)).fetchall() == [(1,)]
            connection.execute("UPDATE memories SET content = 'Vegan now' WHERE id = 1")
            assert connection.execute(found, ('"vegetarian"',)).fetchall() == []
            assert connection.execute(found, ('"vegan"',)).fetchall() == [(1,)]
            connection.execute("DELETE FROM memories")
            assert connection.execute(found, ('"vegan"',)).fetchall() == []


def test_the_memories_migration_goes_down_and_up_again(tmp_path: Path) -> None:
    database = migrated_by_alembic(tmp_path / "bruce.db")
    command.downgrade(_alembic_config(f"sqlite+aiosqlite:///{database}"), "0009")
    assert not set(schema_of(database)) & (SQLITE_FTS_TABLES | {"memories", "memory_links"})
    migrated_by_alembic(database)
    assert schema_of(database) == schema_of(migrated_by_alembic(tmp_path / "again.db"))


def test_0017_keeps_the_people_let_in_and_takes_text_ids_and_its_downgrade_drops_those(
    tmp_path: Path,
) -> None:
    database = migrated_by_alembic(tmp_path / "bruce.db", "0016")
    with sqlite3.connect(database) as connection:
        connection.execute(
            "INSERT INTO approved_users (channel, user_id, name, chat_id, approved_by, "
            "approved_at, username) VALUES ('telegram', 6666, 'Mallory', '6666', 'cli', "
            "'2026-01-01 00:00:00', 'mallory')"
        )
    url = f"sqlite+aiosqlite:///{database}"
    command.upgrade(_alembic_config(url), "0017")

    async def approved(channel: str, user_id: int | str) -> bool:
        engine = create_async_engine(url)
        try:
            return await PairingStore(engine).is_approved(channel, user_id)
        finally:
            await engine.dispose()

    assert asyncio.run(approved("telegram", 6666))  # still let in, read back as a number
    with sqlite3.connect(database) as connection:
        connection.execute(
            "INSERT INTO approved_users (channel, user_id, name, chat_id, approved_by, "
            "approved_at, username) VALUES ('matrix', '@bob:example.org', 'Bob', '!r:x', "
            "'cli', '2026-01-01 00:00:00', '')"
        )
    assert asyncio.run(approved("matrix", "@bob:example.org"))
    command.downgrade(_alembic_config(url), "0016")
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT channel, user_id FROM approved_users").fetchall()
    assert rows == [("telegram", 6666)]
