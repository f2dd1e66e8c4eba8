"""Ledger rows of the candidates, and the exchange units of ids-only vector hits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.stores.sql import exchange_rows
from memstack.stores.sql.exchange_rows import LedgerRow


async def read_rows(
    reads: async_sessionmaker[AsyncSession],
    user_id: str,
    msg_ids: Sequence[str],
    heads: Sequence[str],
) -> tuple[dict[str, LedgerRow], dict[str, tuple[str, ...]]]:
    """Ledger rows of the candidates, each with the id of the message before it, and
    the exchange unit (message ids) of each of ``heads``, whose followers' rows are
    added. ``heads`` must be among ``msg_ids``."""
    if not msg_ids:
        return {}, {}
    async with reads() as s:
        rows, following = await exchange_rows.read(s, user_id, msg_ids, heads)
    return rows, _units(rows, following, heads)


def _units(
    rows: dict[str, LedgerRow], following: dict[str, list[LedgerRow]], heads: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """Each head's unit; a follower's row joins ``rows``, unless the follower is itself
    a candidate already there."""
    units: dict[str, tuple[str, ...]] = {}
    for head in heads:
        first = rows.get(head)
        if first is None:
            continue
        members = [first]
        for x in sorted(following.get(head, ()), key=lambda x: (x.created_at, x.msg_id)):
            # Each follower answers the message just before it in the session.
            members.append(rows.setdefault(x.msg_id, replace(x, prev_id=members[-1].msg_id)))
        units[head] = tuple(m.msg_id for m in members)
    return units
