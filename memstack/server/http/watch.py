"""``memstack serve``'s watch on ingest: jobs that wait while no worker is alive.

The API accepts messages whatever happens behind it; without a worker they reach no
ledger, vector or fact, and nothing else would say so. The watch reads the status
(:meth:`memstack.AsyncMemory.status`, which also sets the Prometheus gauges) every
``interval_s`` and logs a warning when jobs wait with no live worker: once when it
starts, again every ``repeat_s`` while it lasts (a log read hours later still shows
it, without a line per check), and once more when a worker is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from memstack import AsyncMemory, IngestStatus, MemstackError

log = logging.getLogger("memstack.server.watch")

WATCH_INTERVAL_S = 30.0
REPEAT_S = 300.0


class IngestWatch:
    """Warns of stalled ingest; ``check`` is one look, ``run`` looks until stopped."""

    def __init__(self, interval_s: float = WATCH_INTERVAL_S, repeat_s: float = REPEAT_S) -> None:
        self.interval_s = interval_s
        self.repeat_s = repeat_s
        self._warned_at: float | None = None  # while stalled: when it last warned

    async def check(self, mem: AsyncMemory) -> IngestStatus | None:
        """Read the status once and log what changed; None when Redis did not answer
        (``/healthz`` reports that)."""
        try:
            status = await mem.status()
        except MemstackError as exc:
            log.debug("ingest status unknown: %s", exc)
            return None
        now = time.monotonic()
        if status.stalled:
            if self._warned_at is None or now - self._warned_at >= self.repeat_s:
                log.warning(
                    "%d ingest jobs wait (the oldest for %.0f s) and no worker is alive: "
                    "start `memstack worker` with the same settings",
                    status.pending,
                    status.oldest_age_s,
                )
                self._warned_at = now
        elif self._warned_at is not None:
            log.warning(
                "ingest resumed: %d workers alive, %d jobs pending",
                len(status.workers),
                status.pending,
            )
            self._warned_at = None
        return status

    async def run(self, mem: AsyncMemory, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.check(mem)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
