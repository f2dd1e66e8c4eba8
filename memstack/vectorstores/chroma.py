"""ChromaDB behind :class:`~memstack.vectorstores.base.VectorStore`.

Embedded (``PersistentClient`` on a folder) or a ``chroma run`` server (``HttpClient``).
The client is synchronous, so every call runs in a worker thread.

Chroma's HNSW query with a metadata filter is slow when the filter is selective: a
``user_id`` that owns 100 of 100,000 vectors costs tens of milliseconds, far more than
reading those 100 vectors. So :meth:`ChromaStore.search` scores a scope by brute force
when it is both small and a small share of the collection, and keeps the HNSW query
for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
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
# A scope is scored by brute force when it holds at most BRUTE_FORCE_MAX vectors and
# at most BRUTE_FORCE_SHARE of the collection; beyond either, the filtered HNSW query
# is the faster one. Both are crossovers measured with 384-d vectors (docs/benchmarks.md,
# "Read path: latency"): brute force costs about the same per vector whatever the
# collection, while the HNSW query is slow only when its filter is selective (one
# user owning all of 1,000 vectors: ~7 ms HNSW against ~38 ms brute force).
BRUTE_FORCE_MAX = 1000
BRUTE_FORCE_SHARE = 0.02
# How long a collection count is trusted. It only sets the brute-force limit, so a
# stale one (writes by another client) costs speed, never results; counting 100k
# vectors takes several ms, too much for every search.
COUNT_TTL_S = 60.0
# Bound on the remembered large scopes, so a store serving many users cannot grow it
# without limit; forgetting only costs one more probe per scope.
LARGE_SCOPES_MAX = 10_000

Pairs = tuple[tuple[str, MetaValue], ...]


class _SharedRead:
    """One scope read that concurrent searches of the same scope wait for and share."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: dict[str, Any] = {}
        self.error: BaseException | None = None


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
        brute_force_share: float = BRUTE_FORCE_SHARE,
    ) -> None:
        if (path is None) == (url is None):
            raise ConfigError("ChromaStore needs exactly one of path or url")
        if brute_force_max < 0:
            raise ConfigError(f"brute_force_max must be >= 0, got {brute_force_max}")
        if not 0.0 <= brute_force_share <= 1.0:
            raise ConfigError(f"brute_force_share must be in [0, 1], got {brute_force_share}")
        self.collection_name = collection
        self.model_version = model_version
        self.dim = dim
        self.brute_force_max = brute_force_max
        self.brute_force_share = brute_force_share
        # Filters seen to match more vectors than the brute-force limit of the time
        # (the value): their searches go straight to HNSW instead of paying for a get
        # that would be thrown away, until the limit rises. Only speed depends on it,
        # never results, so a stale entry (a scope that shrank through another client)
        # is harmless.
        self._large_scopes: dict[Pairs, int] = {}
        # (monotonic time, collection count) behind the brute-force limit.
        self._count: tuple[float, int] | None = None
        # Scope reads in flight, by (conditions, limit, writes so far). Chroma evaluates
        # a where over every row of the collection (GROUP BY ... HAVING in its SQLite
        # reader), so the two searches of one context() call (two query embeddings,
        # same user) share one read rather than pay for it twice.
        # The write count in the key keeps read-your-writes: a search issued after one
        # of our upserts or deletes completes never joins a read that began before.
        self._reads: dict[tuple[Pairs, int, int], _SharedRead] = {}
        self._reads_lock = threading.Lock()
        self._writes = 0
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
        brute_force_share: float = BRUTE_FORCE_SHARE,
    ) -> ChromaStore:
        """Connect and create or check the collection now, rather than on first use."""
        store = cls(
            collection,
            model_version=model_version,
            dim=dim,
            path=path,
            url=url,
            brute_force_max=brute_force_max,
            brute_force_share=brute_force_share,
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
            try:
                for start in range(0, len(unique), UPSERT_BATCH):
                    batch = unique[start : start + UPSERT_BATCH]
                    collection.upsert(
                        ids=[r.id for r in batch],
                        embeddings=[[float(x) for x in r.vector] for r in batch],
                        documents=[r.text for r in batch],
                        # Chroma rejects an empty metadata dict but accepts None.
                        metadatas=[dict(r.metadata) or None for r in batch],
                    )
            finally:
                # Even a failed upsert may have written some batches.
                self._wrote()
            if self._count is not None:
                # Counting again would cost more than the upsert saves: an upper bound
                # (some ids may have existed) is close enough for the brute-force limit.
                self._count = (self._count[0], self._count[1] + len(unique))

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
            limit = self._brute_force_limit(collection)
            if limit and limit > self._large_scopes.get(filter_key, 0):
                hits = self._brute_force(collection, query, filter_key, top_k, limit)
                if hits is not None:
                    self._large_scopes.pop(filter_key, None)
                    return hits
                if len(self._large_scopes) >= LARGE_SCOPES_MAX:
                    self._large_scopes.clear()
                self._large_scopes[filter_key] = limit
            return self._hnsw(collection, query, _where(pairs), top_k)

        return await self._run(work, "search")

    def _brute_force_limit(self, collection: Any) -> int:
        """Most vectors a scope may hold to be scored by brute force (0: never)."""
        if not self.brute_force_max or not self.brute_force_share:
            return 0
        now = time.monotonic()
        if self._count is None or now - self._count[0] > COUNT_TTL_S:
            self._count = (now, int(collection.count()))
        return min(self.brute_force_max, int(self._count[1] * self.brute_force_share))

    def _wrote(self) -> None:
        with self._reads_lock:
            self._writes += 1

    def _scope_vectors(self, collection: Any, pairs: Pairs, limit: int) -> dict[str, Any]:
        """Ids and embeddings of up to ``limit + 1`` vectors matching ``pairs``; joins an
        identical read already in flight instead of starting another."""
        key = (pairs, limit, self._writes)
        with self._reads_lock:
            shared = self._reads.get(key)
            leader = shared is None
            if shared is None:
                shared = self._reads[key] = _SharedRead()
        if not leader:
            shared.done.wait()
            if shared.error is not None:
                raise shared.error
            return shared.result
        try:
            shared.result = collection.get(
                where=_where(pairs), include=["embeddings"], limit=limit + 1
            )
        except BaseException as exc:
            shared.error = exc
            raise
        finally:
            with self._reads_lock:
                del self._reads[key]
            shared.done.set()
        return shared.result

    def _brute_force(
        self, collection: Any, query: list[float], pairs: Pairs, top_k: int, limit: int
    ) -> list[VectorHit] | None:
        """Exact cosine top ``top_k`` of the vectors matching ``pairs``, or None when more
        than ``limit`` match. Same scores as :meth:`_hnsw` up to float error."""
        # Embeddings only: documents and metadata cost more to read than the vectors,
        # and only top_k rows need them.
        got = self._scope_vectors(collection, pairs, limit)
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
            # filter to this get, which measured slower, growing with the scope.
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
            try:
                collection.delete(ids=id_list, where=_where(pairs))
            finally:
                self._wrote()
            # A delete can shrink a large scope below the limit, and the collection.
            self._large_scopes.clear()
            self._count = None

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
            self._count = None
            self._wrote()

        await self._run(work, "drop the collection")

    async def close(self) -> None:
        # Embedded clients share one process-wide system per path and HttpClient holds
        # only a connection pool: dropping the references is all closing can do safely.
        self._collection = None
        self._client = None
