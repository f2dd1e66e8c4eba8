"""fact memory tables

Revision ID: 0001
Revises:
Create Date: 2026-11-30 00:17:11.946064
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _agent_memory_fact()
    _agent_memory_fact_archive()
    _memory_message()
    _memory_session_summary()
    _memory_tool_result()


def _agent_memory_fact() -> None:
    op.create_table(
        "agent_memory_fact",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("msg_id", sa.String(length=300), nullable=False),
        sa.Column("fact_type", sa.String(length=32), nullable=False),
        sa.Column("fact_key", sa.String(length=128), nullable=False),
        sa.Column(
            "fact_value",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "supersedes_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("hit_count", sa.Integer(), nullable=False),
        sa.Column("last_hit_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("agent_memory_fact", schema=None) as batch_op:
        batch_op.create_index(
            "idx_fact_user_key",
            ["user_id", "fact_key"],
            unique=True,
            postgresql_where=sa.text("valid_until IS NULL"),
            sqlite_where=sa.text("valid_until IS NULL"),
        )
        batch_op.create_index(
            "ix_fact_user_history", ["user_id", "fact_key", "valid_from"], unique=False
        )
        batch_op.create_index("uq_fact_msg", ["msg_id", "fact_key"], unique=True)


def _agent_memory_fact_archive() -> None:
    op.create_table(
        "agent_memory_fact_archive",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("msg_id", sa.String(length=300), nullable=False),
        sa.Column("fact_type", sa.String(length=32), nullable=False),
        sa.Column("fact_key", sa.String(length=128), nullable=False),
        sa.Column(
            "fact_value",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "supersedes_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("hit_count", sa.Integer(), nullable=False),
        sa.Column("last_hit_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("agent_memory_fact_archive", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_agent_memory_fact_archive_user_id"), ["user_id"], unique=False
        )


def _memory_message() -> None:
    op.create_table(
        "memory_message",
        sa.Column("msg_id", sa.String(length=300), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("search_terms", sa.Text(), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("msg_id"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE INDEX ix_message_fts ON memory_message "
            "USING gin (to_tsvector('simple', search_terms))"
        )
    with op.batch_alter_table("memory_message", schema=None) as batch_op:
        batch_op.create_index("ix_message_session_time", ["session_id", "created_at"], unique=False)
        batch_op.create_index("ix_message_user_time", ["user_id", "created_at"], unique=False)


def _memory_session_summary() -> None:
    op.create_table(
        "memory_session_summary",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("first_msg_id", sa.String(length=300), nullable=False),
        sa.Column("last_msg_id", sa.String(length=300), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("topic", sa.String(length=64), nullable=False),
        sa.Column(
            "content",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("memory_session_summary", schema=None) as batch_op:
        batch_op.create_index("ix_summary_user", ["user_id", "created_at"], unique=False)
        batch_op.create_index("uq_summary_last_msg", ["session_id", "last_msg_id"], unique=True)


def _memory_tool_result() -> None:
    op.create_table(
        "memory_tool_result",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("field", sa.String(length=128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("memory_tool_result", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_tool_result_user_id"), ["user_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("memory_tool_result", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_tool_result_user_id"))

    op.drop_table("memory_tool_result")
    with op.batch_alter_table("memory_session_summary", schema=None) as batch_op:
        batch_op.drop_index("uq_summary_last_msg")
        batch_op.drop_index("ix_summary_user")

    op.drop_table("memory_session_summary")
    with op.batch_alter_table("memory_message", schema=None) as batch_op:
        batch_op.drop_index("ix_message_user_time")
        batch_op.drop_index("ix_message_session_time")

    op.drop_table("memory_message")
    with op.batch_alter_table("agent_memory_fact_archive", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_memory_fact_archive_user_id"))

    op.drop_table("agent_memory_fact_archive")
    with op.batch_alter_table("agent_memory_fact", schema=None) as batch_op:
        batch_op.drop_index("uq_fact_msg")
        batch_op.drop_index("ix_fact_user_history")
        batch_op.drop_index(
            "idx_fact_user_key",
            postgresql_where=sa.text("valid_until IS NULL"),
            sqlite_where=sa.text("valid_until IS NULL"),
        )

    op.drop_table("agent_memory_fact")
