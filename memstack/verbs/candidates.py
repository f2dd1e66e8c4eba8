"""Fact candidates: the values extraction read with too little confidence to serve as
the user's (docs/facts.md, "Candidates"), listed, confirmed or rejected by a person.

A mixin of :class:`memstack.AsyncMemory` (through :class:`memstack.verbs.reading.Management`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstack.core.errors import Conflict, NotFound, ValidationError
from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import VOCABULARY
from memstack.core.ids import validate_candidate_id, validate_id
from memstack.core.inputs import check_moment
from memstack.core.time import Timestamp
from memstack.stores.sql import candidates as candidate_store
from memstack.stores.sql import db, erasure
from memstack.stores.sql import facts as fact_store
from memstack.stores.sql.candidates import PENDING, STATUSES
from memstack.types import StoredCandidate, StoredFact
from memstack.verbs.base import Verbs

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


ALL = "all"


def _statuses(status: object) -> tuple[str, ...]:
    if status == ALL:
        return STATUSES
    if status not in STATUSES:
        names = ", ".join((*STATUSES, ALL))
        raise ValidationError(f"status must be one of {names}; got {status!r}")
    assert isinstance(status, str)
    return (status,)


class FactCandidates(Verbs):
    async def candidates(
        self,
        user_id: str,
        *,
        status: str = PENDING,
        as_of: Timestamp | None = None,
        key: str | None = None,
    ) -> list[StoredCandidate]:
        """The user's fact candidates, newest first: ``pending`` ones (the default),
        ``confirmed``, ``rejected``, ``superseded`` or ``all``. With ``as_of`` (an aware
        datetime or epoch seconds): those that were pending at that moment, whatever
        became of them since. A candidate whose message was deleted is gone with it."""
        validate_id("user_id", user_id)
        statuses = _statuses(status)
        if key is not None:
            validate_id("key", key)
        if as_of is not None and status != PENDING:
            raise ValidationError("as_of lists the candidates pending at that moment: omit status")
        at = None if as_of is None else check_moment("as_of", as_of)
        async with db.guarded("candidates"), self.stores.db_sessions() as s:
            return await candidate_store.candidates(
                s, user_id, statuses=statuses, as_of=at, key=key
            )

    async def _pending(self, s: AsyncSession, user_id: str, candidate_id: int) -> StoredCandidate:
        """The user's pending candidate, its row held; NotFound or Conflict otherwise."""
        await erasure.hold_users(s, [user_id])
        c = await candidate_store.get(s, user_id, candidate_id, for_update=True)
        if c is None:
            raise NotFound(f"user {user_id!r} has no fact candidate {candidate_id}")
        if c.status != PENDING:
            raise Conflict(
                f"fact candidate {candidate_id} is {c.status}; only a pending one can be decided"
            )
        return c

    async def confirm_candidate(self, user_id: str, candidate_id: int) -> StoredFact:
        """Confirm a pending candidate: its value becomes the user's current fact now
        (confidence 1.0, its message as the source, ``candidate_id`` naming the
        candidate), superseding the current value as ``set_fact`` does, history kept.
        Returns the current fact. :class:`NotFound` for a candidate the user does not
        have, :class:`Conflict` for one already decided; nothing changes then."""
        validate_id("user_id", user_id)
        wanted = validate_candidate_id(candidate_id)
        async with db.guarded("confirm candidate"):
            now = await self.stores.working.server_time()
            async with self.stores.db_sessions.begin() as s:
                c = await self._pending(s, user_id, wanted)
                spec = VOCABULARY.get(c.key)
                fact = Fact(
                    key=c.key,
                    value=c.value,
                    type=spec.type if spec is not None else "preference",
                    confidence=1.0,
                    source="user_stated" if c.source == "user_stated" else "extract",
                )
                await candidate_store.confirm(s, c, fact, now)
                confirmed = await fact_store.find(s, user_id, c.key, current=True)
        if confirmed is None:  # another writer ended it at once; what stands is current
            raise Conflict(f"fact {c.key!r} changed while it was being confirmed; read it again")
        return confirmed

    async def reject_candidate(self, user_id: str, candidate_id: int) -> StoredCandidate:
        """Reject a pending candidate: it is kept, ``rejected``, with the time, and never
        served. :class:`NotFound` / :class:`Conflict` as :meth:`confirm_candidate`."""
        validate_id("user_id", user_id)
        wanted = validate_candidate_id(candidate_id)
        async with db.guarded("reject candidate"):
            now = await self.stores.working.server_time()
            async with self.stores.db_sessions.begin() as s:
                await candidate_store.reject(s, await self._pending(s, user_id, wanted), now)
                decided = await candidate_store.get(s, user_id, wanted)
        assert decided is not None
        return decided
