"""ChromaDB behind :class:`~memstack.vectorstores.base.VectorStore`.

Embedded (``PersistentClient`` on a folder) or a ``chroma run`` server (``HttpClient``).
The client is synchronous, so every call runs in a worker thread.

Chroma evaluates a metadata filter over every row of a collection, so reading one
user's 100 vectors out of 100,000 costs tens of milliseconds whatever the search
does with them. Two things keep a user's search small:

- **Shards.** With ``shards > 1`` the vectors live in that many collections, routed by
  a stable hash of one metadata key (semantic memory: ``user_id``), so a user's
  search filters one shard's rows instead of the whole store's. The root collection
  (the store's name) records the shard count and holds the vectors only when there
  is one shard, which is also the layout of stores written before sharding.
- **Brute force.** Within a collection, a scope that is both small and a small share
  of it is read and scored by numpy instead of the filtered HNSW query, which is slow
  when its filter is selective.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np

from memstack.errors import ConfigError, SchemaMismatch, StoreError, ValidationError
from memstack.vectorstores.base import HitFields, MetaValue, VectorHit, VectorRecord
from memstack.vectorstores.filters import (
    check_schema,
    check_top_k,
    check_vector,
    conditions,
    in_thread,
    unique_records,
)

T = TypeVar("T")

log = logging.getLogger("memstack.vectorstores")

# Collection metadata keys recording which embedder wrote the vectors.
VERSION_KEY = "memstack_model_version"
DIM_KEY = "memstack_dim"
# Root collection metadata: how many shard collections hold the vectors, and by which
# metadata key they are routed. A root without SHARDS_KEY predates sharding.
SHARDS_KEY = "memstack_shards"
SHARD_KEY_KEY = "memstack_shard_key"
# Beyond this, collections (each with its own files and HNSW index) cost more than
# the smaller filters save.
MAX_SHARDS = 1024
# Chroma rejects larger batches (its limit is ~5k on SQLite); stay well below it.
UPSERT_BATCH = 1000
# A scope is scored by brute force when it holds at most BRUTE_FORCE_MAX vectors and
# at most BRUTE_FORCE_SHARE of its collection (its shard, not the whole store: the HNSW
# query searches one shard); beyond either, the filtered HNSW query is the faster one.
# Both are crossovers measured with 384-d vectors (docs/benchmarks.md, "Read path:
# latency"): brute force costs about the same per vector whatever the collection,
# while the HNSW query is slow only when its filter is selective (one user owning all
# of 1,000 vectors: ~7 ms HNSW against ~38 ms brute force).
BRUTE_FORCE_MAX = 1000
BRUTE_FORCE_SHARE = 0.02
# How long a collection count is trusted. It only sets the brute-force limit, so a
# stale one (writes by another client) costs speed, never results; counting 100k
# vectors takes several ms, too much for every search.
COUNT_TTL_S = 60.0
# Bound on the remembered large scopes, so a store serving many users cannot grow it
# without limit; forgetting only costs one more probe per scope.
LARGE_SCOPES_MAX = 10_000
# The layout warnings are about the data on disk, not about one store object: stores
# are reopened often (reindex, doctor, each Memory), and once per process is enough.
_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()

Pairs = tuple[tuple[str, MetaValue], ...]


def shard_of(value: str, shards: int) -> int:
    """Index of the shard holding ``value``'s vectors. CRC-32 rather than ``hash()``,
    which is randomised per process for strings: every process must route alike."""
    return zlib.crc32(value.encode("utf-8")) % shards


def shard_name(root: str, index: int, shards: int) -> str:
    """Collection name of shard ``index`` of ``shards``. The count is part of the name,
    so the shards of another layout (left by an interrupted drop) are never read."""
    return f"{root}.{index}-of-{shards}"


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


def _warn_once(location: str, collection: str, message: str, *args: object) -> None:
    with _WARNED_LOCK:
        if (location, collection) in _WARNED:
            return
        _WARNED.add((location, collection))
    log.warning(message, *args)


class _Shard:
    """One Chroma collection holding vectors, with the search state that belongs to it:
    the brute-force limit depends on this collection's size, and a scope read or a
    write here says nothing about the other shards."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection
        # Filters seen to match more vectors than the brute-force limit of the time
        # (the value): their searches go straight to HNSW instead of paying for a get
        # that would be thrown away, until the limit rises. Only speed depends on it,
        # never results, so a stale entry (a scope that shrank through another client)
        # is harmless.
        self.large_scopes: dict[Pairs, int] = {}
        # (monotonic time, collection count) behind the brute-force limit.
        self.count_cache: tuple[float, int] | None = None
        # Scope reads in flight, by (conditions, limit, writes so far). Chroma evaluates
        # a where over every row of the collection (GROUP BY ... HAVING in its SQLite
        # reader), so concurrent searches of one scope (calls for the same user in
        # flight at once) share one read rather than pay for it twice. The queries of
        # one call need none of this: search_many scores them all on one read.
        # The write count in the key keeps read-your-writes: a search issued after one
        # of our upserts or deletes completes never joins a read that began before.
        self.reads: dict[tuple[Pairs, int, int], _SharedRead] = {}
        self.reads_lock = threading.Lock()
        self.writes = 0

    def upsert(self, records: Sequence[VectorRecord]) -> None:
        try:
            for start in range(0, len(records), UPSERT_BATCH):
                batch = records[start : start + UPSERT_BATCH]
                self.collection.upsert(
                    ids=[r.id for r in batch],
                    embeddings=[[float(x) for x in r.vector] for r in batch],
                    documents=[r.text for r in batch],
                    # Chroma rejects an empty metadata dict but accepts None.
                    metadatas=[dict(r.metadata) or None for r in batch],
                )
        finally:
            # Even a failed upsert may have written some batches.
            self.wrote()
        if self.count_cache is not None:
            # Counting again would cost more than the upsert saves: an upper bound
            # (some ids may have existed) is close enough for the brute-force limit.
            self.count_cache = (self.count_cache[0], self.count_cache[1] + len(records))

    def delete(self, ids: list[str] | None, pairs: Pairs) -> None:
        try:
            self.collection.delete(ids=ids, where=_where(pairs))
        finally:
            self.wrote()
        # A delete can shrink a large scope below the limit, and the collection.
        self.large_scopes.clear()
        self.count_cache = None

    def get(self, ids: list[str], pairs: Pairs) -> list[VectorHit]:
        # By id alone, then the scope in Python: with a where, Chroma would evaluate the
        # filter over every row of the collection.
        got = self.collection.get(ids=ids, include=["metadatas", "documents"])
        hits = []
        for i, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
            metadata = dict(meta or {})
            if all(metadata.get(key) == value for key, value in pairs):
                hits.append(VectorHit(id=i, text=doc or "", score=1.0, metadata=metadata))
        return hits

    def count(self, pairs: Pairs | None) -> int:
        if not pairs:
            return int(self.collection.count())
        return len(self.collection.get(where=_where(pairs), include=[])["ids"])

    def search(
        self,
        queries: list[list[float]],
        pairs: Pairs,
        top_k: int,
        max_vectors: int,
        max_share: float,
        fields: HitFields,
    ) -> list[list[VectorHit]]:
        limit = self.brute_force_limit(max_vectors, max_share)
        if limit and limit > self.large_scopes.get(pairs, 0):
            hits = self.brute_force(queries, pairs, top_k, limit, fields)
            if hits is not None:
                self.large_scopes.pop(pairs, None)
                return hits
            if len(self.large_scopes) >= LARGE_SCOPES_MAX:
                self.large_scopes.clear()
            self.large_scopes[pairs] = limit
        return self.hnsw(queries, _where(pairs), top_k, fields)

    def brute_force_limit(self, max_vectors: int, max_share: float) -> int:
        """Most vectors a scope may hold to be scored by brute force (0: never)."""
        if not max_vectors or not max_share:
            return 0
        now = time.monotonic()
        if self.count_cache is None or now - self.count_cache[0] > COUNT_TTL_S:
            self.count_cache = (now, int(self.collection.count()))
        return min(max_vectors, int(self.count_cache[1] * max_share))

    def wrote(self) -> None:
        with self.reads_lock:
            self.writes += 1

    def scope_vectors(self, pairs: Pairs, limit: int) -> dict[str, Any]:
        """Ids and embeddings of up to ``limit + 1`` vectors matching ``pairs``; joins an
        identical read already in flight instead of starting another."""
        key = (pairs, limit, self.writes)
        with self.reads_lock:
            shared = self.reads.get(key)
            leader = shared is None
            if shared is None:
                shared = self.reads[key] = _SharedRead()
        if not leader:
            shared.done.wait()
            if shared.error is not None:
                raise shared.error
            return shared.result
        try:
            shared.result = self.collection.get(
                where=_where(pairs), include=["embeddings"], limit=limit + 1
            )
        except BaseException as exc:
            shared.error = exc
            raise
        finally:
            with self.reads_lock:
                del self.reads[key]
            shared.done.set()
        return shared.result

    def brute_force(
        self,
        queries: list[list[float]],
        pairs: Pairs,
        top_k: int,
        limit: int,
        fields: HitFields,
    ) -> list[list[VectorHit]] | None:
        """Exact cosine top ``top_k`` of the vectors matching ``pairs`` for each query, or
        None when more than ``limit`` match. Same scores as :meth:`hnsw` up to float
        error."""
        # Embeddings only: documents and metadata cost more to read than the vectors,
        # and only the top rows need them.
        got = self.scope_vectors(pairs, limit)
        ids: list[str] = got["ids"]
        if len(ids) > limit:
            return None
        if not ids:
            return [[] for _ in queries]
        matrix = np.asarray(got["embeddings"], dtype=np.float64)
        q = np.asarray(queries, dtype=np.float64)
        norms = np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(matrix, axis=1))
        # Every collection's space is cosine (see ChromaStore._collection), in which a
        # zero vector is at distance 1, i.e. similarity 0.
        sims = (q @ matrix.T) / np.where(norms > 0, norms, 1.0)
        orders = [np.argsort(-row, kind="stable")[:top_k] for row in sims]
        if fields == "ids":
            # Every id matched the scope when the read above ran: nothing more to read.
            return [
                [VectorHit(id=ids[k], text="", score=float(row[k])) for k in order]
                for row, order in zip(sims, orders, strict=True)
            ]
        # One read for the union of every query's top rows: the queries of one call
        # mostly agree, and each row read costs the same whichever query wanted it.
        wanted = list(dict.fromkeys(ids[i] for order in orders for i in order))
        rows = self.collection.get(ids=wanted, include=["documents", "metadatas"])
        n = len(rows["ids"])
        docs = rows.get("documents") or [None] * n
        metas = rows.get("metadatas") or [None] * n
        found = dict(zip(rows["ids"], zip(docs, metas, strict=True), strict=True))
        out: list[list[VectorHit]] = []
        for row, order in zip(sims, orders, strict=True):
            hits = []
            for k in order:
                i = ids[k]
                if i not in found:  # deleted since the first get: gone, not an error
                    continue
                doc, meta = found[i][0], dict(found[i][1] or {})
                # A row re-upserted into another scope since the first get must not come
                # back with its new owner's text. Checked here rather than by passing the
                # filter to this get, which measured slower, growing with the scope.
                if any(meta.get(key) != value for key, value in pairs):
                    continue
                hits.append(VectorHit(id=i, text=doc or "", score=float(row[k]), metadata=meta))
            out.append(hits)
        return out

    def hnsw(
        self, queries: list[list[float]], flt: dict[str, Any], top_k: int, fields: HitFields
    ) -> list[list[VectorHit]]:
        include = ["metadatas", "distances", "documents"] if fields == "all" else ["distances"]
        try:
            # All queries in one call: Chroma evaluates the filter once for them.
            result: dict[str, Any] = self.collection.query(
                query_embeddings=queries, n_results=top_k, where=flt, include=include
            )
        except Exception:
            # Some Chroma versions raise when n_results exceeds an empty index.
            if self.collection.count() == 0:
                return [[] for _ in queries]
            raise
        if not result or not result.get("ids"):
            return [[] for _ in queries]
        out: list[list[VectorHit]] = []
        for q, ids in enumerate(result["ids"]):
            docs = (result.get("documents") or [[]] * len(queries))[q] or [None] * len(ids)
            metas = (result.get("metadatas") or [[]] * len(queries))[q] or [None] * len(ids)
            dists = (result.get("distances") or [[]] * len(queries))[q] or [1.0] * len(ids)
            out.append(
                [
                    VectorHit(id=i, text=d or "", score=1.0 - float(dist), metadata=dict(m or {}))
                    for i, d, m, dist in zip(ids, docs, metas, dists, strict=True)
                ]
            )
        return out


