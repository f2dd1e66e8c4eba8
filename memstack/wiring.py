"""How a deployment's parts are built from settings: Redis and SQL at open; the ingest
worker and the two vector stores (semantic memory, knowledge base) on first use, which
:class:`memstack.parts.Stores` holds.

The vector stores are returned unopened: they connect and check their collection on first
use (or on ``await store.ensure_open()``), so a store that is down at start degrades
one layer instead of stopping the process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memstack.core.errors import ConfigError
from memstack.ingest.extraction import build_extractor
from memstack.ingest.pipeline import Ingestor
from memstack.ingest.summaries import SessionSummaries
from memstack.ingest.summarisers import build_summariser
from memstack.ingest.worker import Worker
from memstack.ml.embedders import Embedder, resolve_dim
from memstack.stores import home
from memstack.stores.connect import create_redis, reach
from memstack.stores.journal import Journal
from memstack.stores.redis import layout as redis_layout
from memstack.stores.redis.keys import keys_for
from memstack.stores.redis.queue import IngestQueue
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import db, vector_space
from memstack.stores.vectors.base import VectorStore

if TYPE_CHECKING:
    from memstack.core.settings import Settings


async def connect(settings: Settings) -> tuple[Settings, Redis, AsyncEngine, Journal | None]:
    """Redis and the SQL engine, both reached and checked (schema revision, key layout),
    the journal of the embedded default, whose Redis ends with the process, and the
    settings on the deployment's embedder (:func:`settle_embedder`)."""
    if settings.embedded_redis:
        home.claim(settings.home)
    redis = create_redis(settings)
    engine = db.create_engine(settings)
    try:
        await reach(redis, settings)
        await db.prepare(engine, settings)
        await redis_layout.check(redis, keys_for(settings), migrate=settings.embedded_redis)
        settings = await settle_embedder(settings, engine)
    except BaseException:
        await redis.aclose()
        await engine.dispose()
        raise
    journal = Journal(settings.home / "journal.db") if settings.embedded_redis else None
    return settings, redis, engine, journal


def build_worker(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    working: WorkingMemory,
    queue: IngestQueue,
    embedder: Embedder,
    vectors: VectorStore,
) -> Worker:
    """The ingest worker: the queue, one ingest pipeline and the summariser."""
    summarizer = SessionSummaries(
        settings, sessions, working, build_summariser(settings), embedder, vectors
    )
    ingestor = Ingestor(settings, sessions, embedder, vectors, build_extractor(settings))
    return Worker(
        queue,
        ingestor,
        summarizer,
        settings.ingest_batch,
        log_interval_s=settings.worker_log_interval_s,
    )


def session_factories(
    engine: AsyncEngine,
) -> tuple[async_sessionmaker[AsyncSession], async_sessionmaker[AsyncSession]]:
    """Sessions for transactions, and sessions for single-statement reads: those run
    without BEGIN and ROLLBACK, two round trips fewer per query on the read path, which
    sends three of them per context() call."""
    return (
        async_sessionmaker(engine, expire_on_commit=False),
        async_sessionmaker(
            engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False
        ),
    )


# What every deployment embedded with before embedders were recorded, and the default
# for a new one.
LEGACY_EMBEDDER = "minilm"
NEW_EMBEDDER = "e5-small"


async def settle_embedder(
    settings: Settings, engine: AsyncEngine, *, record: bool = True
) -> Settings:
    """``settings`` on the embedder whose vectors this deployment holds.

    ``auto`` takes the recorded embedder, so a deployment never mixes two vector spaces
    when the default changes: the new default for a new deployment, MiniLM for one
    holding messages from before the record. An explicit embedder stands (a vector
    store written by another refuses it, naming the re-embed); with nothing recorded
    yet, it is recorded (unless ``record`` is False: a diagnosis writes nothing).
    """
    explicit = settings.embedder != "auto"
    new = settings.embedder if explicit else NEW_EMBEDDER
    legacy = settings.embedder if explicit else LEGACY_EMBEDDER
    sessions, _ = session_factories(engine)
    if record:
        name = await vector_space.settle(sessions, settings.key_prefix, new=new, legacy=legacy)
    else:
        async with sessions() as s:
            name, _ = await vector_space.lookup(s, settings.key_prefix, new=new, legacy=legacy)
    return settings if explicit else settings.with_embedder(name)


