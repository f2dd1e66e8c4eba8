"""Re-embedding the knowledge base with another embedder (part of ``memstack reindex``).

The documents' files are not read again: every registered document's chunks are read as
the old collection holds them and embedded with the new embedder first, the slow part;
only then is the old collection dropped and the new vectors written, so the chunks exist
only in memory for the moment between the two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.errors import StoreError
from memstack.core.settings import Settings
from memstack.knowledge.base import KnowledgeBase, as_document, registry_collection
from memstack.ml.embedders import Embedder
from memstack.stores.sql.models import KBDocumentRow
from memstack.stores.vectors.base import VectorStore
from memstack.types import KBDocument


async def _registered(
    sessions: async_sessionmaker[AsyncSession], collection: str
) -> list[KBDocument]:
    async with sessions() as s:
        rows = await s.scalars(select(KBDocumentRow).where(KBDocumentRow.collection == collection))
        return [as_document(row) for row in rows]


async def reembed(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    old_store: VectorStore,
    open_new: Callable[[], Awaitable[VectorStore]],
) -> int:
    """Move every document of the deployment's knowledge base from ``old_store`` (the
    old embedder's collection, dropped) to the store ``open_new`` opens, embedded with
    ``embedder``; how many documents moved. Nothing changes if a chunk is missing."""

    def kb(store: VectorStore, namespace: str) -> KnowledgeBase:
        return KnowledgeBase(
            settings=settings, sessions=sessions, store=store, embedder=embedder,
            namespace=namespace,
        )  # fmt: skip

    docs = await _registered(sessions, registry_collection(settings))
    chunks: list[list[str]] = []
    for doc in docs:
        texts = await kb(old_store, doc.namespace).chunk_texts(doc)
        if texts is None:
            raise StoreError(
                f"document {doc.doc_id!r} of knowledge base {doc.namespace!r} has lost "
                "chunks; remove it (memstack kb remove) and add it again, then reindex",
                layer="knowledge base",
            )
        chunks.append(texts)
    vectors: list[Sequence[Sequence[float]]] = [await embedder.embed(c) for c in chunks]
    await old_store.drop()
    await old_store.close()
    store = await open_new()
    for doc, texts, embedded in zip(docs, chunks, vectors, strict=True):
        await kb(store, doc.namespace).restore(
            doc.doc_id, doc.title, doc.source, doc.content_hash, texts, embedded
        )
    return len(docs)
