"""Moving facts out of the served table into the archive, history kept."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, insert, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.stores.sql.models import FactArchiveRow, FactRow

_FACT_COLUMNS = [c.name for c in FactRow.__table__.columns]


def _archivable(unused_before: datetime) -> ColumnElement[bool]:
    return or_(
        FactRow.valid_until.is_not(None),
        (FactRow.created_at < unused_before) & (FactRow.hit_count == 0),
    )


async def archive(s: AsyncSession, *, now: datetime, unused_before: datetime, dry_run: bool) -> int:
    """Move superseded facts, and facts created before ``unused_before`` that no context
    ever used, to the archive; returns how many (only counts them on a dry run). An
    archived current fact gets ``valid_until = now``: it is no longer served, and its
    history says when that began."""
    cond = _archivable(unused_before)
    n = int(await s.scalar(select(func.count()).select_from(FactRow).where(cond)) or 0)
    if dry_run or n == 0:
        return n
    cols = [getattr(FactRow, c) for c in _FACT_COLUMNS if c != "valid_until"]
    await s.execute(
        insert(FactArchiveRow).from_select(
            [*[c for c in _FACT_COLUMNS if c != "valid_until"], "valid_until", "archived_at"],
            select(
                *cols,
                func.coalesce(FactRow.valid_until, literal(now, FactRow.valid_until.type)),
                literal(now, FactArchiveRow.archived_at.type),
            ).where(cond),
        )
    )
    await s.execute(delete(FactRow).where(cond))
    return n
