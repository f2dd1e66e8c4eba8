"""Facts read and corrected by hand: the current facts and their history, each marked
when the message it came from was deleted, and ``set_fact`` / ``delete_fact``, which
write through the same supersede and retraction as extraction.

A mixin of :class:`memstack.AsyncMemory` (through :class:`memstack.verbs.reading.Management`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memstack.core.errors import Conflict, NotFound, ValidationError
from memstack.core.facts.checks import check_fact_key, check_fact_value
from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import VOCABULARY, default_currency, normalise_fact
from memstack.core.ids import BY_HAND, by_hand_id, validate_id
from memstack.core.inputs import check_moment
from memstack.core.time import Timestamp
from memstack.stores.sql import db, ledger
from memstack.stores.sql import facts as fact_store
from memstack.stores.sql.facts import Outcome
from memstack.types import StoredFact
from memstack.verbs.base import Verbs

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


# A fact set or ended by hand belongs to no session.
NO_SESSION = ""


async def _with_sources(s: AsyncSession, facts: list[StoredFact]) -> list[StoredFact]:
    """``facts`` with ``source_deleted`` set where their message left the ledger."""
    ids = [f.msg_id for f in facts if not f.msg_id.startswith(BY_HAND)]
    held = await ledger.existing(s, ids)
    return [
        replace(f, source_deleted=True)
        if not f.msg_id.startswith(BY_HAND) and f.msg_id not in held
        else f
        for f in facts
    ]


def _by_hand(key: str, value: Any, current: StoredFact | None, max_bytes: int) -> Fact:
    """The fact ``set_fact`` writes, checked and shaped as extraction shapes a fact of
    ``key``; :class:`ValidationError` when the value is no value of it."""
    canonical = check_fact_key(key)
    if value is None:
        raise ValidationError("a fact's value must not be null (delete_fact ends a fact)")
    check_fact_value(value, max_bytes=max_bytes)
    known = current.value if current is not None else None
    code = known.get("currency") if isinstance(known, dict) else None
    currency = code if isinstance(code, str) and code else default_currency(json.dumps(value))
    fact = normalise_fact(
        Fact(
            # A vocabulary key keeps its spelling: "wife" labels the value it carries.
            key=key if canonical in VOCABULARY else canonical,
            value=value,
            type="preference",  # the vocabulary's type replaces it
            confidence=1.0,
            source="user_stated",
        ),
        default_currency=currency,
    )
    if fact is None:
        raise ValidationError(f"{json.dumps(value)[:200]} is not a usable value of {canonical!r}")
    check_fact_value(fact.value, max_bytes=max_bytes)
    return fact


class FactCorrections(Verbs):
    async def facts(self, user_id: str, *, as_of: Timestamp | None = None) -> list[StoredFact]:
        """The user's current facts (``valid_until IS NULL``), most confident first; with
        ``as_of`` (an aware datetime or epoch seconds), those current at that moment
        (``valid_from <= as_of < valid_until``), archived ones included. A fact whose
        message was deleted is kept, with ``source_deleted``."""
        validate_id("user_id", user_id)
        at = None if as_of is None else check_moment("as_of", as_of)
        async with db.guarded("facts"), self.stores.db_sessions() as s:
            if at is not None:
                found = await fact_store.facts_as_of(s, user_id, at)
            else:
                found = await fact_store.current_facts(s, user_id)
            return await _with_sources(s, found)

    async def fact_history(self, user_id: str, key: str | None = None) -> list[StoredFact]:
        """Every value a fact ever had, current, superseded and retracted, oldest first (a
        retracted one names the message that withdrew it: ``ended_by_msg_id``)."""
        validate_id("user_id", user_id)
        if key is not None:
            validate_id("key", key)
        async with db.guarded("fact history"), self.stores.db_sessions() as s:
            return await _with_sources(s, await fact_store.fact_history(s, user_id, key))

    async def _current_fact(self, user_id: str, key: str) -> StoredFact | None:
        async with self.stores.db_sessions() as s:
            return await fact_store.find(s, user_id, key, current=True)

    async def _written(self, user_id: str, key: str, msg_id: str) -> StoredFact:
        async with self.stores.db_sessions() as s:
            found = await fact_store.find(s, user_id, key, msg_id=msg_id)
        if found is None:  # another writer ended it at once; what stands is current
            raise Conflict(f"fact {key!r} changed while it was being written; read it again")
        return found

    def _moment(self, now: datetime, current: StoredFact | None) -> datetime:
        # A message may be dated up to a day ahead; what is said by hand now must still
        # come after the value it corrects, or it would be stored as history only.
        return max(now, current.valid_from) if current is not None else now

    async def set_fact(self, user_id: str, key: str, value: Any) -> StoredFact:
        """Set ``key`` to ``value`` by hand (``source="user_stated"``, confidence 1.0):
        the current value, if different, is superseded as extraction supersedes it,
        its history kept. The key and value are checked and shaped as extraction's are
        (``"budget"`` is ``budget_limit``, ``"8000元"`` is ``{"amount": 8000, ...}``).
        Returns the current row: the new one, or the old one if the value is the same."""
        validate_id("user_id", user_id)
        canonical = check_fact_key(key)
        async with db.guarded("set fact"):
            current = await self._current_fact(user_id, canonical)
            fact = _by_hand(key, value, current, self.stores.settings.max_fact_value_bytes)
            now = await self.stores.working.server_time()
            msg_id = by_hand_id()
            outcome = await fact_store.write_fact(
                self.stores.db_sessions,
                user_id=user_id,
                session_id=NO_SESSION,
                msg_id=msg_id,
                fact=fact,
                at=self._moment(now, current),
                accepted_at=now,
                max_value_bytes=self.stores.settings.max_fact_value_bytes,
            )
            if outcome in (Outcome.INSERTED, Outcome.SUPERSEDED):
                return await self._written(user_id, fact.key, msg_id)
            standing = await self._current_fact(user_id, fact.key)
        if outcome is Outcome.UNCHANGED and standing is not None:
            return standing
        raise Conflict(f"fact {fact.key!r} was not set ({outcome.value}); nothing was written")

    async def delete_fact(self, user_id: str, key: str) -> StoredFact:
        """End the current value of ``key`` with nothing in its place (a retraction by
        hand): its row gets ``valid_until`` and is kept in the history. Returns that row;
        :class:`NotFound` if the key has no current value."""
        validate_id("user_id", user_id)
        canonical = check_fact_key(key)
        async with db.guarded("delete fact"):
            current = await self._current_fact(user_id, canonical)
            if current is None:
                raise NotFound(f"user {user_id!r} has no current fact {canonical!r}")
            now = await self.stores.working.server_time()
            msg_id = by_hand_id()
            withdrawal = Fact(
                key=canonical,
                value=None,
                type="preference",
                confidence=1.0,
                source="user_stated",
                retracts=True,
            )
            outcome = await fact_store.write_fact(
                self.stores.db_sessions,
                user_id=user_id,
                session_id=NO_SESSION,
                msg_id=msg_id,
                fact=withdrawal,
                at=self._moment(now, current),
                accepted_at=now,
            )
            if outcome is Outcome.RETRACTED:
                return await self._written(user_id, canonical, msg_id)
        if outcome is Outcome.NOTHING_TO_RETRACT:
            raise NotFound(f"user {user_id!r} has no current fact {canonical!r}")
        raise Conflict(f"fact {canonical!r} was not ended ({outcome.value}); nothing was written")
