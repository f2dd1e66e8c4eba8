"""How many rows an unfiltered, over-fetched search asks for, from the learnt share of
its scope: shared by Chroma (:mod:`~memstack.stores.vectors.chroma_wide`) and Qdrant's
local mode, whose filtered searches both cost time linear in the scope or the
collection while their unfiltered ones do not.

The share is learnt from the searches themselves (the hits that matched the scope
over the rows fetched, older searches weighing less) rather than counted, since
counting a scope costs as much as the filtered search it would save. It only sets
speed: a search whose unfiltered rows hold too few of the scope's is answered by the
filtered search.
"""

from __future__ import annotations

import math
import threading

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
# Weight of the evidence so far when a search adds its own: the share follows writes
# (including other clients') within a few searches, and one query whose neighbours
# happen to be other users' does not send a heavy scope to the filtered query.
SHARE_DECAY = 0.7
# A scope judged too small is tried unfiltered again on every this-many searches, so a
# misjudged heavy scope (its filtered query the slow one) is not stuck there. The cost
# for a truly small one is a short unfiltered query before its filtered one.
REPROBE_EVERY = 8
# Bound on the remembered shares, as for the large scopes: forgetting costs one probe.
SHARES_MAX = 10_000


class _Seen:
    """Decayed counts of the rows fetched for a scope and of those that matched it."""

    def __init__(self) -> None:
        self.kept = 0.0
        self.fetched = 0.0
        self.skipped = 0

    @property
    def share(self) -> float:
        return self.kept / self.fetched if self.fetched else 1.0


class Shares:
    """The learnt share of each scope within one collection: how many rows the
    unfiltered search fetches for it, or none (the filtered query)."""

    def __init__(self) -> None:
        self.seen: dict[Pairs, _Seen] = {}
        self.lock = threading.Lock()

    def share(self, pairs: Pairs) -> float | None:
        """The learnt share of ``pairs``; None before any search of it."""
        entry = self.seen.get(pairs)
        return None if entry is None or not entry.fetched else entry.share

    def rows(self, pairs: Pairs, top_k: int, max_rows: int) -> int:
        """Rows to fetch per query for ``top_k`` survivors; 0 for the filtered query."""
        if max_rows <= 0:
            return 0
        learnt = self.share(pairs)
        # Unknown: tried as if the scope were the whole collection.
        share = 1.0 if learnt is None else learnt
        if share < WIDE_SHARE_MIN:
            with self.lock:
                entry = self.seen.get(pairs)
                if entry is not None:
                    entry.skipped += 1
                    if entry.skipped % REPROBE_EVERY:
                        return 0
            share = 1.0
        rows = math.ceil(top_k / share * OVERFETCH_MARGIN) + OVERFETCH_EXTRA
        return rows if rows <= max_rows else 0

    def learn(self, pairs: Pairs, kept: int, fetched: int) -> None:
        """Add one search: ``fetched`` rows, ``kept`` of them matching ``pairs``."""
        with self.lock:
            entry = self.seen.get(pairs)
            if entry is None:
                if len(self.seen) >= SHARES_MAX:
                    self.seen.clear()
                entry = self.seen[pairs] = _Seen()
            entry.kept = entry.kept * SHARE_DECAY + kept
            entry.fetched = entry.fetched * SHARE_DECAY + fetched

    def clear(self) -> None:
        with self.lock:
            self.seen.clear()
