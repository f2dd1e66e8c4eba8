"""fact candidates, the confirmation a fact came from, and the user's own names

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from memstack.stores.sql.models import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

CANDIDATES = "memory_fact_candidate"
FACT_TABLES = ("agent_memory_fact", "agent_memory_fact_archive")
BigId = sa.BigInteger().with_variant(sa.Integer, "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # New table and nullable columns without defaults: catalogue-only changes on
    # PostgreSQL, nothing existing is rewritten.
    op.create_table(
        CANDIDATES,
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("msg_id", sa.String(length=400), nullable=False),
        sa.Column("fact_type", sa.String(length=32), nullable=False),
        sa.Column("fact_key", sa.String(length=128), nullable=False),
        sa.Column("fact_value", Json, nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("said_at", UTCDateTime(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("decided_at", UTCDateTime(), nullable=True),
        sa.Column("fact_id", BigId, nullable=True),
    )
    op.create_index("uq_candidate_msg", CANDIDATES, ["msg_id", "fact_key"], unique=True)
    op.create_index("ix_candidate_user", CANDIDATES, ["user_id", "fact_key", "said_at"])
    for table in FACT_TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("candidate_id", BigId, nullable=True))
    with op.batch_alter_table("memory_user", schema=None) as batch_op:
        batch_op.add_column(sa.Column("display_name", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("aliases", Json, nullable=True))


def downgrade() -> None:
    # Candidates and name bindings are lost: downgrade only to go back to a memstack that
    # had neither.
    with op.batch_alter_table("memory_user", schema=None) as batch_op:
        batch_op.drop_column("aliases")
        batch_op.drop_column("display_name")
    for table in FACT_TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("candidate_id")
    op.drop_index("ix_candidate_user", table_name=CANDIDATES)
    op.drop_index("uq_candidate_msg", table_name=CANDIDATES)
    op.drop_table(CANDIDATES)
