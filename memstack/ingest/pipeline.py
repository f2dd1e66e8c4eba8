"""The asynchronous half of the write path (docs/spec.md, Write path): one batch of ingest jobs.

For each batch, in order: the ledger (``ON CONFLICT DO NOTHING``); facts, extracted and
written with supersede; then the vectors: the exchange units the new messages make or
change, derived from the ledger (:mod:`memstack.ingest.units`) and embedded in one call, with
``inferred`` facts, and the chunks those units left stale deleted. Every step is
idempotent, so a redelivered job changes nothing; a job is acknowledged by the worker
only after all of them succeed. Every step runs under the erasure guard
(:mod:`memstack.stores.sql.erasure`): nothing accepted before a ``forget_user`` is written after it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.facts.checks import fact_problem
from memstack.core.facts.fact import BatchMessage, Extractor, Fact, prepare_batch
from memstack.core.identity import UserIdentity
from memstack.core.ids import chunk_id
from memstack.core.inputs import safe_text
from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.ingest import units
from memstack.ingest.summarisers import classify_topic, topic_code
from memstack.ml.embedders import Embedder
from memstack.stores.sql import candidates as candidate_store
from memstack.stores.sql import erasure, ledger
from memstack.stores.sql import facts as fact_store
from memstack.stores.sql import identity as identities
from memstack.stores.sql.db import guarded
from memstack.stores.vectors.base import MetaValue, VectorHit, VectorRecord, VectorStore
from memstack.text.chunking import split_semantic
from memstack.text.locales import resolve_locale

log = logging.getLogger("memstack.ingest.pipeline")
# Facts said at a message's own moment are its own (a redelivery), not what it knew.
_JUST_BEFORE = timedelta(microseconds=1)


def _count(value: MetaValue | None, *, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _changed(records: Sequence[VectorRecord], stored: dict[str, VectorHit]) -> list[VectorRecord]:
    """The records the store does not hold as they are."""
    out = []
    for r in records:
        hit = stored.get(r.id)
        if hit is None or hit.text != r.text or dict(hit.metadata) != dict(r.metadata):
            out.append(r)
    return out


def _stale(
    derivation: units.Derivation,
    records: Sequence[VectorRecord],
    stored: dict[str, VectorHit],
) -> dict[str, list[str]]:
    """Chunk ids to delete, by user: those of messages no longer heads, and those past
    the new end of a unit that shrank. What each id held before is read from its first
    chunk's ``chunk_count`` (chunks written before it was recorded count as one)."""
    new_count: dict[str, int] = defaultdict(int)
    for r in records:
        if r.metadata.get("source_layer") == "dialogue":
            new_count[str(r.metadata["msg_id"])] += 1
    owners = {**derivation.absorbed, **{h: u.head for h, u in derivation.units.items()}}
    stale: dict[str, list[str]] = defaultdict(list)
    for msg_id, m in owners.items():
        first = stored.get(chunk_id(msg_id, 0))
        if first is None:
            continue
        old = _count(first.metadata.get("chunk_count"), default=new_count[msg_id] or 1)
        stale[m.user_id] += [chunk_id(msg_id, i) for i in range(new_count[msg_id], old)]
    return {user: ids for user, ids in stale.items() if ids}


@dataclass
class BatchReport:
    messages: int = 0
    new_ledger_rows: int = 0
    chunks: int = 0
    facts: dict[str, int] = field(default_factory=dict)
    sessions: set[tuple[str, str]] = field(default_factory=set)
    # Messages of a user forgotten after they were accepted: written nowhere.
    forgotten: int = 0


