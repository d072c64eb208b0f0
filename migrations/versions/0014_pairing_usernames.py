"""pairing: the platform @username beside the name a stranger chose, for the owner to go by

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("approved_users", "pairing_codes"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("username", sa.String(length=200), server_default="", nullable=False)
            )


def downgrade() -> None:
    for table in ("approved_users", "pairing_codes"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("username")
