"""The names each user speaks under (``memory_user.display_name`` and ``aliases``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.core.identity import UserIdentity
from memstack.stores.sql.models import UserRow


def _identity(user_id: str, display_name: str | None, aliases: Any) -> UserIdentity:
    names = tuple(a for a in aliases if isinstance(a, str)) if isinstance(aliases, list) else ()
    return UserIdentity(user_id, display_name, names)


async def read(s: AsyncSession, user_ids: Iterable[str]) -> dict[str, UserIdentity]:
    """The identities of those of ``user_ids`` that have a row (a user without one has
    had nothing stored yet)."""
    users = sorted(set(user_ids))
    if not users:
        return {}
    rows = await s.execute(
        select(UserRow.user_id, UserRow.display_name, UserRow.aliases).where(
            UserRow.user_id.in_(users)
        )
    )
    return {u: _identity(u, name, aliases) for u, name, aliases in rows}


async def write(s: AsyncSession, identity: UserIdentity) -> bool:
    """Replace the user's names; False when the user has no row (nothing written)."""
    result = await s.execute(
        update(UserRow)
        .where(UserRow.user_id == identity.user_id)
        .values(display_name=identity.display_name, aliases=list(identity.aliases) or None)
    )
    return bool(getattr(result, "rowcount", 0))
