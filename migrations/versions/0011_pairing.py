"""pairing: people the owner let in from the dashboard or the CLI, and the codes strangers wait with

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import bruce_bot.storage.models

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "approved_users",
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("chat_id", sa.String(length=128), nullable=False),
        sa.Column("approved_by", sa.String(length=32), nullable=False),
        sa.Column("approved_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("channel", "user_id", name=op.f("pk_approved_users")),
    )
    op.create_table(
        "pairing_codes",
        sa.Column("code", sa.String(length=16), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("chat_id", sa.String(length=128), nullable=False),
        sa.Column("created_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.Column("expires_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("code", name=op.f("pk_pairing_codes")),
        sa.UniqueConstraint("channel", "user_id", name="uq_pairing_codes_channel_user"),
    )
    op.create_index("ix_pairing_codes_expires_at", "pairing_codes", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_pairing_codes_expires_at", table_name="pairing_codes")
    op.drop_table("pairing_codes")
    op.drop_table("approved_users")
