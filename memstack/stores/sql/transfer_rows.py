"""The SQL rows an export carries and an import writes back: every column of the ledger,
of the fact history (served and archived rows), of summaries and of tool results, read
user by user and written verbatim (nothing is extracted or summarised again).

Rows are matched by what identifies them in any deployment: a message by its id, a fact
by ``(msg_id, fact_key)`` (its numeric id is local: an import gives it a new one and
maps the ``supersedes_id`` links onto it, and ``candidate_id`` onto the candidates of
:mod:`~memstack.stores.sql.transfer_candidates`), a summary by ``(session_id, last_msg_id)``,
a tool result by its reference. A row already present is left alone, so importing a
file twice writes nothing the second time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import delete, select, tuple_, union, union_all, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from memstack.core.messages import Message
from memstack.stores.sql import ledger
from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.fact_rows import decode_value, value_text
from memstack.stores.sql.facts import lock_fact_key
from memstack.stores.sql.models import (
    CandidateRow,
    FactArchiveRow,
    FactRow,
    KBDocumentRow,
    MessageRow,
    SummaryRow,
    ToolResultRow,
)

# Ids per IN (...) list: far below the bound-parameter limits of SQLite and PostgreSQL.
BATCH = 400
T = TypeVar("T")


def batches(items: Sequence[T], size: int = BATCH) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class FactData:
    """Every column of one row of the fact history; ``archived_at`` is set for a row of
    the archive (``agent_memory_fact_archive``), None for a served one."""

    id: int
    user_id: str
    session_id: str
    msg_id: str
    fact_type: str
    fact_key: str
    fact_value: Any
    confidence: float
    source: str
    valid_from: datetime
    valid_until: datetime | None
    created_at: datetime
    supersedes_id: int | None
    ended_by_msg_id: str | None
    hit_count: int
    last_hit_at: datetime | None
    archived_at: datetime | None
    # The candidate whose confirmation wrote the row (an id of the same file or
    # deployment); absent from files exported before candidates existed.
    candidate_id: int | None = None


@dataclass(frozen=True)
class SummaryData:
    user_id: str
    session_id: str
    first_msg_id: str
    last_msg_id: str
    message_count: int
    topic: str
    content: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class ToolResultData:
    ref: str
    user_id: str
    session_id: str
    field: str
    content: str
    created_at: datetime


# --- reading ------------------------------------------------------------------------------


async def snapshot(s: AsyncSession) -> None:
    """Make the session's reads one snapshot (REPEATABLE READ on PostgreSQL; a SQLite read
    transaction is one already): a user's messages, facts and summaries then agree with
    each other while workers write. Call it before the session's first query."""
    if s.get_bind().dialect.name == "postgresql":
        await s.connection(execution_options={"isolation_level": "REPEATABLE READ"})


async def user_ids(s: AsyncSession) -> list[str]:
    """Every user with a row in the ledger, the fact history, fact candidates, summaries
    or tool results."""
    tables = (MessageRow, FactRow, FactArchiveRow, CandidateRow, SummaryRow, ToolResultRow)
    rows = await s.scalars(union(*(select(t.user_id) for t in tables)))
    return sorted(set(rows))


async def message_page(
    s: AsyncSession, user_id: str, after: tuple[str, datetime, str] | None, limit: int
) -> list[Message]:
    """The user's messages by session, then in ledger order, after the key ``after``
    (``session_id, created_at, msg_id`` of the last one read)."""
    order = (MessageRow.session_id, MessageRow.created_at, MessageRow.msg_id)
    stmt = select(MessageRow).where(MessageRow.user_id == user_id)
    if after is not None:
        stmt = stmt.where(tuple_(*order) > tuple_(*after))
    rows = await s.scalars(stmt.order_by(*order).limit(limit))
    return [
        Message(
            r.msg_id,
            r.user_id,
            r.session_id,
            r.role,
            r.content,
            r.created_at,
            r.name,
            r.accepted_at,
        )
        for r in rows
    ]


