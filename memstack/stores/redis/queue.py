"""The ingest queue: Redis Streams with one consumer group each, at-least-once.

One Redis has one stream; a Redis Cluster has one per shard (each in the slot of its
sessions' keys, see :mod:`memstack.stores.redis.keys`), each with its own group and
dead-letter stream, and a worker reads them all.

A job stays pending until every effect of it is stored, then it is acknowledged and
deleted. A failed job stays in its consumer's pending list and is read again; a
consumer that died leaves its jobs to be claimed (``XAUTOCLAIM``) after an idle time,
and is removed from the group once it holds nothing; a job delivered
``max_deliveries`` times goes to the dead-letter stream with its error. A stream or
group that vanished (a Redis restarted without persistence, a ``FLUSHALL``) is made
again on the next read instead of failing every read after.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from memstack.core.errors import StoreUnavailable, ValidationError
from memstack.core.messages import Message
from memstack.stores.journal import Journal
from memstack.stores.redis.errors import REDIS_ERRORS
from memstack.stores.redis.jobs import (
    DeadLetter,
    Job,
    Wanted,
    accepted_at,
    entry_order,
    job_fields,
    message_from_job,
    text_of,
)
from memstack.stores.redis.keys import Keys

__all__ = ["GROUP", "DeadLetter", "IngestQueue", "Job", "job_fields", "message_from_job"]

log = logging.getLogger("memstack.stores.redis.queue")

GROUP = "ingest"

# On a cluster no single XREADGROUP can wait on streams of several slots: an idle read
# waits on one shard at a time, this long at most, so a job on another waits no longer.
SHARD_BLOCK_MS = 100

Entries = list[tuple[bytes, dict[bytes, bytes]]]


def _vanished(exc: RedisError) -> bool:
    # NOGROUP: no such stream or group. UNBLOCKED: the stream was deleted while this
    # consumer waited on it.
    return isinstance(exc, ResponseError) and any(
        word in str(exc) for word in ("NOGROUP", "UNBLOCKED")
    )


class IngestQueue:
    """The streams, their consumer groups and dead letters; with a ``journal`` (the
    embedded default), every accepted job is also kept there until it is acknowledged.

    ``stream`` and ``dead_stream`` name the first pair: the only one on one Redis."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        claim_idle_ms: int,
        max_deliveries: int,
        journal: Journal | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.journal = journal
        self.pairs = keys.streams()
        self.dead_of = dict(self.pairs)
        self.stream, self.dead_stream = self.pairs[0]
        self.claim_idle_ms = claim_idle_ms
        self.max_deliveries = max_deliveries
        self._group_ready = False
        self._consumers_checked: dict[str, float] = {}
        self._next = 0  # the shard an idle read waits on, in turn
        # The last error per entry, kept in process: it explains a dead letter.
        self.last_errors: dict[str, str] = {}

    async def ensure_group(self) -> None:
        if self._group_ready:
            return
        for stream, _dead in self.pairs:
            try:
                await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
            except REDIS_ERRORS as exc:
                raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        self._group_ready = True

    async def read(self, consumer: str, count: int, block_ms: int | None = None) -> list[Job]:
        """Up to ``count`` jobs: this consumer's retries first, then orphans, then new ones."""
        await self.ensure_group()
        try:
            return await self._read(consumer, count, block_ms)
        except StoreUnavailable as exc:
            if not (isinstance(exc.__cause__, RedisError) and _vanished(exc.__cause__)):
                raise
        # The group (and maybe the stream) is gone: Redis lost its data. Jobs it held
        # are lost with it; the ones written since must still flow.
        log.warning("ingest consumer group %r vanished from Redis; creating it again", GROUP)
        self._group_ready = False
        await self.ensure_group()
        return await self._read(consumer, count, block_ms)

    async def _read(self, consumer: str, count: int, block_ms: int | None) -> list[Job]:
        jobs: list[Job] = []
        start = self._next
        self._next = (self._next + 1) % len(self.pairs)
        # Each shard from a turning start, so no shard waits behind the others' backlog.
        order = [self.pairs[(start + i) % len(self.pairs)][0] for i in range(len(self.pairs))]
        if len(order) == 1:
            return await self._read_stream(order[0], consumer, count, block_ms)
        for stream in order:
            if len(jobs) >= count:
                break
            jobs += await self._read_stream(stream, consumer, count - len(jobs), None)
        if not jobs and block_ms is not None:
            wait = min(block_ms, SHARD_BLOCK_MS)
            jobs = await self._read_stream(order[0], consumer, count, wait, fresh_only=True)
        return jobs

    async def _read_stream(
        self,
        stream: str,
        consumer: str,
        count: int,
        block_ms: int | None,
        *,
        fresh_only: bool = False,
    ) -> list[Job]:
        try:
            entries: Entries = (
                [] if fresh_only else await self._own_pending(stream, consumer, count)
            )
            if len(entries) < count and not fresh_only:
                claimed = await self.redis.xautoclaim(
                    stream,
                    GROUP,
                    consumer,
                    min_idle_time=self.claim_idle_ms,
                    start_id="0-0",
                    count=count - len(entries),
                )
                entries += [e for e in claimed[1] if e and e[1]]
                await self._remove_idle_consumers(stream, consumer)
            if len(entries) < count:
                fresh: Any = await self.redis.xreadgroup(
                    GROUP, consumer, {stream: ">"}, count=count - len(entries), block=block_ms
                )
                for _stream, items in fresh or []:
                    entries += items
            deliveries = await self._deliveries(stream, consumer, [text_of(e[0]) for e in entries])
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        return [
            Job(
                text_of(eid),
                {text_of(k): text_of(v) for k, v in fields.items()},
                deliveries.get(text_of(eid), 1),
                stream,
            )
            for eid, fields in entries
        ]

    async def _remove_idle_consumers(self, stream: str, me: str) -> None:
        """Remove consumers that hold no jobs and have not read for two claim intervals:
        their workers are gone and their jobs were claimed. Were one still alive (busy
        between batches), its next read would simply add it again. Checked at most once
        per claim interval and stream."""
        now = time.monotonic()
        if now - self._consumers_checked.get(stream, 0.0) < self.claim_idle_ms / 1000:
            return
        self._consumers_checked[stream] = now
        for info in await self.redis.xinfo_consumers(stream, GROUP):
            name = text_of(info["name"])
            idle_ms = int(info["idle"])
            if name != me and int(info["pending"]) == 0 and idle_ms > 2 * self.claim_idle_ms:
                await self.redis.xgroup_delconsumer(stream, GROUP, name)
                log.info("removed idle ingest consumer %s", name)

    async def _own_pending(self, stream: str, consumer: str, count: int) -> Entries:
        # Reading the pending list again counts as a delivery, which is what bounds
        # the retries of a poison job.
        res: Any = await self.redis.xreadgroup(GROUP, consumer, {stream: "0"}, count=count)
        out: Entries = []
        for _stream, items in res or []:
            out += [(eid, f) for eid, f in items if f]
        return out

    async def _deliveries(
        self, stream: str, consumer: str, entry_ids: Sequence[str]
    ) -> dict[str, int]:
        """Delivery counts of the entries just read: all sit in this consumer's pending list."""
        if not entry_ids:
            return {}
        wanted = set(entry_ids)
        info = await self.redis.xpending_range(
            stream,
            GROUP,
            min=min(entry_ids, key=entry_order),
            max=max(entry_ids, key=entry_order),
            count=max(len(entry_ids), 64) * 4,
            consumername=consumer,
        )
        out = {}
        for row in info:
            eid = text_of(row["message_id"])  # type: ignore[arg-type]
            if eid in wanted:
                out[eid] = int(row["times_delivered"])
        return out

    def accepted(self, fields: Mapping[str, str]) -> None:
        """Journal a job the write script just queued (no-op without a journal)."""
        if self.journal is not None:
            self.journal.add(fields)

    async def replay_journal(self) -> int:
        """Queue again the journaled jobs the streams lack (their process ended before
        ingesting them); returns how many."""
        if self.journal is None:
            return 0
        pending = self.journal.pending()
        if not pending:
            return 0
        try:
            queued: set[str] = set()
            for stream, _dead in self.pairs:
                rows: Any = await self.redis.xrange(stream)
                queued |= {text_of(f.get(b"msg_id", b"")) for _eid, f in rows}
            missing = [job for job in pending if job["msg_id"] not in queued]
            for job in missing:
                stream = self.keys.session_stream(job["user_id"], job["session_id"])
                await self.redis.xadd(stream, job)  # type: ignore[arg-type]
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        if missing:
            log.info("queued %d journaled ingest jobs again", len(missing))
        return len(missing)

    async def ack(self, jobs: Sequence[Job]) -> None:
        """The jobs are ingested: off their streams, and out of the journal."""
        by_stream: dict[str, list[str]] = {}
        for job in jobs:
            by_stream.setdefault(job.stream or self.stream, []).append(job.entry_id)
        for stream, entry_ids in by_stream.items():
            await self._ack(stream, entry_ids)
        if self.journal is not None:
            self.journal.remove(j.fields.get("msg_id", "") for j in jobs)

    async def _ack(self, stream: str, entry_ids: Sequence[str]) -> None:
        if not entry_ids:
            return
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xack(stream, GROUP, *entry_ids)
                pipe.xdel(stream, *entry_ids)
                await pipe.execute()
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        for eid in entry_ids:
            self.last_errors.pop(eid, None)

    async def dead_letter(self, job: Job, error: str) -> None:
        """Move a job that keeps failing aside, with its error, so the rest can flow."""
        stream = job.stream or self.stream
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
            # One MULTI: a stream and its dead letters share a slot on a cluster too.
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(self.dead_of[stream], fields)  # type: ignore[arg-type]
                pipe.xack(stream, GROUP, job.entry_id)
                pipe.xdel(stream, job.entry_id)
                await pipe.execute()
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        self.last_errors.pop(job.entry_id, None)

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        """Up to ``count`` dead letters, oldest first (by when they died, over shards)."""
        out: list[tuple[int, DeadLetter]] = []
        try:
            for _stream, dead in self.pairs:
                rows: Any = await self.redis.xrange(dead, count=count)
                for eid, raw in rows:
                    f = {text_of(k): text_of(v) for k, v in raw.items()}
                    letter = DeadLetter(
                        f.get("_entry_id", ""), f, f.get("_error", ""), int(f.get("_deliveries", 0))
                    )
                    out.append((entry_order(text_of(eid))[0], letter))
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        out.sort(key=lambda pair: pair[0])
        return [letter for _at, letter in out[:count]]

    async def requeue_dead(self) -> int:
        """Put every dead letter back on its ingest stream (after fixing its cause)."""
        moved = 0
        try:
            for stream, dead in self.pairs:
                rows: Any = await self.redis.xrange(dead)
                for eid, raw in rows:
                    fields = {k: v for k, v in raw.items() if not text_of(k).startswith("_")}
                    async with self.redis.pipeline(transaction=True) as pipe:
                        pipe.xadd(stream, fields)
                        pipe.xdel(dead, eid)
                        await pipe.execute()
                moved += len(rows)
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        return moved

    async def drop_user_jobs(self, user_id: str, *, accepted_until: datetime) -> int:
        """Remove the queued and dead-lettered jobs of ``user_id`` accepted up to
        ``accepted_until`` (``forget_user``: they hold what the user said); returns how
        many."""
        return await self.drop_jobs(user_id, accepted_until=accepted_until)

    async def drop_jobs(
        self,
        user_id: str,
        *,
        accepted_until: datetime,
        session_id: str | None = None,
        msg_id: str | None = None,
    ) -> int:
        """:meth:`drop_user_jobs` for one session of the user, or one message."""
        wanted = Wanted(user_id, session_id, msg_id)
        await self.ensure_group()
        dropped = 0
        for stream, dead in self._pairs_of(user_id, session_id):
            try:
                queued = await self._jobs_of(stream, wanted, accepted_until)
                if queued:
                    await self.ack(queued)
                dead_jobs = await self._jobs_of(dead, wanted, accepted_until)
                if dead_jobs:
                    await self.redis.xdel(dead, *(j.entry_id for j in dead_jobs))
            except REDIS_ERRORS as exc:
                raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
            if self.journal is not None:
                self.journal.remove(j.fields.get("msg_id", "") for j in dead_jobs)
            dropped += len(queued) + len(dead_jobs)
        return dropped

    def _pairs_of(self, user_id: str, session_id: str | None) -> list[tuple[str, str]]:
        """The streams that can hold jobs of a session (its own), or of a whole user (all)."""
        if session_id is None or len(self.pairs) == 1:
            return self.pairs
        stream = self.keys.session_stream(user_id, session_id)
        return [(stream, self.dead_of[stream])]

    async def queued_message(self, user_id: str, msg_id: str) -> Message | None:
        """The message of a job of ``user_id`` still queued or dead-lettered, if any."""
        wanted = Wanted(user_id, None, msg_id)
        until = datetime.max.replace(tzinfo=UTC)
        try:
            for pair in self.pairs:
                for stream in pair:
                    for job in await self._jobs_of(stream, wanted, until):
                        try:
                            return message_from_job(job)
                        except ValidationError:
                            continue
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        return None

    async def _jobs_of(
        self, stream: str, wanted: Wanted, accepted_until: datetime, page: int = 500
    ) -> list[Job]:
        found: list[Job] = []
        start = "-"
        while True:
            rows: Any = await self.redis.xrange(stream, min=start, count=page)
            for eid, raw in rows:
                job = Job(
                    text_of(eid), {text_of(k): text_of(v) for k, v in raw.items()}, stream=stream
                )
                if not wanted.matches(job.fields):
                    continue
                when = accepted_at(job)
                if when is None or when <= accepted_until:
                    found.append(job)
            if len(rows) < page:
                return found
            start = "(" + text_of(rows[-1][0])

    async def pending_count(self) -> int:
        """Jobs not yet acknowledged, over every stream."""
        await self.ensure_group()
        total = 0
        try:
            for stream, _dead in self.pairs:
                info = await self.redis.xpending(stream, GROUP)
                backlog = await self.redis.xlen(stream)
                total += max(int(info["pending"]), int(backlog))
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
        return total
