"""Reading and correcting what memory holds, user by user: the users, sessions and
messages in the ledger, facts and their history, summaries, and erasure.

A mixin of :class:`memstack.AsyncMemory`, which supplies the stores it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memstack.core.errors import ValidationError
from memstack.core.ids import validate_id
from memstack.core.inputs import check_moment
from memstack.core.messages import Message
from memstack.core.time import Timestamp
from memstack.ingest.summaries import summaries_of
from memstack.stores.sql import db, erasure, ledger, tool_results
from memstack.stores.sql import facts as fact_store
from memstack.stores.sql import summaries as summary_rows
from memstack.stores.sql.facts import StoredFact
from memstack.stores.sql.ledger import SessionOverview, UserOverview

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from memstack.core.settings import Settings
    from memstack.stores.redis.queue import IngestQueue
    from memstack.stores.redis.working_memory import WorkingMemory
    from memstack.stores.vectors.base import VectorStore

MAX_PAGE = 1000


def _page(limit: object, offset: object) -> tuple[int, int]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
        raise ValidationError(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError(f"offset must be a whole number from 0, got {offset!r}")
    return limit, offset


class Management:
    if TYPE_CHECKING:
        settings: Settings
        db_sessions: async_sessionmaker[AsyncSession]
        reads: async_sessionmaker[AsyncSession]
        working: WorkingMemory
        queue: IngestQueue

        async def memory_vectors(self) -> VectorStore: ...

    # --- users, sessions, messages (the ledger: what the worker has stored) ----------------
    async def users(self, *, limit: int = 100, offset: int = 0) -> list[UserOverview]:
        """Users with messages in the ledger, by id: their session and message counts and
        the time of their last message."""
        limit, offset = _page(limit, offset)
        async with db.guarded("users"), self.reads() as s:
            return await ledger.user_overviews(s, limit=limit, offset=offset)

    async def sessions(self, user_id: str) -> list[SessionOverview]:
        """The user's sessions in the ledger, oldest first, with their first and last
        message times; empty for a user with none."""
        validate_id("user_id", user_id)
        async with db.guarded("sessions"), self.reads() as s:
            return await ledger.session_overviews(s, user_id)

    async def messages(
        self, user_id: str, session_id: str, *, limit: int = 100, offset: int = 0
    ) -> list[Message]:
        """One page of a session's messages in the ledger, oldest first."""
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        limit, offset = _page(limit, offset)
        async with db.guarded("messages"), self.reads() as s:
            return await ledger.session_page(s, user_id, session_id, offset=offset, limit=limit)

    # --- facts ---------------------------------------------------------------------------
    async def facts(self, user_id: str, *, as_of: Timestamp | None = None) -> list[StoredFact]:
        """The user's current facts (``valid_until IS NULL``), most confident first; with
        ``as_of`` (an aware datetime or epoch seconds), those current at that moment
        (``valid_from <= as_of < valid_until``), archived ones included."""
        validate_id("user_id", user_id)
        at = None if as_of is None else check_moment("as_of", as_of)
        async with db.guarded("facts"), self.db_sessions() as s:
            if at is not None:
                return await fact_store.facts_as_of(s, user_id, at)
            return await fact_store.current_facts(s, user_id)

    async def fact_history(self, user_id: str, key: str | None = None) -> list[StoredFact]:
        """Every value a fact ever had, current, superseded and retracted, oldest first (a
        retracted one names the message that withdrew it: ``ended_by_msg_id``)."""
        validate_id("user_id", user_id)
        if key is not None:
            validate_id("key", key)
        async with db.guarded("fact history"), self.db_sessions() as s:
            return await fact_store.fact_history(s, user_id, key)

    async def summaries(self, user_id: str, session_id: str | None = None) -> list[dict[str, Any]]:
        validate_id("user_id", user_id)
        async with db.guarded("summaries"):
            return await summaries_of(self.db_sessions, user_id, session_id)

    async def forget_user(self, user_id: str) -> dict[str, int]:
        """Erase everything memstack holds about ``user_id`` in every layer.

        Final against work in flight: the erasure is marked with the time it began, and
        an ingest batch that is writing waits for it or, after it, writes nothing
        accepted before that time. Messages accepted after it are new memories.
        """
        validate_id("user_id", user_id)
        began = await self.working.server_time()
        vectors = await self.memory_vectors()
        async with db.guarded("forget user"), self.db_sessions.begin() as s:
            # Held until the vectors are gone too: a batch waiting for the mark then finds
            # nothing of the user to write next to.
            await erasure.mark_forgotten(s, user_id, began)
            session_ids = await ledger.sessions_of(s, user_id)
            facts_deleted = await fact_store.delete_user(s, user_id)
            await summary_rows.delete_user(s, user_id)
            await tool_results.delete_user(s, user_id)
            messages_deleted = await ledger.delete_user(s, user_id)
            await vectors.delete(scope={"user_id": user_id})
        dropped_jobs = await self.queue.drop_user_jobs(user_id, accepted_until=began)
        redis_keys = await self.working.forget_user(user_id)
        return {
            "jobs": dropped_jobs,
            "messages": messages_deleted,
            "facts": facts_deleted,
            "sessions": len(session_ids),
            "redis_keys": redis_keys,
        }
