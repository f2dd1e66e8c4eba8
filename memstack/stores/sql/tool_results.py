"""Task-state values too large for the Redis hash, kept in SQL under a random reference."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.stores.sql import db
from memstack.stores.sql.models import ToolResultRow


async def save(
    sessions: async_sessionmaker[AsyncSession],
    user_id: str,
    session_id: str,
    field: str,
    content: str,
) -> str:
    """Store ``content`` and return its reference."""
    ref = uuid.uuid4().hex
    async with db.guarded("tool result"), sessions.begin() as s:
        s.add(
            ToolResultRow(
                id=ref,
                user_id=user_id,
                session_id=session_id,
                field=field,
                content=content,
                size_bytes=len(content.encode("utf-8")),
                created_at=datetime.now(UTC),
            )
        )
    return ref


async def load(sessions: async_sessionmaker[AsyncSession], user_id: str, ref: str) -> str | None:
    """The content behind ``ref`` if it belongs to ``user_id``."""
    async with db.guarded("tool result"), sessions() as s:
        row = await s.scalar(
            select(ToolResultRow).where(ToolResultRow.id == ref, ToolResultRow.user_id == user_id)
        )
    return None if row is None else row.content


async def delete_user(s: AsyncSession, user_id: str) -> None:
    await s.execute(delete(ToolResultRow).where(ToolResultRow.user_id == user_id))


async def delete_session(s: AsyncSession, user_id: str, session_id: str) -> int:
    result = await s.execute(
        delete(ToolResultRow).where(
            ToolResultRow.user_id == user_id, ToolResultRow.session_id == session_id
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)
