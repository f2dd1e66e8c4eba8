"""Searching a scope that holds a large share of its Chroma collection.

Chroma's filtered query first lists every row matching the ``where`` from its SQLite
metadata, so its cost grows with the scope: one user who owns most of a shard pays for
their whole history on every search, although the HNSW walk itself is fast. For such a
scope the unfiltered query is run instead, asking for more rows than ``top_k`` (about
``top_k / share``), and each hit's metadata is checked against every condition: if at
least ``top_k`` hits survive, they are the scope's top ``top_k`` (any closer vector of
the scope would have ranked among the rows fetched), the same hits as the filtered query
up to HNSW's approximation. A query with fewer survivors is answered by the filtered
query after all, so results never depend on the share estimate, only speed does.

The share is learnt from these searches (survivors over rows fetched) rather than
counted, since counting a scope costs as much as the filtered query it would save.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memstack.stores.vectors.base import HitFields, MetaValue, VectorHit

Pairs = tuple[tuple[str, MetaValue], ...]

# Most rows one query of the unfiltered search may fetch; past it the filtered query is
# used. Each row fetched costs a metadata read, so the crossover with the filtered query
# is set by measurement (docs/benchmarks.md, "Heavy scopes").
OVERFETCH_MAX = 200
# Rows fetched per expected survivor, and a few more, so that a scope at its estimated
# share rarely falls short of top_k (a shortfall costs one filtered query on top).
OVERFETCH_MARGIN = 1.5
OVERFETCH_EXTRA = 10
# Below this learnt share the filtered query is used without trying the unfiltered one:
# it would need more rows than it saves.
WIDE_SHARE_MIN = 0.2
# How long a learnt share is trusted before the scope is tried unfiltered again (the
# scope and its collection change with writes, including other clients').
SHARE_TTL_S = 60.0
# Bound on the remembered shares, as for the large scopes: forgetting costs one probe.
SHARES_MAX = 10_000


def matches(metadata: Mapping[str, Any], pairs: Pairs) -> bool:
    """Whether ``metadata`` meets every equality of ``pairs`` as Chroma's ``where`` judges
    it: a bool matches only a bool (Python's ``True == 1`` does not hold there), numbers
    compare by value whatever their type, strings exactly."""
    for key, value in pairs:
        if key not in metadata:
            return False
        found = metadata[key]
        if isinstance(value, bool) or isinstance(found, bool):
            if not (isinstance(value, bool) and isinstance(found, bool) and found is value):
                return False
        elif isinstance(value, str) or isinstance(found, str):
            if not (isinstance(value, str) and isinstance(found, str) and found == value):
                return False
        elif found != value:
            return False
    return True


class Shares:
    """The learnt share of each scope within one collection: how many rows the
    unfiltered search fetches for it, or none (the filtered query)."""

    def __init__(self) -> None:
        self.seen: dict[Pairs, tuple[float, float]] = {}
        self.lock = threading.Lock()

    def rows(self, pairs: Pairs, top_k: int, max_rows: int) -> int:
        """Rows to fetch per query for ``top_k`` survivors; 0 for the filtered query."""
        if max_rows <= 0:
            return 0
        entry = self.seen.get(pairs)
        share = 1.0  # unknown: tried as if the scope were the whole collection
        if entry is not None and time.monotonic() - entry[0] <= SHARE_TTL_S:
            share = entry[1]
        if share < WIDE_SHARE_MIN:
            return 0
        rows = math.ceil(top_k / share * OVERFETCH_MARGIN) + OVERFETCH_EXTRA
        return rows if rows <= max_rows else 0

    def learn(self, pairs: Pairs, share: float) -> None:
        with self.lock:
            if pairs not in self.seen and len(self.seen) >= SHARES_MAX:
                self.seen.clear()
            self.seen[pairs] = (time.monotonic(), share)

    def clear(self) -> None:
        with self.lock:
            self.seen.clear()


def wide_search(
    collection: Any,
    queries: list[list[float]],
    pairs: Pairs,
    top_k: int,
    rows: int,
    fields: HitFields,
) -> tuple[list[list[VectorHit] | None], float]:
    """The unfiltered query for ``rows`` rows each, kept to the hits matching ``pairs``.
    Per query, its top ``top_k`` hits, or None where fewer survived while more rows
    exist; and the share of the rows fetched that matched (the learnt share)."""
    include = ["metadatas", "distances"]
    if fields == "all":
        include.append("documents")
    try:
        result: dict[str, Any] = collection.query(
            query_embeddings=queries, n_results=rows, include=include
        )
    except Exception:
        # Some Chroma versions raise when n_results exceeds an empty index.
        if collection.count() == 0:
            return [[] for _ in queries], 1.0
        raise
    out: list[list[VectorHit] | None] = []
    fetched = kept = 0
    for q, ids in enumerate(result.get("ids") or [[] for _ in queries]):
        metas = _column(result, "metadatas", q, len(ids))
        docs = _column(result, "documents", q, len(ids))
        dists = _column(result, "distances", q, len(ids))
        hits: list[VectorHit] = []
        for i, meta, doc, dist in zip(ids, metas, docs, dists, strict=True):
            metadata = dict(meta or {})
            if not matches(metadata, pairs):
                continue
            kept += 1
            if len(hits) < top_k:
                score = 1.0 - float(dist if dist is not None else 1.0)
                if fields == "all":
                    hits.append(VectorHit(id=i, text=doc or "", score=score, metadata=metadata))
                else:
                    hits.append(VectorHit(id=i, text="", score=score))
        fetched += len(ids)
        # Fewer rows than asked means the query saw the whole collection: the survivors
        # are all of the scope, however few.
        complete = len(hits) >= top_k or len(ids) < rows
        out.append(hits if complete else None)
    return out, (kept / fetched if fetched else 1.0)


def _column(result: Mapping[str, Any], name: str, q: int, n: int) -> Sequence[Any]:
    column = result.get(name)
    if not column or column[q] is None:
        return [None] * n
    values: Sequence[Any] = column[q]
    return values
