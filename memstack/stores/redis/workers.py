"""Worker liveness and ingest lag, as Redis holds them.

A worker beats: it sets its heartbeat key (:meth:`Keys.worker`) with a TTL, again every
third of it, and deletes it when it stops. A worker that dies without a word is gone
once the TTL runs out, so the live workers are simply the keys that exist. A beat's age
is read from the key's remaining TTL, on Redis's clock, so a reader whose clock differs
from the worker's still reads it right.

The lag is read from the streams: a job is deleted when it is acknowledged, so each
stream's length is its pending jobs (queued or delivered and not yet acknowledged), and
its first entry, whose id is the time Redis took it, is the oldest of them.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from redis.asyncio import Redis

from memstack.core.errors import StoreUnavailable
from memstack.core.status import StreamLag, WorkerBeat
from memstack.stores.redis.errors import REDIS_ERRORS
from memstack.stores.redis.jobs import entry_order, text_of
from memstack.stores.redis.keys import Keys


def _wrap(exc: Exception) -> StoreUnavailable:
    return StoreUnavailable(f"Redis: {exc}", layer="redis")


async def beat(redis: Redis, keys: Keys, worker_id: str, ttl_s: float) -> None:
    """Mark ``worker_id`` alive for ``ttl_s`` seconds from now."""
    ttl_ms = max(int(ttl_s * 1000), 1)
    value = json.dumps(
        {"host": socket.gethostname(), "pid": os.getpid(), "ttl_ms": ttl_ms},
        separators=(",", ":"),
    )
    try:
        await redis.set(keys.worker(worker_id), value, px=ttl_ms)
    except REDIS_ERRORS as exc:
        raise _wrap(exc) from exc


async def clear(redis: Redis, keys: Keys, worker_id: str) -> None:
    """``worker_id`` stopped: it is no longer counted at once, not after its TTL."""
    try:
        await redis.delete(keys.worker(worker_id))
    except REDIS_ERRORS as exc:
        raise _wrap(exc) from exc


async def live_workers(redis: Redis, keys: Keys) -> list[WorkerBeat]:
    """Every worker whose heartbeat has not run out, by id."""
    head = keys.worker("")
    out: list[WorkerBeat] = []
    try:
        names = [text_of(k) async for k in redis.scan_iter(match=keys.workers_pattern(), count=500)]
        for name in sorted(names):
            async with redis.pipeline(transaction=False) as pipe:
                pipe.get(name)
                pipe.pttl(name)
                raw, left_ms = await pipe.execute()
            if raw is None or int(left_ms) < 0:
                continue  # expired between the SCAN and the read
            info: dict[str, Any] = json.loads(text_of(raw))
            age_ms = max(int(info.get("ttl_ms", 0)) - int(left_ms), 0)
            host, pid = str(info.get("host", "")), int(info.get("pid", 0))
            out.append(WorkerBeat(name[len(head) :], host, pid, age_ms / 1000))
    except REDIS_ERRORS as exc:
        raise _wrap(exc) from exc
    return out


async def stream_lag(redis: Redis, keys: Keys) -> list[StreamLag]:
    """Each ingest stream's pending jobs, the age of its oldest, and its dead letters."""
    out: list[StreamLag] = []
    try:
        seconds, micros = await redis.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        for stream, dead in keys.streams():
            async with redis.pipeline(transaction=False) as pipe:
                pipe.xlen(stream)
                pipe.xrange(stream, count=1)
                pipe.xlen(dead)
                pending, first, dead_count = await pipe.execute()
            oldest = 0.0
            if first:
                taken_ms = entry_order(text_of(first[0][0]))[0]
                oldest = max(now_ms - taken_ms, 0) / 1000
            out.append(StreamLag(stream, int(pending), oldest, int(dead_count)))
    except REDIS_ERRORS as exc:
        raise _wrap(exc) from exc
    return out
