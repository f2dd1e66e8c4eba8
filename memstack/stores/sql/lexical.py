"""BM25 over the message ledger, always for one user.

The ledger's ``search_terms`` column holds client-side terms (:func:`lexical_terms`,
jieba for Chinese), so PostgreSQL's ``'simple'`` configuration indexes Chinese as well as
English. PostgreSQL selects the candidate rows through the GIN index on
``to_tsvector('simple', search_terms)``; the BM25 arithmetic happens here, because
``ts_rank`` has no inverse document frequency and ranks a common word as high as a rare
one. On SQLite (the embedded default) the user's rows are scored in Python.

Every query carries ``user_id``: no path of this module can read another user's rows.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.core.ids import validate_id
from memstack.stores.sql.models import MessageRow

_TSQUERY_TERM = re.compile(r"^\w+$")

# Okapi BM25 constants; the usual values, fine for chat turns of a few lines.
K1 = 1.2
B = 0.75
# Candidate rows read per query: a term that occurs everywhere would otherwise drag
# the user's whole history out of the database. The newest rows win the cut.
MAX_CANDIDATES = 3000
# Corpus statistics (row count, mean length) change slowly; recomputing them on every
# query would scan all the user's rows.
STATS_TTL_S = 30.0


@dataclass(frozen=True)
class LexicalHit:
    msg_id: str
    session_id: str
    role: str
    content: str
    created_at: datetime
    score: float
    # The score over what a message holding every query term once would score (0-1):
    # how much of the question the message matches, comparable across queries.
    share: float = 1.0


@dataclass(frozen=True)
class _Doc:
    msg_id: str
    session_id: str
    role: str
    content: str
    created_at: datetime
    terms: Counter[str]
    length: int


def bm25(
    weights: Mapping[str, float],
    docs: Sequence[Counter[str]],
    *,
    n_docs: int,
    avgdl: float,
    df: Mapping[str, int],
    lengths: Sequence[int],
) -> list[float]:
    """Okapi BM25 of each doc for weighted query terms (idf with the +1 that keeps it > 0)."""
    idf = {t: math.log(1.0 + (n_docs - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)) for t in weights}
    avgdl = avgdl or 1.0
    scores = []
    for tf, length in zip(docs, lengths, strict=True):
        s = 0.0
        norm = K1 * (1.0 - B + B * length / avgdl)
        for term, w in weights.items():
            f = tf.get(term, 0)
            if f:
                s += w * idf[term] * f * (K1 + 1.0) / (f + norm)
        scores.append(s)
    return scores


def _rank(
    docs: list[_Doc], weights: Mapping[str, float], n_docs: int, avgdl: float, limit: int
) -> list[LexicalHit]:
    df: Counter[str] = Counter()
    for d in docs:
        df.update(t for t in weights if t in d.terms)
    n_docs = max(n_docs, len(docs))
    scores = bm25(
        weights,
        [d.terms for d in docs],
        n_docs=n_docs,
        avgdl=avgdl,
        df=df,
        lengths=[d.length for d in docs],
    )
    # A message holding each term once, at the average length: sum of weight x idf.
    [ideal] = bm25(weights, [Counter(list(weights))], n_docs=n_docs, avgdl=1.0, df=df, lengths=[1])
    ranked = sorted(
        ((s, d) for s, d in zip(scores, docs, strict=True) if s > 0),
        key=lambda p: (-p[0], -p[1].created_at.timestamp(), p[1].msg_id),
    )
    return [
        LexicalHit(d.msg_id, d.session_id, d.role, d.content, d.created_at, s, min(s / ideal, 1.0))
        for s, d in ranked[:limit]
    ]


@dataclass
class _StatsCache:
    ttl_s: float = STATS_TTL_S
    entries: dict[str, tuple[float, int, float]] = field(default_factory=dict)

    def get(self, user_id: str) -> tuple[int, float] | None:
        hit = self.entries.get(user_id)
        if hit is None or time.monotonic() - hit[0] > self.ttl_s:
            return None
        return hit[1], hit[2]

    def put(self, user_id: str, n: int, avgdl: float) -> None:
        if len(self.entries) > 10000:
            self.entries.clear()
        self.entries[user_id] = (time.monotonic(), n, avgdl)


_stats = _StatsCache()


def _tsquery(terms: Iterable[str]) -> str:
    safe = [t for t in terms if _TSQUERY_TERM.match(t)]
    return " | ".join(f"'{t}'" for t in safe)


def _doc(row: Any) -> _Doc:
    terms = row.search_terms.split() if row.search_terms else []
    return _Doc(
        row.msg_id,
        row.session_id,
        row.role,
        row.content,
        row.created_at,
        Counter(terms),
        len(terms),
    )


async def _pg_stats(session: AsyncSession, user_id: str) -> tuple[int, float]:
    cached = _stats.get(user_id)
    if cached is not None:
        return cached
    row = (
        await session.execute(
            text(
                "SELECT count(*) AS n, coalesce(avg(array_length("
                "string_to_array(nullif(search_terms, ''), ' '), 1)), 0) AS avgdl "
                "FROM memory_message WHERE user_id = :u"
            ),
            {"u": user_id},
        )
    ).one()
    n, avgdl = int(row.n), float(row.avgdl)
    _stats.put(user_id, n, avgdl)
    return n, avgdl


_ROW_COLUMNS = (
    MessageRow.msg_id,
    MessageRow.session_id,
    MessageRow.role,
    MessageRow.content,
    MessageRow.created_at,
    MessageRow.search_terms,
)
# Built once: building a statement costs more CPU per call than running this one.
# PostgreSQL: the newest MAX_CANDIDATES of the user's messages matching the query, found
# by the full-text index. SQLite: all of the user's messages, scored in Python.
_PG_MATCHES = (
    select(*_ROW_COLUMNS)
    .where(
        MessageRow.user_id == bindparam("user_id"),
        text("to_tsvector('simple', search_terms) @@ to_tsquery('simple', :q)"),
    )
    .order_by(MessageRow.created_at.desc())
    .limit(MAX_CANDIDATES)
)
_ALL_ROWS = (
    select(*_ROW_COLUMNS)
    .where(MessageRow.user_id == bindparam("user_id"))
    .order_by(MessageRow.created_at.desc())
)


async def search(
    session: AsyncSession, user_id: str, weights: Mapping[str, float], *, limit: int = 50
) -> list[LexicalHit]:
    """The user's best ``limit`` ledger messages for weighted query terms, by BM25."""
    validate_id("user_id", user_id)
    if not weights or limit <= 0:
        return []
    if session.get_bind().dialect.name == "postgresql":
        query = _tsquery(weights)
        if not query:
            return []
        n_docs, avgdl = await _pg_stats(session, user_id)
        rows = (await session.execute(_PG_MATCHES, {"user_id": user_id, "q": query})).all()
        docs = [_doc(r) for r in rows]
    else:
        rows = (await session.execute(_ALL_ROWS, {"user_id": user_id})).all()
        all_docs = [_doc(r) for r in rows]
        n_docs = len(all_docs)
        avgdl = sum(d.length for d in all_docs) / n_docs if n_docs else 0.0
        docs = [d for d in all_docs if any(t in d.terms for t in weights)]
    return _rank(docs, weights, n_docs, avgdl, limit)
