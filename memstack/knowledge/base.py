"""The knowledge base of the session knowledge cache: documents → chunks → vectors.

A document (a text or Markdown file, every such file under a folder, or a string given
through the API) is cut by :func:`memstack.text.chunking.split_semantic`, embedded in one
batched call, and upserted into the KB vector store (Qdrant by default, Chroma through
the same protocol) with ids ``namespace:doc_id#chunk_idx`` and metadata ``kb`` (the namespace:
the store's mandatory scope filter), ``doc_id``, ``title``, ``source``, ``chunk_idx``,
``model_version``. The SQL table ``memory_kb_document`` is the registry: it says which
documents exist, with their content hash and chunk count.

Re-adding a document whose content, title, source and embedder are unchanged does
nothing. A changed one is re-embedded; its new chunks overwrite the old ids and the
surplus old ids are deleted afterwards, so a search running meanwhile never finds the
document missing. Removing a document deletes every chunk whose ``doc_id`` matches,
whatever the registry says, so an interrupted earlier run leaves nothing behind.

Namespaces keep knowledge bases apart inside one collection: every search and delete
is scoped to one. Searches leave out hits under ``kb_min_score`` unless asked not to.

Reading files and checking documents (text, title, source, size) is
:mod:`memstack.knowledge.documents`: a refused document writes nothing. :func:`has_documents`
tells ``context()`` whether there is a knowledge base to search at all, from the
registry, read at most every :data:`PRESENCE_TTL_S` seconds per process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.errors import NotFound, StoreError, StoreUnavailable, ValidationError
from memstack.core.ids import DEFAULT_NAMESPACE, MAX_NAMESPACE_LEN, chunk_id, text_hash, validate_id
from memstack.core.inputs import check_text
from memstack.core.settings import Settings
from memstack.knowledge.documents import SUFFIXES as SUFFIXES
from memstack.knowledge.documents import Document as Document
from memstack.knowledge.documents import Skipped as Skipped
from memstack.knowledge.documents import Source as Source
from memstack.knowledge.documents import load_documents, normalise
from memstack.knowledge.documents import slug_id as slug_id
from memstack.ml.embedders import Embedder
from memstack.stores.sql.models import KBDocumentRow
from memstack.stores.vectors.base import MetaValue, VectorRecord, VectorStore
from memstack.text.chunking import split_semantic
from memstack.types import AddReport as AddReport
from memstack.types import AddResult as AddResult
from memstack.types import KBDocument as KBDocument
from memstack.types import KBHit as KBHit

SCOPE_KEY = "kb"
# How long this process trusts what it last read of whether the registry holds documents
# (documents added or removed here update it at once).
PRESENCE_TTL_S = 30.0


# Called after each document with (documents done, documents in total, its result).
Progress = Callable[[int, int, AddResult], None]


def _now() -> datetime:
    return datetime.now(UTC)


def _db_error(exc: SQLAlchemyError) -> StoreUnavailable:
    # Only the class name: a driver's message holds the statement and its parameters
    # (the document's text and title), and messages reach API clients. The chained
    # exception keeps it for logs.
    cause = type(getattr(exc, "orig", None) or exc).__name__
    return StoreUnavailable(f"database (knowledge-base registry): {cause}", layer="database")


def registry_collection(settings: Settings) -> str:
    """The collection the registry rows of this deployment's knowledge base name (the
    KB store's collection, as :func:`~memstack.wiring.build_kb_store`
    names it)."""
    return f"{settings.key_prefix}_kb"


# --- is there a knowledge base? ----------------------------------------------------------
# context() searches the knowledge base only when it holds documents. What this process
# last read of that, by (database, collection): (when, answer).
_presence: dict[tuple[str, str], tuple[float, bool]] = {}
_lookups: dict[tuple[str, str], asyncio.Task[bool]] = {}


def _presence_key(settings: Settings, collection: str) -> tuple[str, str]:
    return (settings.database_url or str(settings.home.resolve()), collection)


def _presence_changed(settings: Settings, collection: str, present: bool | None) -> None:
    """This process added (True) or removed (None: read again) documents."""
    key = _presence_key(settings, collection)
    if present is None:
        _presence.pop(key, None)
    else:
        _presence[key] = (time.monotonic(), present)


async def registry_has_documents(
    sessions: async_sessionmaker[AsyncSession],
    collection: str,
    namespace: str | None = DEFAULT_NAMESPACE,
) -> bool:
    """Whether the registry holds a document of ``collection`` (and of ``namespace``,
    unless None): one lookup on the primary key's prefix."""
    query = select(KBDocumentRow.doc_id).where(KBDocumentRow.collection == collection)
    if namespace is not None:
        query = query.where(KBDocumentRow.namespace == namespace)
    try:
        async with sessions() as session:
            return await session.scalar(query.limit(1)) is not None
    except SQLAlchemyError as exc:
        raise _db_error(exc) from exc


