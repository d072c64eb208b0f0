"""leases: which process works on a session, and which one is delivering a reply

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import bruce_bot.storage.models

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "session_leases",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("expires_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_session_leases_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_session_leases")),
    )
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(length=128)))
        batch.add_column(sa.Column("lease_until", bruce_bot.storage.models.UTCDateTime()))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("lease_until")
        batch.drop_column("lease_owner")
    op.drop_table("session_leases")
