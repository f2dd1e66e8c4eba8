"""Fact memory: current facts, their history, and the supersede write (seed 002 §3.2).

A changed value never overwrites: the old row gets ``valid_until``, the new row records
``supersedes_id``, both in one transaction. Writers of one (user, key) take a transaction
advisory lock on PostgreSQL, and a partial unique index on
``(user_id, fact_key) WHERE valid_until IS NULL`` makes two current rows impossible even
if they did not; a writer that loses such a race retries and supersedes the winner.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import (
    CompoundSelect,
    Table,
    Text,
    bindparam,
    case,
    delete,
    func,
    null,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from memstack import erasure, metrics
from memstack.extraction.base import Fact
from memstack.extraction.chat import safe_text
from memstack.extraction.checks import DEFAULT_MAX_VALUE_BYTES, fact_problem
from memstack.extraction.vocabulary import depth_within, same_value
from memstack.inputs import MAX_DEPTH
from memstack.ledger import dialect_insert
from memstack.models import FactArchiveRow, FactRow

log = logging.getLogger("memstack.facts")

# What a read hands on. Values written now are at most max_fact_value_bytes and 8
# levels deep; these bounds only keep a value stored before the checks existed (an LLM's
# 20 MB or 500-deep answer) from costing every context() seconds or a RecursionError:
# such a value is read as withheld (None) and left out of current facts.
READ_MAX_VALUE_BYTES = 64 * 1024
READ_MAX_DEPTH = MAX_DEPTH


@dataclass(frozen=True)
class StoredFact:
    id: int
    user_id: str
    session_id: str
    msg_id: str
    key: str
    value: Any
    type: str
    confidence: float
    source: str
    valid_from: datetime
    valid_until: datetime | None
    supersedes_id: int | None
    # The stored value is beyond what a read hands on (READ_MAX_VALUE_BYTES, depth, not
    # JSON): ``value`` is None and the fact is left out of the current facts.
    withheld: bool = False

    @property
    def current(self) -> bool:
        return self.valid_until is None


def _value_text(table: Any, dialect: str) -> ColumnElement[Any]:
    """The value's JSON text, or NULL when it is too large to hand on. On PostgreSQL the
    stored (possibly compressed) size is checked first: it costs nothing, so a 20 MB
    value is never rendered as text, let alone sent."""
    as_text = sql_cast(table.fact_value, Text)
    if dialect == "postgresql":
        return case(
            (func.pg_column_size(table.fact_value) > READ_MAX_VALUE_BYTES, null()),
            (func.octet_length(as_text) > READ_MAX_VALUE_BYTES, null()),
            else_=as_text,
        )
    return case((func.length(as_text) > READ_MAX_VALUE_BYTES, null()), else_=as_text)


_WITHHELD_LOGGED: set[int] = set()


def _decode(fact_id: int, raw: object) -> tuple[Any, bool]:
    """``(value, withheld)`` from the JSON text a read selected; never raises."""
    value: Any = None
    if isinstance(raw, str) and len(raw) <= READ_MAX_VALUE_BYTES:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            raw = None
        else:
            if depth_within(value, READ_MAX_DEPTH):
                return value, False
    if fact_id not in _WITHHELD_LOGGED and len(_WITHHELD_LOGGED) < 10_000:
        _WITHHELD_LOGGED.add(fact_id)
        log.warning(
            "fact %s: stored value withheld (over %d bytes, deeper than %d, or not JSON)",
            fact_id,
            READ_MAX_VALUE_BYTES,
            READ_MAX_DEPTH,
        )
    return None, True


def _stored(row: Any) -> StoredFact:
    """A fact from a result row of :data:`_FACT_COLUMNS` with the value as JSON text."""
    value, withheld = _decode(row.id, row.fact_value)
    return StoredFact(
        id=row.id,
        user_id=row.user_id,
        session_id=row.session_id,
        msg_id=row.msg_id,
        key=row.fact_key,
        value=value,
        type=row.fact_type,
        confidence=row.confidence,
        source=row.source,
        valid_from=row.valid_from,
        valid_until=row.valid_until,
        supersedes_id=row.supersedes_id,
        withheld=withheld,
    )


class Outcome(StrEnum):
    INSERTED = "inserted"  # first value of this key
    SUPERSEDED = "superseded"  # replaced a different current value
    UNCHANGED = "unchanged"  # same value as the current one: nothing written
    DUPLICATE = "duplicate"  # this message's fact was already stored (redelivery)
    HISTORICAL = "historical"  # an older message arrived late: stored as history only
    FORGOTTEN = "forgotten"  # the user was forgotten after the message was accepted
    REFUSED = "refused"  # the key or the value failed the checks: nothing written


async def _write_once(
    s: AsyncSession,
    *,
    user_id: str,
    session_id: str,
    msg_id: str,
    fact: Fact,
    at: datetime,
    accepted_at: datetime | None,
) -> Outcome:
    marks = await erasure.hold_users(s, [user_id])
    if erasure.forgotten(marks[user_id], accepted_at):
        return Outcome.FORGOTTEN
    if await s.scalar(
        select(FactRow.id).where(FactRow.msg_id == msg_id, FactRow.fact_key == fact.key)
    ):
        return Outcome.DUPLICATE
    if s.get_bind().dialect.name == "postgresql":
        # Writers of one (user, key) queue here instead of colliding on the partial
        # unique index and retrying; the lock ends with the transaction.
        await s.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"{user_id}\x1f{fact.key}"},
        )
    current = (
        await s.execute(
            select(
                FactRow.id,
                FactRow.valid_from,
                _value_text(FactRow, s.get_bind().dialect.name).label("fact_value"),
            ).where(
                FactRow.user_id == user_id,
                FactRow.fact_key == fact.key,
                FactRow.valid_until.is_(None),
            )
        )
    ).first()
    row: dict[str, Any] = {
        "user_id": user_id,
        "session_id": session_id,
        "msg_id": msg_id,
        "fact_type": fact.type,
        "fact_key": fact.key,
        "fact_value": fact.value,
        "confidence": fact.confidence,
        "source": fact.source,
        "valid_from": at,
        "valid_until": None,
        "created_at": at,
        "supersedes_id": None,
        "hit_count": 0,
    }
    outcome = Outcome.INSERTED
    if current is not None:
        if current.valid_from > at:
            # A late, older message must not override what the user said after it.
            row["valid_until"] = current.valid_from
            outcome = Outcome.HISTORICAL
        elif _same_as_stored(current.id, current.fact_value, fact.value):
            return Outcome.UNCHANGED
        else:
            await s.execute(
                update(FactRow)
                .where(FactRow.id == current.id, FactRow.valid_until.is_(None))
                .values(valid_until=at)
            )
            row["supersedes_id"] = current.id
            outcome = Outcome.SUPERSEDED
    result = await s.execute(
        dialect_insert(s, FactRow)
        .values(row)
        .on_conflict_do_nothing(index_elements=["msg_id", "fact_key"])
    )
    if not getattr(result, "rowcount", 1):
        raise IntegrityError("fact already stored", None, Exception("duplicate"))
    return outcome


def _same_as_stored(fact_id: int, stored: object, value: Any) -> bool:
    old, withheld = _decode(fact_id, stored)
    return not withheld and same_value(old, value)


async def write_fact(
    sessions: async_sessionmaker[AsyncSession],
    *,
    user_id: str,
    session_id: str,
    msg_id: str,
    fact: Fact,
    at: datetime,
    accepted_at: datetime | None,
    attempts: int = 5,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
) -> Outcome:
    """Store one fact, superseding a different current value, in one transaction.
    ``accepted_at`` is when its message was accepted: nothing is stored if the user was
    forgotten since. A fact whose key is neither canonical nor a safe id, or whose value
    is not plain JSON within ``max_value_bytes`` and 8 levels (NUL and lone surrogates
    included), is refused whichever extractor produced it: logged, counted, not written
    (:data:`Outcome.REFUSED`)."""
    problem = fact_problem(fact.key, fact.value, max_bytes=max_value_bytes)
    if problem is not None:
        field, reason = problem
        metrics.FACTS_REFUSED.labels(field).inc()
        log.warning("fact of %s refused: %s", msg_id, safe_text(reason))
        return Outcome.REFUSED
    for attempt in range(attempts):
        try:
            async with sessions.begin() as s:
                return await _write_once(
                    s,
                    user_id=user_id,
                    session_id=session_id,
                    msg_id=msg_id,
                    fact=fact,
                    at=at,
                    accepted_at=accepted_at,
                )
        except IntegrityError:
            # Another worker inserted the current row (or this very fact) first; the
            # next attempt sees it and supersedes it or reports the duplicate.
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _columns(table: Any, dialect: str) -> list[ColumnElement[Any]]:
    return [
        _value_text(table, dialect).label(c) if c == "fact_value" else getattr(table, c)
        for c in _FACT_COLUMNS
    ]


async def current_facts(s: AsyncSession, user_id: str) -> list[StoredFact]:
    """The user's current facts, most confident first; withheld values left out."""
    rows = await s.execute(
        select(*_columns(FactRow, s.get_bind().dialect.name))
        .where(FactRow.user_id == user_id, FactRow.valid_until.is_(None))
        .order_by(FactRow.confidence.desc(), FactRow.fact_key)
    )
    return [f for f in map(_stored, rows) if not f.withheld]


