"""The knowledge base of the session knowledge cache (seed 000): documents → chunks → vectors.

A document (a text or Markdown file, every such file under a folder, or a string given
through the API) is cut by :func:`memstack.chunking.split_semantic`, embedded in one
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
is scoped to one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.chunking import split_semantic
from memstack.embedders import Embedder
from memstack.errors import NotFound, StoreError, StoreUnavailable, ValidationError
from memstack.ids import chunk_id, text_hash, validate_id
from memstack.models import KBDocumentRow
from memstack.settings import Settings
from memstack.vectorstores.base import MetaValue, VectorRecord, VectorStore

DEFAULT_NAMESPACE = "default"
SCOPE_KEY = "kb"
SUFFIXES = frozenset({".md", ".markdown", ".txt", ".text"})
MAX_NAMESPACE_LEN = 64
MAX_TITLE_LEN = 300
_MAX_DOC_ID_STEM = 100
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_.:@-]+")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Document:
    """A document to add. ``doc_id`` defaults to one derived from the content (a string)
    or the path (a file); give it explicitly to replace a document by adding it again."""

    text: str
    doc_id: str | None = None
    title: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class KBDocument:
    """One registered document."""

    namespace: str
    doc_id: str
    title: str
    source: str
    content_hash: str
    chunk_count: int
    model_version: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class KBHit:
    """One chunk found by :meth:`KnowledgeBase.search`; ``score`` is cosine similarity."""

    id: str
    doc_id: str
    title: str
    source: str
    chunk_idx: int
    text: str
    score: float


@dataclass(frozen=True)
class AddResult:
    doc_id: str
    title: str
    source: str
    status: Literal["added", "replaced", "unchanged"]
    chunk_count: int


# Called after each document with (documents done, documents in total, its result).
Progress = Callable[[int, int, AddResult], None]
Source = Path | str | Document


def _now() -> datetime:
    return datetime.now(UTC)


def _db_error(exc: SQLAlchemyError) -> StoreUnavailable:
    return StoreUnavailable(f"database (knowledge-base registry): {exc}")


def slug_id(name: str) -> str:
    """A valid doc id for ``name`` (a file stem or relative path).

    Names that are already safe are kept as they are; others (Chinese file names,
    spaces) keep their safe characters and get a hash suffix, so "清结算.md" and
    "合规.md" do not both become "-".
    """
    stem = _UNSAFE_ID_CHARS.sub("-", name).strip("-.")[:_MAX_DOC_ID_STEM]
    if stem == name and stem:
        return stem
    suffix = text_hash(name)[:10]
    return f"{stem}-{suffix}" if stem else f"doc-{suffix}"


def _title_of(text: str, fallback: str, markdown: bool) -> str:
    if markdown and (heading := _MD_HEADING.search(text)):
        return heading.group(1)[:MAX_TITLE_LEN]
    if fallback:
        return fallback[:MAX_TITLE_LEN]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:80]


def _read_file(path: Path, doc_id: str) -> Document:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise ValidationError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    markdown = path.suffix.lower() in (".md", ".markdown")
    return Document(
        text=text,
        doc_id=doc_id,
        title=_title_of(text, path.stem, markdown),
        source=str(path.resolve()),
    )


def _documents_of_path(path: Path) -> list[Document]:
    if path.is_file():
        if path.suffix.lower() not in SUFFIXES:
            raise ValidationError(
                f"{path}: unsupported file type {path.suffix or '(none)'}; "
                f"the knowledge base takes {', '.join(sorted(SUFFIXES))}"
            )
        return [_read_file(path, slug_id(path.stem))]
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file()
            and p.suffix.lower() in SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise ValidationError(f"{path}: no {', '.join(sorted(SUFFIXES))} files in this folder")
        # Ids from the path inside the folder, so two folders' README.md differ by place.
        return [
            _read_file(p, slug_id(".".join(p.relative_to(path).with_suffix("").parts)))
            for p in files
        ]
    raise ValidationError(f"{path}: no such file or folder")


def _normalise(doc: Document) -> Document:
    if not isinstance(doc.text, str):
        raise ValidationError(f"document text must be a string, got {type(doc.text).__name__}")
    where = doc.source or doc.doc_id or doc.text[:40]
    if not doc.text.strip():
        raise ValidationError(f"document {where!r} is empty")
    doc_id = doc.doc_id if doc.doc_id is not None else f"text-{text_hash(doc.text)[:16]}"
    validate_id("doc_id", doc_id)
    title = doc.title if doc.title is not None else _title_of(doc.text, "", False)
    return Document(
        text=doc.text,
        doc_id=doc_id,
        title=title[:MAX_TITLE_LEN],
        source=doc.source if doc.source is not None else "api",
    )


def load_documents(sources: Sequence[Source]) -> list[Document]:
    """Read and check every source before anything is written.

    A :class:`~pathlib.Path` is a file or a folder (its text and Markdown files, hidden
    ones skipped); a ``str`` is the text of a document; a :class:`Document` is text with
    its id, title and source. Raises :class:`ValidationError` on the first bad source or
    on two documents with one id.
    """
    if isinstance(sources, str | Path | Document):
        raise ValidationError("sources must be a sequence of paths, texts or Documents")
    if not sources:
        raise ValidationError("nothing to add: give at least one path or text")
    docs: list[Document] = []
    for source in sources:
        if isinstance(source, Path):
            docs.extend(_normalise(d) for d in _documents_of_path(source))
        elif isinstance(source, str):
            docs.append(_normalise(Document(text=source)))
        elif isinstance(source, Document):
            docs.append(_normalise(source))
        else:
            raise ValidationError(
                f"cannot add a {type(source).__name__}: give a Path, a str or a Document"
            )
    seen: dict[str, str] = {}
    for doc in docs:
        assert doc.doc_id is not None
        if doc.doc_id in seen:
            raise ValidationError(
                f"two documents have the id {doc.doc_id!r} ({seen[doc.doc_id]} and {doc.source})"
            )
        seen[doc.doc_id] = doc.source or ""
    return docs


def _as_document(row: KBDocumentRow) -> KBDocument:
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
    ) -> list[AddResult]:
        """Add or replace documents; every source is read and checked first."""
        docs = load_documents(sources)
        results: list[AddResult] = []
        for doc in docs:
            results.append(await self.add_document(doc))
            if progress is not None:
                progress(len(results), len(docs), results[-1])
        return results

    async def add_document(self, doc: Document) -> AddResult:
        doc = _normalise(doc)
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
        # Embed before touching the store: a failing embedder leaves the old version.
        vectors = await self.embedder.embed(chunks)
        if len(vectors) != len(chunks):
            raise StoreError(f"embedder returned {len(vectors)} vectors for {len(chunks)} chunks")
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
        return _as_document(row)

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
                return [_as_document(r) for r in rows]
        except SQLAlchemyError as exc:
            raise _db_error(exc) from exc

    async def get(self, doc_id: str) -> KBDocument:
        validate_id("doc_id", doc_id)
        row = await self._row(doc_id)
        if row is None:
            raise NotFound(f"no document {doc_id!r} in knowledge base {self.namespace!r}")
        return _as_document(row)

    async def search(self, query: str, top_k: int | None = None) -> list[KBHit]:
        """The ``top_k`` (default ``kb_top_k``) chunks most similar to ``query``."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("query must be a non-empty string")
        k = self.settings.kb_top_k if top_k is None else top_k
        if not isinstance(k, int) or k <= 0:
            raise ValidationError(f"top_k must be a positive integer, got {k!r}")
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
