"""The message ledger in SQL: every message exactly as received, written by the worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import CompoundSelect, bindparam, delete, func, literal, select, tuple_, union_all
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from memstack.core.messages import Message
from memstack.stores.sql import term_index
from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.models import MessageRow
from memstack.text.terms import lexical_terms
from memstack.types import SessionOverview as SessionOverview
from memstack.types import UserOverview as UserOverview


def _from_row(row: MessageRow) -> Message:
    return Message(
        row.msg_id,
        row.user_id,
        row.session_id,
        row.role,
        row.content,
        row.created_at,
        row.name,
        row.accepted_at,
    )


def search_terms(m: Message) -> str:
    """The lexical index text: the author's name counts too, so "what did Tim say
    about …" finds Tim's messages even when they never mention him."""
    text = f"{m.name} {m.content}" if m.name else m.content
    return " ".join(lexical_terms(text))


# Rows per INSERT statement: PostgreSQL takes at most 65,535 bound parameters in one
# statement (nine a message here), and SQLite builds of old allow far fewer.
ROWS_PER_INSERT = 1000


async def insert_messages(session: AsyncSession, messages: Sequence[Message]) -> int:
    """Insert, ignoring ids already present (redelivery), and index the new rows for
    keyword search; returns rows actually new. Any number of messages: the rows go in
    statements of :data:`ROWS_PER_INSERT`."""
    new = 0
    for start in range(0, len(messages), ROWS_PER_INSERT):
        part: dict[str, tuple[Message, str]] = {}
        for m in messages[start : start + ROWS_PER_INSERT]:
            part.setdefault(m.msg_id, (m, search_terms(m)))
        rows = [
            {
                "msg_id": m.msg_id,
                "user_id": m.user_id,
                "session_id": m.session_id,
                "role": m.role,
                "content": m.content,
                "created_at": m.created_at,
                "name": m.name,
                "search_terms": terms,
                "accepted_at": m.accepted_at,
            }
            for m, terms in part.values()
        ]
        stmt = (
            dialect_insert(session, MessageRow)
            .on_conflict_do_nothing(index_elements=["msg_id"])
            .returning(MessageRow.msg_id)
        )
        # From RETURNING: psycopg reports no rowcount for ON CONFLICT DO NOTHING, and
        # only the rows written here may enter the index (a redelivery must not count
        # its terms twice).
        written = (await session.scalars(stmt, rows)).all()
        await term_index.add(
            session,
            (
                term_index.Indexed(m.user_id, m.msg_id, m.created_at, terms)
                for m, terms in (part[msg_id] for msg_id in written)
            ),
        )
        new += len(written)
    return new


async def recent_messages(
    session: AsyncSession, user_id: str, session_id: str, limit: int
) -> list[Message]:
    """The session's last ``limit`` messages of ``user_id``, oldest first."""
    rows = (
        await session.scalars(
            select(MessageRow)
            .where(MessageRow.user_id == user_id, MessageRow.session_id == session_id)
            .order_by(MessageRow.created_at.desc(), MessageRow.msg_id.desc())
            .limit(limit)
        )
    ).all()
    return [_from_row(r) for r in reversed(rows)]


@dataclass(frozen=True)
class Slice:
    """Consecutive messages of one session in ledger order, and whether they reach the
    session's first and last message."""

    rows: list[Message]
    from_start: bool
    to_end: bool


def _around_statement() -> CompoundSelect[Any]:
    """Rows of one session before a (time, id) key, newest first, then rows after it,
    oldest first: one round trip, plain columns (no ORM objects), built once."""
    same = (
        MessageRow.user_id == bindparam("user_id"),
        MessageRow.session_id == bindparam("session_id"),
    )
    order = tuple_(MessageRow.created_at, MessageRow.msg_id)
    key = tuple_(bindparam("at", type_=MessageRow.created_at.type), bindparam("msg_id"))
    head = (
        select(*_COLUMNS, literal(0).label("side"))
        .where(*same, order <= key)
        .order_by(MessageRow.created_at.desc(), MessageRow.msg_id.desc())
        .limit(bindparam("before"))
        .subquery()
    )
    tail = (
        select(*_COLUMNS, literal(1).label("side"))
        .where(*same, order > key)
        .order_by(MessageRow.created_at, MessageRow.msg_id)
        .limit(bindparam("after"))
        .subquery()
    )
    return union_all(select(head), select(tail))


_COLUMNS = (
    MessageRow.msg_id,
    MessageRow.user_id,
    MessageRow.session_id,
    MessageRow.role,
    MessageRow.content,
    MessageRow.created_at,
    MessageRow.name,
    MessageRow.accepted_at,
)
_AROUND = _around_statement()


async def around(session: AsyncSession, m: Message, *, before: int, after: int) -> Slice:
    """Up to ``before`` messages of ``m``'s session before it, ``m`` itself (if in the
    ledger), and up to ``after`` messages after it."""
    result = await session.execute(
        _AROUND,
        {
            "user_id": m.user_id,
            "session_id": m.session_id,
            "at": m.created_at,
            "msg_id": m.msg_id,
            "before": before + 1,
            "after": after,
        },
    )
    head: list[Message] = []
    tail: list[Message] = []
    for *fields, side in result:
        (tail if side else head).append(Message(*fields))
    head.sort(key=lambda x: (x.created_at, x.msg_id))
    tail.sort(key=lambda x: (x.created_at, x.msg_id))
    return Slice(head + tail, from_start=len(head) <= before, to_end=len(tail) < after)


