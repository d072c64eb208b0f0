"""The schema is defined once: models, migrations and the start-up fast path agree."""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory

from bruce_bot.storage.database import SCHEMA_HEAD, _alembic_config


def test_schema_head_constant_matches_the_newest_migration(tmp_path: Path) -> None:
    config = _alembic_config(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_HEAD


def test_migrations_create_exactly_the_tables_of_the_models(tmp_path: Path) -> None:
    import asyncio

    from sqlalchemy import create_engine, inspect

    from bruce_bot.storage.database import upgrade_schema
    from bruce_bot.storage.models import Base

    database = tmp_path / "bruce.db"
    asyncio.run(upgrade_schema(f"sqlite+aiosqlite:///{database}"))
    engine = create_engine(f"sqlite:///{database}")
    tables = set(inspect(engine).get_table_names()) - {"alembic_version"}
    engine.dispose()
    assert tables == set(Base.metadata.tables)
    assert {"sessions", "messages", "tool_executions", "session_summaries", "settings"} <= tables
