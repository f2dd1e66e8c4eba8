"""The keyword index over the ledger: postings, document frequencies and per-user totals,
kept in step with the messages in the same transaction as the ledger write or delete.

BM25 needs, per query, each term's document frequency and the user's message count
and mean length. Counting them per query costs time that grows with the user's
history; kept here as running totals, a query reads a handful of rows instead.
Every row carries ``user_id``: each user's index and statistics are their own.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import String, bindparam, delete, insert, literal, select, tuple_, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.models import TERM_MAX_CHARS, LexiconRow, TermCountRow, TermRow

# Okapi BM25 constants; the usual values, fine for chat turns of a few lines.
K1 = 1.2
B = 0.75
# The message length (in terms) the stored impacts assume. Impacts only order one
# term's postings, and for equal term frequencies that order (shorter first) is the
# same for any mean length, so a fixed value serves every user.
REFERENCE_LENGTH = 10.0
# Rows per statement, well inside PostgreSQL's 65,535 bound parameters.
ROWS_PER_STATEMENT = 2000


@dataclass(frozen=True)
class Indexed:
    """One ledger message as the index sees it."""

    user_id: str
    msg_id: str
    created_at: datetime
    search_terms: str


def term_frequencies(search_terms: str) -> tuple[Counter[str], int]:
    """The indexable terms of a message with their counts, and its length in terms."""
    terms = search_terms.split()
    return Counter(t for t in terms if len(t) <= TERM_MAX_CHARS), len(terms)


def impact(tf: int, length: int) -> float:
    """BM25's term-frequency factor for ``tf`` occurrences in a message of ``length``
    terms, at :data:`REFERENCE_LENGTH`."""
    return tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / REFERENCE_LENGTH))


async def _add_totals(
    session: AsyncSession, counts: dict[tuple[str, str], int], totals: dict[str, list[int]]
) -> None:
    # An empty parameter list would insert one row of defaults.
    if not totals:
        return
    if counts:
        # Sorted, so that two writers of one user lock the same rows in the same order.
        counted = dialect_insert(session, TermCountRow)
        await session.execute(
            counted.on_conflict_do_update(
                index_elements=["user_id", "term"],
                set_={"docs": TermCountRow.docs + counted.excluded.docs},
            ),
            [{"user_id": u, "term": t, "docs": n} for (u, t), n in sorted(counts.items())],
        )
    summed = dialect_insert(session, LexiconRow)
    await session.execute(
        summed.on_conflict_do_update(
            index_elements=["user_id"],
            set_={
                "docs": LexiconRow.docs + summed.excluded.docs,
                "terms": LexiconRow.terms + summed.excluded.terms,
            },
        ),
        [{"user_id": u, "docs": d, "terms": n} for u, (d, n) in sorted(totals.items())],
    )


async def add(session: AsyncSession, messages: Iterable[Indexed]) -> None:
    """Index messages just written to the ledger (each exactly once: the caller passes
    only rows its insert created)."""
    postings: list[dict[str, object]] = []
    counts: Counter[tuple[str, str]] = Counter()
    totals: dict[str, list[int]] = {}
    for m in messages:
        tf, length = term_frequencies(m.search_terms)
        for term, n in tf.items():
            postings.append(
                {
                    "user_id": m.user_id,
                    "term": term,
                    "msg_id": m.msg_id,
                    "created_at": m.created_at,
                    "tf": n,
                    "length": length,
                    "impact": impact(n, length),
                }
            )
            counts[(m.user_id, term)] += 1
        total = totals.setdefault(m.user_id, [0, 0])
        total[0] += 1
        total[1] += length
    if postings:
        # One statement compiled once, sent in batches by the driver layer.
        await session.execute(insert(TermRow), postings)
    await _add_totals(session, dict(counts), totals)


async def remove(session: AsyncSession, messages: Sequence[Indexed]) -> None:
    """Take deleted ledger messages out of the index and its totals."""
    keys: list[tuple[str, str, str]] = []
    counts: Counter[tuple[str, str]] = Counter()
    totals: dict[str, list[int]] = {}
    for m in messages:
        tf, length = term_frequencies(m.search_terms)
        keys.extend((m.user_id, term, m.msg_id) for term in tf)
        counts.update((m.user_id, term) for term in tf)
        total = totals.setdefault(m.user_id, [0, 0])
        total[0] -= 1
        total[1] -= length
    for start in range(0, len(keys), ROWS_PER_STATEMENT):
        await session.execute(
            delete(TermRow).where(
                tuple_(TermRow.user_id, TermRow.term, TermRow.msg_id).in_(
                    keys[start : start + ROWS_PER_STATEMENT]
                )
            )
        )
    await _add_totals(session, {k: -n for k, n in counts.items()}, totals)
    users = sorted(totals)
    await session.execute(
        delete(TermCountRow).where(TermCountRow.user_id.in_(users), TermCountRow.docs <= 0)
    )
    await session.execute(
        delete(LexiconRow).where(LexiconRow.user_id.in_(users), LexiconRow.docs <= 0)
    )


async def remove_user(session: AsyncSession, user_id: str) -> None:
    """Drop a user's whole index."""
    for table in (TermRow, TermCountRow, LexiconRow):
        await session.execute(delete(table).where(table.user_id == user_id))


@functools.cache
def _statistics_statement() -> Any:
    # Made once: building it cost more of the event loop's CPU than the database takes.
    user = bindparam("user_id", type_=String)
    # The totals come back as the row of the empty term, which no message holds.
    return union_all(
        select(literal("").label("term"), LexiconRow.docs, LexiconRow.terms).where(
            LexiconRow.user_id == user
        ),
        select(TermCountRow.term, TermCountRow.docs, literal(0)).where(
            TermCountRow.user_id == user,
            TermCountRow.term.in_(bindparam("terms", expanding=True)),
        ),
    )


async def statistics(
    session: AsyncSession, user_id: str, terms: Sequence[str]
) -> tuple[int, int, dict[str, int]]:
    """The user's indexed message count, their total terms, and each term's document
    frequency (absent terms left out), in one round trip."""
    rows = await session.execute(
        _statistics_statement(), {"user_id": user_id, "terms": list(terms)}
    )
    docs, total, df = 0, 0, {}
    for row in rows:
        if row.term:
            df[row.term] = int(row.docs)
        else:
            docs, total = int(row.docs), int(row.terms)
    return docs, total, df