async def user_overviews(session: AsyncSession, *, limit: int, offset: int) -> list[UserOverview]:
    """One page of the users with messages, by id."""
    rows = await session.execute(
        select(
            MessageRow.user_id,
            func.count(func.distinct(MessageRow.session_id)),
            func.count(),
            func.max(MessageRow.created_at),
        )
        .group_by(MessageRow.user_id)
        .order_by(MessageRow.user_id)
        .offset(offset)
        .limit(limit)
    )
    return [UserOverview(u, int(ns), int(nm), last) for u, ns, nm, last in rows]


async def session_overviews(session: AsyncSession, user_id: str) -> list[SessionOverview]:
    """The user's sessions, the one begun first first."""
    first = func.min(MessageRow.created_at)
    rows = await session.execute(
        select(MessageRow.session_id, func.count(), first, func.max(MessageRow.created_at))
        .where(MessageRow.user_id == user_id)
        .group_by(MessageRow.session_id)
        .order_by(first, MessageRow.session_id)
    )
    return [SessionOverview(sid, int(n), a, b) for sid, n, a, b in rows]


async def all_sessions(session: AsyncSession) -> list[tuple[str, str]]:
    """Every (user_id, session_id) in the ledger."""
    rows = await session.execute(
        select(MessageRow.user_id, MessageRow.session_id).distinct().order_by(MessageRow.user_id)
    )
    return [(r[0], r[1]) for r in rows]


async def session_page(
    session: AsyncSession, user_id: str, session_id: str, *, offset: int, limit: int
) -> list[Message]:
    """One page of a session's messages in ledger order."""
    rows = await session.scalars(
        select(MessageRow)
        .where(MessageRow.user_id == user_id, MessageRow.session_id == session_id)
        .order_by(MessageRow.created_at, MessageRow.msg_id)
        .offset(offset)
        .limit(limit)
    )
    return [_from_row(r) for r in rows]


async def count_all(session: AsyncSession) -> int:
    return int(await session.scalar(select(func.count()).select_from(MessageRow)) or 0)


async def sessions_of(session: AsyncSession, user_id: str) -> list[str]:
    rows = await session.scalars(
        select(MessageRow.session_id).where(MessageRow.user_id == user_id).distinct()
    )
    return list(rows)


async def count_messages(session: AsyncSession, user_id: str) -> int:
    return int(
        await session.scalar(
            select(func.count()).select_from(MessageRow).where(MessageRow.user_id == user_id)
        )
        or 0
    )


async def delete_user(session: AsyncSession, user_id: str) -> int:
    result = await session.execute(delete(MessageRow).where(MessageRow.user_id == user_id))
    await term_index.remove_user(session, user_id)
    return int(getattr(result, "rowcount", 0) or 0)


async def messages_by_id(
    session: AsyncSession, user_id: str, msg_ids: Sequence[str]
) -> dict[str, Message]:
    """The user's messages among ``msg_ids``, by id (another user's are never read)."""
    if not msg_ids:
        return {}
    rows = await session.scalars(
        select(MessageRow).where(
            MessageRow.user_id == user_id, MessageRow.msg_id.in_(list(msg_ids))
        )
    )
    return {r.msg_id: _from_row(r) for r in rows}


async def existing(session: AsyncSession, msg_ids: Sequence[str]) -> set[str]:
    """Which of ``msg_ids`` the ledger holds."""
    ids = sorted(set(msg_ids))
    found: set[str] = set()
    for i in range(0, len(ids), 1000):  # bounded statements for a user with many facts
        rows = await session.scalars(
            select(MessageRow.msg_id).where(MessageRow.msg_id.in_(ids[i : i + 1000]))
        )
        found.update(rows)
    return found


async def _delete(session: AsyncSession, *where: ColumnElement[bool]) -> int:
    """Delete ledger rows and take them out of the keyword index; returns the count."""
    deleted = (
        await session.execute(
            delete(MessageRow)
            .where(*where)
            .returning(
                MessageRow.user_id,
                MessageRow.msg_id,
                MessageRow.created_at,
                MessageRow.search_terms,
            )
        )
    ).all()
    await term_index.remove(session, [term_index.Indexed(*row) for row in deleted])
    return len(deleted)


async def delete_message(session: AsyncSession, user_id: str, msg_id: str) -> int:
    return await _delete(session, MessageRow.user_id == user_id, MessageRow.msg_id == msg_id)


async def delete_session(session: AsyncSession, user_id: str, session_id: str) -> int:
    return await _delete(
        session, MessageRow.user_id == user_id, MessageRow.session_id == session_id
    )


async def users_silent_since(session: AsyncSession, cutoff: datetime) -> list[str]:
    """Users whose newest message is older than ``cutoff``."""
    rows = await session.execute(
        select(MessageRow.user_id)
        .group_by(MessageRow.user_id)
        .having(func.max(MessageRow.created_at) < cutoff)
    )
    return [r[0] for r in rows]
