"""Fact candidates: values read with too little confidence to be served as the user's.

A candidate is stored with its message and waits (``pending``) until someone confirms
it, which writes it as a fact through the same supersede as any other, or rejects it;
a newer statement of its key makes it moot (``superseded``, see
:func:`memstack.stores.sql.facts.settle_candidates`). Decisions only change a row's
status and ``decided_at``, so the review stays auditable and
:func:`candidates` can say what was pending at any past moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.facts.fact import Fact
from memstack.core.ids import by_hand_id
from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.fact_rows import decode_value, fact_columns, stored_fact, value_text
from memstack.stores.sql.facts import (
    Outcome,
    Source,
    current_row,
    hold,
    insert_fact,
    lock_fact_key,
    refused,
    same_as_stored,
    settle_candidates,
)
from memstack.stores.sql.models import CandidateRow, FactRow
from memstack.types import StoredCandidate as StoredCandidate

PENDING, CONFIRMED, REJECTED, SUPERSEDED = "pending", "confirmed", "rejected", "superseded"
STATUSES = (PENDING, CONFIRMED, REJECTED, SUPERSEDED)


_COLUMNS = (
    "id",
    "user_id",
    "session_id",
    "msg_id",
    "fact_key",
    "fact_type",
    "confidence",
    "source",
    "said_at",
    "status",
    "decided_at",
    "fact_id",
)


def _select(dialect: str) -> Any:
    return select(
        *(getattr(CandidateRow, c) for c in _COLUMNS),
        value_text(CandidateRow, dialect).label("fact_value"),
    )


def _candidate(row: Any) -> StoredCandidate:
    value, _ = decode_value(row.id, row.fact_value)
    return StoredCandidate(
        id=row.id,
        user_id=row.user_id,
        session_id=row.session_id,
        msg_id=row.msg_id,
        key=row.fact_key,
        value=value,
        type=row.fact_type,
        confidence=row.confidence,
        source=row.source,
        said_at=row.said_at,
        status=row.status,
        decided_at=row.decided_at,
        fact_id=row.fact_id,
    )


async def write_candidate(
    sessions: async_sessionmaker[AsyncSession],
    source: Source,
    fact: Fact,
    at: datetime,
    *,
    max_value_bytes: int,
) -> Outcome:
    """Keep ``fact`` (said at ``at``) as a pending candidate of the user's. A value equal
    to the current one adds nothing (``UNCHANGED``); one said before the current value
    arrived late and is moot at once (stored ``superseded``); the key's older pending
    candidates are superseded by it. A candidate that replaces the current value (another
    text, an amount, a list it drops items of) puts that value in doubt: it ends, with the
    candidate's message as what ended it, and :func:`reject` brings it back. One that
    only adds to a list leaves the list as it is."""
    if fact.retracts or refused(fact, source.msg_id, max_value_bytes):
        return Outcome.REFUSED
    async with sessions.begin() as s:
        if not await hold(s, source, fact.key):
            return Outcome.FORGOTTEN
        if await s.scalar(
            select(CandidateRow.id).where(
                CandidateRow.msg_id == source.msg_id, CandidateRow.fact_key == fact.key
            )
        ):
            return Outcome.DUPLICATE  # a redelivery: nothing again
        current = await current_row(s, source.user_id, fact.key)
        if current is not None and current.valid_from <= at:
            if same_as_stored(current.id, current.fact_value, fact.value):
                return Outcome.UNCHANGED
            if _replaces(current.id, current.fact_value, fact.value):
                await s.execute(
                    update(FactRow)
                    .where(FactRow.id == current.id, FactRow.valid_until.is_(None))
                    .values(valid_until=at, ended_by_msg_id=source.msg_id)
                )
        late = current is not None and current.valid_from > at
        await settle_candidates(s, source.user_id, fact.key, at)
        await s.execute(
            dialect_insert(s, CandidateRow).values(
                user_id=source.user_id,
                session_id=source.session_id,
                msg_id=source.msg_id,
                fact_type=fact.type,
                fact_key=fact.key,
                fact_value=fact.value,
                confidence=fact.confidence,
                source=fact.source,
                said_at=at,
                status=SUPERSEDED if late else PENDING,
                decided_at=current.valid_from if late and current is not None else None,
            )
        )
    return Outcome.CANDIDATE


def _replaces(fact_id: int, stored: object, value: Any) -> bool:
    """Whether ``value`` replaces the stored value rather than adding to it: a list that
    keeps every stored item only adds."""
    old, withheld = decode_value(fact_id, stored)
    if withheld:
        return False
    if isinstance(old, list) and isinstance(value, list):
        kept = {str(v).casefold() for v in value}
        return not all(str(o).casefold() in kept for o in old)
    return True


async def candidates(
    s: AsyncSession,
    user_id: str,
    *,
    statuses: Sequence[str] = (PENDING,),
    as_of: datetime | None = None,
    key: str | None = None,
) -> list[StoredCandidate]:
    """The user's candidates in ``statuses``, newest first. With ``as_of``: those pending
    at that moment (said by then, decided after it or not yet), whatever they are now."""
    stmt = _select(s.get_bind().dialect.name).where(CandidateRow.user_id == user_id)
    if as_of is not None:
        stmt = stmt.where(
            CandidateRow.said_at <= as_of,
            or_(CandidateRow.decided_at.is_(None), CandidateRow.decided_at > as_of),
        )
    else:
        stmt = stmt.where(CandidateRow.status.in_(list(statuses)))
    if key is not None:
        stmt = stmt.where(CandidateRow.fact_key == key)
    rows = await s.execute(stmt.order_by(CandidateRow.said_at.desc(), CandidateRow.id.desc()))
    return [_candidate(r) for r in rows]


async def get(
    s: AsyncSession, user_id: str, candidate_id: int, *, for_update: bool = False
) -> StoredCandidate | None:
    """The user's candidate ``candidate_id`` (another user's is None); ``for_update``
    locks its row on PostgreSQL until the transaction ends, so two decisions on it
    queue."""
    stmt = _select(s.get_bind().dialect.name).where(
        CandidateRow.user_id == user_id, CandidateRow.id == candidate_id
    )
    if for_update and s.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(of=CandidateRow)
    row = (await s.execute(stmt)).first()
    return None if row is None else _candidate(row)


async def confirm(s: AsyncSession, c: StoredCandidate, fact: Fact, now: datetime) -> int | None:
    """Make pending candidate ``c`` a fact (``fact``, its value as a fact) stated
    ``now``, superseding the current value as a correction by hand does, and record the
    decision; the caller holds the user's row. Returns the id of the key's current fact
    (the new row, or the current one when it already held the value)."""
    await lock_fact_key(s, c.user_id, c.key)
    current = await current_row(s, c.user_id, c.key)
    # Said by hand now, it must still come after the value it corrects (a message may
    # be dated up to a day ahead).
    at = max(now, current.valid_from) if current is not None else now
    existing = await s.scalar(
        select(FactRow.id).where(FactRow.msg_id == c.msg_id, FactRow.fact_key == c.key)
    )
    if existing is None:
        source = Source(c.msg_id, c.user_id, c.session_id, None)
        await insert_fact(s, source, fact, at, candidate_id=c.id)
    await settle_candidates(s, c.user_id, c.key, at)
    current = await current_row(s, c.user_id, c.key)
    fact_id = current.id if current is not None else existing
    await _decide(s, c.id, CONFIRMED, at, fact_id=fact_id)
    return fact_id


async def reject(s: AsyncSession, c: StoredCandidate, at: datetime) -> None:
    """Record that pending candidate ``c`` is wrong. The value it put in doubt (ended by
    its message) is current again, as a new row from ``at`` superseding the ended one, if
    nothing has taken the key's place since; the caller holds the user's row."""
    await lock_fact_key(s, c.user_id, c.key)
    ended = (
        await s.execute(
            select(*fact_columns(FactRow, s.get_bind().dialect.name)).where(
                FactRow.user_id == c.user_id,
                FactRow.fact_key == c.key,
                FactRow.ended_by_msg_id == c.msg_id,
            )
        )
    ).first()
    if ended is not None and await current_row(s, c.user_id, c.key) is None:
        doubted = stored_fact(ended)
        if not doubted.withheld:
            await s.execute(
                dialect_insert(s, FactRow).values(
                    user_id=c.user_id,
                    session_id="",  # restored by hand: no session says it
                    msg_id=by_hand_id(),
                    fact_type=doubted.type,
                    fact_key=c.key,
                    fact_value=doubted.value,
                    confidence=doubted.confidence,
                    source=doubted.source,
                    valid_from=at,
                    valid_until=None,
                    created_at=at,
                    supersedes_id=doubted.id,
                    ended_by_msg_id=None,
                    hit_count=0,
                    candidate_id=None,
                )
            )
    await _decide(s, c.id, REJECTED, at)


async def _decide(
    s: AsyncSession, candidate_id: int, status: str, at: datetime, *, fact_id: int | None = None
) -> None:
    await s.execute(
        update(CandidateRow)
        .where(CandidateRow.id == candidate_id)
        .values(status=status, decided_at=at, fact_id=fact_id)
    )


async def delete_for(
    s: AsyncSession,
    user_id: str,
    *,
    session_id: str | None = None,
    msg_ids: Sequence[str] | None = None,
) -> int:
    """Delete the user's candidates, or those of one session or of some messages: they
    are the user's words, and erasure leaves none of them."""
    stmt = delete(CandidateRow).where(CandidateRow.user_id == user_id)
    if session_id is not None:
        stmt = stmt.where(CandidateRow.session_id == session_id)
    if msg_ids is not None:
        stmt = stmt.where(CandidateRow.msg_id.in_(list(msg_ids)))
    result = await s.execute(stmt)
    return int(getattr(result, "rowcount", 0) or 0)
