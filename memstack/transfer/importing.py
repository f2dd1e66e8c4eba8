"""Reading an export into a deployment, empty or not.

The file is read three times. First it is checked whole, no store touched: every line
parsed and every record checked (:mod:`memstack.transfer.records`), ids unique within
it, links inside it, the end record present; then its ids are looked up here, and one
another user holds here refuses the file. Nothing is written before both passed, so a
bad file changes nothing. The second pass writes the ledger rows, facts, fact
candidates, summaries, tool results and the users' names in one transaction. After it,
the exchange units of each imported session are derived from the ledger and embedded
with this deployment's embedder, as ``memstack reindex`` does, and the summaries'
chunks too; the third pass sets the task state and stores the knowledge-base documents.
Each of those steps is idempotent, so an import stopped there (a store down) is
finished by running it again, and a file imported twice writes nothing the second time.

Erasure marks are not consulted: an import is an operator's deliberate write, and a
user forgotten here and then imported is there again.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.errors import ValidationError
from memstack.core.identity import UserIdentity
from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.ingest.maintenance import rebuild_session
from memstack.ingest.pipeline import Ingestor
from memstack.ingest.summaries import summary_record
from memstack.knowledge.base import KnowledgeBase
from memstack.stores.redis.transfer_state import mark_windows_incomplete, restore_counters
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import db, erasure, transfer_candidates, transfer_rows
from memstack.stores.sql import summaries as summary_rows
from memstack.stores.sql.transfer_candidates import CandidateData
from memstack.stores.sql.transfer_rows import FactData, SummaryData, ToolResultData
from memstack.stores.vectors.base import VectorRecord
from memstack.transfer import records
from memstack.transfer.fields import parse_line
from memstack.transfer.records import DocumentData, Header, Limits, StateData
from memstack.types import ImportReport as ImportReport

# Called with (stage, done, total): "checking" (lines; total 0 while unknown),
# "writing" (records), "embedding" (messages), "state and knowledge" (records).
TransferProgress = Callable[[str, int, int], None]
ImportSource = str | os.PathLike[str] | bytes | IO[bytes] | IO[str]
# Rows per INSERT.
WRITE_BATCH = 200


@contextmanager
def _seekable(source: ImportSource) -> Iterator[IO[bytes]]:
    """The source as a binary file that can be read again from where it starts."""
    if isinstance(source, bytes):
        yield io.BytesIO(source)
    elif isinstance(source, str | os.PathLike):
        with Path(source).open("rb") as f:
            yield f
    elif isinstance(source, io.TextIOBase) or not source.seekable():
        # Text, or a stream read once: spooled (to disk past 8 MiB) to be read again.
        with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
            while chunk := source.read(1 << 20):
                spool.write(chunk.encode("utf-8") if isinstance(chunk, str) else chunk)
            spool.seek(0)
            yield spool
    else:
        yield source  # type: ignore[misc]


class _Reader:
    """The lines of the file as parsed objects, from its start, as often as asked."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.start = f.tell() if f.seekable() else 0

    def objects(self) -> Iterator[tuple[int, dict[str, Any]]]:
        self.f.seek(self.start)
        n = 0
        while raw := self.f.readline(records.MAX_LINE_BYTES + 1):
            n += 1
            if len(raw) > records.MAX_LINE_BYTES:
                raise ValidationError(
                    f"line {n}: longer than {records.MAX_LINE_BYTES} bytes; not an export"
                )
            obj = parse_line(raw, n)
            if obj is not None:
                yield n, obj

    def records(self, header: Header, limits: Limits) -> Iterator[tuple[int, records.Record]]:
        users = frozenset(header.users)
        for n, obj in self.objects():
            if obj.get("type") not in ("header", "end"):
                yield n, records.read_record(obj, n, users, limits)


