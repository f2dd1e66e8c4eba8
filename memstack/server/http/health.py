"""``/healthz``: each store of the process's memory, probed at most once a second.

Load balancers and probes call it often and all at once; one round of probes answers
them all (single flight), and its result stands for ``ttl_s``. A store that is down is
named by its layer and the error's type, never by its address.
"""

from __future__ import annotations

import asyncio
import time

from memstack import AsyncMemory
from memstack.server.schemas import HealthOut, StoreHealth


async def health(mem: AsyncMemory) -> HealthOut:
    """Each store of this process's memory, probed once."""
    stores = {n: StoreHealth(ok=s.ok, detail=s.detail) for n, s in (await mem.health()).items()}
    return HealthOut(status="ok" if all(s.ok for s in stores.values()) else "down", stores=stores)


class HealthCheck:
    """The stores' health, probed at most once per ``ttl_s``: concurrent callers share
    one round of probes (single flight) and later ones its result until it is
    ``ttl_s`` old, so a thousand load-balancer checks cost one probe of each store."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.rounds = 0
        self._last: HealthOut | None = None
        self._at = 0.0
        self._running: asyncio.Future[HealthOut] | None = None

    async def report(self, mem: AsyncMemory) -> HealthOut:
        if self._last is not None and time.monotonic() - self._at < self.ttl_s:
            return self._last
        if self._running is None:
            self._running = asyncio.ensure_future(self._round(mem))
        # shield: a caller that gives up does not cancel the round the others wait for.
        return await asyncio.shield(self._running)

    async def _round(self, mem: AsyncMemory) -> HealthOut:
        try:
            self.rounds += 1
            report = await health(mem)
            self._last, self._at = report, time.monotonic()
            return report
        finally:
            self._running = None
