"""How the deployment is doing, for an operator: the live ingest workers and the lag.

A mixin of :class:`memstack.AsyncMemory`, over the queue. Each read also sets
the Prometheus gauges, so a process that reads the status (``memstack serve`` does,
periodically) exposes it at ``/metrics``.
"""

from __future__ import annotations

from memstack.core import metrics
from memstack.core.status import IngestStatus
from memstack.stores.redis import workers
from memstack.verbs.base import Verbs


class Operations(Verbs):
    async def status(self) -> IngestStatus:
        """The live workers (id, host, pid, seconds since the last beat) and, per
        ingest stream, the jobs not yet acknowledged, the age of the oldest and the dead
        letters. A worker counts as live until its heartbeat's TTL runs out."""
        redis, keys = self.stores.queue.redis, self.stores.queue.keys
        report = IngestStatus(
            workers=tuple(await workers.live_workers(redis, keys)),
            streams=tuple(await workers.stream_lag(redis, keys)),
        )
        metrics.WORKERS_LIVE.set(len(report.workers))
        for lag in report.streams:
            metrics.INGEST_PENDING.labels(lag.stream).set(lag.pending)
            metrics.INGEST_OLDEST_PENDING_SECONDS.labels(lag.stream).set(lag.oldest_age_s)
        return report
