"""Fact hits: which facts reached a context, written in batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.stores.sql import facts as fact_store

log = logging.getLogger("memstack.recall")

# Most seconds a fact hit waits to be written (see HitBuffer).
HIT_FLUSH_S = 1.0


class HitBuffer:
    """Fact hits of calls since the last write, by fact id: (count, latest call time).

    One write per HIT_FLUSH_S rather than a transaction per call, which cost more CPU
    than any query of the call; settle() writes what is left."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions
        self._hits: dict[int, tuple[int, float]] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._flush_now = asyncio.Event()

    def note(self, fact_ids: Sequence[int], now_s: float) -> None:
        for fid in fact_ids:
            count, at = self._hits.get(fid, (0, now_s))
            self._hits[fid] = (count + 1, max(at, now_s))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_later())

    async def settle(self) -> None:
        """Write the buffered hits now."""
        while self._flusher is not None:
            self._flush_now.set()
            await self._flusher

    async def _flush_later(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._flush_now.wait(), HIT_FLUSH_S)
        self._flush_now.clear()
        hits, self._hits = self._hits, {}
        self._flusher = None
        # The archive rule spares facts that reach a context; a failure here must not
        # cost any caller the context it already has.
        try:
            async with self.sessions.begin() as s:
                await fact_store.record_hits(
                    s,
                    {
                        fid: (count, datetime.fromtimestamp(at, tz=UTC))
                        for fid, (count, at) in hits.items()
                    },
                )
        except Exception as exc:
            log.warning("could not record the hits of %d facts: %s", len(hits), exc)