def _fact_data(r: FactRow | FactArchiveRow, value: Any, archived_at: datetime | None) -> FactData:
    return FactData(
        id=r.id,
        user_id=r.user_id,
        session_id=r.session_id,
        msg_id=r.msg_id,
        fact_type=r.fact_type,
        fact_key=r.fact_key,
        fact_value=value,
        confidence=r.confidence,
        source=r.source,
        valid_from=r.valid_from,
        valid_until=r.valid_until,
        created_at=r.created_at,
        supersedes_id=r.supersedes_id,
        ended_by_msg_id=r.ended_by_msg_id,
        hit_count=r.hit_count,
        last_hit_at=r.last_hit_at,
        archived_at=archived_at,
        candidate_id=r.candidate_id,
    )


async def fact_rows(s: AsyncSession, user_id: str) -> tuple[list[FactData], int]:
    """Every row of the user's fact history, served and archived, by id, and how many
    rows were left out because their stored value cannot be read back (too large, too
    deep or not JSON, as fact_rows.decode_value judges; it logs each). Such a value was
    stored before values were checked and no read serves it either; a row superseding
    it then links to nothing."""
    dialect = s.get_bind().dialect.name
    out: list[FactData] = []
    withheld: set[int] = set()
    for table in (FactRow, FactArchiveRow):
        stmt = (
            select(table, value_text(table, dialect).label("value"))
            .where(table.user_id == user_id)
            .options(defer(table.fact_value))
        )
        for row, raw in await s.execute(stmt):
            value, unreadable = decode_value(row.id, raw)
            if unreadable:
                withheld.add(row.id)
                continue
            archived_at = row.archived_at if isinstance(row, FactArchiveRow) else None
            out.append(_fact_data(row, value, archived_at))
    out = [replace(f, supersedes_id=None) if f.supersedes_id in withheld else f for f in out]
    return sorted(out, key=lambda f: f.id), len(withheld)


async def summary_rows(s: AsyncSession, user_id: str) -> list[SummaryData]:
    rows = await s.scalars(
        select(SummaryRow)
        .where(SummaryRow.user_id == user_id)
        .order_by(SummaryRow.created_at, SummaryRow.id)
    )
    return [
        SummaryData(
            r.user_id,
            r.session_id,
            r.first_msg_id,
            r.last_msg_id,
            r.message_count,
            r.topic,
            r.content,
            r.created_at,
        )
        for r in rows
    ]


async def tool_result_rows(s: AsyncSession, user_id: str) -> list[ToolResultData]:
    rows = await s.scalars(
        select(ToolResultRow)
        .where(ToolResultRow.user_id == user_id)
        .order_by(ToolResultRow.created_at, ToolResultRow.id)
    )
    return [
        ToolResultData(r.id, r.user_id, r.session_id, r.field, r.content, r.created_at)
        for r in rows
    ]


# --- who holds an id already --------------------------------------------------------------


async def message_owners(s: AsyncSession, msg_ids: Sequence[str]) -> dict[str, str]:
    """The user of each of these message ids already in the ledger."""
    found: dict[str, str] = {}
    for part in batches(msg_ids):
        rows = await s.execute(
            select(MessageRow.msg_id, MessageRow.user_id).where(MessageRow.msg_id.in_(part))
        )
        found.update({m: u for m, u in rows})
    return found


