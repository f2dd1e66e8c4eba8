"""The ingest queue: a Redis Stream with one consumer group, at-least-once.

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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from memstack.core.errors import StoreUnavailable, ValidationError
from memstack.core.ids import validate_id
from memstack.core.messages import ROLES, Message, validate_name
from memstack.core.time import from_ms
from memstack.stores.journal import Journal
from memstack.stores.redis.keys import Keys

log = logging.getLogger("memstack.stores.redis.queue")

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


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def accepted_at(job: Job) -> datetime | None:
    """When Redis accepted the job: the write script's ``accepted_us``, else (a job
    queued before it recorded one) the stream entry's time."""
    raw = job.fields.get("accepted_us")
    try:
        micros = int(raw) if raw else _entry_order(job.entry_id)[0] * 1000
    except ValueError:
        return None
    return datetime.fromtimestamp(micros / 1_000_000, tz=UTC)


def _vanished(exc: RedisError) -> bool:
    # NOGROUP: no such stream or group. UNBLOCKED: the stream was deleted while this
    # consumer waited on it.
    return isinstance(exc, ResponseError) and any(
        word in str(exc) for word in ("NOGROUP", "UNBLOCKED")
    )


class IngestQueue:
    """The stream, its consumer group and dead letters; with a ``journal`` (the embedded
    default), every accepted job is also kept there until it is acknowledged."""

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
        self.journal = journal
        self.stream = keys.ingest_stream()
        self.dead_stream = keys.dead_letter_stream()
        self.claim_idle_ms = claim_idle_ms
        self.max_deliveries = max_deliveries
        self._group_ready = False
        self._consumers_checked = 0.0
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
                await self._remove_idle_consumers(consumer)
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

    async def _remove_idle_consumers(self, me: str) -> None:
        """Remove consumers that hold no jobs and have not read for two claim intervals:
        their workers are gone and their jobs were claimed. Were one still alive (busy
        between batches), its next read would simply add it again. Checked at most once
        per claim interval."""
        now = time.monotonic()
        if now - self._consumers_checked < self.claim_idle_ms / 1000:
            return
        self._consumers_checked = now
        for info in await self.redis.xinfo_consumers(self.stream, GROUP):
            name = _s(info["name"])
            idle_ms = int(info["idle"])
            if name != me and int(info["pending"]) == 0 and idle_ms > 2 * self.claim_idle_ms:
                await self.redis.xgroup_delconsumer(self.stream, GROUP, name)
                log.info("removed idle ingest consumer %s", name)

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

    def accepted(self, fields: Mapping[str, str]) -> None:
        """Journal a job the write script just queued (no-op without a journal)."""
        if self.journal is not None:
            self.journal.add(fields)

    async def replay_journal(self) -> int:
        """Queue again the journaled jobs the stream lacks (their process ended before
        ingesting them); returns how many."""
        if self.journal is None:
            return 0
        pending = self.journal.pending()
        if not pending:
            return 0
        try:
            rows: Any = await self.redis.xrange(self.stream)
            queued = {_s(f.get(b"msg_id", b"")) for _eid, f in rows}
            missing = [job for job in pending if job["msg_id"] not in queued]
            for job in missing:
                await self.redis.xadd(self.stream, job)  # type: ignore[arg-type]
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        if missing:
            log.info("queued %d journaled ingest jobs again", len(missing))
        return len(missing)

    async def ack(self, jobs: Sequence[Job]) -> None:
        """The jobs are ingested: off the stream, and out of the journal."""
        await self._ack([j.entry_id for j in jobs])
        if self.journal is not None:
            self.journal.remove(j.fields.get("msg_id", "") for j in jobs)

    async def _ack(self, entry_ids: Sequence[str]) -> None:
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
        wanted = _Wanted(user_id, session_id, msg_id)
        await self.ensure_group()
        try:
            queued = await self._jobs_of(self.stream, wanted, accepted_until)
            if queued:
                await self.ack(queued)
            dead = await self._jobs_of(self.dead_stream, wanted, accepted_until)
            if dead:
                await self.redis.xdel(self.dead_stream, *(j.entry_id for j in dead))
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        if self.journal is not None:
            self.journal.remove(j.fields.get("msg_id", "") for j in dead)
        return len(queued) + len(dead)

    async def queued_message(self, user_id: str, msg_id: str) -> Message | None:
        """The message of a job of ``user_id`` still queued or dead-lettered, if any."""
        wanted = _Wanted(user_id, None, msg_id)
        until = datetime.max.replace(tzinfo=UTC)
        try:
            for stream in (self.stream, self.dead_stream):
                for job in await self._jobs_of(stream, wanted, until):
                    try:
                        return message_from_job(job)
                    except ValidationError:
                        continue
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        return None

    async def _jobs_of(
        self, stream: str, wanted: _Wanted, accepted_until: datetime, page: int = 500
    ) -> list[Job]:
        found: list[Job] = []
        start = "-"
        while True:
            rows: Any = await self.redis.xrange(stream, min=start, count=page)
            for eid, raw in rows:
                job = Job(_s(eid), {_s(k): _s(v) for k, v in raw.items()})
                if not wanted.matches(job.fields):
                    continue
                when = accepted_at(job)
                if when is None or when <= accepted_until:
                    found.append(job)
            if len(rows) < page:
                return found
            start = "(" + _s(rows[-1][0])

    async def pending_count(self) -> int:
        await self.ensure_group()
        try:
            info = await self.redis.xpending(self.stream, GROUP)
            backlog = await self.redis.xlen(self.stream)
        except RedisError as exc:
            raise StoreUnavailable(f"Redis: {exc}") from exc
        return max(int(info["pending"]), int(backlog))


