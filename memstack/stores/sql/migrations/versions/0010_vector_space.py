"""the embedder each deployment's vectors were written with

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 09:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstack.stores.sql.models import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_vector_space",
        sa.Column("deployment", sa.String(length=32), primary_key=True),
        sa.Column("embedder", sa.String(length=32), nullable=False),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memory_vector_space")
