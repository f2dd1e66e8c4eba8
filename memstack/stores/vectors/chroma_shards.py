"""Chroma collections as shards of one vector store: routing a scope to its shard, and
searching one collection (filtered HNSW, brute force over a small scope, or the
unfiltered query over a scope that is most of it).

Chroma evaluates a metadata filter over every row of a collection, so reading one
user's 100 vectors out of 100,000 costs tens of milliseconds whatever the search
does with them. Three things keep a user's search small:

- **Shards.** With ``shards > 1`` the vectors live in that many collections, routed by
  a stable hash of one metadata key (semantic memory: ``user_id``), so a user's
  search filters one shard's rows instead of the whole store's. The root collection
  (the store's name) records the shard count and holds the vectors only when there
  is one shard, which is also the layout of stores written before sharding.
- **Brute force.** Within a collection, a scope that is both small and a small share
  of it is read and scored by numpy instead of the filtered HNSW query, which is slow
  when its filter is selective.
- **No filter.** A scope that is a large share of its collection (one user owning
  most of a shard) is searched by the unfiltered HNSW query, over-fetched and checked
  hit by hit (:mod:`~memstack.stores.vectors.chroma_wide`): listing its rows for the
  filter would cost time linear in the user's history.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memstack.stores.vectors.base import HitFields, MetaValue, VectorHit, VectorRecord
from memstack.stores.vectors.chroma_wide import (
    OVERFETCH_MAX,
    Pairs,
    Shares,
    matches,
    wide_search,
)

log = logging.getLogger("memstack.stores.vectors")

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
# Both are crossovers measured with 384-d vectors (docs/benchmarks.md, "Brute force for
# small scopes"): brute force costs about the same per vector whatever the collection,
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


@dataclass(frozen=True)
class SearchLimits:
    """When a search takes brute force and when the unfiltered query (chroma_wide)."""

    brute_force_max: int = BRUTE_FORCE_MAX
    brute_force_share: float = BRUTE_FORCE_SHARE
    overfetch_max: int = OVERFETCH_MAX


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


def is_unreachable(exc: BaseException) -> bool:
    import httpx

    if isinstance(exc, httpx.TransportError | ConnectionError | TimeoutError):
        return True
    # HttpClient reports a refused connection at start as a bare ValueError.
    return isinstance(exc, ValueError) and "could not connect" in str(exc).lower()


def warn_once(location: str, collection: str, message: str, *args: object) -> None:
    with _WARNED_LOCK:
        if (location, collection) in _WARNED:
            return
        _WARNED.add((location, collection))
    log.warning(message, *args)


class Shard:
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
        # Scopes searched without the filter (chroma_wide): their learnt shares.
        self.shares = Shares()

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
        # A delete can shrink a large scope below the limit, and the collection; and
        # change a scope's share of it.
        self.large_scopes.clear()
        self.shares.clear()
        self.count_cache = None

    def get(self, ids: list[str], pairs: Pairs) -> list[VectorHit]:
        # By id alone, then the scope in Python: with a where, Chroma would evaluate the
        # filter over every row of the collection.
        got = self.collection.get(ids=ids, include=["metadatas", "documents"])
        hits = []
        for i, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
            metadata = dict(meta or {})
            if matches(metadata, pairs):
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
        limits: SearchLimits,
        fields: HitFields,
    ) -> list[list[VectorHit]]:
        limit = self.brute_force_limit(limits.brute_force_max, limits.brute_force_share)
        if limit and limit > self.large_scopes.get(pairs, 0):
            hits = self.brute_force(queries, pairs, top_k, limit, fields)
            if hits is not None:
                self.large_scopes.pop(pairs, None)
                return hits
            if len(self.large_scopes) >= LARGE_SCOPES_MAX:
                self.large_scopes.clear()
            self.large_scopes[pairs] = limit
        rows = self.shares.rows(pairs, top_k, limits.overfetch_max)
        if not rows:
            return self.hnsw(queries, _where(pairs), top_k, fields)
        wide, kept, fetched = wide_search(self.collection, queries, pairs, top_k, rows, fields)
        self.shares.learn(pairs, kept, fetched)
        short = [q for q, hits in enumerate(wide) if hits is None]
        if short:
            # Too few of the rows fetched were the scope's: the filtered query answers
            # those queries (in one call: Chroma evaluates the filter once for them).
            redo = self.hnsw([queries[q] for q in short], _where(pairs), top_k, fields)
            for q, filtered in zip(short, redo, strict=True):
                wide[q] = filtered
        return [found or [] for found in wide]

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
                if not matches(meta, pairs):
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


class Layout:
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
        self.shards: dict[int, Shard] = {0: Shard(root)} if count == 1 else {}
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
