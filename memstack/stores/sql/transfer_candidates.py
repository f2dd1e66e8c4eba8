"""The rows of a user's review that an export carries and an import writes back: fact
candidates (every status, with their decisions) and the names the user speaks under.

A candidate is matched by ``(msg_id, fact_key)``, as a fact is; its numeric id is local,
so an import gives it a new one and maps the links between candidates and facts (a
confirmed candidate's ``fact_id``, a fact's ``candidate_id``) onto the ids written here.
A candidate already present is left alone, so importing a file twice writes nothing the
second time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from memstack.core.identity import UserIdentity
from memstack.stores.sql import identity as identities
from memstack.stores.sql.db import dialect_insert
from memstack.stores.sql.fact_rows import decode_value, value_text
from memstack.stores.sql.models import CandidateRow, UserRow
from memstack.stores.sql.transfer_rows import FactData, batches


@dataclass(frozen=True)
class CandidateData:
    """Every column of one fact candidate; ``fact_id`` names the fact a confirmed one
    became (an id of the same file or deployment as ``id``)."""

    id: int
    user_id: str
    session_id: str
    msg_id: str
    fact_type: str
    fact_key: str
    fact_value: Any
    confidence: float
    source: str
    said_at: datetime
    status: str
    decided_at: datetime | None
    fact_id: int | None


# --- reading ------------------------------------------------------------------------------


async def candidate_rows(s: AsyncSession, user_id: str) -> tuple[list[CandidateData], int]:
    """The user's candidates by id, and how many were left out because their stored
    value cannot be read back (as :func:`transfer_rows.fact_rows` judges a fact's)."""
    stmt = (
        select(CandidateRow, value_text(CandidateRow, s.get_bind().dialect.name).label("value"))
        .where(CandidateRow.user_id == user_id)
        .options(defer(CandidateRow.fact_value))
        .order_by(CandidateRow.id)
    )
    out: list[CandidateData] = []
    withheld = 0
    for r, raw in await s.execute(stmt):
        value, unreadable = decode_value(r.id, raw)
        if unreadable:
            withheld += 1
            continue
        out.append(
            CandidateData(
                id=r.id,
                user_id=r.user_id,
                session_id=r.session_id,
                msg_id=r.msg_id,
                fact_type=r.fact_type,
                fact_key=r.fact_key,
                fact_value=value,
                confidence=r.confidence,
                source=r.source,
                said_at=r.said_at,
                status=r.status,
                decided_at=r.decided_at,
                fact_id=r.fact_id,
            )
        )
    return out, withheld


def tie(
    facts: Sequence[FactData], candidates: Sequence[CandidateData]
) -> tuple[list[FactData], list[CandidateData]]:
    """The rows with every link between them kept that names a row among them. A link
    to a row left out (its message deleted with its candidate, a value withheld) would
    name nothing in the file, which an import refuses; it names nothing here either."""
    fact_ids = {f.id for f in facts}
    candidate_ids = {c.id for c in candidates}
    return (
        [
            replace(f, candidate_id=None)
            if f.candidate_id is not None and f.candidate_id not in candidate_ids
            else f
            for f in facts
        ],
        [
            replace(c, fact_id=None) if c.fact_id is not None and c.fact_id not in fact_ids else c
            for c in candidates
        ],
    )


async def named_users(s: AsyncSession) -> list[str]:
    """Every user with a name bound (a user may keep names after the last of their
    messages was deleted)."""
    # A cleared alias list may be stored as JSON null: read back, it binds nothing.
    maybe = await s.scalars(
        select(UserRow.user_id).where(
            or_(UserRow.display_name.is_not(None), UserRow.aliases.is_not(None))
        )
    )
    users = list(maybe)
    found: dict[str, UserIdentity] = {}
    for part in batches(users):
        found.update(await identities.read(s, part))
    return sorted(u for u, names in found.items() if bound(names))


def bound(identity: UserIdentity | None) -> bool:
    return identity is not None and (identity.display_name is not None or bool(identity.aliases))


async def identity(s: AsyncSession, user_id: str) -> UserIdentity | None:
    """The user's names, or None when none is bound."""
    found = (await identities.read(s, [user_id])).get(user_id)
    return found if bound(found) else None


# --- who holds a candidate already --------------------------------------------------------


async def _held(s: AsyncSession, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """``(user_id, id)`` of each stored candidate ``(msg_id, fact_key)`` among ``keys``."""
    found: dict[tuple[str, str], Any] = {}
    for part in batches(keys):
        rows = await s.execute(
            select(
                CandidateRow.msg_id, CandidateRow.fact_key, CandidateRow.user_id, CandidateRow.id
            ).where(tuple_(CandidateRow.msg_id, CandidateRow.fact_key).in_(list(part)))
        )
        found.update({(m, k): (u, cid) for m, k, u, cid in rows})
    return found


async def candidate_owners(
    s: AsyncSession, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """The user of each ``(msg_id, fact_key)`` already a candidate here."""
    return {key: user for key, (user, _id) in (await _held(s, keys)).items()}


# --- writing ------------------------------------------------------------------------------


async def write_candidates(
    s: AsyncSession, rows: Sequence[CandidateData]
) -> tuple[dict[int, int], list[CandidateData]]:
    """Insert the candidates not stored yet, status and times as they are, without their
    ``fact_id`` (the facts are written after them: :func:`link_candidates`). Returns the
    id here of every row (new or found) by its id in the file, and the new rows."""
    held = await _held(s, [(r.msg_id, r.fact_key) for r in rows])
    ids: dict[int, int] = {}
    new: list[CandidateData] = []
    for r in rows:
        mine = held.get((r.msg_id, r.fact_key))
        if mine is not None:
            ids[r.id] = int(mine[1])
            continue
        insert = dialect_insert(s, CandidateRow).values(
            user_id=r.user_id,
            session_id=r.session_id,
            msg_id=r.msg_id,
            fact_type=r.fact_type,
            fact_key=r.fact_key,
            fact_value=r.fact_value,
            confidence=r.confidence,
            source=r.source,
            said_at=r.said_at,
            status=r.status,
            decided_at=r.decided_at,
            fact_id=None,
        )
        # A worker may have stored the same reading of the message since it was looked up.
        stmt = insert.on_conflict_do_nothing(index_elements=["msg_id", "fact_key"])
        made = (await s.execute(stmt.returning(CandidateRow.id))).scalar_one_or_none()
        if made is None:
            (_user, mine_id), *_ = (await _held(s, [(r.msg_id, r.fact_key)])).values()
            ids[r.id] = int(mine_id)
            continue
        ids[r.id] = int(made)
        new.append(r)
    return ids, new


async def link_candidates(
    s: AsyncSession,
    new: Sequence[CandidateData],
    candidate_ids: Mapping[int, int],
    fact_ids: Mapping[int, int],
) -> None:
    """Give the new candidates their ``fact_id``, mapped onto the facts written here."""
    for r in new:
        if r.fact_id is not None:
            await s.execute(
                update(CandidateRow)
                .where(CandidateRow.id == candidate_ids[r.id])
                .values(fact_id=fact_ids[r.fact_id])
            )


async def write_identity(s: AsyncSession, wanted: UserIdentity) -> bool:
    """Bind the user's names as the file has them; whether they changed (the user's row
    exists: the import gave it one)."""
    if (await identities.read(s, [wanted.user_id])).get(wanted.user_id) == wanted:
        return False
    return await identities.write(s, wanted)
