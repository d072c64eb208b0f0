"""tool_executions.details: what a tool's audit row keeps besides its input and output (JSON
text; run_code: exit code, duration, output size, files, and the approval: asked or not, by
whom, when)

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tool_executions") as batch:
        batch.add_column(sa.Column("details", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tool_executions") as batch:
        batch.drop_column("details")