_FACT_COLUMNS = (
    "id",
    "user_id",
    "session_id",
    "msg_id",
    "fact_key",
    "fact_value",
    "fact_type",
    "confidence",
    "source",
    "valid_from",
    "valid_until",
    "supersedes_id",
)


def _history_statement(dialect: str, by_key: bool) -> CompoundSelect[Any]:
    """Hot and archived rows of one user (and key): archiving moves rows, history must
    not lose them."""
    parts = []
    for table in (FactRow, FactArchiveRow):
        stmt = select(*_columns(table, dialect)).where(table.user_id == bindparam("user_id"))
        if by_key:
            stmt = stmt.where(table.fact_key == bindparam("key"))
        parts.append(stmt)
    return union_all(*parts)


# Built once per dialect, one round trip, no ORM objects: context() reads this on every
# call, and two ORM queries cost more CPU than anything else it sends to PostgreSQL.
_HISTORY: dict[tuple[str, bool], CompoundSelect[Any]] = {}


async def _all_facts(s: AsyncSession, user_id: str, key: str | None = None) -> list[StoredFact]:
    which = (s.get_bind().dialect.name, key is not None)
    if which not in _HISTORY:
        _HISTORY[which] = _history_statement(*which)
    rows = await s.execute(_HISTORY[which], {"user_id": user_id, "key": key})
    facts = [_stored(r) for r in rows]
    return sorted(facts, key=lambda f: (f.key, f.valid_from, f.id))


