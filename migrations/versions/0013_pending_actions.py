"""pending_actions: tool calls held for the user's yes after a turn read outside content;
proactive_tasks.question_message_id: the question asked about an unconfirmed task

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import bruce_bot.storage.models

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pending_actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=64), nullable=False),
        sa.Column("person", sa.String(length=160), nullable=False),
        sa.Column("task_run", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("question_message_id", sa.Integer(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("created_at", bruce_bot.storage.models.UTCDateTime(), nullable=False),
        sa.Column("resolved_at", bruce_bot.storage.models.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_pending_actions_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["question_message_id"],
            ["messages.id"],
            name=op.f("fk_pending_actions_question_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_actions")),
    )
    op.create_index("ix_pending_actions_session_id", "pending_actions", ["session_id"])
    op.create_index(
        "uq_pending_actions_origin", "pending_actions", ["session_id", "origin"], unique=True
    )
    with op.batch_alter_table("proactive_tasks") as batch:
        batch.add_column(sa.Column("question_message_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_proactive_tasks_question_message_id_messages"),
            "messages",
            ["question_message_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    with op.batch_alter_table("proactive_tasks") as batch:
        batch.drop_constraint(
            op.f("fk_proactive_tasks_question_message_id_messages"), type_="foreignkey"
        )
        batch.drop_column("question_message_id")
    op.drop_index("uq_pending_actions_origin", table_name="pending_actions")
    op.drop_index("ix_pending_actions_session_id", table_name="pending_actions")
    op.drop_table("pending_actions")
