"""the keyword index: postings, document frequencies and per-user totals

Replaces the full-text index on memory_message, whose matches were scored outside the
database and so cost time in proportion to a user's history. Existing messages are
indexed here, in batches.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 16:30:00.000000
"""

from __future__ import annotations

from collections import Counter

import sqlalchemy as sa
from alembic import op

from memstack.stores.sql.models import UTCDateTime
from memstack.stores.sql.term_index import ROWS_PER_STATEMENT, impact, term_frequencies

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_TERM = sa.String(length=64)
_ID = sa.String(length=128)


def _create_tables() -> None:
    op.create_table(
        "memory_term",
        sa.Column("user_id", _ID, primary_key=True),
        sa.Column("term", _TERM, primary_key=True),
        sa.Column("msg_id", sa.String(length=400), primary_key=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("tf", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("impact", sa.Float(), nullable=False),
    )
    op.create_index(
        "ix_term_impact",
        "memory_term",
        [
            "user_id",
            "term",
            sa.text("impact DESC"),
            sa.text("created_at DESC"),
            "msg_id",
            "tf",
            "length",
        ],
    )
    op.create_table(
        "memory_term_count",
        sa.Column("user_id", _ID, primary_key=True),
        sa.Column("term", _TERM, primary_key=True),
        sa.Column("docs", sa.Integer(), nullable=False),
    )
    op.create_table(
        "memory_lexicon",
        sa.Column("user_id", _ID, primary_key=True),
        sa.Column("docs", sa.Integer(), nullable=False),
        sa.Column("terms", sa.BigInteger(), nullable=False),
    )


def _backfill() -> None:
    conn = op.get_bind()
    postings = sa.table(
        "memory_term",
        sa.column("user_id"),
        sa.column("term"),
        sa.column("msg_id"),
        sa.column("created_at", UTCDateTime()),
        sa.column("tf"),
        sa.column("length"),
        sa.column("impact"),
    )
    counts: Counter[tuple[str, str]] = Counter()
    totals: dict[str, list[int]] = {}
    batch: list[dict[str, object]] = []
    messages = sa.table(
        "memory_message",
        sa.column("user_id"),
        sa.column("msg_id"),
        sa.column("created_at", UTCDateTime()),
        sa.column("search_terms"),
    )
    rows = conn.execute(sa.select(messages)).mappings()
    for row in rows:
        tf, length = term_frequencies(row["search_terms"] or "")
        for term, n in tf.items():
            batch.append(
                {
                    "user_id": row["user_id"],
                    "term": term,
                    "msg_id": row["msg_id"],
                    "created_at": row["created_at"],
                    "tf": n,
                    "length": length,
                    "impact": impact(n, length),
                }
            )
            counts[(row["user_id"], term)] += 1
        total = totals.setdefault(row["user_id"], [0, 0])
        total[0] += 1
        total[1] += length
        if len(batch) >= ROWS_PER_STATEMENT:
            conn.execute(postings.insert(), batch)
            batch = []
    if batch:
        conn.execute(postings.insert(), batch)
    if counts:
        conn.execute(
            sa.table(
                "memory_term_count", sa.column("user_id"), sa.column("term"), sa.column("docs")
            ).insert(),
            [{"user_id": u, "term": t, "docs": n} for (u, t), n in counts.items()],
        )
    if totals:
        conn.execute(
            sa.table(
                "memory_lexicon", sa.column("user_id"), sa.column("docs"), sa.column("terms")
            ).insert(),
            [{"user_id": u, "docs": d, "terms": n} for u, (d, n) in totals.items()],
        )


def upgrade() -> None:
    _create_tables()
    _backfill()
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_message_fts")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE INDEX ix_message_fts ON memory_message "
            "USING gin (to_tsvector('simple', search_terms))"
        )
    op.drop_table("memory_lexicon")
    op.drop_table("memory_term_count")
    op.drop_index("ix_term_impact", table_name="memory_term")
    op.drop_table("memory_term")
