"""``GET /v1/admin/status``: the live ingest workers and how far behind ingest is.

Admin only (the guard keeps ``/v1/admin/…`` from user keys): it names hosts and
process ids. ``/healthz`` stays the load balancer's probe of this process's stores; a
missing worker is no reason to stop routing requests here.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from memstack import IngestStatus
from memstack.server.http.params import MemoryDep, Route


class WorkerOut(BaseModel):
    worker_id: str = Field(description="The consumer name the worker reads as.")
    host: str
    pid: int
    age_s: float = Field(description="Seconds since its last heartbeat.")


class StreamOut(BaseModel):
    stream: str
    pending: int = Field(description="Jobs not yet acknowledged.")
    oldest_age_s: float = Field(description="Seconds the oldest of them has waited.")
    dead_letters: int


class StatusOut(BaseModel):
    workers: list[WorkerOut]
    streams: list[StreamOut]
    pending: int = Field(description="Jobs not yet acknowledged, over every stream.")
    oldest_age_s: float
    stalled: bool = Field(description="Jobs wait and no worker is alive.")

    @classmethod
    def of(cls, status: IngestStatus) -> StatusOut:
        return cls(
            workers=[WorkerOut.model_validate(w, from_attributes=True) for w in status.workers],
            streams=[StreamOut.model_validate(s, from_attributes=True) for s in status.streams],
            pending=status.pending,
            oldest_age_s=status.oldest_age_s,
            stalled=status.stalled,
        )


async def status(mem: MemoryDep) -> StatusOut:
    """The live ingest workers (id, host, pid, seconds since the last heartbeat) and,
    per ingest stream, the jobs not yet acknowledged and how long the oldest waited."""
    return StatusOut.of(await mem.status())


ROUTES: list[Route] = [("GET", "/admin/status", status, {})]
