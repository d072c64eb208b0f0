"""approved_users.user_id and pairing_codes.user_id as text: Matrix's and Slack's user ids are
text ("@alice:example.org", "U012ABCDEF"), so strangers there can pair too. The numbers of
Telegram and Discord are kept as their digits (read back as numbers).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("approved_users", "pairing_codes")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(
                "user_id",
                type_=sa.String(128),
                existing_type=sa.BigInteger(),
                existing_nullable=False,
                postgresql_using="user_id::text" if postgres else None,
            )


def downgrade() -> None:
    # Text ids (Matrix's, Slack's) cannot become numbers: their rows go first.
    postgres = op.get_bind().dialect.name == "postgresql"
    not_a_number = "user_id !~ '^[0-9]+$'" if postgres else "user_id GLOB '*[^0-9]*'"
    for table in TABLES:
        op.execute(sa.text(f"DELETE FROM {table} WHERE {not_a_number}"))
        with op.batch_alter_table(table) as batch:
            batch.alter_column(
                "user_id",
                type_=sa.BigInteger(),
                existing_type=sa.String(128),
                existing_nullable=False,
                postgresql_using="user_id::bigint" if postgres else None,
            )
