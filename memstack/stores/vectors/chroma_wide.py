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

The share is learnt from these searches (:class:`~memstack.stores.vectors.overfetch.Shares`)
rather than counted, since counting a scope costs as much as the filtered query it
would save.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memstack.stores.vectors.base import HitFields, VectorHit
from memstack.stores.vectors.overfetch import (
    OVERFETCH_MAX,
    WIDE_SHARE_MIN,
    Pairs,
    Shares,
)

__all__ = ["OVERFETCH_MAX", "WIDE_SHARE_MIN", "Pairs", "Shares", "matches", "wide_search"]


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


def wide_search(
    collection: Any,
    queries: list[list[float]],
    pairs: Pairs,
    top_k: int,
    rows: int,
    fields: HitFields,
) -> tuple[list[list[VectorHit] | None], int, int]:
    """The unfiltered query for ``rows`` rows each, kept to the hits matching ``pairs``.
    Per query, its top ``top_k`` hits, or None where fewer survived while more rows
    exist; then how many of the rows fetched matched, and how many were fetched."""
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
            return [[] for _ in queries], 0, 0
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
    return out, kept, fetched


def _column(result: Mapping[str, Any], name: str, q: int, n: int) -> Sequence[Any]:
    column = result.get(name)
    if not column or column[q] is None:
        return [None] * n
    values: Sequence[Any] = column[q]
    return values