# Keys of the scope filters (semantic memory: user, session; knowledge base: namespace,
# document); a payload index makes them cheap on a Qdrant server.
MEMORY_INDEX_KEYS = ("user_id", "session_id")
# Every semantic-memory search is scoped to one user, so a Chroma store split by user
# answers each from one shard.
MEMORY_SHARD_KEY = "user_id"
KB_INDEX_KEYS = ("kb", "doc_id")


async def build_store(
    kind: Literal["chroma", "qdrant", "qdrant-edge"],
    *,
    collection: str,
    url: str | None,
    settings: Settings,
    embedder: Embedder,
    index_keys: tuple[str, ...] = (),
    chroma_shards: int = 1,
    shard_key: str | None = None,
) -> VectorStore:
    """A store of ``kind`` on ``url``, or embedded under ``settings.home / kind``.

    ``chroma_shards`` and ``shard_key`` split a new Chroma store into collections by
    that metadata key (see :class:`ChromaStore`); Qdrant filters by payload index instead.
    """
    # A remote embedder only knows its dimension after answering once.
    dim = await resolve_dim(embedder)
    if kind == "chroma":
        from memstack.stores.vectors.chroma import ChromaStore

        return ChromaStore(
            collection,
            model_version=embedder.model_version,
            dim=dim,
            url=url or None,
            # Absolute: chromadb caches clients by path text, and one home reached from two
            # working directories must be one client.
            path=None if url else settings.home.resolve() / "chroma",
            shards=chroma_shards,
            shard_key=shard_key,
        )
    if kind == "qdrant-edge":
        from memstack.stores.vectors.qdrant_edge import QdrantEdgeStore

        if url:
            raise ConfigError("qdrant-edge is embedded: it takes no server URL")
        return QdrantEdgeStore(
            collection,
            model_version=embedder.model_version,
            dim=dim,
            path=settings.home.resolve() / "qdrant-edge",
        )
    from memstack.stores.vectors.qdrant import QdrantStore

    if url:
        return QdrantStore(
            collection,
            model_version=embedder.model_version,
            dim=dim,
            url=url,
            index_keys=index_keys,
        )
    return QdrantStore(
        collection,
        model_version=embedder.model_version,
        dim=dim,
        path=settings.home.resolve() / "qdrant",
    )


async def build_memory_store(settings: Settings, embedder: Embedder) -> VectorStore:
    """Semantic memory: collection ``{key_prefix}_memory`` in ``settings.vector_store``,
    on Chroma split by user into ``settings.chroma_shards`` collections."""
    return await build_store(
        settings.vector_store,
        collection=f"{settings.key_prefix}_memory",
        url=settings.vector_url,
        settings=settings,
        embedder=embedder,
        index_keys=MEMORY_INDEX_KEYS,
        chroma_shards=settings.chroma_shards,
        shard_key=MEMORY_SHARD_KEY,
    )


def kb_store_kind(settings: Settings) -> Literal["chroma", "qdrant", "qdrant-edge"]:
    """``settings.kb_store``, with the embedded "qdrant" resolved to an engine.

    "qdrant" without ``kb_url`` is qdrant-edge (Qdrant's engine in process, with an HNSW
    index: far faster than local mode's exact scan, docs/benchmarks.md), except in a home whose
    knowledge base qdrant-client's local mode already holds (``<home>/qdrant``, from
    before qdrant-edge): that one stays in local mode, so no documents vanish on upgrade.
    To move such a home over: ``kb_store="qdrant-edge"``, then remove and add each document
    again (adding an unchanged one is a no-op).
    """
    kind = settings.kb_store
    if kind != "qdrant" or settings.kb_url:
        return kind
    local = settings.home.resolve() / "qdrant" / "collection" / f"{settings.key_prefix}_kb"
    return "qdrant" if local.is_dir() else "qdrant-edge"


async def build_kb_store(settings: Settings, embedder: Embedder) -> VectorStore:
    """Knowledge base: collection ``{key_prefix}_kb`` in :func:`kb_store_kind`'s store;
    never sharded: its scope is a namespace, not a user, and it is small."""
    return await build_store(
        kb_store_kind(settings),
        collection=f"{settings.key_prefix}_kb",
        url=settings.kb_url,
        settings=settings,
        embedder=embedder,
        index_keys=KB_INDEX_KEYS,
    )