@dataclass
class _Plan:
    """What the checking pass learnt: the header, the counts, and every id with its line."""

    header: Header
    counts: Counter[str] = field(default_factory=Counter)
    lines: int = 0
    messages: dict[str, tuple[str, int]] = field(default_factory=dict)
    facts: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    fact_ids: dict[int, tuple[str, int]] = field(default_factory=dict)
    links: list[tuple[int, int]] = field(default_factory=list)
    current: dict[tuple[str, str], int] = field(default_factory=dict)
    candidates: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    candidate_ids: dict[int, tuple[str, int]] = field(default_factory=dict)
    # (id, user, line) of each link between facts and candidates, checked at the end
    to_candidates: list[tuple[int, str, int]] = field(default_factory=list)
    to_facts: list[tuple[int, str, int]] = field(default_factory=list)
    # A user's names are few and written before any other row, so the checking pass
    # keeps them.
    identities: dict[str, tuple[UserIdentity, int]] = field(default_factory=dict)
    summaries: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    tool_results: dict[str, tuple[str, int]] = field(default_factory=dict)
    states: dict[tuple[str, str], int] = field(default_factory=dict)
    documents: dict[tuple[str, str], int] = field(default_factory=dict)
    sessions: set[tuple[str, str]] = field(default_factory=set)
    users: set[str] = field(default_factory=set)

    def note(self, n: int, r: records.Record) -> None:
        """Count ``r`` and refuse an id the file already used."""
        self.counts[records.kind_of(r)] += 1
        if isinstance(r, Message):
            _once(self.messages, r.msg_id, (r.user_id, n), n, f"msg_id {r.msg_id!r}")
            self.sessions.add((r.user_id, r.session_id))
        elif isinstance(r, FactData):
            key = (r.msg_id, r.fact_key)
            _once(self.facts, key, (r.user_id, n), n, f"the fact {r.fact_key!r} of {r.msg_id!r}")
            _once(self.fact_ids, r.id, (r.user_id, n), n, f"fact id {r.id}")
            if r.supersedes_id is not None:
                self.links.append((r.supersedes_id, n))
            if r.candidate_id is not None:
                self.to_candidates.append((r.candidate_id, r.user_id, n))
            if r.valid_until is None:
                what = f"a current value of {r.fact_key!r} for user {r.user_id!r}"
                _once(self.current, (r.user_id, r.fact_key), n, n, what)
        elif isinstance(r, CandidateData):
            key = (r.msg_id, r.fact_key)
            what = f"the candidate {r.fact_key!r} of {r.msg_id!r}"
            _once(self.candidates, key, (r.user_id, n), n, what)
            _once(self.candidate_ids, r.id, (r.user_id, n), n, f"candidate id {r.id}")
            if r.fact_id is not None:
                self.to_facts.append((r.fact_id, r.user_id, n))
        elif isinstance(r, UserIdentity):
            _once(self.identities, r.user_id, (r, n), n, f"the names of user {r.user_id!r}")
        elif isinstance(r, SummaryData):
            key = (r.session_id, r.last_msg_id)
            _once(self.summaries, key, (r.user_id, n), n, f"the summary ending {r.last_msg_id!r}")
        elif isinstance(r, ToolResultData):
            _once(self.tool_results, r.ref, (r.user_id, n), n, f"tool result {r.ref!r}")
        elif isinstance(r, StateData):
            key = (r.user_id, r.session_id)
            _once(self.states, key, n, n, f"the state of session {r.session_id!r}")
        else:
            key = (r.namespace, r.doc_id)
            _once(self.documents, key, n, n, f"document {r.doc_id!r} of {r.namespace!r}")
        if not isinstance(r, DocumentData | StateData):
            self.users.add(r.user_id)


def _once(seen: dict[Any, Any], key: Any, value: Any, n: int, what: str) -> None:
    if key in seen:
        first = seen[key]
        line = first[1] if isinstance(first, tuple) else first
        raise ValidationError(f"line {n}: {what} appears twice in the file (first on line {line})")
    seen[key] = value