async def fact_owners(
    s: AsyncSession, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """The user of each ``(msg_id, fact_key)`` already in the fact history."""
    found: dict[tuple[str, str], str] = {}
    for part in batches(keys):
        stmt = union_all(
            *(
                select(t.msg_id, t.fact_key, t.user_id).where(
                    tuple_(t.msg_id, t.fact_key).in_(list(part))
                )
                for t in (FactRow, FactArchiveRow)
            )
        )
        found.update({(m, k): u for m, k, u in await s.execute(stmt)})
    return found


async def summary_owners(
    s: AsyncSession, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """The user of each stored summary ``(session_id, last_msg_id)``."""
    found: dict[tuple[str, str], str] = {}
    for part in batches(keys):
        rows = await s.execute(
            select(SummaryRow.session_id, SummaryRow.last_msg_id, SummaryRow.user_id).where(
                tuple_(SummaryRow.session_id, SummaryRow.last_msg_id).in_(list(part))
            )
        )
        found.update({(sid, last): u for sid, last, u in rows})
    return found


async def tool_result_owners(s: AsyncSession, refs: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in batches(refs):
        rows = await s.execute(
            select(ToolResultRow.id, ToolResultRow.user_id).where(ToolResultRow.id.in_(part))
        )
        found.update({r: u for r, u in rows})
    return found


# --- writing ------------------------------------------------------------------------------


async def insert_messages(s: AsyncSession, messages: Sequence[Message]) -> int:
    """Insert the messages not in the ledger yet (:func:`ledger.insert_messages`);
    returns how many were new."""
    held = await message_owners(s, [m.msg_id for m in messages])
    await ledger.insert_messages(s, messages)
    return sum(m.msg_id not in held for m in messages)


async def insert_summaries(s: AsyncSession, rows: Sequence[SummaryData]) -> int:
    """Insert the summaries not stored yet; returns how many were new."""
    if not rows:
        return 0
    stmt = (
        dialect_insert(s, SummaryRow)
        .values(
            [
                {
                    "user_id": r.user_id,
                    "session_id": r.session_id,
                    "first_msg_id": r.first_msg_id,
                    "last_msg_id": r.last_msg_id,
                    "message_count": r.message_count,
                    "topic": r.topic,
                    "content": r.content,
                    "created_at": r.created_at,
                }
                for r in rows
            ]
        )
        .on_conflict_do_nothing(index_elements=["session_id", "last_msg_id"])
        .returning(SummaryRow.id)
    )
    # Counted from RETURNING: psycopg reports no rowcount for ON CONFLICT DO NOTHING.
    return len((await s.execute(stmt)).all())


async def insert_tool_results(s: AsyncSession, rows: Sequence[ToolResultData]) -> int:
    """Insert the tool results not stored yet; returns how many were new."""
    if not rows:
        return 0
    stmt = (
        dialect_insert(s, ToolResultRow)
        .values(
            [
                {
                    "id": r.ref,
                    "user_id": r.user_id,
                    "session_id": r.session_id,
                    "field": r.field,
                    "content": r.content,
                    "size_bytes": len(r.content.encode("utf-8")),
                    "created_at": r.created_at,
                }
                for r in rows
            ]
        )
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(ToolResultRow.id)
    )
    return len((await s.execute(stmt)).all())


@dataclass(frozen=True)
class _Held:
    id: int
    current: bool  # served and open: the import may end it


async def _held_facts(
    s: AsyncSession, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], _Held]:
    found: dict[tuple[str, str], _Held] = {}
    for part in batches(keys):
        for table in (FactRow, FactArchiveRow):
            rows = await s.execute(
                select(table.msg_id, table.fact_key, table.id, table.valid_until).where(
                    tuple_(table.msg_id, table.fact_key).in_(list(part))
                )
            )
            for m, k, fid, until in rows:
                found[(m, k)] = _Held(fid, table is FactRow and until is None)
    return found


async def _fit_current(s: AsyncSession, r: FactData) -> FactData:
    """A current row of the file against the deployment's current row of its key: what
    was said last stays current, the other ends where it begins (as a late message is
    stored as history by ingest)."""
    await lock_fact_key(s, r.user_id, r.fact_key)
    current = (
        await s.execute(
            select(FactRow.id, FactRow.valid_from).where(
                FactRow.user_id == r.user_id,
                FactRow.fact_key == r.fact_key,
                FactRow.valid_until.is_(None),
            )
        )
    ).first()
    if current is None:
        return r
    if current.valid_from <= r.valid_from:
        await s.execute(
            update(FactRow).where(FactRow.id == current.id).values(valid_until=r.valid_from)
        )
        return r
    return replace(r, valid_until=current.valid_from)


def _columns(r: FactData, supersedes_id: int | None, candidate_id: int | None) -> dict[str, Any]:
    return {
        "user_id": r.user_id,
        "session_id": r.session_id,
        "msg_id": r.msg_id,
        "fact_type": r.fact_type,
        "fact_key": r.fact_key,
        "fact_value": r.fact_value,
        "confidence": r.confidence,
        "source": r.source,
        "valid_from": r.valid_from,
        "valid_until": r.valid_until,
        "created_at": r.created_at,
        "supersedes_id": supersedes_id,
        "ended_by_msg_id": r.ended_by_msg_id,
        "hit_count": r.hit_count,
        "last_hit_at": r.last_hit_at,
        "candidate_id": candidate_id,
    }


async def write_facts(
    s: AsyncSession, rows: Sequence[FactData], candidate_ids: Mapping[int, int]
) -> tuple[int, dict[int, int]]:
    """Write the fact rows of a file verbatim; returns how many were new, and the id here
    of every row (new or found) by its id in the file.

    A row whose ``(msg_id, fact_key)`` is stored already is that row (a current one is
    ended if the file says it ended); a new row gets an id of this deployment, and
    ``supersedes_id`` links are mapped onto those ids, ``candidate_id`` onto
    ``candidate_ids`` (the file's candidates, written first). Archived rows are inserted
    first and moved to the archive, as ``memstack maintain`` moves them, so their ids
    come from the same sequence as every other fact's."""
    held = await _held_facts(s, [(r.msg_id, r.fact_key) for r in rows])
    ids: dict[int, int] = {}
    new: list[FactData] = []
    for r in rows:
        mine = held.get((r.msg_id, r.fact_key))
        if mine is None:
            new.append(r)
            continue
        ids[r.id] = mine.id
        if mine.current and r.valid_until is not None:
            await lock_fact_key(s, r.user_id, r.fact_key)
            await s.execute(
                update(FactRow)
                .where(FactRow.id == mine.id)
                .values(valid_until=r.valid_until, ended_by_msg_id=r.ended_by_msg_id)
            )
    new = [await _fit_current(s, r) if r.valid_until is None else r for r in new]
    new.sort(key=lambda r: (r.archived_at is None, r.id))
    known: dict[int, int | None] = {}  # the link each new row was inserted with
    candidates = {
        r.id: None if r.candidate_id is None else candidate_ids[r.candidate_id] for r in new
    }
    for r in new:
        known[r.id] = None if r.supersedes_id is None else ids.get(r.supersedes_id)
        stmt = dialect_insert(s, FactRow).values(_columns(r, known[r.id], candidates[r.id]))
        ids[r.id] = int((await s.execute(stmt.returning(FactRow.id))).scalar_one())
    for r in new:
        link = None if r.supersedes_id is None else ids[r.supersedes_id]
        if r.archived_at is not None:
            await s.execute(delete(FactRow).where(FactRow.id == ids[r.id]))
            await s.execute(
                dialect_insert(s, FactArchiveRow).values(
                    id=ids[r.id],
                    archived_at=r.archived_at,
                    **_columns(r, link, candidates[r.id]),
                )
            )
        elif link != known[r.id]:
            await s.execute(
                update(FactRow).where(FactRow.id == ids[r.id]).values(supersedes_id=link)
            )
    return len(new), ids


async def kb_namespaces(s: AsyncSession, collection: str) -> list[str]:
    """The namespaces with documents in a knowledge-base registry."""
    rows = await s.scalars(
        select(KBDocumentRow.namespace)
        .where(KBDocumentRow.collection == collection)
        .distinct()
        .order_by(KBDocumentRow.namespace)
    )
    return list(rows)
