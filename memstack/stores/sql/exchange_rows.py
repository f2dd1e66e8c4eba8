"""Ledger rows of recall's candidates, each with the id of the message before it, and
the followers of exchange-unit heads: one statement per dialect, built once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Select,
    String,
    and_,
    any_,
    bindparam,
    case,
    func,
    null,
    select,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from memstack.stores.sql.models import MessageRow
from memstack.text.chunking import UNIT_LOOKBACK


@dataclass(frozen=True)
class LedgerRow:
    """A candidate's ledger row, with the id of the message before it in its session."""

    msg_id: str
    role: str
    content: str
    created_at: float
    prev_id: str | None
    name: str | None


def _among(column: Any, name: str, postgresql: bool) -> Any:
    # One array parameter on PostgreSQL: the same SQL text whatever the number of ids,
    # which psycopg parses once (it parses an IN list anew for each length, at a CPU
    # cost per call). SQLite has no arrays.
    if postgresql:
        return column == any_(bindparam(name, type_=ARRAY(String)))
    return column.in_(bindparam(name, expanding=True))


def _prev_id() -> Any:
    """The id of the message before ``MessageRow`` in its session."""
    prev = aliased(MessageRow)
    return (
        select(prev.msg_id)
        .where(
            prev.user_id == MessageRow.user_id,
            prev.session_id == MessageRow.session_id,
            # A row comparison, not the equivalent OR: PostgreSQL turns only this form
            # into one backward step of ix_message_session_order.
            tuple_(prev.created_at, prev.msg_id) < tuple_(MessageRow.created_at, MessageRow.msg_id),
        )
        .order_by(prev.created_at.desc(), prev.msg_id.desc())
        .limit(1)
        .correlate(MessageRow)
        .scalar_subquery()
    )


def _followers_postgresql(head: Any, nxt: Any, after_head: Any, of_heads: Any) -> Select[Any]:
    columns = (nxt.msg_id, nxt.role, nxt.content, nxt.created_at, nxt.name)
    # A few forward steps of ix_message_session_order per head.
    next_few = (
        select(*columns)
        .where(after_head)
        .order_by(nxt.created_at, nxt.msg_id)
        .limit(UNIT_LOOKBACK)
        .correlate(head)
        .subquery("next_few")
    )
    counted = select(
        next_few,
        func.sum(case((next_few.c.role == "user", 1), else_=0))
        .over(order_by=(next_few.c.created_at, next_few.c.msg_id))
        .label("users"),
    ).subquery("counted")
    later = (
        select(*(counted.c[c.key] for c in columns)).where(counted.c.users == 0).lateral("later")
    )
    return (
        select(*later.c, null().label("prev_id"), head.msg_id.label("head_id"))
        .select_from(head)
        .join(later, true())
        .where(of_heads, head.role == "user")
    )


def _followers_sqlite(head: Any, nxt: Any, after_head: Any, of_heads: Any) -> Select[Any]:
    # SQLite has no LATERAL: number each head's later messages instead.
    columns = (nxt.msg_id, nxt.role, nxt.content, nxt.created_at, nxt.name)
    order = (nxt.created_at, nxt.msg_id)
    users = func.sum(case((nxt.role == "user", 1), else_=0))
    numbered = (
        select(
            *columns,
            head.msg_id.label("head_id"),
            func.row_number().over(partition_by=head.msg_id, order_by=order).label("n"),
            users.over(partition_by=head.msg_id, order_by=order).label("users"),
        )
        .select_from(head)
        .join(nxt, after_head)
        .where(of_heads, head.role == "user")
        .subquery()
    )
    return select(
        *(numbered.c[c.key] for c in columns),
        null().label("prev_id"),
        numbered.c.head_id,
    ).where(numbered.c.n <= UNIT_LOOKBACK, numbered.c.users == 0)


def rows_statement(postgresql: bool) -> CompoundSelect[Any]:
    """Rows ``ids`` of the user, each with the id of the message before it, then (with
    ``head_id`` set) the next :data:`UNIT_LOOKBACK` messages after each of ``heads`` in
    its session: the replies that may share a head's exchange unit."""
    rows = select(
        MessageRow.msg_id,
        MessageRow.role,
        MessageRow.content,
        MessageRow.created_at,
        MessageRow.name,
        _prev_id().label("prev_id"),
        null().label("head_id"),
    ).where(
        MessageRow.user_id == bindparam("user_id"), _among(MessageRow.msg_id, "ids", postgresql)
    )
    head, nxt = aliased(MessageRow), aliased(MessageRow)
    after_head = and_(
        nxt.user_id == head.user_id,
        nxt.session_id == head.session_id,
        tuple_(nxt.created_at, nxt.msg_id) > tuple_(head.created_at, head.msg_id),
    )
    of_heads = and_(head.user_id == bindparam("user_id"), _among(head.msg_id, "heads", postgresql))
    # A reply joins the unit of the user turn it answers (ingest.dialogue_records): a
    # head's unit is the head, if a user turn, and the replies after it up to the next
    # user turn, at most UNIT_LOOKBACK of them. Counting the user turns seen so far
    # keeps only those replies.
    followers = _followers_postgresql if postgresql else _followers_sqlite
    return union_all(rows, followers(head, nxt, after_head, of_heads))


# Candidate ledger rows and the followers of unit heads. Built once: building the
# statement costs more CPU than PostgreSQL spends running it.
ROWS = {True: rows_statement(True), False: rows_statement(False)}


async def read(
    session: AsyncSession, user_id: str, msg_ids: Sequence[str], heads: Sequence[str]
) -> tuple[dict[str, LedgerRow], dict[str, list[LedgerRow]]]:
    """The rows of ``msg_ids``, and the rows following each of ``heads`` by head."""
    stmt = ROWS[session.get_bind().dialect.name == "postgresql"]
    result = await session.execute(
        stmt, {"user_id": user_id, "ids": list(msg_ids), "heads": list(heads)}
    )
    rows: dict[str, LedgerRow] = {}
    following: dict[str, list[LedgerRow]] = {}
    for r in result.all():
        row = LedgerRow(r.msg_id, r.role, r.content, r.created_at.timestamp(), r.prev_id, r.name)
        if r.head_id is None:
            rows[r.msg_id] = row
        else:
            following.setdefault(r.head_id, []).append(row)
    return rows, following