def _check(reader: _Reader, limits: Limits, progress: TransferProgress | None) -> _Plan:
    """The first pass: every line read and checked; nothing is written."""
    header: Header | None = None
    end: int | None = None
    plan: _Plan | None = None
    last = 0
    for n, obj in reader.objects():
        last = n
        if progress is not None and n % 1000 == 0:
            progress("checking", n, 0)
        if header is None:
            header = records.read_header(obj, n)
            plan = _Plan(header)
            continue
        assert plan is not None
        if end is not None:
            raise ValidationError(f"line {n}: a record after the end record")
        if obj.get("type") == "end":
            end = records.read_end(obj, n)
            continue
        plan.note(n, records.read_record(obj, n, frozenset(header.users), limits))
        plan.lines += 1
    if plan is None:
        raise ValidationError("the file is empty: an export begins with its header line")
    if end is None:
        raise ValidationError(
            f"the file ends at line {last} without its end record: it was cut short"
        )
    if end != plan.lines:
        raise ValidationError(f"the end record counts {end} records; the file holds {plan.lines}")
    for target, n in plan.links:
        if target not in plan.fact_ids:
            raise ValidationError(f"line {n}: supersedes_id {target} names no fact of the file")
    _check_links(plan.to_candidates, plan.candidate_ids, "candidate_id", "candidate")
    _check_links(plan.to_facts, plan.fact_ids, "fact_id", "fact")
    return plan


def _check_links(
    links: list[tuple[int, str, int]], ids: dict[int, tuple[str, int]], name: str, what: str
) -> None:
    """Each link names a row of the file, and one of the same user."""
    for target, user, n in links:
        if target not in ids:
            raise ValidationError(f"line {n}: {name} {target} names no {what} of the file")
        if ids[target][0] != user:
            raise ValidationError(
                f"line {n}: {name} {target} names a {what} of another user (line {ids[target][1]})"
            )


async def _check_here(s: AsyncSession, plan: _Plan) -> None:
    """Refuse the file when an id of it belongs to another user here."""
    checks: list[tuple[str, dict[Any, tuple[str, int]], dict[Any, str]]] = [
        ("msg_id", plan.messages, await transfer_rows.message_owners(s, list(plan.messages))),
        ("fact", plan.facts, await transfer_rows.fact_owners(s, list(plan.facts))),
        (
            "fact candidate",
            plan.candidates,
            await transfer_candidates.candidate_owners(s, list(plan.candidates)),
        ),
        ("summary", plan.summaries, await transfer_rows.summary_owners(s, list(plan.summaries))),
        (
            "tool result",
            plan.tool_results,
            await transfer_rows.tool_result_owners(s, list(plan.tool_results)),
        ),
    ]
    for what, ids, owners in checks:
        for key, owner in owners.items():
            user, n = ids[key]
            if owner != user:
                raise ValidationError(
                    f"line {n}: this {what} ({key!r}) belongs to another user in this "
                    "deployment; nothing was imported"
                )