async def has_documents(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    *,
    ttl_s: float | None = None,
) -> bool:
    """Whether this deployment's knowledge base (its default namespace, the one the
    session knowledge cache searches) holds documents, wherever they were added.

    Read from the registry at most once per ``ttl_s`` (default :data:`PRESENCE_TTL_S`)
    per process, one lookup shared by concurrent callers; documents this process adds
    or removes update the answer at once. :class:`StoreUnavailable` when the registry
    cannot be read.
    """
    key = _presence_key(settings, registry_collection(settings))
    known = _presence.get(key)
    ttl = PRESENCE_TTL_S if ttl_s is None else ttl_s
    if known is not None and time.monotonic() - known[0] < ttl:
        return known[1]
    loop = asyncio.get_running_loop()
    task = _lookups.get(key)
    if task is None or task.done() or task.get_loop() is not loop:
        task = loop.create_task(_look_up(key, sessions))
        # Read its outcome even when every caller was cancelled (no "never retrieved").
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        _lookups[key] = task
    return await asyncio.shield(task)


async def _look_up(key: tuple[str, str], sessions: async_sessionmaker[AsyncSession]) -> bool:
    try:
        present = await registry_has_documents(sessions, key[1])
        _presence[key] = (time.monotonic(), present)
        return present
    finally:
        if _lookups.get(key) is asyncio.current_task():
            del _lookups[key]


