"""BM25 over the message ledger, always for one user.

The ledger's ``search_terms`` column holds client-side terms (:func:`lexical_terms`,
jieba for Chinese). A query reads, for each of its terms, the user's postings with the
highest impact (``stores/sql/term_index.py``), at most :data:`POSTINGS_PER_TERM` of
them: a rare term's postings are all read, a common term's only where it weighs most.
The database scores them by Okapi BM25 with the user's own document frequencies and
mean length, sums them per message and returns the best messages: exact BM25 unless a
common term's postings were cut, and then only that term's part of a message outside
its top list is missing. What a query costs depends on its terms, not on how long the
user's history is; the same statement serves PostgreSQL and SQLite.

Every query carries ``user_id``: no path of this module can read another user's rows.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Float,
    String,
    bindparam,
    func,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.core.ids import validate_id
from memstack.stores.sql import term_index
from memstack.stores.sql.models import TERM_MAX_CHARS, MessageRow, TermRow
from memstack.stores.sql.term_index import K1, B

# Postings read per query term. A message outside every term's top list can only hold
# common terms, each of which adds little; a larger figure reads more rows per query.
POSTINGS_PER_TERM = 1000


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


def idf(n_docs: int, df: int) -> float:
    """BM25's inverse document frequency, with the +1 that keeps it above zero."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def bm25(
    weights: Mapping[str, float],
    docs: Sequence[Counter[str]],
    *,
    n_docs: int,
    avgdl: float,
    df: Mapping[str, int],
    lengths: Sequence[int],
) -> list[float]:
    """The same Okapi BM25 in Python, for offline use (``benchmarks/recall_ablation.py``
    scores a whole conversation with it)."""
    idfs = {t: idf(n_docs, df.get(t, 0)) for t in weights}
    avgdl = avgdl or 1.0
    scores = []
    for tf, length in zip(docs, lengths, strict=True):
        norm = K1 * (1.0 - B + B * length / avgdl)
        scores.append(
            sum(
                w * idfs[t] * tf[t] * (K1 + 1.0) / (tf[t] + norm)
                for t, w in weights.items()
                if tf.get(t)
            )
        )
    return scores


@functools.lru_cache(maxsize=64)
def _statement(n_terms: int) -> Any:
    """The ``limit`` messages whose read postings score highest, best first, newest
    first among equals. Term ``i`` (``t{i}``) contributes its top postings by impact,
    scored by BM25 with its weight × idf × (k1 + 1) (``w{i}``) and ``norm_per_term`` =
    k1·b / the user's mean length.

    Made once per number of terms, with every value a parameter: building the
    statement costs more CPU than PostgreSQL takes to run it, and one shape per term
    count is also what SQLAlchemy's compiled cache keys on."""
    user: BindParameter[str] = bindparam("user_id", type_=String)
    norm: ColumnElement[float] = (
        K1 * (1.0 - B) + bindparam("norm_per_term", type_=Float) * TermRow.length
    )
    per_term = [
        select(
            TermRow.msg_id,
            TermRow.created_at,
            (bindparam(f"w{i}", type_=Float) * TermRow.tf / (TermRow.tf + norm)).label("s"),
        )
        .where(TermRow.user_id == user, TermRow.term == bindparam(f"t{i}", type_=String))
        .order_by(TermRow.impact.desc(), TermRow.created_at.desc())
        .limit(POSTINGS_PER_TERM)
        .subquery()
        for i in range(n_terms)
    ]
    parts = union_all(*(select(p.c.msg_id, p.c.created_at, p.c.s) for p in per_term)).subquery()
    score = func.sum(parts.c.s).label("score")
    best = (
        select(parts.c.msg_id, score)
        .group_by(parts.c.msg_id, parts.c.created_at)
        .order_by(score.desc(), parts.c.created_at.desc(), parts.c.msg_id)
        .limit(bindparam("limit"))
        .subquery()
    )
    return (
        select(*_ROW_COLUMNS, best.c.score)
        .join(best, best.c.msg_id == MessageRow.msg_id)
        .where(MessageRow.user_id == user)
        .order_by(best.c.score.desc(), MessageRow.created_at.desc(), MessageRow.msg_id)
    )


def _parameters(
    user_id: str, weights: Mapping[str, float], avgdl: float, limit: int
) -> dict[str, Any]:
    params: dict[str, Any] = {"user_id": user_id, "norm_per_term": K1 * B / avgdl, "limit": limit}
    for i, (term, w) in enumerate(weights.items()):
        params[f"t{i}"], params[f"w{i}"] = term, w * (K1 + 1.0)
    return params


_ROW_COLUMNS = (
    MessageRow.msg_id,
    MessageRow.session_id,
    MessageRow.role,
    MessageRow.content,
    MessageRow.created_at,
)


async def search(
    session: AsyncSession, user_id: str, weights: Mapping[str, float], *, limit: int = 50
) -> list[LexicalHit]:
    """The user's best ``limit`` ledger messages for weighted query terms, by BM25."""
    validate_id("user_id", user_id)
    terms = {t: w for t, w in weights.items() if len(t) <= TERM_MAX_CHARS}
    if not terms or limit <= 0:
        return []
    n_docs, total_terms, df = await term_index.statistics(session, user_id, list(terms))
    present = {t: w * idf(n_docs, df[t]) for t, w in terms.items() if t in df}
    if not present:
        return []
    # What a message holding each query term once would score at the mean length: the
    # measure of how much of the question a hit matches (a term the user never wrote
    # counts at the idf of a term no message holds).
    ideal = sum(w * idf(n_docs, df.get(t, 0)) for t, w in terms.items())
    avgdl = total_terms / n_docs or 1.0
    rows = await session.execute(
        _statement(len(present)), _parameters(user_id, present, avgdl, limit)
    )
    return [
        LexicalHit(
            r.msg_id,
            r.session_id,
            r.role,
            r.content,
            r.created_at,
            r.score,
            min(r.score / ideal, 1.0),
        )
        for r in rows
    ]