async def fact_history(s: AsyncSession, user_id: str, key: str | None = None) -> list[StoredFact]:
    return await _all_facts(s, user_id, key)


async def superseded_values(s: AsyncSession, user_id: str) -> dict[str, list[Any]]:
    """Old values per key whose current value differs: the stale-value filter's input."""
    return _superseded(await _all_facts(s, user_id))


async def current_and_superseded(
    s: AsyncSession, user_id: str
) -> tuple[list[StoredFact], dict[str, list[Any]]]:
    """:func:`current_facts` and :func:`superseded_values` from one read of the history
    (context() needs both, and every query is a round trip on its critical path)."""
    rows = await _all_facts(s, user_id)
    current = sorted(
        (r for r in rows if r.valid_until is None and not r.withheld),
        key=lambda f: (-f.confidence, f.key),
    )
    return current, _superseded(rows)


def _superseded(rows: Sequence[StoredFact]) -> dict[str, list[Any]]:
    current = {r.key: r.value for r in rows if r.valid_until is None and not r.withheld}
    stale: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        if (
            r.valid_until is not None
            and not r.withheld
            and r.key in current
            and not same_value(r.value, current[r.key])
        ):
            stale[r.key].append(r.value)
    return dict(stale)


async def record_hits(s: AsyncSession, hits: Mapping[int, tuple[int, datetime]]) -> None:
    """Count that facts reached a context (the archive rule spares hit facts): by fact
    id, how many contexts and the latest one's time."""
    if hits:
        table = cast(Table, FactRow.__table__)
        await s.execute(
            update(table)
            .where(table.c.id == bindparam("fid"))
            .values(
                hit_count=table.c.hit_count + bindparam("n"),
                last_hit_at=bindparam("at"),
            ),
            [{"fid": fid, "n": n, "at": at} for fid, (n, at) in hits.items()],
        )


async def delete_user(s: AsyncSession, user_id: str) -> int:
    await s.execute(delete(FactArchiveRow).where(FactArchiveRow.user_id == user_id))
    result = await s.execute(delete(FactRow).where(FactRow.user_id == user_id))
    return int(getattr(result, "rowcount", 0) or 0)
