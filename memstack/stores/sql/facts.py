"""Fact memory: current facts, their history, and the supersede write.

A changed value never overwrites: the old row gets ``valid_until``, the new row records
``supersedes_id``, both in one transaction. A retraction (the user withdrew a value with
nothing in its place) only ends the current row and names the message that did it
(``ended_by_msg_id``). :func:`facts_as_of` reads what was current at any moment, from the
hot and the archived rows alike. Writers of one (user, key) take a transaction
advisory lock on PostgreSQL, and a partial unique index on
``(user_id, fact_key) WHERE valid_until IS NULL`` makes two current rows impossible even
if they did not; a writer that loses such a race retries and supersedes the winner.
"""

from __future__ import annotations

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
    bindparam,
    delete,
    func,
    or_,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core import metrics
from memstack.core.facts.checks import DEFAULT_MAX_VALUE_BYTES, fact_problem
from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import same_value
from memstack.core.inputs import safe_text
from memstack.stores.sql import erasure
from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.fact_rows import StoredFact as StoredFact  # callers import it from here
from memstack.stores.sql.fact_rows import decode_value, fact_columns, stored_fact, value_text
from memstack.stores.sql.models import CandidateRow, FactArchiveRow, FactRow, UTCDateTime

log = logging.getLogger("memstack.stores.sql.facts")


class Outcome(StrEnum):
    INSERTED = "inserted"  # first value of this key
    SUPERSEDED = "superseded"  # replaced a different current value
    UNCHANGED = "unchanged"  # same value as the current one: nothing written
    DUPLICATE = "duplicate"  # this message's fact was already stored (redelivery)
    HISTORICAL = "historical"  # an older message arrived late: stored as history only
    FORGOTTEN = "forgotten"  # the user was forgotten after the message was accepted
    REFUSED = "refused"  # the key or the value failed the checks: nothing written
    RETRACTED = "retracted"  # the current value ended, with nothing in its place
    CANDIDATE = "candidate"  # too little confidence: kept as a candidate, not served
    # A retraction with no current value to end, or whose message is older than the
    # current value (a late withdrawal must not end what the user said after it).
    NOTHING_TO_RETRACT = "nothing_to_retract"


@dataclass(frozen=True)
class Source:
    """The message a fact comes from, as the erasure guard reads it."""

    msg_id: str
    user_id: str
    session_id: str
    accepted_at: datetime | None


async def hold(s: AsyncSession, source: Source, key: str) -> bool:
    """Take the user's erasure guard and, on PostgreSQL, the (user, key) lock; False when
    the user, the session or the message was erased after the message was accepted."""
    user_id = source.user_id
    if await erasure.hold_messages(s, [source]):
        return False
    await lock_fact_key(s, user_id, key)
    return True


async def lock_fact_key(s: AsyncSession, user_id: str, key: str) -> None:
    """On PostgreSQL, the (user, key) lock every writer of the key's rows takes (until
    the transaction ends); SQLite's writers hold the database lock already."""
    if s.get_bind().dialect.name == "postgresql":
        # Writers of one (user, key) queue here instead of colliding on the partial
        # unique index and retrying.
        await s.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"{user_id}\x1f{key}"},
        )


async def current_row(s: AsyncSession, user_id: str, key: str) -> Any:
    """The current row of the key (id, valid_from, value as JSON text), or None."""
    return (
        await s.execute(
            select(
                FactRow.id,
                FactRow.valid_from,
                value_text(FactRow, s.get_bind().dialect.name).label("fact_value"),
            ).where(
                FactRow.user_id == user_id,
                FactRow.fact_key == key,
                FactRow.valid_until.is_(None),
            )
        )
    ).first()


async def _retraction_after(s: AsyncSession, user_id: str, key: str, at: datetime) -> Any:
    """The first retraction of the key after ``at`` (``valid_until``, ``ended_by_msg_id``),
    archived or not, or None."""
    parts = [
        select(t.valid_until, t.ended_by_msg_id).where(
            t.user_id == user_id,
            t.fact_key == key,
            t.ended_by_msg_id.is_not(None),
            t.valid_until > at,
        )
        for t in (FactRow, FactArchiveRow)
    ]
    ends = union_all(*parts).subquery()
    return (await s.execute(select(ends).order_by(ends.c.valid_until).limit(1))).first()


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
    if not await hold(s, Source(msg_id, user_id, session_id, accepted_at), fact.key):
        return Outcome.FORGOTTEN
    if await s.scalar(
        select(FactRow.id).where(FactRow.msg_id == msg_id, FactRow.fact_key == fact.key)
    ):
        return Outcome.DUPLICATE
    outcome = await insert_fact(
        s, Source(msg_id, user_id, session_id, accepted_at), fact, at, candidate_id=None
    )
    if outcome is not Outcome.HISTORICAL:
        await settle_candidates(s, user_id, fact.key, at)
    return outcome


