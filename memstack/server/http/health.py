"""``/healthz``: each store of the process's memory, probed at most once a second.

Load balancers and probes call it often and all at once; one round of probes answers
them all (single flight), and its result stands for ``ttl_s``. A store that is down is
named by its layer and the error's type, never by its address.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from sqlalchemy import text

from memstack import AsyncMemory
from memstack.server.schemas import HealthOut, StoreHealth

log = logging.getLogger("memstack.server.http")


async def _probe(name: str, probe: Callable[[], Awaitable[str]], timeout_s: float) -> StoreHealth:
    try:
        return StoreHealth(ok=True, detail=await asyncio.wait_for(probe(), timeout_s))
    except TimeoutError:
        return StoreHealth(ok=False, detail=f"no answer within {timeout_s} s")
    except Exception as exc:
        # The error names hosts, ports and URLs: the log has it, the anonymous probe not.
        log.warning("health probe of %s failed: %s: %s", name, type(exc).__name__, exc)
        return StoreHealth(ok=False, detail=f"unavailable ({type(exc).__name__})")


async def health(mem: AsyncMemory) -> HealthOut:
    """Each store of this process's memory, probed once."""

    async def redis() -> str:
        await mem.working.redis.ping()
        return "ping ok" + (" (embedded)" if mem.settings.embedded_redis else "")

    async def database() -> str:
        async with mem.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return f"{mem.engine.dialect.name} ok"

    async def vectors() -> str:
        store = await mem.memory_vectors()
        return f"{await store.count()} vectors"

    async def knowledge_base() -> str:
        kb = await mem.knowledge_base()
        return f"{await kb.store.count()} chunks"

    probes: dict[str, Callable[[], Awaitable[str]]] = {
        "redis": redis,
        "database": database,
        "vectors": vectors,
    }
    # Only a configured knowledge-base server is a dependency worth failing a probe for.
    if mem.settings.kb_url:
        probes["knowledge_base"] = knowledge_base
    timeout_s = mem.settings.store_timeout_s
    results = await asyncio.gather(*(_probe(n, p, timeout_s) for n, p in probes.items()))
    stores = dict(zip(probes, results, strict=True))
    return HealthOut(status="ok" if all(s.ok for s in results) else "down", stores=stores)


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