class _Layout:
    """The shards of a store as found on one open. Replaced as a whole when the store is
    dropped, closed or reopened, so that a call in flight keeps routing by the layout it
    started with instead of mixing two."""

    def __init__(self, count: int, key: str | None, legacy: bool, root: Any) -> None:
        self.count = count
        self.key = key
        # A root written before sharding, holding the vectors itself.
        self.legacy = legacy
        # Shard index -> open shard, filled lazily from worker threads; each index has
        # its own lock so that first touches of different shards do not queue.
        self.shards: dict[int, _Shard] = {0: _Shard(root)} if count == 1 else {}
        self.locks: dict[int, threading.Lock] = {}
        self.lock = threading.Lock()
        # Set by drop and close: creating a shard after them would leave it without a
        # root, where a later root of the same count would pick it up.
        self.closed = False

    def route(self, pairs: Sequence[tuple[str, MetaValue]]) -> int | None:
        """The one shard that can hold matches of ``pairs`` (conditions are ANDed, so any
        condition on the shard key names it); None when they must fan out."""
        if self.count == 1:
            return 0
        for key, value in pairs:
            if key == self.key and isinstance(value, str):
                return shard_of(value, self.count)
        return None


class ChromaStore:
    """Chroma collections with cosine distance; ``score = 1 - distance``.

    ``shards`` and ``shard_key`` apply when the store is first created: an existing
    store keeps the layout recorded in its root collection (:meth:`drop` and a new open
    re-shard it). In a sharded store every record needs a string ``shard_key`` in its
    metadata, and an id must keep its shard key value: re-upserting an id under
    another value adds a row in that value's shard rather than moving it (memstack's
    ids are per session, and a session has one user).
    """

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
        shards: int = 1,
        shard_key: str | None = None,
    ) -> None:
        if (path is None) == (url is None):
            raise ConfigError("ChromaStore needs exactly one of path or url")
        if brute_force_max < 0:
            raise ConfigError(f"brute_force_max must be >= 0, got {brute_force_max}")
        if not 0.0 <= brute_force_share <= 1.0:
            raise ConfigError(f"brute_force_share must be in [0, 1], got {brute_force_share}")
        if not 1 <= shards <= MAX_SHARDS:
            raise ConfigError(f"shards must be in [1, {MAX_SHARDS}], got {shards}")
        if shards > 1 and not shard_key:
            raise ConfigError("shards > 1 needs a shard_key to route records by")
        self.collection_name = collection
        self.model_version = model_version
        self.dim = dim
        self.brute_force_max = brute_force_max
        self.brute_force_share = brute_force_share
        self.shards = shards
        self.shard_key = shard_key
        self._path = Path(path) if path is not None else None
        self._url = url
        self._client: Any = None
        self._layout: _Layout | None = None
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
        shards: int = 1,
        shard_key: str | None = None,
    ) -> ChromaStore:
        """Connect and create or check the root collection now, rather than on first use."""
        store = cls(
            collection,
            model_version=model_version,
            dim=dim,
            path=path,
            url=url,
            brute_force_max=brute_force_max,
            brute_force_share=brute_force_share,
            shards=shards,
            shard_key=shard_key,
        )
        await store.ensure_open()
        return store

    @property
    def location(self) -> str:
        return self._url or str(self._path)

    @property
    def layout(self) -> str:
        """The layout on disk, for ``memstack doctor`` (known once open)."""
        layout = self._layout
        if layout is None:
            return "not open"
        if layout.count > 1:
            return f"{layout.count} shards by {layout.key}"
        if layout.legacy:
            return "single collection (written before sharding; `memstack reindex` shards it)"
        return "single collection"

    async def _run(self, fn: Callable[[], T], what: str) -> T:
        where = f"chroma {self.location} collection {self.collection_name!r}"
        return await in_thread(fn, where=where, what=what, unreachable=_is_unreachable)

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        # No telemetry: it would try the network on every start, and there may be none.
        settings = ChromaSettings(anonymized_telemetry=False)
        if self._path is not None:
            self._path.mkdir(parents=True, exist_ok=True)
            self._client = chromadb.PersistentClient(path=str(self._path), settings=settings)
            return self._client
        assert self._url is not None
        parts = urlsplit(self._url if "//" in self._url else f"http://{self._url}")
        if not parts.hostname:
            raise ConfigError(f"chroma url {self._url!r} has no host")
        self._client = chromadb.HttpClient(
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 8000),
            ssl=parts.scheme == "https",
            settings=settings,
        )
        return self._client

    def _collection(self, name: str, extra: Mapping[str, MetaValue], *, create: bool = True) -> Any:
        """Collection ``name`` checked against our embedder; created with ``extra`` in its
        metadata when missing and ``create``, else None when missing."""
        from chromadb.errors import NotFoundError

        client = self._connect()
        try:
            # get first: get_or_create would hide a collection made by another embedder.
            collection = client.get_collection(name, embedding_function=None)
        except NotFoundError:
            if not create:
                return None
            collection = client.get_or_create_collection(
                name,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={VERSION_KEY: self.model_version, DIM_KEY: self.dim, **extra},
                embedding_function=None,
            )
        meta = collection.metadata or {}
        check_schema(
            name,
            found_version=meta.get(VERSION_KEY),
            found_dim=meta.get(DIM_KEY),
            model_version=self.model_version,
            dim=self.dim,
        )
        return collection

    def _open_root(self) -> _Layout:
        wanted: dict[str, MetaValue] = {SHARDS_KEY: self.shards}
        if self.shards > 1 and self.shard_key:
            wanted[SHARD_KEY_KEY] = self.shard_key
        root = self._collection(self.collection_name, wanted)
        meta = dict(root.metadata or {})
        recorded = meta.get(SHARDS_KEY)
        legacy = False
        if recorded is None:
            if root.count() > 0:
                # Written before sharding: the root holds the vectors and keeps doing so.
                legacy, layout, key = True, 1, None
                if self.shards > 1:
                    _warn_once(
                        self.location,
                        self.collection_name,
                        "chroma collection %r holds its vectors in one collection, not "
                        "the configured %d shards; `memstack reindex` shards it",
                        self.collection_name,
                        self.shards,
                    )
            else:
                # Empty: nothing to keep, so it takes the configured layout.
                root.modify(metadata={**meta, **wanted})
                layout, key = self.shards, self.shard_key if self.shards > 1 else None
        elif isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 1:
            raise SchemaMismatch(
                f"collection {self.collection_name!r} records {recorded!r} shards; "
                "run `memstack reindex` to rebuild it"
            )
        else:
            layout, key = recorded, meta.get(SHARD_KEY_KEY)
            if layout != self.shards:
                _warn_once(
                    self.location,
                    self.collection_name,
                    "chroma collection %r is laid out in %d shard(s), not the configured %d; "
                    "the layout on disk is kept until `memstack reindex`",
                    self.collection_name,
                    layout,
                    self.shards,
                )
        if layout > 1:
            if not isinstance(key, str) or not key:
                raise SchemaMismatch(
                    f"collection {self.collection_name!r} records {layout} shards but no "
                    "shard key; run `memstack reindex` to rebuild it"
                )
            if self.shard_key is not None and key != self.shard_key:
                raise ConfigError(
                    f"collection {self.collection_name!r} is sharded by {key!r}, "
                    f"not {self.shard_key!r}"
                )
        return _Layout(layout, key, legacy, root)

    async def ensure_open(self) -> None:
        await self._open()

    async def _open(self) -> _Layout:
        """Connect, and create or check the root collection, once; the layout in use."""
        layout = self._layout
        if layout is not None:
            return layout
        async with self._open_lock:
            if self._layout is None:
                self._layout = await self._run(self._open_root, "open the collection")
            return self._layout

    def _shard(self, layout: _Layout, index: int, *, create: bool = True) -> _Shard | None:
        """Shard ``index`` of ``layout``, opened (and created if missing and ``create``)
        on first use; None when it does not exist and ``create`` is false. Runs in
        worker threads."""
        shard = layout.shards.get(index)
        if shard is not None:
            return shard
        with layout.lock:
            lock = layout.locks.setdefault(index, threading.Lock())
        with lock:
            shard = layout.shards.get(index)
            if shard is None:
                if layout.closed:
                    raise StoreError(
                        f"collection {self.collection_name!r} was dropped or closed during the call"
                    )
                name = shard_name(self.collection_name, index, layout.count)
                collection = self._collection(name, {}, create=create)
                if collection is None:
                    return None
                shard = layout.shards[index] = _Shard(collection)
            return shard

    def _existing_shards(self, layout: _Layout) -> list[_Shard]:
        """Every shard of ``layout`` that exists, for operations the shard key cannot
        route."""
        missing = [i for i in range(layout.count) if i not in layout.shards]
        if missing:
            # One listing instead of a failed get per missing shard; a shard created
            # since is opened the next time.
            names = {c.name for c in self._connect().list_collections()}
            for i in missing:
                if shard_name(self.collection_name, i, layout.count) in names:
                    self._shard(layout, i, create=False)
        return [shard for i in range(layout.count) if (shard := layout.shards.get(i))]

    async def _on_layout(self, work: Callable[[_Layout], T], what: str) -> T:
        """Run ``work`` on the open layout. A collection that another client dropped
        and made again (``memstack reindex`` in another process) is opened anew and the
        call retried once, instead of failing every call until a restart."""
        layout = await self._open()
        try:
            return await self._run(lambda: work(layout), what)
        except StoreError as exc:
            from chromadb.errors import NotFoundError

            if not isinstance(exc.__cause__, NotFoundError):
                raise
            log.info("chroma collection %r was dropped elsewhere; reopening", self.collection_name)
            if self._layout is layout:
                self._forget_layout()
            layout = await self._open()
            return await self._run(lambda: work(layout), what)

    def _groups(
        self, layout: _Layout, records: Sequence[VectorRecord]
    ) -> dict[int, list[VectorRecord]]:
        """``records`` by the shard they belong in; every record is checked first."""
        groups: dict[int, list[VectorRecord]] = {}
        for r in records:
            index = 0
            if layout.count > 1:
                assert layout.key is not None
                value = r.metadata.get(layout.key)
                if not isinstance(value, str):
                    raise ValidationError(
                        f"vector record {r.id!r} needs a string {layout.key!r} in its "
                        f"metadata: collection {self.collection_name!r} is sharded by it"
                    )
                index = shard_of(value, layout.count)
            groups.setdefault(index, []).append(r)
        return groups

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        unique = unique_records(records, self.dim)
        if not unique:
            return
        self._groups(await self._open(), unique)  # refuse a bad record before any call

        def work(layout: _Layout) -> None:
            for index, batch in self._groups(layout, unique).items():
                shard = self._shard(layout, index)
                assert shard is not None
                shard.upsert(batch)

        await self._on_layout(work, "upsert")

    async def search(
        self,
        vector: Sequence[float],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
    ) -> list[VectorHit]:
        return (await self.search_many([vector], scope=scope, top_k=top_k, where=where))[0]

    async def search_many(
        self,
        vectors: Sequence[Sequence[float]],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
        fields: HitFields = "all",
    ) -> list[list[VectorHit]]:
        pairs = tuple(conditions(scope, where))
        check_top_k(top_k)
        queries = [check_vector(v, self.dim) for v in vectors]
        if not queries:
            return []
        limits = (self.brute_force_max, self.brute_force_share)

        def work(layout: _Layout) -> list[list[VectorHit]]:
            index = layout.route(pairs)
            if index is not None:
                shard = self._shard(layout, index, create=False)
                if shard is None:
                    return [[] for _ in queries]
                return shard.search(queries, pairs, top_k, *limits, fields)
            # No shard key in the filter: every shard may hold matches. Each one's top
            # k contains its share of the overall top k.
            merged: list[list[VectorHit]] = [[] for _ in queries]
            for shard in self._existing_shards(layout):
                for hits, more in zip(
                    merged, shard.search(queries, pairs, top_k, *limits, fields), strict=True
                ):
                    hits.extend(more)
            for hits in merged:
                hits.sort(key=lambda h: h.score, reverse=True)
                del hits[top_k:]
            return merged

        return await self._on_layout(work, "search")

    async def get(self, ids: Sequence[str], *, scope: Mapping[str, MetaValue]) -> list[VectorHit]:
        pairs = tuple(conditions(scope, None))
        if not ids:
            return []
        id_list = list(dict.fromkeys(ids))

        def work(layout: _Layout) -> list[VectorHit]:
            shards = self._scoped_shards(layout, pairs)
            return [hit for shard in shards for hit in shard.get(id_list, pairs)]

        return await self._on_layout(work, "get")

    def _scoped_shards(self, layout: _Layout, pairs: Pairs) -> list[_Shard]:
        """The existing shards that may hold records matching ``pairs``: the routed one,
        or all of them when the filter does not name the shard key."""
        index = layout.route(pairs)
        if index is None:
            return self._existing_shards(layout)
        routed = self._shard(layout, index, create=False)
        return [] if routed is None else [routed]

    async def delete(
        self, *, scope: Mapping[str, MetaValue], ids: Sequence[str] | None = None
    ) -> None:
        pairs = tuple(conditions(scope, None))
        if ids is not None and not ids:
            return
        id_list = list(ids) if ids is not None else None

        def work(layout: _Layout) -> None:
            for shard in self._scoped_shards(layout, pairs):
                shard.delete(id_list, pairs)

        await self._on_layout(work, "delete")

    async def count(self, scope: Mapping[str, MetaValue] | None = None) -> int:
        """Number of vectors, all of them or those matching ``scope`` (stats, dry runs)."""
        pairs = tuple(conditions(scope, None)) if scope else None

        def work(layout: _Layout) -> int:
            index = layout.route(pairs) if pairs else None
            if index is not None:
                shard = self._shard(layout, index, create=False)
                return 0 if shard is None else shard.count(pairs)
            return sum(shard.count(pairs) for shard in self._existing_shards(layout))

        return await self._on_layout(work, "count")

    async def drop(self) -> None:
        """Delete the root and every shard (``memstack reindex``); the next use creates
        the configured layout."""
        pattern = re.compile(rf"{re.escape(self.collection_name)}\.\d+-of-\d+")

        def work() -> None:
            from chromadb.errors import NotFoundError

            client = self._connect()
            self._forget_layout()
            # Shards first: a root left by a failed drop still describes them, while
            # shards left without their root would be picked up by a new root.
            shards = [c.name for c in client.list_collections() if pattern.fullmatch(c.name)]
            for name in [*shards, self.collection_name]:
                with contextlib.suppress(NotFoundError, ValueError):
                    client.delete_collection(name)

        await self._run(work, "drop the collection")

    def _forget_layout(self) -> None:
        layout, self._layout = self._layout, None
        if layout is not None:
            with layout.lock:
                layout.closed = True

    async def close(self) -> None:
        # Embedded clients share one process-wide system per path and HttpClient holds
        # only a connection pool: dropping the references is all closing can do safely.
        self._forget_layout()
        self._client = None
