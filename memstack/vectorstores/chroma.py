"""ChromaDB behind :class:`~memstack.vectorstores.base.VectorStore`.

Embedded (``PersistentClient`` on a folder) or a ``chroma run`` server (``HttpClient``).
The client is synchronous, so every call runs in a worker thread.

Chroma's HNSW query with a metadata filter is slow when the filter is selective: a
``user_id`` that owns 100 of 100,000 vectors costs tens of milliseconds, far more than
reading those 100 vectors. So :meth:`ChromaStore.search` scores a small scope by brute
force and keeps the HNSW query for scopes of more than ``brute_force_max`` vectors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np

from memstack.errors import ConfigError
from memstack.vectorstores.base import MetaValue, VectorHit, VectorRecord
from memstack.vectorstores.filters import (
    check_schema,
    check_top_k,
    check_vector,
    conditions,
    in_thread,
    unique_records,
)

T = TypeVar("T")

# Collection metadata keys recording which embedder wrote the vectors.
VERSION_KEY = "memstack_model_version"
DIM_KEY = "memstack_dim"
# Chroma rejects larger batches (its limit is ~5k on SQLite); stay well below it.
UPSERT_BATCH = 1000
# Largest scope scored by brute force; see docs/benchmarks.md ("Read path: latency")
# for the measurement behind it. 0 always uses the HNSW query.
BRUTE_FORCE_MAX = 2000
# Bound on the remembered large scopes, so a store serving many users cannot grow it
# without limit; forgetting only costs one more probe per scope.
LARGE_SCOPES_MAX = 10_000

Pairs = tuple[tuple[str, MetaValue], ...]


def _where(pairs: Sequence[tuple[str, MetaValue]]) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{key: value} for key, value in pairs]
    # Chroma wants a bare clause for one condition and $and only for two or more.
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _is_unreachable(exc: BaseException) -> bool:
    import httpx

    if isinstance(exc, httpx.TransportError | ConnectionError | TimeoutError):
        return True
    # HttpClient reports a refused connection at start as a bare ValueError.
    return isinstance(exc, ValueError) and "could not connect" in str(exc).lower()


class ChromaStore:
    """One Chroma collection with cosine distance; ``score = 1 - distance``."""

    def __init__(
        self,
        collection: str,
        *,
        model_version: str,
        dim: int,
        path: str | Path | None = None,
        url: str | None = None,
        brute_force_max: int = BRUTE_FORCE_MAX,
    ) -> None:
        if (path is None) == (url is None):
            raise ConfigError("ChromaStore needs exactly one of path or url")
        if brute_force_max < 0:
            raise ConfigError(f"brute_force_max must be >= 0, got {brute_force_max}")
        self.collection_name = collection
        self.model_version = model_version
        self.dim = dim
        self.brute_force_max = brute_force_max
        # Filters seen to match more than brute_force_max vectors: their searches go
        # straight to HNSW instead of paying for a get that would be thrown away. Only
        # speed depends on it, never results, so a stale entry (a scope that shrank,
        # e.g. through another client) is harmless.
        self._large_scopes: set[Pairs] = set()
        self._path = Path(path) if path is not None else None
        self._url = url
        self._client: Any = None
        self._collection: Any = None
        self._open_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        collection: str,
        *,
        model_version: str,
        dim: int,
        path: str | Path | None = None,
        url: str | None = None,
        brute_force_max: int = BRUTE_FORCE_MAX,
    ) -> ChromaStore:
        """Connect and create or check the collection now, rather than on first use."""
        store = cls(
            collection,
            model_version=model_version,
            dim=dim,
            path=path,
            url=url,
            brute_force_max=brute_force_max,
        )
        await store.ensure_open()
        return store

    @property
    def location(self) -> str:
        return self._url or str(self._path)

    async def _run(self, fn: Callable[[], T], what: str) -> T:
        where = f"chroma {self.location} collection {self.collection_name!r}"
        return await in_thread(fn, where=where, what=what, unreachable=_is_unreachable)

    def _connect(self) -> Any:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        # No telemetry: it would try the network on every start, and there may be none.
        settings = ChromaSettings(anonymized_telemetry=False)
        if self._path is not None:
            self._path.mkdir(parents=True, exist_ok=True)
            return chromadb.PersistentClient(path=str(self._path), settings=settings)
        assert self._url is not None
        parts = urlsplit(self._url if "//" in self._url else f"http://{self._url}")
        if not parts.hostname:
            raise ConfigError(f"chroma url {self._url!r} has no host")
        return chromadb.HttpClient(
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 8000),
            ssl=parts.scheme == "https",
            settings=settings,
        )

    def _open_collection(self) -> Any:
        from chromadb.errors import NotFoundError

        client = self._client or self._connect()
        self._client = client
        try:
            # get first: get_or_create would hide a collection made by another embedder.
            collection = client.get_collection(self.collection_name, embedding_function=None)
        except NotFoundError:
            collection = client.get_or_create_collection(
                self.collection_name,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={VERSION_KEY: self.model_version, DIM_KEY: self.dim},
                embedding_function=None,
            )
        meta = collection.metadata or {}
        check_schema(
            self.collection_name,
            found_version=meta.get(VERSION_KEY),
            found_dim=meta.get(DIM_KEY),
            model_version=self.model_version,
            dim=self.dim,
        )
        return collection

    async def ensure_open(self) -> None:
        if self._collection is not None:
            return
        async with self._open_lock:
            if self._collection is None:
                self._collection = await self._run(self._open_collection, "open the collection")

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        unique = unique_records(records, self.dim)
        if not unique:
            return
        await self.ensure_open()
        collection = self._collection

        def work() -> None:
            for start in range(0, len(unique), UPSERT_BATCH):
                batch = unique[start : start + UPSERT_BATCH]
                collection.upsert(
                    ids=[r.id for r in batch],
                    embeddings=[[float(x) for x in r.vector] for r in batch],
                    documents=[r.text for r in batch],
                    # Chroma rejects an empty metadata dict but accepts None.
                    metadatas=[dict(r.metadata) or None for r in batch],
                )

        await self._run(work, "upsert")

    async def search(
        self,
        vector: Sequence[float],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
    ) -> list[VectorHit]:
        pairs = conditions(scope, where)
        check_top_k(top_k)
        query = check_vector(vector, self.dim)
        await self.ensure_open()
        collection = self._collection
        filter_key = tuple(pairs)

        def work() -> list[VectorHit]:
            if self.brute_force_max and filter_key not in self._large_scopes:
                hits = self._brute_force(collection, query, filter_key, top_k)
                if hits is not None:
                    return hits
                if len(self._large_scopes) >= LARGE_SCOPES_MAX:
                    self._large_scopes.clear()
                self._large_scopes.add(filter_key)
            return self._hnsw(collection, query, _where(pairs), top_k)

        return await self._run(work, "search")

    def _brute_force(
        self, collection: Any, query: list[float], pairs: Pairs, top_k: int
    ) -> list[VectorHit] | None:
        """Exact cosine top ``top_k`` of the vectors matching ``pairs``, or None when more
        than ``brute_force_max`` match. Same scores as :meth:`_hnsw` up to float error."""
        limit = self.brute_force_max
        # Embeddings only: documents and metadata cost more to read than the vectors,
        # and only top_k rows need them.
        got = collection.get(where=_where(pairs), include=["embeddings"], limit=limit + 1)
        ids: list[str] = got["ids"]
        if len(ids) > limit:
            return None
        if not ids:
            return []
        matrix = np.asarray(got["embeddings"], dtype=np.float64)
        q = np.asarray(query, dtype=np.float64)
        norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(q)
        # The collection's space is cosine (see _open_collection), in which a zero
        # vector is at distance 1, i.e. similarity 0.
        sims = (matrix @ q) / np.where(norms > 0, norms, 1.0)
        order = np.argsort(-sims, kind="stable")[:top_k]
        top = [ids[i] for i in order]
        rows = collection.get(ids=top, include=["documents", "metadatas"])
        n = len(rows["ids"])
        docs = rows.get("documents") or [None] * n
        metas = rows.get("metadatas") or [None] * n
        found = dict(zip(rows["ids"], zip(docs, metas, strict=True), strict=True))
        hits = []
        for k, i in zip(order, top, strict=True):
            if i not in found:  # deleted since the first get: gone, not an error
                continue
            doc, meta = found[i][0], dict(found[i][1] or {})
            # A row re-upserted into another scope since the first get must not come
            # back with its new owner's text. Checked here rather than by passing the
            # filter to this get, which Chroma evaluates over the whole scope.
            if any(meta.get(key) != value for key, value in pairs):
                continue
            hits.append(VectorHit(id=i, text=doc or "", score=float(sims[k]), metadata=meta))
        return hits

    @staticmethod
    def _hnsw(
        collection: Any, query: list[float], flt: dict[str, Any], top_k: int
    ) -> list[VectorHit]:
        try:
            result: dict[str, Any] = collection.query(
                query_embeddings=[query],
                n_results=top_k,
                where=flt,
                include=["documents", "metadatas", "distances"],
            )
        except Exception:
            # Some Chroma versions raise when n_results exceeds an empty index.
            if collection.count() == 0:
                return []
            raise
        if not result or not result.get("ids"):
            return []
        ids = result["ids"][0]
        docs = (result.get("documents") or [[]])[0] or [None] * len(ids)
        metas = (result.get("metadatas") or [[]])[0] or [None] * len(ids)
        dists = (result.get("distances") or [[]])[0] or [1.0] * len(ids)
        return [
            VectorHit(id=i, text=d or "", score=1.0 - float(dist), metadata=dict(m or {}))
            for i, d, m, dist in zip(ids, docs, metas, dists, strict=True)
        ]

    async def delete(
        self, *, scope: Mapping[str, MetaValue], ids: Sequence[str] | None = None
    ) -> None:
        pairs = conditions(scope, None)
        if ids is not None and not ids:
            return
        await self.ensure_open()
        collection = self._collection
        id_list = list(ids) if ids is not None else None

        def work() -> None:
            collection.delete(ids=id_list, where=_where(pairs))
            # A delete can shrink a large scope below the threshold.
            self._large_scopes.clear()

        await self._run(work, "delete")

    async def count(self, scope: Mapping[str, MetaValue] | None = None) -> int:
        """Number of vectors, all of them or those matching ``scope`` (stats, dry runs)."""
        await self.ensure_open()
        collection = self._collection
        if not scope:
            return await self._run(lambda: int(collection.count()), "count")
        where = _where(conditions(scope, None))
        return await self._run(lambda: len(collection.get(where=where, include=[])["ids"]), "count")

    async def drop(self) -> None:
        """Delete the whole collection (``memstack reindex``); the next use recreates it."""

        def work() -> None:
            from chromadb.errors import NotFoundError

            client = self._client or self._connect()
            self._client = client
            with contextlib.suppress(NotFoundError, ValueError):
                client.delete_collection(self.collection_name)
            self._collection = None
            self._large_scopes.clear()

        await self._run(work, "drop the collection")

    async def close(self) -> None:
        # Embedded clients share one process-wide system per path and HttpClient holds
        # only a connection pool: dropping the references is all closing can do safely.
        self._collection = None
        self._client = None