@dataclass
class Importer:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    working: WorkingMemory
    ingestor: Callable[[], Awaitable[Ingestor]]
    knowledge: Callable[[str], Awaitable[KnowledgeBase]]
    progress: TransferProgress | None = None

    async def run(self, source: ImportSource) -> ImportReport:
        limits = Limits.of(self.settings)
        with _seekable(source) as f:
            reader = _Reader(f)
            plan = _check(reader, limits, self.progress)
            async with db.guarded("import"), self.sessions() as s:
                await _check_here(s, plan)
            report = ImportReport(list(plan.header.users), dict(plan.counts))
            await self._rows(reader, plan, limits, report)
            async with db.guarded("import"), self.sessions.begin() as s:
                # An import can multiply a table's rows at once: plans chosen for the
                # small table would walk the new rows.
                await db.refresh_statistics(s)
            await self._vectors(plan, report)
            await self._state_and_knowledge(reader, plan, limits, report)
        return report

    def _tick(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    async def _rows(
        self, reader: _Reader, plan: _Plan, limits: Limits, report: ImportReport
    ) -> None:
        """The second pass: the SQL rows, in one transaction."""
        written: Counter[str] = Counter()
        facts: list[FactData] = []
        candidates: list[CandidateData] = []
        batch: dict[str, list[Any]] = {"message": [], "summary": [], "tool_result": []}
        kinds = ("message", "fact", "candidate", "identity", "summary", "tool_result")
        total = sum(plan.counts[k] for k in kinds)
        done = plan.counts["identity"]

        async def flush(s: AsyncSession) -> None:
            nonlocal done
            written["message"] += await transfer_rows.insert_messages(s, batch["message"])
            written["summary"] += await transfer_rows.insert_summaries(s, batch["summary"])
            written["tool_result"] += await transfer_rows.insert_tool_results(
                s, batch["tool_result"]
            )
            done += sum(len(rows) for rows in batch.values())
            for rows in batch.values():
                rows.clear()
            self._tick("writing", done + len(facts) + len(candidates), total)

        async with db.guarded("import"), self.sessions.begin() as s:
            if plan.users:
                await erasure.ensure_users(s, plan.users, datetime.now(UTC))
                # Held to the end: a forget_user meanwhile waits, then erases the import.
                await erasure.hold_users(s, plan.users)
            if plan.identities:
                written["identity"] = await self._identities(s, plan)
            for _n, r in reader.records(plan.header, limits):
                if isinstance(r, FactData):
                    facts.append(r)
                elif isinstance(r, CandidateData):
                    candidates.append(r)
                elif not isinstance(r, StateData | DocumentData | UserIdentity):
                    batch[records.kind_of(r)].append(r)
                    if sum(len(rows) for rows in batch.values()) >= WRITE_BATCH:
                        await flush(s)
            await flush(s)
            # Candidates first: the facts link to them, and confirmed ones to the facts.
            candidate_ids, new = await transfer_candidates.write_candidates(s, candidates)
            written["fact"], fact_ids = await transfer_rows.write_facts(s, facts, candidate_ids)
            await transfer_candidates.link_candidates(s, new, candidate_ids, fact_ids)
            if candidates:
                written["candidate"] = len(new)
        self._tick("writing", total, total)
        report.written.update(written)

    @staticmethod
    async def _identities(s: AsyncSession, plan: _Plan) -> int:
        """Bind the users' names as the file has them; how many users' names changed.
        Written before any other row: updating a user's row waits for the ingest
        transactions that share-lock it, which then cannot be waiting for a row or a
        fact key of this transaction."""
        changed = 0
        for user_id in sorted(plan.identities):
            identity, _n = plan.identities[user_id]
            changed += await transfer_candidates.write_identity(s, identity)
        return changed

    async def _vectors(self, plan: _Plan, report: ImportReport) -> None:
        """Chunks of every imported session and summary, embedded here."""
        if not plan.sessions and not plan.summaries:
            return
        ingestor = await self.ingestor()
        total, done = plan.counts["message"], 0

        def counted(messages: int, _chunks: int) -> None:
            nonlocal done
            done += messages
            self._tick("embedding", done, total)

        async with db.guarded("import"):
            for user_id, session_id in sorted(plan.sessions):
                await rebuild_session(ingestor, user_id, session_id, clear=True, on_batch=counted)
            chunks = await self._summary_records(plan, ingestor.embedder.model_version)
        for i in range(0, len(chunks), 256):
            await ingestor.store(chunks[i : i + 256])
        await mark_windows_incomplete(self.working, plan.sessions)

    async def _summary_records(self, plan: _Plan, model_version: str) -> list[VectorRecord]:
        out: list[VectorRecord] = []
        async with self.sessions() as s:
            for user_id in sorted({user for user, _n in plan.summaries.values()}):
                for r in await summary_rows.stored(s, user_id):
                    if (r.session_id, r.last_msg_id) not in plan.summaries:
                        continue
                    record = summary_record(
                        r.user_id, r.session_id, r.last_msg_id, r.last_at, r.content, model_version
                    )
                    if record is not None:
                        out.append(record)
        return out

    async def _state_and_knowledge(
        self, reader: _Reader, plan: _Plan, limits: Limits, report: ImportReport
    ) -> None:
        """The third pass: task state into Redis, documents into the knowledge base."""
        total = plan.counts["state"] + plan.counts["document"]
        if not total:
            return
        done = states = documents = 0
        for _n, r in reader.records(plan.header, limits):
            if isinstance(r, StateData):
                if r.fields:
                    await self.working.set_state(r.user_id, r.session_id, r.fields)
                await restore_counters(
                    self.working, r.user_id, r.session_id, r.turns, r.last_msg_id, r.last_msg_at
                )
                states += 1
            elif isinstance(r, DocumentData):
                kb = await self.knowledge(r.namespace)
                result = await kb.restore(r.doc_id, r.title, r.source, r.content_hash, r.chunks)
                documents += result.status != "unchanged"
            else:
                continue
            done += 1
            self._tick("state and knowledge", done, total)
        report.written["state"] = states
        report.written["document"] = documents
