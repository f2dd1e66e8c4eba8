"""message author name

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: existing rows have no author, and adding such a column
    # is a catalogue-only change on PostgreSQL (no table rewrite of the ledger).
    with op.batch_alter_table("memory_message", schema=None) as batch_op:
        batch_op.add_column(sa.Column("name", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("memory_message", schema=None) as batch_op:
        batch_op.drop_column("name")
