"""fact retraction: the message that ended a value

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# A retraction ends a value with nothing in its place; the ended row names the message
# that withdrew it. The archive keeps the same columns, since archiving moves rows.
TABLES = ("agent_memory_fact", "agent_memory_fact_archive")
COLUMN = "ended_by_msg_id"


def upgrade() -> None:
    # Nullable without a default: every existing row is current or superseded, and adding
    # such a column is a catalogue-only change on PostgreSQL (no rewrite of the table).
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column(COLUMN, sa.String(length=400), nullable=True))


def downgrade() -> None:
    # On SQLite batch mode rebuilds the table; the partial unique index that keeps one
    # current row per key comes back with it (tests/test_migrations.py checks).
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column(COLUMN)
