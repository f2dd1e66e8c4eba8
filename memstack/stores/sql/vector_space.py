"""The embedder a deployment's vectors were written with (``memory_vector_space``)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.errors import StoreError
from memstack.stores.sql.models import MessageRow, VectorSpaceRow


async def recorded(s: AsyncSession, deployment: str) -> str | None:
    row = await s.get(VectorSpaceRow, deployment)
    return row.embedder if row is not None else None


async def record(s: AsyncSession, deployment: str, embedder: str) -> None:
    """Set the deployment's embedder (after a re-embed, or when it is first chosen)."""
    row = await s.get(VectorSpaceRow, deployment)
    now = datetime.now(UTC)
    if row is None:
        s.add(VectorSpaceRow(deployment=deployment, embedder=embedder, recorded_at=now))
    else:
        row.embedder, row.recorded_at = embedder, now


async def lookup(s: AsyncSession, deployment: str, *, new: str, legacy: str) -> tuple[str, bool]:
    """The deployment's embedder and whether it is recorded. With none recorded yet:
    ``legacy`` when the database already holds messages (written before embedders were
    recorded), else ``new``. Writes nothing."""
    name = await recorded(s, deployment)
    if name is not None:
        return name, True
    held = await s.scalar(select(MessageRow.msg_id).limit(1)) is not None
    return (legacy if held else new), False


async def settle(
    sessions: async_sessionmaker[AsyncSession], deployment: str, *, new: str, legacy: str
) -> str:
    """:func:`lookup`, recording the embedder when none was, unless another process
    recorded one first."""
    for _ in range(2):
        try:
            async with sessions() as s, s.begin():
                name, recorded = await lookup(s, deployment, new=new, legacy=legacy)
                if not recorded:
                    await record(s, deployment, name)
            return name
        except IntegrityError:
            continue  # another process recorded it between the read and the write: read it
    raise StoreError(f"no embedder could be recorded for {deployment!r}", layer="database")
