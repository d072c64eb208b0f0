"""task runs keep the message they stored and how many times they were handed over

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task_runs") as batch:
        batch.add_column(sa.Column("message_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), server_default="1", nullable=False))
        batch.create_foreign_key(
            op.f("fk_task_runs_message_id_messages"),
            "messages",
            ["message_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_index("ix_task_runs_status", ["status"], unique=False)
        batch.create_index("ix_task_runs_message_id", ["message_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("task_runs") as batch:
        batch.drop_index("ix_task_runs_message_id")
        batch.drop_index("ix_task_runs_status")
        batch.drop_constraint(op.f("fk_task_runs_message_id_messages"), type_="foreignkey")
        batch.drop_column("attempts")
        batch.drop_column("message_id")
