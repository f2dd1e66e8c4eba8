"""The ingest queue: a Redis Stream with one consumer group, at-least-once.

A job stays pending until every effect of it is stored, then it is acknowledged and
deleted. A failed job stays in its consumer's pending list and is read again; a
consumer that died leaves its jobs to be claimed (``XAUTOCLAIM``) after an idle time;
a job delivered ``max_deliveries`` times goes to the dead-letter stream with its error.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from memstack.errors import StoreUnavailable
from memstack.keys import Keys

GROUP = "ingest"


@dataclass(frozen=True)
class Job:
    """One stream entry; ``fields`` are the write script's (msg_id, user_id, …)."""

    entry_id: str
    fields: Mapping[str, str]
    deliveries: int = 1


@dataclass
class DeadLetter:
    entry_id: str
    fields: dict[str, str]
    error: str
    deliveries: int


@dataclass
class QueueStats:
    acked: int = 0
    dead: int = 0
    errors: list[str] = field(default_factory=list)


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class IngestQueue:
    def __init__(
        self, redis: Redis, keys: Keys, *, claim_idle_ms: int, max_deliveries: int
    ) -> None:
        self.redis = redis
        self.stream = keys.ingest_stream()
        self.dead_stream = keys.dead_letter_stream()
        self.claim_idle_ms = claim_idle_ms
        self.max_deliveries = max_deliveries
        self._group_ready = False
        # The last error per entry, kept in process: it explains a dead letter.
        self.last_errors: dict[str, str] = {}

    async def ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise StoreUnavailable(f"Redis: {exc}") from exc
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        self._group_ready = True

    async def read(self, consumer: str, count: int, block_ms: int | None = None) -> list[Job]:
        """Up to ``count`` jobs: this consumer's retries first, then orphans, then new ones."""
        await self.ensure_group()
        try:
            entries = await self._own_pending(consumer, count)
            if len(entries) < count:
                claimed = await self.redis.xautoclaim(
                    self.stream,
                    GROUP,
                    consumer,
                    min_idle_time=self.claim_idle_ms,
                    start_id="0-0",
                    count=count - len(entries),
                )
                entries += [e for e in claimed[1] if e and e[1]]
            if len(entries) < count:
                fresh: Any = await self.redis.xreadgroup(
                    GROUP, consumer, {self.stream: ">"}, count=count - len(entries), block=block_ms
                )
                for _stream, items in fresh or []:
                    entries += items
            deliveries = await self._deliveries(consumer, [_s(e[0]) for e in entries])
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        return [
            Job(_s(eid), {_s(k): _s(v) for k, v in fields.items()}, deliveries.get(_s(eid), 1))
            for eid, fields in entries
        ]

    async def _own_pending(
        self, consumer: str, count: int
    ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        # Reading the pending list again counts as a delivery, which is what bounds
        # the retries of a poison job.
        res = await self.redis.xreadgroup(GROUP, consumer, {self.stream: "0"}, count=count)
        out: list[Any] = []
        res_any: Any = res
        for _stream, items in res_any or []:
            out += [(eid, f) for eid, f in items if f]
        return out

    async def _deliveries(self, consumer: str, entry_ids: Sequence[str]) -> dict[str, int]:
        """Delivery counts of the entries just read: all sit in this consumer's pending list."""
        if not entry_ids:
            return {}
        wanted = set(entry_ids)
        info = await self.redis.xpending_range(
            self.stream,
            GROUP,
            min=min(entry_ids, key=_entry_order),
            max=max(entry_ids, key=_entry_order),
            count=max(len(entry_ids), 64) * 4,
            consumername=consumer,
        )
        out = {}
        for row in info:
            eid = _s(row["message_id"])  # type: ignore[arg-type]
            if eid in wanted:
                out[eid] = int(row["times_delivered"])
        return out

    async def ack(self, entry_ids: Sequence[str]) -> None:
        if not entry_ids:
            return
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xack(self.stream, GROUP, *entry_ids)
                pipe.xdel(self.stream, *entry_ids)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        for eid in entry_ids:
            self.last_errors.pop(eid, None)

    async def dead_letter(self, job: Job, error: str) -> None:
        """Move a job that keeps failing aside, with its error, so the rest can flow."""
        fields = dict(job.fields)
        fields.update(
            {
                "_error": error[:2000],
                "_entry_id": job.entry_id,
                "_deliveries": str(job.deliveries),
                "_dead_at_ms": str(int(time.time() * 1000)),
            }
        )
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(self.dead_stream, fields)  # type: ignore[arg-type]
                pipe.xack(self.stream, GROUP, job.entry_id)
                pipe.xdel(self.stream, job.entry_id)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        self.last_errors.pop(job.entry_id, None)

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        try:
            rows: Any = await self.redis.xrange(self.dead_stream, count=count)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        out = []
        for _eid, raw in rows:
            f = {_s(k): _s(v) for k, v in raw.items()}
            out.append(
                DeadLetter(
                    f.get("_entry_id", ""), f, f.get("_error", ""), int(f.get("_deliveries", 0))
                )
            )
        return out

    async def requeue_dead(self) -> int:
        """Put every dead letter back on the ingest stream (after fixing its cause)."""
        try:
            rows: Any = await self.redis.xrange(self.dead_stream)
            for eid, raw in rows:
                fields = {k: v for k, v in raw.items() if not _s(k).startswith("_")}
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.xadd(self.stream, fields)
                    pipe.xdel(self.dead_stream, eid)
                    await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        return len(rows)

    async def drop_user_jobs(self, user_id: str) -> int:
        """Remove every queued job of ``user_id`` (for ``forget_user``); returns how many."""
        await self.ensure_group()
        dropped: list[str] = []
        try:
            start = "-"
            while True:
                rows: Any = await self.redis.xrange(self.stream, min=start, count=500)
                if not rows:
                    break
                for eid, fields in rows:
                    if _s(fields.get(b"user_id", b"")) == user_id:
                        dropped.append(_s(eid))
                if len(rows) < 500:
                    break
                start = "(" + _s(rows[-1][0])
            if dropped:
                await self.ack(dropped)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        return len(dropped)

    async def pending_count(self) -> int:
        await self.ensure_group()
        try:
            info = await self.redis.xpending(self.stream, GROUP)
            backlog = await self.redis.xlen(self.stream)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        return max(int(info["pending"]), int(backlog))
