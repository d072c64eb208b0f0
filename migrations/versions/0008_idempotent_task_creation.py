"""proactive tasks remember the tool call that created them (no second task on resume)

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("proactive_tasks") as batch:
        batch.add_column(sa.Column("origin", sa.String(length=64), nullable=True))
        batch.create_index("uq_proactive_tasks_origin", ["session_id", "origin"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("proactive_tasks") as batch:
        batch.drop_index("uq_proactive_tasks_origin")
        batch.drop_column("origin")
