"""tool executions remember their call id and the message they answer (resuming cut turns)

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tool_executions") as batch:
        batch.add_column(sa.Column("call_id", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("answers_message_id", sa.Integer(), nullable=True))
        batch.create_index(
            "ix_tool_executions_answers_message_id", ["answers_message_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("tool_executions") as batch:
        batch.drop_index("ix_tool_executions_answers_message_id")
        batch.drop_column("answers_message_id")
        batch.drop_column("call_id")
