"""Writing an export (:mod:`memstack.transfer.records`): one user, or every user and the
knowledge base.

A user's SQL rows are read in one transaction (a snapshot on PostgreSQL), so their
messages, facts and summaries agree while workers write; then the task state of their
sessions that Redis still holds. What is in the ingest queue and not yet stored by a
worker is not exported: drain or let the workers finish first. ``inferred`` facts,
which live only as vectors, are not exported either (``memstack reindex`` does not keep
them); vectors are never exported, the importing deployment embeds with its own model.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.settings import Settings
from memstack.knowledge.base import KnowledgeBase, registry_collection
from memstack.stores.redis.transfer_state import state_sessions
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import db, transfer_candidates, transfer_rows
from memstack.transfer import records
from memstack.transfer.importing import TransferProgress
from memstack.transfer.records import Record, StateData
from memstack.types import ExportReport as ExportReport

ExportTarget = str | os.PathLike[str] | IO[bytes] | IO[str]
PAGE = 500


@dataclass
class Exporter:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    working: WorkingMemory
    knowledge: Callable[[str], Awaitable[KnowledgeBase]]
    user_id: str | None = None  # None: every user, and the knowledge base
    progress: TransferProgress | None = None
    report: ExportReport = field(default_factory=ExportReport)

    async def lines(self) -> AsyncGenerator[str, None]:
        """The export, line by line (each ends with a newline). The stores are reached
        before the header is given: an error then comes before any line."""
        users = [self.user_id] if self.user_id is not None else await self._users()
        self.report.users = users
        counts: Counter[str] = Counter()
        found = self._records(users)
        try:
            first = await anext(found, None)
            yield records.header_line(datetime.now(UTC), users, self.user_id is None)
            if first is not None:
                counts[records.kind_of(first)] += 1
                yield records.record_line(first)
                async for record in found:
                    counts[records.kind_of(record)] += 1
                    yield records.record_line(record)
        finally:  # a reader that stops early ends the read transaction now
            await found.aclose()
        self.report.records = dict(counts)
        yield records.end_line(sum(counts.values()))

    async def _records(self, users: list[str]) -> AsyncGenerator[Record, None]:
        for i, user_id in enumerate(users, 1):
            async for record in self._user(user_id):
                yield record
            if self.progress is not None:
                self.progress("exporting", i, len(users))
        if self.user_id is None:
            async for document in self._documents():
                yield document

    async def _users(self) -> list[str]:
        async with db.guarded("export"), self.sessions() as s:
            found = set(await transfer_rows.user_ids(s))
            found |= set(await transfer_candidates.named_users(s))
        found |= {user for user, _session in await state_sessions(self.working)}
        return sorted(found)

    async def _user(self, user_id: str) -> AsyncIterator[Record]:
        async with db.guarded("export"), self.sessions() as s:
            await transfer_rows.snapshot(s)
            after = None
            while True:
                page = await transfer_rows.message_page(s, user_id, after, PAGE)
                for m in page:
                    yield m
                if len(page) < PAGE:
                    break
                after = (page[-1].session_id, page[-1].created_at, page[-1].msg_id)
            facts, withheld = await transfer_rows.fact_rows(s, user_id)
            candidates, unreadable = await transfer_candidates.candidate_rows(s, user_id)
            self.report.withheld_facts += withheld + unreadable
            facts, candidates = transfer_candidates.tie(facts, candidates)
            for fact in facts:
                yield fact
            for candidate in candidates:
                yield candidate
            for summary in await transfer_rows.summary_rows(s, user_id):
                yield summary
            for result in await transfer_rows.tool_result_rows(s, user_id):
                yield result
            names = await transfer_candidates.identity(s, user_id)
            if names is not None:
                yield names
        for user, session_id in await state_sessions(self.working, user_id):
            state = await self.working.get_state(user, session_id)
            if state.fields or state.turns or state.last_msg_id:
                yield StateData(
                    user,
                    session_id,
                    state.fields,
                    state.turns,
                    state.last_msg_id,
                    state.last_msg_at,
                )

    async def _documents(self) -> AsyncIterator[Record]:
        async with db.guarded("export"), self.sessions() as s:
            namespaces = await transfer_rows.kb_namespaces(s, registry_collection(self.settings))
        for namespace in namespaces:
            kb = await self.knowledge(namespace)
            for doc in await kb.documents():
                chunks = await kb.chunk_texts(doc)
                if chunks is None:
                    self.report.skipped_documents.append(f"{namespace}/{doc.doc_id}")
                    continue
                yield records.document_data(doc, chunks)


@contextmanager
def _destination(out: ExportTarget) -> Iterator[IO[bytes] | IO[str]]:
    """The stream to write to. A path is written under a temporary name and renamed
    when complete, so a failed export leaves no partial file under the name asked for."""
    if not isinstance(out, str | os.PathLike):
        yield out
        return
    path = Path(out)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("wb") as f:
            yield f
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


async def write_export(exporter: Exporter, out: ExportTarget) -> ExportReport:
    """Write the export to a path or a stream (binary or text)."""
    with _destination(out) as f:
        text = isinstance(f, io.TextIOBase)
        async for line in exporter.lines():
            f.write(line if text else line.encode("utf-8"))  # type: ignore[arg-type]
        f.flush()
    return exporter.report
