"""Session summaries in SQL: one row per summarised window, keyed by its last message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from memstack.core.messages import Message
from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.models import MessageRow, SummaryRow


@dataclass(frozen=True)
class StoredSummary:
    user_id: str
    session_id: str
    first_msg_id: str
    last_msg_id: str
    message_count: int
    created_at: datetime
    # The time of the last message it covers (its own creation time if that is gone).
    last_at: datetime
    content: dict[str, Any]


async def exists(s: AsyncSession, session_id: str, last_msg_id: str) -> bool:
    found = await s.scalar(
        select(SummaryRow.id).where(
            SummaryRow.session_id == session_id, SummaryRow.last_msg_id == last_msg_id
        )
    )
    return found is not None


async def insert(s: AsyncSession, messages: Sequence[Message], content: dict[str, Any]) -> bool:
    """Store the summary of ``messages`` (one session, oldest first) unless one of them
    is no longer in the ledger: its user or session was forgotten, or it was deleted,
    while the summary was being made (it may quote the message)."""
    first, last = messages[0], messages[-1]
    ids = {m.msg_id for m in messages}
    held = await s.scalar(
        select(func.count()).select_from(MessageRow).where(MessageRow.msg_id.in_(sorted(ids)))
    )
    if held != len(ids):
        return False
    stmt = (
        dialect_insert(s, SummaryRow)
        .values(
            user_id=last.user_id,
            session_id=last.session_id,
            first_msg_id=first.msg_id,
            last_msg_id=last.msg_id,
            message_count=len(messages),
            topic=str(content.get("topic", ""))[:64],
            content=content,
            created_at=datetime.now(UTC),
        )
        .on_conflict_do_nothing(index_elements=["session_id", "last_msg_id"])
    )
    await s.execute(stmt)
    return True


async def stored(
    s: AsyncSession, user_id: str | None = None, session_id: str | None = None
) -> list[StoredSummary]:
    """The summaries of a user (of one session), oldest first; every one without a user."""
    q = select(SummaryRow, MessageRow.created_at.label("last_at")).outerjoin(
        MessageRow, MessageRow.msg_id == SummaryRow.last_msg_id
    )
    if user_id is not None:
        q = q.where(SummaryRow.user_id == user_id)
    if session_id is not None:
        q = q.where(SummaryRow.session_id == session_id)
    rows = (await s.execute(q.order_by(SummaryRow.created_at, SummaryRow.id))).all()
    return [
        StoredSummary(
            r.user_id,
            r.session_id,
            r.first_msg_id,
            r.last_msg_id,
            r.message_count,
            r.created_at,
            last_at if last_at is not None else r.created_at,
            r.content,
        )
        for r, last_at in rows
    ]


async def delete_user(s: AsyncSession, user_id: str) -> None:
    await s.execute(delete(SummaryRow).where(SummaryRow.user_id == user_id))


async def delete_session(s: AsyncSession, user_id: str, session_id: str) -> int:
    result = await s.execute(
        delete(SummaryRow).where(SummaryRow.user_id == user_id, SummaryRow.session_id == session_id)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def delete_covering(s: AsyncSession, m: Message) -> list[str]:
    """Delete the summaries of ``m``'s session whose messages include ``m`` (an
    extractive summary quotes the user's sentences); returns their last message ids. A
    summary whose first or last message is gone cannot be placed, so it goes too."""
    first, last = aliased(MessageRow), aliased(MessageRow)
    rows = await s.execute(
        select(
            SummaryRow.id,
            SummaryRow.last_msg_id,
            first.created_at,
            first.msg_id,
            last.created_at,
            last.msg_id,
        )
        .outerjoin(first, first.msg_id == SummaryRow.first_msg_id)
        .outerjoin(last, last.msg_id == SummaryRow.last_msg_id)
        .where(SummaryRow.user_id == m.user_id, SummaryRow.session_id == m.session_id)
    )
    key = (m.created_at, m.msg_id)
    doomed = {
        sid: last_id
        for sid, last_id, a_at, a_id, b_at, b_id in rows
        if a_at is None or b_at is None or (a_at, a_id) <= key <= (b_at, b_id)
    }
    if doomed:
        await s.execute(delete(SummaryRow).where(SummaryRow.id.in_(list(doomed))))
    return list(doomed.values())
