"""SQLAlchemy tables of fact memory. Alembic migrations in ``memstack/migrations`` build them.

The same tables run on PostgreSQL (production, tests) and SQLite (embedded default);
type variants keep JSONB and BIGSERIAL on PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

BigId = BigInteger().with_variant(Integer, "sqlite")
JsonValue = JSON().with_variant(JSONB(), "postgresql")
IdStr = String(128)
# A message id is "<ts>-<user>/<session>-<seq>" or "<user>/<session>:<caller id>": room
# for three ids (ids stored before sessions were scoped by user lack the "<user>/").
MsgIdStr = String(400)
# A keyword-index term; longer tokens (a URL's path, a hash) are left out of the index.
TERM_MAX_CHARS = 64
TermStr = String(TERM_MAX_CHARS)


class UTCDateTime(TypeDecorator[datetime]):
    """TIMESTAMPTZ on PostgreSQL; on SQLite, naive UTC read back as aware UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return (
            value.astimezone(UTC)
            if dialect.name != "sqlite"
            else value.astimezone(UTC).replace(tzinfo=None)
        )

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class MessageRow(Base):
    """The message ledger: every message, exactly as received."""

    __tablename__ = "memory_message"

    msg_id: Mapped[str] = mapped_column(MsgIdStr, primary_key=True)
    user_id: Mapped[str] = mapped_column(IdStr)
    session_id: Mapped[str] = mapped_column(IdStr)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # The author in a conversation of several people (OpenAI's ``name``); NULL for most.
    name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Space-joined lexical terms (jieba for Chinese), made client-side; the keyword
    # index (TermRow) is built from them.
    search_terms: Mapped[str] = mapped_column(Text, default="")
    # When Redis accepted the message (its clock, not the caller's ts): an erasure
    # refuses what was accepted before it. NULL for messages ingested before 0005.
    accepted_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    __table_args__ = (
        # The ledger's order within a session: "the message before" is one index step.
        Index("ix_message_user_session_order", "user_id", "session_id", "created_at", "msg_id"),
        Index("ix_message_user_time", "user_id", "created_at"),
    )


class TermRow(Base):
    """One posting of the keyword index: a term of one message and its weight there.

    Read per term in weight order, so a query reads a bounded number of postings per
    term however long the user's history is (``stores/sql/lexical.py``)."""

    __tablename__ = "memory_term"

    user_id: Mapped[str] = mapped_column(IdStr, primary_key=True)
    term: Mapped[str] = mapped_column(TermStr, primary_key=True)
    msg_id: Mapped[str] = mapped_column(MsgIdStr, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # Occurrences of the term in the message, and the message's length in terms: what
    # BM25 scores it by, with the user's mean length at query time.
    tf: Mapped[int] = mapped_column(Integer)
    length: Mapped[int] = mapped_column(Integer)
    # BM25's term-frequency factor at a reference message length: the order in which a
    # term's postings are read (idf is the same for all of them).
    impact: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        # Holds every column a query reads, so it is answered from the index alone
        # (PostgreSQL's index-only scan) instead of a heap visit per posting.
        Index(
            "ix_term_impact",
            "user_id",
            "term",
            text("impact DESC"),
            text("created_at DESC"),
            "msg_id",
            "tf",
            "length",
        ),
    )


class TermCountRow(Base):
    """How many of a user's messages hold a term (BM25's document frequency)."""

    __tablename__ = "memory_term_count"

    user_id: Mapped[str] = mapped_column(IdStr, primary_key=True)
    term: Mapped[str] = mapped_column(TermStr, primary_key=True)
    docs: Mapped[int] = mapped_column(Integer)


class LexiconRow(Base):
    """A user's keyword-index totals: messages indexed and their terms (BM25's corpus
    size and mean length), kept with each write instead of counted per query."""

    __tablename__ = "memory_lexicon"

    user_id: Mapped[str] = mapped_column(IdStr, primary_key=True)
    docs: Mapped[int] = mapped_column(Integer)
    terms: Mapped[int] = mapped_column(BigInteger)


_CURRENT = text("valid_until IS NULL")


