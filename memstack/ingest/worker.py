"""The ingest worker: reads batches from the queue, runs :class:`Ingestor`, acknowledges.

Run as ``memstack worker`` (any number at once) or in-process with
``AsyncMemory.drain()``. A batch that fails as a whole is retried job by job, so one
poison job cannot hold back the others; it reaches the dead-letter stream after
``ingest_max_deliveries`` deliveries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime

from memstack.core import metrics
from memstack.core.errors import MemstackError, SchemaMismatch, StoreUnavailable
from memstack.core.messages import Message
from memstack.ingest.pipeline import Ingestor
from memstack.ingest.summaries import SessionSummaries
from memstack.stores.redis import workers as heartbeats
from memstack.stores.redis.queue import IngestQueue, Job, message_from_job
from memstack.types import WorkerReport as WorkerReport

log = logging.getLogger("memstack.ingest.worker")

# A store that is down or of the wrong schema is no fault of the job: such errors stop
# the batch (the jobs stay pending) instead of counting towards the dead-letter stream.
INFRASTRUCTURE = (StoreUnavailable, SchemaMismatch)
# Jobs with no recorded error of their own (their worker died with them) get this many
# times more deliveries before they are set aside.
SILENT_FAILURE_FACTOR = 10
# How long a worker's heartbeat lives; it beats every third of it, so a worker is taken
# for dead only after missing two beats in a row (a stalled loop, a lost process).
HEARTBEAT_TTL_S = 15.0


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Progress:
    """What a worker did since its last progress line (``worker_log_interval_s``)."""

    started: float = field(default_factory=time.monotonic)
    batches: int = 0
    processed: int = 0
    failed: int = 0

    def add(self, report: WorkerReport) -> None:
        if report.processed or report.failed or report.dead_lettered:
            self.batches += 1
        self.processed += report.processed
        self.failed += report.failed

    def line(self, consumer: str, backlog: int, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        return (
            f"worker {consumer}: {self.batches} batches, {self.processed} messages in "
            f"{elapsed:.0f} s ({self.processed / elapsed:.1f} msg/s), {self.failed} failed, "
            f"backlog {backlog}"
        )


@dataclass
class Worker:
    queue: IngestQueue
    ingestor: Ingestor
    summarizer: SessionSummaries | None
    batch_size: int
    consumer: str = field(default_factory=consumer_name)
    log_interval_s: float = 30.0
    heartbeat_ttl_s: float = HEARTBEAT_TTL_S
    # Sessions touched since their last summary check: (user_id, session_id).
    dirty: set[tuple[str, str]] = field(default_factory=set)

    async def run_batch(self, block_ms: int | None = None) -> WorkerReport:
        """Read and process one batch; returns what happened."""
        jobs = await self.queue.read(self.consumer, self.batch_size, block_ms)
        if not jobs:
            return WorkerReport()
        started = time.perf_counter()
        report = await self._run_jobs(jobs)
        metrics.INGEST_BATCH_SECONDS.observe(time.perf_counter() - started)
        for outcome in ("processed", "failed", "dead_lettered"):
            metrics.INGEST_PROCESSED.labels(outcome).inc(getattr(report, outcome))
        return report

    async def _run_jobs(self, jobs: list[Job]) -> WorkerReport:
        report = WorkerReport()
        live: list[Job] = []
        for job in jobs:
            error = self.queue.last_errors.get(job.entry_id)
            limit = self.queue.max_deliveries * (1 if error else SILENT_FAILURE_FACTOR)
            if job.deliveries > limit:
                error = error or f"no worker finished it in {job.deliveries} deliveries"
                await self.queue.dead_letter(job, error)
                log.error("ingest job %s dead-lettered: %s", job.entry_id, error)
                report.dead_lettered += 1
            else:
                live.append(job)
        if not live:
            return report
        try:
            await self._process(live)
            await self.queue.ack(live)
            report.processed += len(live)
        except INFRASTRUCTURE:
            raise
        except Exception as batch_exc:  # any failure: fall back to one job at a time
            log.warning("ingest batch of %d failed (%s); retrying job by job", len(live), batch_exc)
            for job in live:
                try:
                    await self._process([job])
                except INFRASTRUCTURE:
                    raise
                except Exception as exc:  # recorded, retried, then dead-lettered
                    msg = f"{type(exc).__name__}: {exc}"
                    self.queue.last_errors[job.entry_id] = msg
                    report.failed += 1
                    report.errors.append(msg)
                    log.warning(
                        "ingest job %s failed (delivery %d): %s", job.entry_id, job.deliveries, msg
                    )
                    continue
                await self.queue.ack([job])
                report.processed += 1
        return report

    async def _process(self, jobs: list[Job]) -> None:
        messages: list[Message] = [message_from_job(j) for j in jobs]
        result = await self.ingestor.process(messages)
        self.dirty |= result.sessions

    async def summarize_quiet(self, now: datetime | None = None) -> int:
        """Summarise the dirty sessions that have gone quiet; returns how many were made."""
        if self.summarizer is None or not self.dirty:
            return 0
        made = 0
        for user_id, session_id in list(self.dirty):
            try:
                outcome = await self.summarizer.maybe_summarize(user_id, session_id, now=now)
            except MemstackError as exc:
                log.warning("summary of %s failed: %s", session_id, exc)
                continue
            if outcome.done:
                self.dirty.discard((user_id, session_id))
                made += int(outcome.created)
        return made

    async def run(self, stop: asyncio.Event, *, block_ms: int = 1000) -> WorkerReport:
        """Process until ``stop`` is set; the batch in hand is always finished first.
        The worker beats meanwhile (:mod:`memstack.stores.redis.workers`), from a task
        of its own so that a long batch does not make it look dead, and clears its
        heartbeat when it stops."""
        beating = asyncio.create_task(self._beat(stop))
        try:
            return await self._loop(stop, block_ms)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            with contextlib.suppress(MemstackError):
                await heartbeats.clear(self.queue.redis, self.queue.keys, self.consumer)

    async def _beat(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await heartbeats.beat(
                    self.queue.redis, self.queue.keys, self.consumer, self.heartbeat_ttl_s
                )
            except MemstackError as exc:  # Redis is down: the batch loop says so too
                log.warning("worker %s: heartbeat failed (%s)", self.consumer, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.heartbeat_ttl_s / 3)

    async def _loop(self, stop: asyncio.Event, block_ms: int) -> WorkerReport:
        total = WorkerReport()
        last_summary_check = 0.0
        backoff_s = 0.5
        progress = Progress()
        while not stop.is_set():
            if time.monotonic() - progress.started >= self.log_interval_s:
                progress = await self._log_progress(progress)
            try:
                report = await self.run_batch(block_ms=block_ms)
            except MemstackError as exc:
                backoff_s = min(backoff_s * 2, 30.0)
                log.error("worker: %s; retrying in %.0f s", exc, backoff_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff_s)
                continue
            backoff_s = 0.5
            total.add(report)
            progress.add(report)
            if time.monotonic() - last_summary_check > 5:
                total.summaries += await self.summarize_quiet()
                last_summary_check = time.monotonic()
        return total

    async def _log_progress(self, progress: Progress) -> Progress:
        """Log one progress line and set the backlog gauge; a fresh interval starts."""
        try:
            backlog = await self.queue.pending_count()
        except MemstackError as exc:  # the next batch reports the outage itself
            log.warning("worker %s: backlog unknown (%s)", self.consumer, exc)
            return Progress()
        metrics.INGEST_BACKLOG.set(backlog)
        log.info("%s", progress.line(self.consumer, backlog, time.monotonic()))
        return Progress()