@dataclass(frozen=True)
class _Wanted:
    """Which jobs a drop or a lookup is about: a user's, of one session, of one message."""

    user_id: str
    session_id: str | None
    msg_id: str | None

    def matches(self, fields: Mapping[str, str]) -> bool:
        return (
            fields.get("user_id") == self.user_id
            and self.session_id in (None, fields.get("session_id"))
            and self.msg_id in (None, fields.get("msg_id"))
        )


def job_fields(
    *,
    msg_id: str,
    user_id: str,
    session_id: str,
    role: str,
    content: str,
    ts_ms: int,
    name: str | None,
    accepted_us: int,
) -> dict[str, str]:
    """A message's stream entry as the write script writes it: the message's time in
    epoch milliseconds, when it was accepted in microseconds, ``name`` only when set."""
    fields = {
        "msg_id": msg_id,
        "user_id": user_id,
        "session_id": session_id,
        "role": role,
        "content": content,
        "ts_ms": str(ts_ms),
        "accepted_us": str(accepted_us),
    }
    return fields if name is None else {**fields, "name": name}


def message_from_job(job: Job) -> Message:
    """Validate a stream entry; a malformed one raises and ends in the dead-letter stream."""
    f = job.fields
    try:
        msg_id, user_id, session_id = f["msg_id"], f["user_id"], f["session_id"]
        role, content, ts_ms = f["role"], f["content"], int(f["ts_ms"])
    except (KeyError, ValueError) as exc:
        raise ValidationError(f"malformed ingest job {job.entry_id}: {exc!r}") from exc
    validate_id("user_id", user_id)
    validate_id("session_id", session_id)
    if role not in ROLES or not content.strip():
        raise ValidationError(f"malformed ingest job {job.entry_id}: role {role!r} / empty content")
    try:
        # Jobs queued before names existed have no "name"; "" also means none.
        name = validate_name(f.get("name") or None)
    except ValidationError as exc:
        raise ValidationError(f"malformed ingest job {job.entry_id}: {exc}") from exc
    return Message(
        msg_id,
        user_id,
        session_id,
        role,
        content,
        from_ms(ts_ms),
        name,
        accepted_at(job),
    )