class FactRow(Base):
    """The specification's ``agent_memory_fact``, plus ``supersedes_id`` and hit tracking."""

    __tablename__ = "agent_memory_fact"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(IdStr)
    session_id: Mapped[str] = mapped_column(IdStr)
    msg_id: Mapped[str] = mapped_column(MsgIdStr)
    fact_type: Mapped[str] = mapped_column(String(32))
    fact_key: Mapped[str] = mapped_column(String(128))
    fact_value: Mapped[Any] = mapped_column(JsonValue)
    confidence: Mapped[float] = mapped_column(Float, default=1.0)
    source: Mapped[str] = mapped_column(String(32))
    valid_from: Mapped[datetime] = mapped_column(UTCDateTime())
    valid_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # Not a foreign key: the row it names may have moved to the archive (same id there).
    supersedes_id: Mapped[int | None] = mapped_column(BigId, nullable=True)
    # The message that withdrew this value with nothing in its place (a retraction);
    # NULL for a current or superseded value (a successor names it by supersedes_id).
    ended_by_msg_id: Mapped[str | None] = mapped_column(MsgIdStr, nullable=True)
    hit_count: Mapped[int] = mapped_column(Integer, default=0)
    last_hit_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The candidate whose confirmation wrote this row (None: extracted or set by hand).
    candidate_id: Mapped[int | None] = mapped_column(BigId, nullable=True)

    __table_args__ = (
        # Unique where current: two racing workers can never leave two current rows.
        Index(
            "idx_fact_user_key",
            "user_id",
            "fact_key",
            unique=True,
            postgresql_where=_CURRENT,
            sqlite_where=_CURRENT,
        ),
        Index("uq_fact_msg", "msg_id", "fact_key", unique=True),
        Index("ix_fact_user_history", "user_id", "fact_key", "valid_from"),
    )


class FactArchiveRow(Base):
    """Cold facts moved out of the hot table: superseded or never hit."""

    __tablename__ = "agent_memory_fact_archive"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    user_id: Mapped[str] = mapped_column(IdStr, index=True)
    session_id: Mapped[str] = mapped_column(IdStr)
    msg_id: Mapped[str] = mapped_column(MsgIdStr)
    fact_type: Mapped[str] = mapped_column(String(32))
    fact_key: Mapped[str] = mapped_column(String(128))
    fact_value: Mapped[Any] = mapped_column(JsonValue)
    confidence: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(32))
    valid_from: Mapped[datetime] = mapped_column(UTCDateTime())
    valid_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    supersedes_id: Mapped[int | None] = mapped_column(BigId, nullable=True)
    ended_by_msg_id: Mapped[str | None] = mapped_column(MsgIdStr, nullable=True)
    hit_count: Mapped[int] = mapped_column(Integer)
    last_hit_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    candidate_id: Mapped[int | None] = mapped_column(BigId, nullable=True)
    archived_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SummaryRow(Base):
    """A structured session summary, always made from raw messages."""

    __tablename__ = "memory_session_summary"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(IdStr)
    session_id: Mapped[str] = mapped_column(IdStr)
    first_msg_id: Mapped[str] = mapped_column(MsgIdStr)
    last_msg_id: Mapped[str] = mapped_column(MsgIdStr)
    message_count: Mapped[int] = mapped_column(Integer)
    topic: Mapped[str] = mapped_column(String(64))
    content: Mapped[Any] = mapped_column(JsonValue)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        Index("uq_summary_last_msg", "session_id", "last_msg_id", unique=True),
        Index("ix_summary_user", "user_id", "created_at"),
    )


