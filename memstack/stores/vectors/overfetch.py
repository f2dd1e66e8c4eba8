"""How many rows an unfiltered, over-fetched search asks for, from the learnt share of
its scope: shared by Chroma (:mod:`~memstack.stores.vectors.chroma_wide`) and Qdrant's
local mode, whose filtered searches both cost time linear in the scope or the
collection while their unfiltered ones do not.

The share is learnt from the searches themselves (the hits that matched the scope
over the rows fetched) rather than counted, since counting a scope costs as much as
the filtered search it would save.
"""

from __future__ import annotations

import math
import threading
import time

from memstack.stores.vectors.base import MetaValue

Pairs = tuple[tuple[str, MetaValue], ...]

# Most rows one query of the unfiltered search may fetch; past it the filtered query is
# used. Each row fetched costs a metadata (payload) read, so the crossover with the filtered
# query is set by measurement (docs/benchmarks.md, "Heavy scopes").
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
