"""Qdrant local mode's search of a scope that holds a large share of its collection.

qdrant-client's local mode checks a filter in Python, point by point, over the whole
collection for every query, while its unfiltered search is one numpy product. For a
scope that is most of the collection (one user owning most of an embedded store) the
unfiltered search is run instead, over-fetched as for Chroma
(:mod:`~memstack.stores.vectors.overfetch`), and each hit is checked with local mode's
own filter function, so the hits kept are those the filtered search would have
returned. A query left with fewer than ``top_k`` is answered by the filtered search.
A server and qdrant-edge filter inside their HNSW walk and take none of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstack.stores.vectors.overfetch import OVERFETCH_MAX, Pairs, Shares


def _checker() -> Any:
    try:
        from qdrant_client.local.payload_filters import check_filter
    except ImportError:  # a client without it: the filtered search, as before
        return None
    return check_filter


def search_local(
    client: Any,
    collection: str,
    requests: Sequence[Any],
    pairs: Pairs,
    shares: Shares,
) -> list[list[Any]]:
    """The points of each request in ``requests`` (all with one filter and limit), as
    ``query_batch_points`` with their filter would return them."""
    check = _checker()
    top_k = requests[0].limit
    rows = shares.rows(pairs, top_k, OVERFETCH_MAX) if check is not None else 0
    if not rows:
        return [r.points for r in client.query_batch_points(collection, requests=requests)]
    flt = requests[0].filter
    unfiltered = {"filter": None, "limit": rows, "with_payload": True}
    wide = [r.model_copy(update=unfiltered) for r in requests]
    out: list[list[Any] | None] = []
    fetched = kept = 0
    for request, response in zip(
        requests, client.query_batch_points(collection, requests=wide), strict=True
    ):
        points = [p for p in response.points if check(flt, p.payload or {}, p.id, {})]
        fetched += len(response.points)
        kept += len(points)
        # Fewer points than asked: the search saw the whole collection.
        complete = len(points) >= top_k or len(response.points) < rows
        out.append([_trim(p, request.with_payload) for p in points[:top_k]] if complete else None)
    shares.learn(pairs, kept, fetched)
    short = [q for q, points in enumerate(out) if points is None]
    if short:
        redo = client.query_batch_points(collection, requests=[requests[q] for q in short])
        for q, response in zip(short, redo, strict=True):
            out[q] = response.points
    return [points or [] for points in out]


def _trim(point: Any, with_payload: Any) -> Any:
    """``point`` with only the payload keys the request asked for."""
    if not isinstance(with_payload, list):
        return point
    payload = {k: v for k, v in (point.payload or {}).items() if k in with_payload}
    return point.model_copy(update={"payload": payload})
