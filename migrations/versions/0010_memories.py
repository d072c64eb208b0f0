"""memories: what people told Bruce about themselves, searchable; who asked for each task

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import bruce_bot.storage.models
from bruce_bot.storage import fulltext

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=160), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tags", bruce_bot.storage.models.WordList(), nullable=False),
        sa.Column("source_session_id", sa.Integer(), nullable=True),
        sa.Column("created_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.Column("updated_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["source_session_id"],
            ["sessions.id"],
            name=op.f("fk_memories_source_session_id_sessions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memories")),
    )
    op.create_index("ix_memories_owner_updated_at", "memories", ["owner", "updated_at"])
    op.create_table(
        "memory_links",
        sa.Column("owner", sa.String(length=160), nullable=False),
        sa.Column("person", sa.String(length=160), nullable=False),
        sa.Column("created_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_memory_links")),
    )
    op.create_index("ix_memory_links_person", "memory_links", ["person"])
    with op.batch_alter_table("proactive_tasks") as batch:
        batch.add_column(sa.Column("created_by", sa.String(length=160), nullable=True))
    statements = (
        fulltext.SQLITE_DDL if op.get_bind().dialect.name == "sqlite" else fulltext.POSTGRES_DDL
    )
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    statements = (
        fulltext.SQLITE_DROP if op.get_bind().dialect.name == "sqlite" else fulltext.POSTGRES_DROP
    )
    for statement in statements:
        op.execute(statement)
    with op.batch_alter_table("proactive_tasks") as batch:
        batch.drop_column("created_by")
    op.drop_index("ix_memory_links_person", table_name="memory_links")
    op.drop_table("memory_links")
    op.drop_index("ix_memories_owner_updated_at", table_name="memories")
    op.drop_table("memories")
