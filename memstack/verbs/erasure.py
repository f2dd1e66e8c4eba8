"""Erasure, of a user, a session or one message, in every layer that holds it.

Each is final against ingest work in flight: it takes Redis's time, then in one
transaction writes its mark (:mod:`memstack.stores.sql.erasure`) under an exclusive lock
on the user's row, deletes the rows and the vectors, and commits; an ingest transaction
of the user waits for it or, after it, writes nothing of what the mark covers. Queued
jobs and the Redis keys go after the commit. Messages accepted later are new memories.

Facts are the user's, not a session's or a message's: a session or a message erased
leaves the facts it stated in place, each marked ``source_deleted`` (the caller decides,
with ``delete_fact``); nothing is derived again from what remains. A fact candidate is
only a reading of its message, not yet the user's, and goes with it.

A mixin of :class:`memstack.AsyncMemory` (through :class:`memstack.verbs.reading.Management`).
"""

from __future__ import annotations

import logging

from memstack.core.erasure import UserErasure
from memstack.core.errors import MemstackError, NotFound
from memstack.core.ids import sessions_named_by, validate_id, validate_msg_id
from memstack.core.messages import Message
from memstack.ingest import units
from memstack.ingest.summaries import summary_vector_id
from memstack.stores.sql import api_keys, db, erasure, ledger, tool_results
from memstack.stores.sql import candidates as candidate_store
from memstack.stores.sql import facts as fact_store
from memstack.stores.sql import summaries as summary_rows
from memstack.verbs.keys import KeyManagement

log = logging.getLogger("memstack.verbs.erasure")


def _unit_around(rows: list[Message], m: Message) -> tuple[str, list[Message]]:
    """The head of ``m``'s exchange unit among ``rows`` (consecutive ledger rows around
    it), and the messages just before and after it: their units are derived again once
    ``m`` is gone, the one that held ``m`` among them."""
    head = m.msg_id
    for unit in units.units_of(rows):
        if any(x.msg_id == m.msg_id for x in unit.members):
            head = unit.head.msg_id
    at = next(i for i, x in enumerate(rows) if x.msg_id == m.msg_id)
    return head, rows[max(at - 1, 0) : at] + rows[at + 1 : at + 2]


