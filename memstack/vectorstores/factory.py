"""Build the two vector stores (semantic memory and knowledge base) from settings.

The stores are returned unopened: they connect and check their collection on first
use (or on ``await store.ensure_open()``), so a store that is down at start degrades
one layer instead of stopping the process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from memstack.embedders import Embedder, resolve_dim
from memstack.vectorstores.base import VectorStore

if TYPE_CHECKING:
    from memstack.settings import Settings

# Keys of the scope filters (semantic memory: user, session; knowledge base: namespace,
# document); a payload index makes them cheap on a Qdrant server.
MEMORY_INDEX_KEYS = ("user_id", "session_id")
# Every semantic-memory search is scoped to one user, so a Chroma store split by user
# answers each from one shard.
MEMORY_SHARD_KEY = "user_id"
KB_INDEX_KEYS = ("kb", "doc_id")


async def build_store(
    kind: Literal["chroma", "qdrant"],
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
        from memstack.vectorstores.chroma import ChromaStore

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
    from memstack.vectorstores.qdrant import QdrantStore

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


async def build_kb_store(settings: Settings, embedder: Embedder) -> VectorStore:
    """Knowledge base: collection ``{key_prefix}_kb`` in ``settings.kb_store``; never
    sharded: its scope is a namespace, not a user, and it is small."""
    return await build_store(
        settings.kb_store,
        collection=f"{settings.key_prefix}_kb",
        url=settings.kb_url,
        settings=settings,
        embedder=embedder,
        index_keys=KB_INDEX_KEYS,
    )