async def settle_candidates(s: AsyncSession, user_id: str, key: str, at: datetime) -> None:
    """A statement of ``key`` at ``at`` makes the key's candidates said before it moot:
    still pending, nobody would confirm them now."""
    await s.execute(
        update(CandidateRow)
        .where(
            CandidateRow.user_id == user_id,
            CandidateRow.fact_key == key,
            CandidateRow.status == "pending",
            CandidateRow.said_at <= at,
        )
        .values(status="superseded", decided_at=at)
    )


async def insert_fact(
    s: AsyncSession, source: Source, fact: Fact, at: datetime, *, candidate_id: int | None
) -> Outcome:
    """Insert ``fact`` said at ``at``, superseding the current value (or, said before
    it, as history only); the caller holds the key's lock."""
    user_id, msg_id = source.user_id, source.msg_id
    current = await current_row(s, user_id, fact.key)
    row: dict[str, Any] = {
        "user_id": user_id,
        "session_id": source.session_id,
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
        "ended_by_msg_id": None,
        "hit_count": 0,
        "candidate_id": candidate_id,
    }
    outcome = Outcome.INSERTED
    if current is not None and current.valid_from <= at:
        if same_as_stored(current.id, current.fact_value, fact.value):
            return Outcome.UNCHANGED
        await s.execute(
            update(FactRow)
            .where(FactRow.id == current.id, FactRow.valid_until.is_(None))
            .values(valid_until=at)
        )
        row["supersedes_id"] = current.id
        outcome = Outcome.SUPERSEDED
    else:
        # A late, older message must not override what the user said after it, a
        # withdrawal included: it is history, ending where the next of those begins.
        ends = [(current.valid_from, None)] if current is not None else []
        retraction = await _retraction_after(s, user_id, fact.key, at)
        if retraction is not None:
            ends.append((retraction.valid_until, retraction.ended_by_msg_id))
        if ends:
            row["valid_until"], row["ended_by_msg_id"] = min(ends, key=lambda e: e[0])
            outcome = Outcome.HISTORICAL
    result = await s.execute(
        dialect_insert(s, FactRow)
        .values(row)
        .on_conflict_do_nothing(index_elements=["msg_id", "fact_key"])
    )
    if not getattr(result, "rowcount", 1):
        raise IntegrityError("fact already stored", None, Exception("duplicate"))
    return outcome


async def _retract_once(
    s: AsyncSession,
    *,
    user_id: str,
    session_id: str,
    msg_id: str,
    key: str,
    at: datetime,
    accepted_at: datetime | None,
) -> Outcome:
    if not await hold(s, Source(msg_id, user_id, session_id, accepted_at), key):
        return Outcome.FORGOTTEN
    # A retraction writes no row of its own: the row it ended (hot or archived) is its
    # record, and a redelivered one finds it there.
    parts = [
        select(t.id).where(t.user_id == user_id, t.fact_key == key, t.ended_by_msg_id == msg_id)
        for t in (FactRow, FactArchiveRow)
    ]
    if (await s.execute(union_all(*parts).limit(1))).first() is not None:
        return Outcome.DUPLICATE
    current = await current_row(s, user_id, key)
    if current is None or current.valid_from > at:
        return Outcome.NOTHING_TO_RETRACT
    await s.execute(
        update(FactRow)
        .where(FactRow.id == current.id, FactRow.valid_until.is_(None))
        .values(valid_until=at, ended_by_msg_id=msg_id)
    )
    await settle_candidates(s, user_id, key, at)
    return Outcome.RETRACTED


def same_as_stored(fact_id: int, stored: object, value: Any) -> bool:
    old, withheld = decode_value(fact_id, stored)
    return not withheld and same_value(old, value)


def refused(fact: Fact, msg_id: str, max_value_bytes: int) -> bool:
    """Whether the fact fails the checks every writer applies (logged and counted)."""
    value = None if fact.retracts else fact.value
    problem = fact_problem(fact.key, value, max_bytes=max_value_bytes)
    if problem is None:
        return False
    field, reason = problem
    metrics.FACTS_REFUSED.labels(field).inc()
    log.warning("fact of %s refused: %s", msg_id, safe_text(reason))
    return True


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
    """Store one fact, superseding a different current value, in one transaction; or,
    for a retraction (``fact.retracts``), end the current value with nothing in its place.
    ``accepted_at`` is when its message was accepted: nothing is stored if the user was
    forgotten since. A fact whose key is neither canonical nor a safe id, or whose value
    is not plain JSON within ``max_value_bytes`` and 8 levels (NUL and lone surrogates
    included), is refused whichever extractor produced it: logged, counted, not written
    (:data:`Outcome.REFUSED`). A retraction's value is not stored, so only its key is
    checked."""
    if refused(fact, msg_id, max_value_bytes):
        return Outcome.REFUSED
    for attempt in range(attempts):
        try:
            async with sessions.begin() as s:
                if fact.retracts:
                    return await _retract_once(
                        s,
                        user_id=user_id,
                        session_id=session_id,
                        msg_id=msg_id,
                        key=fact.key,
                        at=at,
                        accepted_at=accepted_at,
                    )
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


