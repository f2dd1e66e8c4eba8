"""What ``AsyncMemory.status()`` reports: the live ingest workers and how far behind
ingest is. Read by ``memstack status``, ``GET /v1/admin/status``, the inspector's
operations page, the Prometheus gauges and ``memstack serve``'s watch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerBeat:
    """A live worker: its id (the consumer name it reads as), host, process id, and how
    long ago it last beat (seconds)."""

    worker_id: str
    host: str
    pid: int
    age_s: float


@dataclass(frozen=True)
class StreamLag:
    """One ingest stream: jobs not yet acknowledged, how long the oldest has waited
    (seconds; 0 with none), and its dead letters."""

    stream: str
    pending: int
    oldest_age_s: float
    dead_letters: int


@dataclass(frozen=True)
class IngestStatus:
    """The live workers and each ingest stream's lag."""

    workers: tuple[WorkerBeat, ...]
    streams: tuple[StreamLag, ...]

    @property
    def pending(self) -> int:
        """Jobs not yet acknowledged, over every stream."""
        return sum(s.pending for s in self.streams)

    @property
    def oldest_age_s(self) -> float:
        """How long the oldest pending job of any stream has waited (seconds)."""
        return max((s.oldest_age_s for s in self.streams), default=0.0)

    @property
    def stalled(self) -> bool:
        """Jobs wait and no worker is alive to take them."""
        return self.pending > 0 and not self.workers
