"""Reading and correcting what memory holds, user by user: the users, sessions and
messages in the ledger, one message, a search of the user's history, summaries; the
facts (:mod:`memstack.verbs.facts`) and erasure (:mod:`memstack.verbs.erasure`) come
from the mixins it joins.

A mixin of :class:`memstack.AsyncMemory`.
"""

from __future__ import annotations

from typing import Any

from memstack.core.errors import NotFound, ValidationError
from memstack.core.ids import validate_id, validate_msg_id
from memstack.core.inputs import check_moment
from memstack.core.messages import Message
from memstack.core.time import Timestamp
from memstack.ingest.summaries import summaries_of
from memstack.recall import search as recall_search
from memstack.stores.sql import db, ledger
from memstack.types import SearchHit, SessionOverview, UserOverview
from memstack.verbs.candidates import FactCandidates
from memstack.verbs.erasure import Erasure
from memstack.verbs.facts import FactCorrections
from memstack.verbs.identity import Identities

MAX_PAGE = 1000
MAX_SEARCH = 100


def _page(limit: object, offset: object) -> tuple[int, int]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
        raise ValidationError(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError(f"offset must be a whole number from 0, got {offset!r}")
    return limit, offset


class Management(FactCorrections, FactCandidates, Identities, Erasure):
    # --- users, sessions, messages (the ledger: what the worker has stored) ----------------
    async def users(self, *, limit: int = 100, offset: int = 0) -> list[UserOverview]:
        """Users with messages in the ledger, by id: their session and message counts and
        the time of their last message."""
        limit, offset = _page(limit, offset)
        async with db.guarded("users"), self.stores.reads() as s:
            return await ledger.user_overviews(s, limit=limit, offset=offset)

    async def sessions(self, user_id: str) -> list[SessionOverview]:
        """The user's sessions in the ledger, oldest first, with their first and last
        message times; empty for a user with none."""
        validate_id("user_id", user_id)
        async with db.guarded("sessions"), self.stores.reads() as s:
            return await ledger.session_overviews(s, user_id)

    async def messages(
        self, user_id: str, session_id: str, *, limit: int = 100, offset: int = 0
    ) -> list[Message]:
        """One page of a session's messages in the ledger, oldest first."""
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        limit, offset = _page(limit, offset)
        async with db.guarded("messages"), self.stores.reads() as s:
            return await ledger.session_page(s, user_id, session_id, offset=offset, limit=limit)

    async def get_message(self, user_id: str, msg_id: str) -> Message:
        """One message of the user by its id (as ``remember()`` returned it): from the
        ledger, or while the worker has not stored it yet from its session's window or
        its queued job. :class:`NotFound` if the user has no such message (another
        user's included)."""
        validate_id("user_id", user_id)
        validate_msg_id(msg_id)
        found = await self._find_message(user_id, msg_id)
        if found is None:
            raise NotFound(f"no message {msg_id[:200]!r} of user {user_id!r}")
        return found

    async def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[SearchHit]:
        """The user's messages that best answer ``query``, best first: the read path's
        ranking (dense and BM25 channels fused, reranked if configured) without its
        filters, budget or assembly. ``since`` / ``until`` (aware datetimes or epoch
        seconds, both ends included) keep messages created within them."""
        validate_id("user_id", user_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_SEARCH:
            raise ValidationError(
                f"limit must be a whole number from 1 to {MAX_SEARCH}, got {limit!r}"
            )
        low = None if since is None else check_moment("since", since)
        high = None if until is None else check_moment("until", until)
        if low is not None and high is not None and low > high:
            raise ValidationError(f"since ({low.isoformat()}) is after until ({high.isoformat()})")
        async with db.guarded("search"):
            return await recall_search.search(
                self.recall, user_id, query, limit=limit, since=low, until=high
            )

    async def summaries(self, user_id: str, session_id: str | None = None) -> list[dict[str, Any]]:
        validate_id("user_id", user_id)
        if session_id is not None:
            validate_id("session_id", session_id)
        async with db.guarded("summaries"):
            return await summaries_of(self.stores.db_sessions, user_id, session_id)