@dataclass
class Ingestor:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    embedder: Embedder
    vectors: VectorStore
    extractor: Extractor

    async def process(self, messages: Sequence[Message]) -> BatchReport:
        async with guarded("ingest"):
            return await self._process(messages)

    async def _process(self, messages: Sequence[Message]) -> BatchReport:
        report = BatchReport(messages=len(messages))
        kept = await self._ledger(messages, report)
        inferred = await self._facts(kept, report)
        report.chunks = await self._vectors(kept, inferred)
        report.sessions = {(m.user_id, m.session_id) for m in kept}
        return report

    async def _ledger(self, messages: Sequence[Message], report: BatchReport) -> list[Message]:
        """Insert the messages not erased since they were accepted; returns those."""
        users = {m.user_id for m in messages}
        async with self.sessions.begin() as s:
            await erasure.ensure_users(s, users, datetime.now(UTC))
            erased = await erasure.hold_messages(s, messages)
            kept = [m for m in messages if m.msg_id not in erased]
            report.new_ledger_rows = await ledger.insert_messages(s, kept)
        report.forgotten = len(messages) - len(kept)
        return kept

    async def _vectors(self, messages: Sequence[Message], inferred: Sequence[VectorRecord]) -> int:
        """Store the chunks of every unit ``messages`` make or change, and ``inferred``;
        returns how many were written.

        The units that hold the new messages are derived and embedded first, without
        locks; then, under the session locks, every unit they may have changed is
        derived again, what the store does not already hold as derived is embedded (if
        not yet) and written, and stale chunks are deleted. The locks are held for a
        few reads and the writes, seldom for the model."""
        if not messages:
            return 0
        async with self.sessions() as s:
            draft = await units.around(s, messages)
        touched = [draft.units[h] for h in draft.touched if h in draft.units]
        cache = await self._embed({r.text for u in touched for r in self.unit_records(u)})
        async with self.sessions.begin() as s:
            erased = await erasure.hold_messages(s, messages)
            live = [m for m in messages if m.msg_id not in erased]
            await erasure.lock_sessions(s, {(m.user_id, m.session_id) for m in live})
            derivation = await units.around(s, live)
            alive = {m.msg_id for m in live}
            records = self._unit_records(derivation)
            records += [r for r in inferred if r.metadata["msg_id"] in alive]
            stored = await self._stored(derivation, records)
            changed = _changed(records, stored)
            cache.update(await self._embed({r.text for r in changed} - cache.keys()))
            await self.vectors.upsert([self._with_vector(r, cache) for r in changed])
            for user_id, ids in _stale(derivation, records, stored).items():
                await self.vectors.delete(scope={"user_id": user_id}, ids=ids)
        return len(changed)

    async def rederive(self, messages: Sequence[Message]) -> int:
        """Write again the exchange units around ``messages`` (ledger rows) as the ledger
        holds them now: after a message between them was deleted, the unit that held it
        must no longer hold its text. Returns how many chunks were written."""
        async with guarded("ingest"):
            return await self._vectors(messages, [])

    async def _stored(
        self, derivation: units.Derivation, records: Sequence[VectorRecord]
    ) -> dict[str, VectorHit]:
        """What the store holds under the records' ids and the first chunk id of every
        absorbed message, by id."""
        wanted: dict[str, list[str]] = defaultdict(list)
        for r in records:
            wanted[str(r.metadata["user_id"])].append(r.id)
        for m in derivation.absorbed.values():
            wanted[m.user_id].append(chunk_id(m.msg_id, 0))
        found: dict[str, VectorHit] = {}
        for user_id, ids in wanted.items():
            for hit in await self.vectors.get(ids, scope={"user_id": user_id}):
                found[hit.id] = hit
        return found

    async def _embed(self, texts: set[str]) -> dict[str, Sequence[float]]:
        ordered = sorted(texts)
        if not ordered:
            return {}
        return dict(zip(ordered, await self.embedder.embed(ordered), strict=True))

    @staticmethod
    def _with_vector(r: VectorRecord, cache: dict[str, Sequence[float]]) -> VectorRecord:
        return VectorRecord(r.id, r.text, cache[r.text], r.metadata)

    async def store(self, records: Sequence[VectorRecord]) -> int:
        """Embed the records' texts in one call and upsert them; returns how many."""
        if not records:
            return 0
        cache = await self._embed({r.text for r in records})
        await self.vectors.upsert([self._with_vector(r, cache) for r in records])
        return len(records)

    def _unit_records(self, derivation: units.Derivation) -> list[VectorRecord]:
        return [r for unit in derivation.units.values() for r in self.unit_records(unit)]

    def unit_records(self, unit: units.Unit) -> list[VectorRecord]:
        """The chunks of one exchange unit (no vectors yet), under its head's id; each
        records how many there are, so a unit that shrinks can drop the rest."""
        pieces = split_semantic(
            unit.text,
            split_chars=self.settings.chunk_split_chars,
            merge_chars=self.settings.chunk_merge_chars,
        )
        locale = resolve_locale(self.settings.locale, unit.text)
        topic = topic_code(classify_topic(unit.text, [], locale)) or ""
        msg_ids = [m.msg_id for m in unit.members]
        out = []
        for idx, text in enumerate(pieces):
            meta = self._metadata(unit.head, idx, "dialogue", msg_ids)
            meta["topic"] = topic
            meta["chunk_count"] = len(pieces)
            out.append(VectorRecord(chunk_id(unit.head.msg_id, idx), text, (), meta))
        return out

    def _metadata(
        self, head: Message, idx: int, layer: str, msg_ids: Sequence[str]
    ) -> dict[str, str | int | float | bool]:
        return {
            "user_id": head.user_id,
            "session_id": head.session_id,
            "msg_id": head.msg_id,
            "msg_ids": ",".join(msg_ids),
            "role": head.role,
            "chunk_idx": idx,
            "created_at": int(head.created_at.timestamp()),
            "topic": "",
            "source_layer": layer,
            "model_version": self.embedder.model_version,
        }

    async def _facts(self, messages: Sequence[Message], report: BatchReport) -> list[VectorRecord]:
        """Write stated facts (in message order, so later overrides earlier); return the
        inferred ones as vector records. The extractor reads the batch's messages that
        are their user's own words (:mod:`memstack.core.identity`) at once (the LLM: one
        request per user, not one per message)."""
        said = await self._own_words(messages)
        known_by_user: dict[str, dict[str, Any]] = {}
        # The newest moment a known fact was said, per user: a message older than it
        # arrived late (a redelivery after a crash) and must be read as it would have
        # been in order, with what was known when it was said, or the same conversation
        # would give other facts depending on what happened to the workers.
        newest: dict[str, datetime] = {}
        for user_id in dict.fromkeys(m.user_id for m in said):
            async with self.sessions() as s:
                current = await fact_store.current_facts(s, user_id)
            known_by_user[user_id] = {f.key: f.value for f in current}
            if current:
                newest[user_id] = max(f.valid_from for f in current)
        batch = await prepare_batch(
            self.extractor,
            [BatchMessage(m.user_id, m.content, m.role) for m in said],
            {user: dict(known) for user, known in known_by_user.items()},
        )
        inferred: list[VectorRecord] = []
        for i, m in enumerate(said):
            known = known_by_user[m.user_id]
            # Strictly older: messages of one moment are read in the batch's order.
            late = m.user_id in newest and m.created_at < newest[m.user_id]
            facts: list[Fact] = await batch.extract(
                i, known=await self._known_before(m) if late else known
            )
            for fact in facts:
                if fact.source == "inferred":
                    # A withdrawal nobody stated ends nothing, and has no value to search.
                    record = None if fact.retracts else self._inferred_record(m, fact)
                    if record is not None:
                        inferred.append(record)
                    continue
                outcome = await self._write(m, fact)
                report.facts[outcome.value] = report.facts.get(outcome.value, 0) + 1
                if outcome in (fact_store.Outcome.INSERTED, fact_store.Outcome.SUPERSEDED):
                    known[fact.key] = fact.value
                    newest[m.user_id] = max(m.created_at, newest.get(m.user_id, m.created_at))
                elif outcome is fact_store.Outcome.RETRACTED:
                    # The batch's later messages must not read the withdrawn value as known.
                    known.pop(fact.key, None)
        return inferred

    async def _write(self, m: Message, fact: Fact) -> fact_store.Outcome:
        """Store a stated fact, or keep it as a candidate when its confidence is below
        ``fact_min_confidence``. A withdrawal is never a candidate: in doubt, memstack
        serves less rather than more."""
        limit = self.settings.max_fact_value_bytes
        if not fact.retracts and fact.confidence < self.settings.fact_min_confidence:
            source = fact_store.Source(m.msg_id, m.user_id, m.session_id, m.accepted_at)
            return await candidate_store.write_candidate(
                self.sessions, source, fact, m.created_at, max_value_bytes=limit
            )
        return await fact_store.write_fact(
            self.sessions,
            user_id=m.user_id,
            session_id=m.session_id,
            msg_id=m.msg_id,
            fact=fact,
            at=m.created_at,
            accepted_at=m.accepted_at,
            max_value_bytes=limit,
        )

    async def _own_words(self, messages: Sequence[Message]) -> list[Message]:
        """The messages whose author is their user: another participant's statements
        are never the user's facts."""
        users = {m.user_id for m in messages if m.role == "user"}
        if not users:
            return []
        async with self.sessions() as s:
            names = await identities.read(s, users)
        return [
            m
            for m in messages
            if names.get(m.user_id, UserIdentity(m.user_id)).speaks(m.role, m.name)
        ]

    async def _known_before(self, m: Message) -> dict[str, Any]:
        """The user's facts as they stood just before ``m`` was said."""
        async with self.sessions() as s:
            before = await fact_store.facts_as_of(s, m.user_id, m.created_at - _JUST_BEFORE)
        return {f.key: f.value for f in before}

    def _inferred_record(self, m: Message, fact: Fact) -> VectorRecord | None:
        # Inferred facts are only a hint: searchable, never in the fact table.
        # They pass the fact table's checks all the same (the key is in the vector id).
        problem = fact_problem(fact.key, fact.value, max_bytes=self.settings.max_fact_value_bytes)
        if problem is not None:
            log.warning("dropped an inferred fact of %s: %s", m.msg_id, safe_text(problem[1]))
            return None
        text = f"{fact.key}: {fact.value}"
        meta = self._metadata(m, 0, "inferred", [m.msg_id])
        meta["fact_key"] = fact.key
        return VectorRecord(f"{m.msg_id}#fact-{fact.key}", text, (), meta)