class ToolResultRow(Base):
    """Large tool output kept out of Redis; the state hash holds only its id."""

    __tablename__ = "memory_tool_result"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(IdStr, index=True)
    session_id: Mapped[str] = mapped_column(IdStr)
    field: Mapped[str] = mapped_column(String(128))
    content: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class UserRow(Base):
    """One row per user the ledger has seen, and the erasure mark of a forgotten one.

    Every ingest transaction reads its user's row under a shared lock and
    ``forget_user`` writes it under an exclusive one, so an erasure waits for the
    writes in flight and every later write sees it: a message accepted before
    ``forgotten_before`` is never written back.
    """

    __tablename__ = "memory_user"

    user_id: Mapped[str] = mapped_column(IdStr, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    forgotten_before: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The names the user speaks under in a conversation of several people: a message
    # with one of them as its author is the user's own (its facts are the user's).
    display_name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    aliases: Mapped[Any] = mapped_column(JsonValue, nullable=True)


class CandidateRow(Base):
    """A fact read with too little confidence to be served as the user's: kept with its
    message until someone confirms it (it becomes a fact, ``fact_id``) or rejects it, or
    a newer statement of its key makes it moot (``superseded``). Rows are never deleted
    but by erasure, so the decisions stay auditable."""

    __tablename__ = "memory_fact_candidate"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(IdStr)
    session_id: Mapped[str] = mapped_column(IdStr)
    msg_id: Mapped[str] = mapped_column(MsgIdStr)
    fact_type: Mapped[str] = mapped_column(String(32))
    fact_key: Mapped[str] = mapped_column(String(128))
    fact_value: Mapped[Any] = mapped_column(JsonValue)
    confidence: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(32))
    said_at: Mapped[datetime] = mapped_column(UTCDateTime())
    status: Mapped[str] = mapped_column(String(16))  # pending confirmed rejected superseded
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    fact_id: Mapped[int | None] = mapped_column(BigId, nullable=True)

    __table_args__ = (
        Index("uq_candidate_msg", "msg_id", "fact_key", unique=True),
        Index("ix_candidate_user", "user_id", "fact_key", "said_at"),
    )


class ErasureRow(Base):
    """The erasure mark of one session or one message of a user (``forget_session``,
    ``delete_message``): nothing of it accepted before ``erased_before`` is written
    back. A user's own mark is ``UserRow.forgotten_before``; forgetting the user drops
    these, which that mark covers."""

    __tablename__ = "memory_erasure"

    user_id: Mapped[str] = mapped_column(IdStr, primary_key=True)
    scope: Mapped[str] = mapped_column(String(16), primary_key=True)  # session | message
    target: Mapped[str] = mapped_column(MsgIdStr, primary_key=True)
    erased_before: Mapped[datetime] = mapped_column(UTCDateTime())


class KBDocumentRow(Base):
    """The knowledge-base registry: one row per document, its chunks in the
    KB vector store under ids ``namespace:doc_id#chunk_idx``. ``content_hash`` makes a re-add of
    unchanged content a no-op; ``chunk_count`` says which chunk ids a shorter version
    leaves behind.
    """

    __tablename__ = "memory_kb_document"

    # The KB vector collection the chunks live in: deployments with different key
    # prefixes may share one database but never each other's registry.
    collection: Mapped[str] = mapped_column(String(128), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(64), primary_key=True)
    doc_id: Mapped[str] = mapped_column(IdStr, primary_key=True)
    title: Mapped[str] = mapped_column(String(300))
    source: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    chunk_count: Mapped[int] = mapped_column(Integer)
    model_version: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ApiKeyRow(Base):
    """An API key of the HTTP API: only the SHA-256 of its secret is kept.

    ``user_id`` NULL is an admin key; a user key reaches only that user's memory.
    ``deployment`` is the key prefix: deployments sharing one database keep their keys
    apart, as they keep their knowledge-base registries.
    """

    __tablename__ = "memory_api_key"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    deployment: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str | None] = mapped_column(IdStr, nullable=True)
    # Space-separated grants beyond a user key's own memory (e.g. "kb:write").
    scopes: Mapped[str] = mapped_column(String(256), default="")
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    __table_args__ = (
        # "Does this deployment have a live key?" is one index probe.
        Index("ix_api_key_deployment_live", "deployment", "revoked_at"),
    )


class VectorSpaceRow(Base):
    """Which embedder wrote a deployment's vectors, so that a deployment left on the
    default embedder keeps the one its vectors were written with when the default
    changes. ``deployment`` is the key prefix, as for API keys."""

    __tablename__ = "memory_vector_space"

    deployment: Mapped[str] = mapped_column(String(32), primary_key=True)
    embedder: Mapped[str] = mapped_column(String(32))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())
