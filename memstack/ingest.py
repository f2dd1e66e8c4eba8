"""The asynchronous half of the write path (seed 002 §3): one batch of ingest jobs.

For each batch: the ledger (``ON CONFLICT DO NOTHING``), exchange-unit chunks embedded
in one call and upserted under ``msg_id#chunk_idx``, facts extracted and written with
supersede, ``inferred`` facts to the vector layer only. Every step is idempotent, so a
redelivered job changes nothing; a job is acknowledged by the worker only after all of
them succeed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack import facts as fact_store
from memstack import ledger
from memstack.chunking import UNIT_LOOKBACK, ChatMessage, exchange_units, split_semantic
from memstack.db import guarded
from memstack.embedders import Embedder
from memstack.errors import SessionOwnershipError, ValidationError
from memstack.extraction.base import Extractor, Fact
from memstack.ids import chunk_id, validate_id
from memstack.ledger import LedgerMessage
from memstack.queue import Job
from memstack.settings import Settings
from memstack.summary import classify_topic, topic_code
from memstack.vectorstores.base import VectorRecord, VectorStore
from memstack.working_memory import ROLES, validate_name

log = logging.getLogger("memstack.ingest")


def _unit_members(context: Sequence[LedgerMessage], m: LedgerMessage) -> list[LedgerMessage]:
    """``m`` alone if it is a user turn; else the user turn it answers and what follows."""
    if m.role == "user":
        return [m]
    pos = next((i for i, x in enumerate(context) if x.msg_id == m.msg_id), None)
    if pos is None:
        return [m]
    for back in range(pos - 1, max(pos - 1 - UNIT_LOOKBACK, -1), -1):
        if context[back].role == "user":
            return list(context[back : pos + 1])
    return [m]


def message_from_job(job: Job) -> LedgerMessage:
    """Validate a stream entry; a malformed one raises and ends in the dead-letter stream."""
    f = job.fields
    try:
        msg_id, user_id, session_id = f["msg_id"], f["user_id"], f["session_id"]
        role, content, ts_ms = f["role"], f["content"], int(f["ts_ms"])
    except (KeyError, ValueError) as exc:
        raise ValidationError(f"malformed ingest job {job.entry_id}: {exc!r}") from exc
    validate_id("user_id", user_id)
    validate_id("session_id", session_id)
    if role not in ROLES or not content.strip():
        raise ValidationError(f"malformed ingest job {job.entry_id}: role {role!r} / empty content")
    try:
        # Jobs queued before names existed have no "name"; "" also means none.
        name = validate_name(f.get("name") or None)
    except ValidationError as exc:
        raise ValidationError(f"malformed ingest job {job.entry_id}: {exc}") from exc
    return LedgerMessage(
        msg_id,
        user_id,
        session_id,
        role,
        content,
        datetime.fromtimestamp(ts_ms / 1000, tz=UTC),
        name,
    )


@dataclass
class BatchReport:
    messages: int = 0
    new_ledger_rows: int = 0
    chunks: int = 0
    facts: dict[str, int] = field(default_factory=dict)
    sessions: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class Ingestor:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    embedder: Embedder
    vectors: VectorStore
    extractor: Extractor

    async def process(self, messages: Sequence[LedgerMessage]) -> BatchReport:
        async with guarded("ingest"):
            return await self._process(messages)

    async def _process(self, messages: Sequence[LedgerMessage]) -> BatchReport:
        report = BatchReport(messages=len(messages))
        async with self.sessions.begin() as s:
            await self._check_owners(s, messages)
            report.new_ledger_rows = await ledger.insert_messages(s, messages)
        records = await self.dialogue_records(messages)
        records += await self._facts(messages, report)
        report.chunks = await self.store(records)
        report.sessions = {(m.user_id, m.session_id) for m in messages}
        return report

    async def _check_owners(self, s: AsyncSession, messages: Sequence[LedgerMessage]) -> None:
        # Redis binds a session to its user while the state lives; the ledger does so
        # for good, so a session id reused by another user days later is refused.
        owners: dict[str, str] = {}
        for m in messages:
            if m.session_id not in owners:
                owners[m.session_id] = await ledger.session_owner(s, m.session_id) or m.user_id
            if owners[m.session_id] != m.user_id:
                raise SessionOwnershipError(
                    f"session {m.session_id!r} belongs to another user; message {m.msg_id} refused"
                )

    async def store(self, records: Sequence[VectorRecord]) -> int:
        """Embed the records' texts in one call and upsert them; returns how many."""
        if not records:
            return 0
        vectors = await self.embedder.embed([r.text for r in records])
        await self.vectors.upsert(
            [
                VectorRecord(r.id, r.text, v, r.metadata)
                for r, v in zip(records, vectors, strict=True)
            ]
        )
        return len(records)

    async def dialogue_records(self, messages: Sequence[LedgerMessage]) -> list[VectorRecord]:
        """Exchange-unit chunks (no vectors yet): a reply joins the user turn it answers,
        under that turn's id. ``messages`` must already be in the ledger."""
        out: list[VectorRecord] = []
        contexts = await self._session_contexts(messages)
        for m in messages:
            members = _unit_members(contexts[m.session_id], m)
            unit = exchange_units(
                [ChatMessage(x.msg_id, x.role, x.content, x.name) for x in members]
            )[-1]
            head = next(x for x in members if x.msg_id == unit.msg_ids[0])
            pieces = split_semantic(
                unit.text,
                split_chars=self.settings.chunk_split_chars,
                merge_chars=self.settings.chunk_merge_chars,
            )
            topic = topic_code(classify_topic(unit.text, [], self.settings.locale)) or ""
            for idx, text in enumerate(pieces):
                meta = self._metadata(head, idx, "dialogue", unit.msg_ids)
                meta["topic"] = topic
                out.append(VectorRecord(chunk_id(head.msg_id, idx), text, (), meta))
        # A later message of the same unit in this batch rewrites the same ids: keep the last.
        return list({r.id: r for r in out}.values())

    async def _session_contexts(
        self, messages: Sequence[LedgerMessage]
    ) -> dict[str, list[LedgerMessage]]:
        """Per session, the ledger's messages up to the batch's last one, in ledger order:
        one query per session rather than one per reply."""
        by_session: dict[str, list[LedgerMessage]] = {}
        for m in messages:
            by_session.setdefault(m.session_id, []).append(m)
        out: dict[str, list[LedgerMessage]] = {}
        async with self.sessions() as s:
            for session_id, mine in by_session.items():
                out[session_id] = await ledger.messages_before(
                    s,
                    mine[0].user_id,
                    session_id,
                    until=max(m.created_at for m in mine),
                    limit=len(mine) + UNIT_LOOKBACK + 1,
                )
        return out

    def _metadata(
        self, head: LedgerMessage, idx: int, layer: str, msg_ids: Sequence[str]
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

    async def _facts(
        self, messages: Sequence[LedgerMessage], report: BatchReport
    ) -> list[VectorRecord]:
        """Write stated facts (in message order, so later overrides earlier); return the
        inferred ones as vector records."""
        inferred: list[VectorRecord] = []
        known_by_user: dict[str, dict[str, Any]] = {}
        for m in messages:
            if m.role != "user":
                continue
            if m.user_id not in known_by_user:
                async with self.sessions() as s:
                    current = await fact_store.current_facts(s, m.user_id)
                known_by_user[m.user_id] = {f.key: f.value for f in current}
            known = known_by_user[m.user_id]
            facts: list[Fact] = await self.extractor.extract(m.content, role=m.role, known=known)
            for fact in facts:
                if fact.source == "inferred":
                    inferred.append(self._inferred_record(m, fact))
                    continue
                outcome = await fact_store.write_fact(
                    self.sessions,
                    user_id=m.user_id,
                    session_id=m.session_id,
                    msg_id=m.msg_id,
                    fact=fact,
                    at=m.created_at,
                )
                report.facts[outcome.value] = report.facts.get(outcome.value, 0) + 1
                if outcome in (fact_store.Outcome.INSERTED, fact_store.Outcome.SUPERSEDED):
                    known[fact.key] = fact.value
        return inferred

    def _inferred_record(self, m: LedgerMessage, fact: Fact) -> VectorRecord:
        # Inferred facts are only a hint (seed §3.2): searchable, never in the fact table.
        text = f"{fact.key}: {fact.value}"
        meta = self._metadata(m, 0, "inferred", [m.msg_id])
        meta["fact_key"] = fact.key
        return VectorRecord(f"{m.msg_id}#fact-{fact.key}", text, (), meta)
