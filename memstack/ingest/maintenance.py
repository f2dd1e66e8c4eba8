"""Keeping the layers healthy over months (docs/spec.md, Retention): archive, prune, reindex.

Every destructive step has a dry run that reports what it would do; the specification's own
warning is a WHERE clause that once archived live data.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.settings import Settings
from memstack.ingest import units
from memstack.ingest.pipeline import Ingestor
from memstack.ingest.summaries import all_summary_records
from memstack.ingest.summarisers import TOPICS
from memstack.stores.sql import erasure, fact_archive, ledger
from memstack.stores.vectors.base import VectorStore
from memstack.types import MaintenanceReport as MaintenanceReport
from memstack.types import ReindexReport as ReindexReport

# Dialogue about preferences and plans outlives the retention window.
KEPT_TOPICS = frozenset({"preference", "plan"})


async def archive_facts(
    sessions: async_sessionmaker[AsyncSession], settings: Settings, *, now: datetime, dry_run: bool
) -> int:
    """Archive superseded facts, and facts older than ``fact_archive_days`` that no
    context ever used (see :func:`memstack.stores.sql.fact_archive.archive`)."""
    unused_before = now - timedelta(days=settings.fact_archive_days)
    async with sessions.begin() as s:
        return await fact_archive.archive(s, now=now, unused_before=unused_before, dry_run=dry_run)


async def prune_vectors(
    sessions: async_sessionmaker[AsyncSession],
    vectors: VectorStore,
    settings: Settings,
    *,
    now: datetime,
    dry_run: bool,
) -> tuple[list[str], int]:
    """Drop the dialogue vectors of users silent for ``retention_dialogue_days``, except
    preference and plan talk; active users keep everything. Returns (users, vectors)."""
    cutoff = now - timedelta(days=settings.retention_dialogue_days)
    async with sessions() as s:
        inactive = await ledger.users_silent_since(s, cutoff)
    pruned = 0
    for user in inactive:
        for topic in ("", *sorted(set(TOPICS) - KEPT_TOPICS)):
            scope = {"user_id": user, "source_layer": "dialogue", "topic": topic}
            n = await vectors.count(scope)
            if n and not dry_run:
                await vectors.delete(scope=scope)
            pruned += n
    return inactive, pruned


async def reindex(
    ingestor: Ingestor,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> ReindexReport:
    """Rebuild semantic memory from the ledger with the configured embedder.

    The caller has dropped the old collection. Dialogue chunks and summaries come back;
    ``inferred`` facts (never stored in SQL) do not. Each session is written under the
    lock ingest takes (:mod:`memstack.stores.sql.erasure`), so a worker writing to the same session
    meanwhile cannot interleave with it.
    """
    report = ReindexReport()
    async with ingestor.sessions() as s:
        total = await ledger.count_all(s)
        pairs = await ledger.all_sessions(s)

    def counted(messages: int, chunks: int) -> None:
        report.messages += messages
        report.chunks += chunks
        if progress is not None:
            progress(report.messages, total)

    for user_id, session_id in pairs:
        await rebuild_session(ingestor, user_id, session_id, on_batch=counted)
    summaries = await all_summary_records(ingestor.sessions, ingestor.embedder.model_version)
    for i in range(0, len(summaries), 256):
        await ingestor.store(summaries[i : i + 256])
    report.summaries = len(summaries)
    return report


async def rebuild_session(
    ingestor: Ingestor,
    user_id: str,
    session_id: str,
    *,
    clear: bool = False,
    on_batch: Callable[[int, int], None] | None = None,
) -> None:
    """Write the chunks of every exchange unit of one session, derived from its ledger
    rows and embedded with the configured embedder (``memstack reindex``, ``memstack
    import``); ``on_batch(messages, chunks)`` after each page of them.

    Under the lock ingest takes for the session (:mod:`memstack.stores.sql.erasure`), so
    a worker writing to it meanwhile cannot interleave. ``clear`` first deletes the
    session's dialogue chunks: where the collection was not dropped, messages that joined
    the ledger between others may leave chunks under ids that are no longer unit heads.
    """
    async with ingestor.sessions.begin() as s:
        await erasure.hold_users(s, [user_id])
        await erasure.lock_sessions(s, [(user_id, session_id)])
        if clear:
            scope = {"user_id": user_id, "session_id": session_id, "source_layer": "dialogue"}
            await ingestor.vectors.delete(scope=scope)
        async for batch in units.of_session(s, user_id, session_id):
            records = [r for unit in batch for r in ingestor.unit_records(unit)]
            chunks = await ingestor.store(records)
            if on_batch is not None:
                on_batch(sum(len(unit.members) for unit in batch), chunks)
