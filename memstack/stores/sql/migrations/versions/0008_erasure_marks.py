"""Erasure marks of one session or one message

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstack.stores.sql.models import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLE = "memory_erasure"


def upgrade() -> None:
    # A new table: nothing existing is read or rewritten.
    op.create_table(
        TABLE,
        sa.Column("user_id", sa.String(length=128), primary_key=True),
        sa.Column("scope", sa.String(length=16), primary_key=True),
        sa.Column("target", sa.String(length=400), primary_key=True),
        sa.Column("erased_before", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    # Without the marks, an ingest batch in flight during a later forget_session or
    # delete_message could write back what they erased: downgrade only to go back to a
    # memstack that had neither.
    op.drop_table(TABLE)
