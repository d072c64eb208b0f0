"""watches: what a watch task checks and what it saw last; each check's verdict on its run

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import bruce_bot.storage.models

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "watches",
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("query", sa.String(length=500), nullable=True),
        sa.Column("condition", sa.Text(), nullable=False),
        sa.Column("interval_seconds", sa.Float(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("matched_hash", sa.String(length=64), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("checked_at", bruce_bot.storage.models.UTCDateTime(), nullable=True),
        sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failures_told", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("unsure_told", sa.Boolean(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["proactive_tasks.id"],
            name=op.f("fk_watches_task_id_proactive_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_watches")),
    )
    with op.batch_alter_table("task_runs") as batch:
        batch.add_column(sa.Column("verdict", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_runs") as batch:
        batch.drop_column("reason")
        batch.drop_column("verdict")
    op.drop_table("watches")