async def current_facts(s: AsyncSession, user_id: str) -> list[StoredFact]:
    """The user's current facts, most confident first; withheld values left out."""
    rows = await s.execute(
        select(*fact_columns(FactRow, s.get_bind().dialect.name))
        .where(FactRow.user_id == user_id, FactRow.valid_until.is_(None))
        .order_by(FactRow.confidence.desc(), FactRow.fact_key)
    )
    return [f for f in map(stored_fact, rows) if not f.withheld]


def _history_statement(dialect: str, by_key: bool) -> CompoundSelect[Any]:
    """Hot and archived rows of one user (and key): archiving moves rows, history must
    not lose them."""
    parts = []
    for table in (FactRow, FactArchiveRow):
        stmt = select(*fact_columns(table, dialect)).where(table.user_id == bindparam("user_id"))
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
    facts = [stored_fact(r) for r in rows]
    return sorted(facts, key=lambda f: (f.key, f.valid_from, f.id))


async def fact_history(s: AsyncSession, user_id: str, key: str | None = None) -> list[StoredFact]:
    return await _all_facts(s, user_id, key)


def _as_of_statement(dialect: str) -> CompoundSelect[Any]:
    """Rows of one user, hot or archived, whose validity holds the moment ``as_of``."""
    at = bindparam("as_of", type_=UTCDateTime())
    parts = [
        select(*fact_columns(table, dialect)).where(
            table.user_id == bindparam("user_id"),
            table.valid_from <= at,
            or_(table.valid_until.is_(None), table.valid_until > at),
        )
        for table in (FactRow, FactArchiveRow)
    ]
    return union_all(*parts)


_AS_OF: dict[str, CompoundSelect[Any]] = {}


async def facts_as_of(s: AsyncSession, user_id: str, as_of: datetime) -> list[StoredFact]:
    """What was current at ``as_of`` (``valid_from <= as_of < valid_until``, an open end
    for a current row), most confident first; withheld values left out.

    A message that arrived late is stored as history overlapping the value it came
    before; of the rows of one key valid at that moment, the one said last counts, as it
    did when the late message was written."""
    dialect = s.get_bind().dialect.name
    if dialect not in _AS_OF:
        _AS_OF[dialect] = _as_of_statement(dialect)
    rows = await s.execute(_AS_OF[dialect], {"user_id": user_id, "as_of": as_of})
    latest: dict[str, StoredFact] = {}
    for f in map(stored_fact, rows):
        seen = latest.get(f.key)
        if seen is None or (f.valid_from, f.id) > (seen.valid_from, seen.id):
            latest[f.key] = f
    shown = [f for f in latest.values() if not f.withheld]
    return sorted(shown, key=lambda f: (-f.confidence, f.key))


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


async def find(
    s: AsyncSession, user_id: str, key: str, *, msg_id: str | None = None, current: bool = False
) -> StoredFact | None:
    """The user's row of ``key`` written for ``msg_id``, or ended by it (a retraction), or
    (``current``) the current one; hot rows only."""
    stmt = select(*fact_columns(FactRow, s.get_bind().dialect.name)).where(
        FactRow.user_id == user_id, FactRow.fact_key == key
    )
    if msg_id is not None:
        stmt = stmt.where(or_(FactRow.msg_id == msg_id, FactRow.ended_by_msg_id == msg_id))
    if current:
        stmt = stmt.where(FactRow.valid_until.is_(None))
    row = (await s.execute(stmt.limit(1))).first()
    return None if row is None else stored_fact(row)


async def count_from(
    s: AsyncSession, user_id: str, *, session_id: str | None = None, msg_id: str | None = None
) -> int:
    """How many of the user's facts, hot or archived, came from a session or a message."""
    total = 0
    for t in (FactRow, FactArchiveRow):
        stmt = select(func.count()).select_from(t).where(t.user_id == user_id)
        if session_id is not None:
            stmt = stmt.where(t.session_id == session_id)
        if msg_id is not None:
            stmt = stmt.where(t.msg_id == msg_id)
        total += int(await s.scalar(stmt) or 0)
    return total


async def delete_user(s: AsyncSession, user_id: str) -> int:
    await s.execute(delete(FactArchiveRow).where(FactArchiveRow.user_id == user_id))
    result = await s.execute(delete(FactRow).where(FactRow.user_id == user_id))
    return int(getattr(result, "rowcount", 0) or 0)
