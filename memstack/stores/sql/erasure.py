"""Erasure marks, and the locks that make an erasure final and ingest orderly.

``forget_user`` writes a mark on the user's row (``memory_user.forgotten_before``, the
Redis time at which it began) under an exclusive lock. Every ingest transaction reads
that row under a shared lock and drops what was accepted before the mark, so a batch
in flight when the erasure began either finishes before it (and the erasure deletes
what it wrote) or sees the mark (and writes nothing); a message accepted after it is a
new memory. On SQLite, whose locks are per database, the first statement of each such
transaction is a write, which holds the database's write lock until it ends.

``forget_session`` and ``delete_message`` erase less than a user and mark it in
``memory_erasure`` (one row per session or message). They lock the user's row
exclusively while they mark and delete, like ``forget_user``, and every ingest
transaction reads the marks of its messages once it holds that row
(:func:`hold_messages`).

Exchange units of one session are derived under a session lock (a transaction-level
advisory lock on PostgreSQL), so two workers never interleave the read of a unit's
ledger rows and the write of its chunks.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from sqlalchemy import delete, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.models import ErasureRow, UserRow

Marks = dict[str, datetime | None]


def _postgresql(s: AsyncSession) -> bool:
    return s.get_bind().dialect.name == "postgresql"


async def ensure_users(s: AsyncSession, user_ids: Iterable[str], at: datetime) -> None:
    """Give each user its row (the ledger is about to hold their messages)."""
    rows = [{"user_id": u, "created_at": at} for u in sorted(set(user_ids))]
    if rows:
        insert = dialect_insert(s, UserRow).values(rows)
        await s.execute(insert.on_conflict_do_nothing(index_elements=["user_id"]))


async def hold_users(s: AsyncSession, user_ids: Iterable[str]) -> Marks:
    """Lock the users' rows against an erasure until the transaction ends; their marks
    (None: never forgotten; a user without a row has no mark either)."""
    users = sorted(set(user_ids))
    if not users:
        return {}
    stmt = select(UserRow.user_id, UserRow.forgotten_before).where(UserRow.user_id.in_(users))
    if _postgresql(s):
        stmt = stmt.order_by(UserRow.user_id).with_for_update(read=True)
    else:
        # A write first: it takes SQLite's database lock for the rest of the transaction.
        await s.execute(
            update(UserRow).where(UserRow.user_id.in_(users)).values(user_id=UserRow.user_id)
        )
    marks: Marks = dict.fromkeys(users)
    for user_id, mark in await s.execute(stmt):
        marks[user_id] = mark
    return marks


def forgotten(mark: datetime | None, accepted_at: datetime | None) -> bool:
    """Whether a message accepted at ``accepted_at`` falls under the erasure ``mark``.
    A message of unknown acceptance (ingested before it was recorded) is older than
    any mark."""
    return mark is not None and (accepted_at is None or accepted_at <= mark)


async def mark_forgotten(s: AsyncSession, user_id: str, before: datetime) -> None:
    """Record that everything ``user_id`` had accepted before ``before`` is erased; waits
    for the ingest transactions holding the user (exclusive row lock)."""
    stmt = (
        dialect_insert(s, UserRow)
        .values(user_id=user_id, created_at=before, forgotten_before=before)
        .on_conflict_do_update(
            index_elements=["user_id"],
            # The names the user went by are personal data too.
            set_={"forgotten_before": before, "display_name": None, "aliases": None},
        )
    )
    await s.execute(stmt)


SESSION = "session"
MESSAGE = "message"


class Accepted(Protocol):
    """A message as an erasure sees it (a :class:`~memstack.core.messages.Message` is one)."""

    @property
    def msg_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def accepted_at(self) -> datetime | None: ...


async def hold_messages(s: AsyncSession, messages: Iterable[Accepted]) -> set[str]:
    """:func:`hold_users` for the messages' users; returns the ids of those an erasure
    covers: their user's, their session's or their own, made after they were accepted."""
    msgs = list(messages)
    users = await hold_users(s, {m.user_id for m in msgs})
    targets = {m.session_id for m in msgs} | {m.msg_id for m in msgs}
    marks: dict[tuple[str, str, str], datetime] = {}
    if msgs:
        # A statement of its own, after the lock: one that waited for the lock would
        # still read the table as it was when it began, without a mark made meanwhile.
        rows = await s.execute(
            select(
                ErasureRow.user_id, ErasureRow.scope, ErasureRow.target, ErasureRow.erased_before
            )
            .where(ErasureRow.user_id.in_(list(users)))
            .where(ErasureRow.target.in_(targets))
        )
        marks = {(u, scope, target): mark for u, scope, target, mark in rows}
    return {
        m.msg_id
        for m in msgs
        if forgotten(users.get(m.user_id), m.accepted_at)
        or forgotten(marks.get((m.user_id, SESSION, m.session_id)), m.accepted_at)
        or forgotten(marks.get((m.user_id, MESSAGE, m.msg_id)), m.accepted_at)
    }


async def mark_erased(
    s: AsyncSession, user_id: str, scope: str, target: str, before: datetime
) -> None:
    """Record that what was accepted before ``before`` of ``target`` (a session or a
    message of ``user_id``, as ``scope`` says) is erased. Takes the user's row first,
    exclusively (made if missing), so the erasure waits for the ingest transactions
    holding the user and every later one reads the mark."""
    lock = (
        dialect_insert(s, UserRow)
        .values(user_id=user_id, created_at=before, forgotten_before=None)
        .on_conflict_do_update(
            index_elements=["user_id"], set_={"forgotten_before": UserRow.forgotten_before}
        )
    )
    await s.execute(lock)
    mark = (
        dialect_insert(s, ErasureRow)
        .values(user_id=user_id, scope=scope, target=target, erased_before=before)
        .on_conflict_do_update(
            index_elements=["user_id", "scope", "target"], set_={"erased_before": before}
        )
    )
    await s.execute(mark)


async def drop_marks(s: AsyncSession, user_id: str) -> None:
    """Remove the session and message marks of a user being forgotten: the user's own
    mark covers all they covered."""
    await s.execute(delete(ErasureRow).where(ErasureRow.user_id == user_id))


async def lock_sessions(s: AsyncSession, sessions: Iterable[tuple[str, str]]) -> None:
    """Serialise the derivation of these sessions' exchange units until the transaction
    ends. On SQLite :func:`hold_users` already holds the database lock."""
    if not _postgresql(s):
        return
    for user_id, session_id in sorted(set(sessions)):
        await s.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 1))"),
            {"k": f"units\x1f{user_id}\x1f{session_id}"},
        )