class Erasure(KeyManagement):
    async def forget_user(self, user_id: str) -> UserErasure:
        """Erase everything memstack holds about ``user_id`` in every layer, and revoke
        every API key bound to the user (``revoked_keys`` lists their ids).

        Final against work in flight: the erasure is marked with the time it began, and
        an ingest batch that is writing waits for it or, after it, writes nothing
        accepted before that time. Messages accepted after it are new memories.
        """
        validate_id("user_id", user_id)
        began = await self.stores.working.server_time()
        vectors = await self.stores.memory_vectors()
        async with db.guarded("forget user"), self.stores.db_sessions.begin() as s:
            # Held until the vectors are gone too: a batch waiting for the mark then finds
            # nothing of the user to write next to.
            await erasure.mark_forgotten(s, user_id, began)
            await erasure.drop_marks(s, user_id)
            session_ids = await ledger.sessions_of(s, user_id)
            facts_deleted = await fact_store.delete_user(s, user_id)
            candidates_deleted = await candidate_store.delete_for(s, user_id)
            await summary_rows.delete_user(s, user_id)
            await tool_results.delete_user(s, user_id)
            messages_deleted = await ledger.delete_user(s, user_id)
            # In the same transaction: no moment where the memory is gone and a key of
            # the user still opens it (new memories written with it included).
            revoked = await api_keys.revoke_user(s, self.stores.settings.key_prefix, user_id, began)
            await vectors.delete(scope={"user_id": user_id})
        self._forget_cached_keys(revoked)
        dropped_jobs = await self.stores.queue.drop_user_jobs(user_id, accepted_until=began)
        redis_keys = await self.stores.working.forget_user(user_id)
        counts = {
            "jobs": dropped_jobs,
            "messages": messages_deleted,
            "facts": facts_deleted,
            "candidates": candidates_deleted,
            "sessions": len(session_ids),
            "redis_keys": redis_keys,
            "api_keys": len(revoked),
        }
        return UserErasure(counts, revoked)

    async def forget_session(self, user_id: str, session_id: str) -> dict[str, int]:
        """Erase one session of the user in every layer: its window, task state,
        knowledge cache and other Redis keys, its queued jobs, its ledger rows, vectors,
        summaries and stored tool results. The user's facts stay (see the module
        docstring); ``facts_kept`` counts those the session stated. Final against work
        in flight, as :meth:`forget_user` is; a session with nothing to erase gives
        zeros."""
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        began = await self.stores.working.server_time()
        vectors = await self.stores.memory_vectors()
        async with db.guarded("forget session"), self.stores.db_sessions.begin() as s:
            await erasure.mark_erased(s, user_id, erasure.SESSION, session_id, began)
            facts_kept = await fact_store.count_from(s, user_id, session_id=session_id)
            # A candidate is a reading of its message, not yet the user's fact: it goes
            # with the message.
            candidates = await candidate_store.delete_for(s, user_id, session_id=session_id)
            summaries = await summary_rows.delete_session(s, user_id, session_id)
            results = await tool_results.delete_session(s, user_id, session_id)
            messages = await ledger.delete_session(s, user_id, session_id)
            # Dialogue chunks, inferred facts and summaries all carry their session.
            await vectors.delete(scope={"user_id": user_id, "session_id": session_id})
        jobs = await self.stores.queue.drop_jobs(
            user_id, accepted_until=began, session_id=session_id
        )
        redis_keys = await self.stores.working.forget_session(user_id, session_id)
        return {
            "jobs": jobs,
            "messages": messages,
            "summaries": summaries,
            "tool_results": results,
            "redis_keys": redis_keys,
            "facts_kept": facts_kept,
            "candidates": candidates,
        }

    async def _find_message(self, user_id: str, msg_id: str) -> Message | None:
        """The user's message ``msg_id`` wherever it is: the ledger, its session's
        window, or a job not yet ingested."""
        async with db.guarded("find message"), self.stores.reads() as s:
            stored = await ledger.messages_by_id(s, user_id, [msg_id])
        if msg_id in stored:
            return stored[msg_id]
        for session_id in sessions_named_by(user_id, msg_id):
            read = await self.stores.working.window(
                user_id, session_id, self.stores.settings.window_max_messages
            )
            for m in read.messages:
                if m.msg_id == msg_id:
                    return m
        return await self.stores.queue.queued_message(user_id, msg_id)

    async def delete_message(self, user_id: str, msg_id: str) -> dict[str, int]:
        """Erase one message of the user in every layer: the window, its queued job, the
        ledger (and so BM25), its vectors, and the summaries that include it. The exchange
        unit that held it is derived again from its neighbours, so no recall returns its
        text. Facts it stated stay, marked ``source_deleted`` (``facts_kept``).
        :class:`NotFound` if the user has no such message. Final against work in flight,
        as :meth:`forget_user` is."""
        validate_id("user_id", user_id)
        validate_msg_id(msg_id)
        found = await self._find_message(user_id, msg_id)
        if found is None:
            raise NotFound(f"no message {msg_id[:200]!r} of user {user_id!r}")
        began = await self.stores.working.server_time()
        vectors = await self.stores.memory_vectors()
        neighbours: list[Message] = []
        counts = {"messages": 0, "summaries": 0, "facts_kept": 0}
        async with db.guarded("delete message"), self.stores.db_sessions.begin() as s:
            await erasure.mark_erased(s, user_id, erasure.MESSAGE, msg_id, began)
            counts["candidates"] = await candidate_store.delete_for(s, user_id, msg_ids=[msg_id])
            # Read under the lock: a batch that stored the message has committed by now.
            stored = (await ledger.messages_by_id(s, user_id, [msg_id])).get(msg_id)
            heads = {msg_id}
            if stored is not None:
                piece = await ledger.around(s, stored, before=units.RADIUS, after=units.RADIUS)
                head, neighbours = _unit_around(piece.rows, stored)
                heads.add(head)
                gone = await summary_rows.delete_covering(s, stored)
                counts["summaries"] = len(gone)
                counts["facts_kept"] = await fact_store.count_from(s, user_id, msg_id=msg_id)
                counts["messages"] = await ledger.delete_message(s, user_id, msg_id)
                if gone:
                    ids = [summary_vector_id(last) for last in gone]
                    await vectors.delete(scope={"user_id": user_id}, ids=ids)
            # Its own chunks and inferred facts, and the unit that held it, which is
            # written again below without it.
            for head_id in sorted(heads):
                await vectors.delete(scope={"user_id": user_id, "msg_id": head_id})
        counts["jobs"] = await self.stores.queue.drop_jobs(
            user_id, accepted_until=began, msg_id=msg_id
        )
        counts["window"] = await self.stores.working.remove_message(
            user_id, found.session_id, msg_id
        )
        counts["chunks"] = 0
        if neighbours:
            try:
                worker = await self.stores.worker()
                counts["chunks"] = await worker.ingestor.rederive(neighbours)
            except MemstackError as exc:
                # The message is erased; only its neighbours' unit is missing from the
                # vector store until `memstack reindex` (BM25 still finds them).
                log.warning("delete_message: the unit around %s was not rewritten: %s", msg_id, exc)
        return counts
