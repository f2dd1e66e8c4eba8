"""sessions scoped by user; erasure marks

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstack.stores.sql.models import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Message ids now carry the user ("<user>/<session>:<id>"), which needs up to 386
# characters. Widening a varchar is a catalogue-only change on PostgreSQL; SQLite does
# not enforce lengths.
WIDENED = (
    ("memory_message", "msg_id"),
    ("agent_memory_fact", "msg_id"),
    ("agent_memory_fact_archive", "msg_id"),
    ("memory_session_summary", "first_msg_id"),
    ("memory_session_summary", "last_msg_id"),
)
OLD_INDEX = "ix_message_session_order"
NEW_INDEX = "ix_message_user_session_order"


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if _postgresql():
        for table, column in WIDENED:
            op.alter_column(table, column, type_=sa.String(400), existing_type=sa.String(300))
    with op.batch_alter_table("memory_message", schema=None) as batch_op:
        batch_op.add_column(sa.Column("accepted_at", UTCDateTime(), nullable=True))
    op.create_table(
        "memory_user",
        sa.Column("user_id", sa.String(128), primary_key=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("forgotten_before", UTCDateTime(), nullable=True),
    )
    # Every user the ledger knows gets its row, which ingest and erasure lock.
    op.execute(
        "INSERT INTO memory_user (user_id, created_at) "
        "SELECT user_id, MIN(created_at) FROM memory_message GROUP BY user_id"
    )
    # Two users may now have sessions of the same id: the session's order includes the user.
    if _postgresql():
        with op.get_context().autocommit_block():
            op.create_index(
                NEW_INDEX,
                "memory_message",
                ["user_id", "session_id", "created_at", "msg_id"],
                postgresql_concurrently=True,
                if_not_exists=True,
            )
            op.drop_index(OLD_INDEX, table_name="memory_message", postgresql_concurrently=True)
        return
    op.create_index(NEW_INDEX, "memory_message", ["user_id", "session_id", "created_at", "msg_id"])
    op.drop_index(OLD_INDEX, table_name="memory_message")


def downgrade() -> None:
    op.create_index(OLD_INDEX, "memory_message", ["session_id", "created_at", "msg_id"])
    op.drop_index(NEW_INDEX, table_name="memory_message")
    op.drop_table("memory_user")
    with op.batch_alter_table("memory_message", schema=None) as batch_op:
        batch_op.drop_column("accepted_at")
    if _postgresql():
        for table, column in WIDENED:
            op.alter_column(table, column, type_=sa.String(300), existing_type=sa.String(400))
