"""API keys of the HTTP API

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstack.stores.sql.models import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLE = "memory_api_key"
INDEX = "ix_api_key_deployment_live"


def upgrade() -> None:
    # A new table: nothing existing is read or rewritten. The secret itself is never
    # stored, only its SHA-256 (a key's secret is random, so a plain hash is enough).
    op.create_table(
        TABLE,
        sa.Column("key_id", sa.String(length=32), primary_key=True),
        sa.Column("deployment", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=True),
        sa.Column("scopes", sa.String(length=256), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
    )
    op.create_index(INDEX, TABLE, ["deployment", "revoked_at"])


def downgrade() -> None:
    # Dropping the keys opens an API that had only keys (no MEMSTACK_API_TOKEN): a
    # downgrade is for going back to a memstack that knew no keys.
    op.drop_index(INDEX, table_name=TABLE)
    op.drop_table(TABLE)