def as_document(row: KBDocumentRow) -> KBDocument:
    return KBDocument(
        namespace=row.namespace,
        doc_id=row.doc_id,
        title=row.title,
        source=row.source,
        content_hash=row.content_hash,
        chunk_count=row.chunk_count,
        model_version=row.model_version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class KnowledgeBase:
    """Documents of one namespace: their registry rows and their chunks' vectors."""

    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        store: VectorStore,
        embedder: Embedder,
        namespace: str = DEFAULT_NAMESPACE,
        collection: str | None = None,
    ) -> None:
        validate_id("namespace", namespace)
        if len(namespace) > MAX_NAMESPACE_LEN:
            raise ValidationError(f"namespace is longer than {MAX_NAMESPACE_LEN} characters")
        self.settings = settings
        self.sessions = sessions
        self.store = store
        self.embedder = embedder
        self.namespace = namespace
        # The registry rows belong to the store's collection ({key_prefix}_kb by default).
        self.collection = collection or str(
            getattr(store, "collection_name", f"{settings.key_prefix}_kb")
        )

    @property
    def scope(self) -> dict[str, MetaValue]:
        return {SCOPE_KEY: self.namespace}

    def _vector_id(self, doc_id: str, chunk_idx: int) -> str:
        # Namespaces share one collection, and a vector id is unique in it: two tenants'
        # "intro#0" must not overwrite each other.
        return chunk_id(f"{self.namespace}:{doc_id}", chunk_idx)

    # --- write ----------------------------------------------------------------------
    async def add(
        self, sources: Sequence[Source], *, progress: Progress | None = None
    ) -> AddReport:
        """Add or replace documents; every source is read and checked first (see
        :mod:`memstack.knowledge.documents`: a refused one writes nothing, a folder's unusable
        files are skipped and listed in the report's ``skipped``)."""
        loaded = load_documents(sources, self.settings.max_document_bytes)
        report = AddReport(skipped=loaded.skipped)
        for doc in loaded.documents:
            report.append(await self.add_document(doc))
            if progress is not None:
                progress(len(report), len(loaded.documents), report[-1])
        return report

    async def add_document(self, doc: Document) -> AddResult:
        """Add or replace one document; :class:`~memstack.core.errors.InvalidContent` (and
        nothing written) if it is refused."""
        doc = normalise(doc, self.settings.max_document_bytes)
        assert doc.doc_id is not None and doc.title is not None and doc.source is not None
        doc_id, title, source = doc.doc_id, doc.title, doc.source
        content_hash = text_hash(doc.text)
        model_version = self.embedder.model_version
        row = await self._row(doc_id)
        if (
            row is not None
            and row.content_hash == content_hash
            and row.model_version == model_version
            and row.title == title
            and row.source == source
        ):
            return AddResult(doc_id, title, source, "unchanged", row.chunk_count)

        s = self.settings
        chunks = split_semantic(
            doc.text, split_chars=s.chunk_split_chars, merge_chars=s.chunk_merge_chars
        )
        return await self._write(doc_id, title, source, content_hash, chunks, row)

    async def restore(
        self,
        doc_id: str,
        title: str,
        source: str,
        content_hash: str,
        chunks: Sequence[str],
        vectors: Sequence[Sequence[float]] | None = None,
    ) -> AddResult:
        """Store a document as another deployment held it: these very chunks (its
        registry's ``content_hash`` kept), embedded here (``memstack import``) unless their
        ``vectors`` come embedded by this embedder (a re-embed); the caller has checked
        them. Unchanged when it is registered so already."""
        row = await self._row(doc_id)
        if (
            row is not None
            and (row.content_hash, row.title, row.source) == (content_hash, title, source)
            and (row.model_version, row.chunk_count) == (self.embedder.model_version, len(chunks))
        ):
            return AddResult(doc_id, title, source, "unchanged", row.chunk_count)
        return await self._write(doc_id, title, source, content_hash, list(chunks), row, vectors)

    async def _write(
        self,
        doc_id: str,
        title: str,
        source: str,
        content_hash: str,
        chunks: list[str],
        row: KBDocumentRow | None,
        vectors: Sequence[Sequence[float]] | None = None,
    ) -> AddResult:
        model_version = self.embedder.model_version
        # Embed before touching the store: a failing embedder leaves the old version.
        if vectors is None:
            vectors = await self.embedder.embed(chunks)
        if len(vectors) != len(chunks):
            raise StoreError(
                f"embedder returned {len(vectors)} vectors for {len(chunks)} chunks",
                layer="embedder",
            )
        records = [
            VectorRecord(
                id=self._vector_id(doc_id, idx),
                text=text,
                vector=vector,
                metadata={
                    SCOPE_KEY: self.namespace,
                    "doc_id": doc_id,
                    "title": title,
                    "source": source,
                    "chunk_idx": idx,
                    "model_version": model_version,
                },
            )
            for idx, (text, vector) in enumerate(zip(chunks, vectors, strict=True))
        ]
        doc_scope: dict[str, MetaValue] = {**self.scope, "doc_id": doc_id}
        if row is None:
            # Not registered: chunks under this id are leftovers of an interrupted run.
            await self.store.delete(scope=doc_scope)
        await self.store.upsert(records)
        if row is not None and row.chunk_count > len(records):
            surplus = [self._vector_id(doc_id, i) for i in range(len(records), row.chunk_count)]
            await self.store.delete(scope=doc_scope, ids=surplus)
        await self._save(doc_id, title, source, content_hash, len(records), model_version)
        if self.namespace == DEFAULT_NAMESPACE:
            _presence_changed(self.settings, self.collection, True)
        return AddResult(
            doc_id, title, source, "added" if row is None else "replaced", len(records)
        )

    async def remove(self, doc_id: str) -> KBDocument:
        """Delete a document's chunks and registry row; :class:`NotFound` if unknown."""
        validate_id("doc_id", doc_id)
        row = await self._row(doc_id)
        if row is None:
            raise NotFound(f"no document {doc_id!r} in knowledge base {self.namespace!r}")
        await self.store.delete(scope={**self.scope, "doc_id": doc_id})
        try:
            async with self.sessions.begin() as session:
                await session.execute(
                    delete(KBDocumentRow).where(
                        KBDocumentRow.collection == self.collection,
                        KBDocumentRow.namespace == self.namespace,
                        KBDocumentRow.doc_id == doc_id,
                    )
                )
        except SQLAlchemyError as exc:
            raise _db_error(exc) from exc
        if self.namespace == DEFAULT_NAMESPACE:
            _presence_changed(self.settings, self.collection, None)
        return as_document(row)

    # --- read -----------------------------------------------------------------------
    async def documents(self) -> list[KBDocument]:
        """Registered documents of this namespace, by id."""
        try:
            async with self.sessions() as session:
                rows = await session.scalars(
                    select(KBDocumentRow)
                    .where(
                        KBDocumentRow.collection == self.collection,
                        KBDocumentRow.namespace == self.namespace,
                    )
                    .order_by(KBDocumentRow.doc_id)
                )
                return [as_document(r) for r in rows]
        except SQLAlchemyError as exc:
            raise _db_error(exc) from exc

    async def get(self, doc_id: str) -> KBDocument:
        validate_id("doc_id", doc_id)
        row = await self._row(doc_id)
        if row is None:
            raise NotFound(f"no document {doc_id!r} in knowledge base {self.namespace!r}")
        return as_document(row)

    async def chunk_texts(self, doc: KBDocument) -> list[str] | None:
        """A document's text as stored, chunk by chunk; None when a chunk is missing."""
        ids = [self._vector_id(doc.doc_id, i) for i in range(doc.chunk_count)]
        found = {h.id: h.text for h in await self.store.get(ids, scope=self.scope)}
        return [found[i] for i in ids] if all(i in found for i in ids) else None

    async def search(
        self, query: str, top_k: int | None = None, *, min_score: float | None = None
    ) -> list[KBHit]:
        """The ``top_k`` (default ``kb_top_k``) chunks most similar to ``query`` that
        score at least ``min_score`` (default ``kb_min_score``: a vector search always
        finds neighbours, and those below it are noise); best first. ``min_score=-1``
        keeps every neighbour."""
        check_text("query", query, max_bytes=self.settings.max_message_bytes)
        if not query.strip():
            raise ValidationError("query must be a non-empty string")
        k = self.settings.kb_top_k if top_k is None else top_k
        if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
            raise ValidationError(f"top_k must be a positive integer, got {k!r}")
        floor = self.settings.kb_min_score if min_score is None else min_score
        [vector] = await self.embedder.embed_queries([query])
        hits = await self.store.search(vector, scope=self.scope, top_k=k)
        return [
            KBHit(
                id=h.id,
                doc_id=str(h.metadata.get("doc_id", "")),
                title=str(h.metadata.get("title", "")),
                source=str(h.metadata.get("source", "")),
                chunk_idx=int(h.metadata.get("chunk_idx", 0)),
                text=h.text,
                score=h.score,
            )
            for h in hits
            if h.score >= floor
        ]

    # --- registry ---------------------------------------------------------------------
    async def _row(self, doc_id: str) -> KBDocumentRow | None:
        try:
            async with self.sessions() as session:
                return await session.get(KBDocumentRow, (self.collection, self.namespace, doc_id))
        except SQLAlchemyError as exc:
            raise _db_error(exc) from exc

    async def _save(
        self,
        doc_id: str,
        title: str,
        source: str,
        content_hash: str,
        chunk_count: int,
        model_version: str,
    ) -> None:
        now = _now()
        for attempt in range(2):
            try:
                async with self.sessions.begin() as session:
                    row = await session.get(
                        KBDocumentRow, (self.collection, self.namespace, doc_id)
                    )
                    if row is None:
                        session.add(
                            KBDocumentRow(
                                collection=self.collection,
                                namespace=self.namespace,
                                doc_id=doc_id,
                                title=title,
                                source=source,
                                content_hash=content_hash,
                                chunk_count=chunk_count,
                                model_version=model_version,
                                created_at=now,
                                updated_at=now,
                            )
                        )
                    else:
                        row.title = title
                        row.source = source
                        row.content_hash = content_hash
                        row.chunk_count = chunk_count
                        row.model_version = model_version
                        row.updated_at = now
                return
            except IntegrityError as exc:
                # Another writer registered the same document first: update its row.
                if attempt:
                    raise _db_error(exc) from exc
            except SQLAlchemyError as exc:
                raise _db_error(exc) from exc
