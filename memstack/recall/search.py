"""``search()``: the read path's ranked messages for a query, without assembly.

The same channels (the dense searches, BM25 over the ledger), the same ledger rows and
the same fusion, reranking included, as ``context()``; then, instead of filters,
budgets and rendering, the best messages in a time range as they are stored. Nothing is
left out for being in a window, near-duplicate or outdated: a search lists what memory
holds. A message in the range but beyond the pool of candidates each channel offers is
not found; the pool widens when a range is given.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime

from memstack.core.errors import StoreUnavailable
from memstack.recall.gather import _Gathered, guarded, query_rewrites, read_lexical, search_vectors
from memstack.recall.pipeline import MIN_POOL, Recall
from memstack.recall.ranking import Candidate
from memstack.recall.request import Request, make_request
from memstack.stores.sql import ledger
from memstack.types import SearchHit as SearchHit

# make_request() checks a budget and names a session; a search has neither. The budget
# holds any query within max_message_bytes, and no window of the session is read.
_BUDGET = 10_000_000
_SESSION = "search"
# Candidates per channel when a time range is given: the range is applied to the
# ranked pool, so a narrow one needs a deeper pool to fill a page.
RANGE_POOL = 200


def _in_range(c: Candidate, since: float | None, until: float | None) -> bool:
    if c.content is None or c.created_at is None:
        return False  # no ledger row: deleted since the vector store was written
    return (since is None or c.created_at >= since) and (until is None or c.created_at <= until)


async def _gather(recall: Recall, g: _Gathered, user_id: str, query: str, pool: int) -> Request:
    """The channels' hits into ``g``, as context() reads them (the same rewrites and
    queries); returns the request, with its rewrite."""
    s = recall.settings
    timeout = s.store_timeout_s
    req = make_request(
        s, user_id, _SESSION, query, budget_tokens=_BUDGET, now=None, locale=None, system=""
    )
    queries, rewrite = await query_rewrites(
        g, req, recall._llm, neighbours=s.word_neighbours, timeout_s=timeout
    )
    req = replace(req, rewrite=rewrite)
    dense = search_vectors(g, recall.stores, user_id, queries, pool)
    lexical = read_lexical(g, recall.reads, user_id, rewrite, pool)
    await asyncio.gather(
        guarded(g, "vector", dense, None, timeout), guarded(g, "lexical", lexical, None, timeout)
    )
    if "vector" in g.degraded and "lexical" in g.degraded:
        # Both the vector store and the database failed: no one layer to name.
        raise StoreUnavailable(f"search: no channel answered: {g.degraded}", layer="store")
    return req


async def search(
    recall: Recall,
    user_id: str,
    query: str,
    *,
    limit: int,
    since: datetime | None,
    until: datetime | None,
) -> list[SearchHit]:
    """The user's best ``limit`` messages for ``query`` created within ``since`` …
    ``until`` (inclusive; either may be None). Inputs are checked by the caller, but
    the query, which ``context()``'s checks read."""
    s = recall.settings
    pool = max(MIN_POOL, s.vector_top_k, 3 * limit)
    if since is not None or until is not None:
        pool = max(pool, RANGE_POOL)
    g = _Gathered()
    req = await _gather(recall, g, user_id, query, pool)
    ranked, _dropped, _rows = await recall.ranked(g, req, set())
    low = None if since is None else since.timestamp()
    high = None if until is None else until.timestamp()
    top = [c for c in ranked if _in_range(c, low, high)][:limit]
    async with recall.reads() as session:
        stored = await ledger.messages_by_id(session, user_id, [c.msg_id for c in top])
    return [
        SearchHit(
            msg_id=c.msg_id,
            session_id=m.session_id,
            role=m.role,
            text=m.content,
            created_at=m.created_at,
            score=c.score,
            relevance=c.relevance,
            recency=c.recency,
            name=m.name,
            ranks=dict(c.ranks),
        )
        for c in top
        if (m := stored.get(c.msg_id)) is not None
    ]
