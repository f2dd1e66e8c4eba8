"""Nothing accepted is lost: exchange units that converge whatever the order of their
jobs, an erasure that sticks against work in flight, a queue that heals when Redis
forgets it, and reindexing beside a running worker. On the real Redis and PostgreSQL
and on the embedded default (the fault suite in tests/faults breaks real servers)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from memstack.core.facts.fact import Fact
from memstack.core.settings import Settings
from memstack.ingest import units
from memstack.ingest.extraction import build_extractor
from memstack.ingest.pipeline import Ingestor
from memstack.ingest.worker import Worker
from memstack.memory import AsyncMemory
from memstack.ml.embedders import Embedder
from memstack.stores.redis.queue import message_from_job
from memstack.stores.sql import ledger
from memstack.stores.sql.models import FactRow, MessageRow
from tests.conftest import new_id

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


async def dialogue_chunks(mem: AsyncMemory, user: str) -> dict[str, dict[str, Any]]:
    """Every dialogue chunk of ``user`` stored under one of its messages' ids (the first
    few pieces of each), read by id: a search would be approximate."""
    async with mem.db_sessions() as s:
        msg_ids = list(await s.scalars(select(MessageRow.msg_id).where(MessageRow.user_id == user)))
    store = await mem.memory_vectors()
    ids = [f"{m}#{i}" for m in msg_ids for i in range(4)]
    hits = await store.get(ids, scope={"user_id": user}) if ids else []
    return {
        h.id: {
            "text": h.text,
            "msg_ids": h.metadata["msg_ids"],
            "chunk_count": h.metadata.get("chunk_count"),
        }
        for h in hits
        if h.metadata.get("source_layer") == "dialogue"
    }


async def clean_pass(mem: AsyncMemory, user: str) -> dict[str, dict[str, Any]]:
    """The chunks one in-order pass over the final ledger writes (what reindex does)."""
    ingestor = (await mem.worker()).ingestor
    out: dict[str, dict[str, Any]] = {}
    async with mem.db_sessions() as s:
        for session_id in await ledger.sessions_of(s, user):
            async for batch in units.of_session(s, user, session_id):
                for unit in batch:
                    for r in ingestor.unit_records(unit):
                        out[r.id] = {
                            "text": r.text,
                            "msg_ids": r.metadata["msg_ids"],
                            "chunk_count": r.metadata["chunk_count"],
                        }
    return out


def covered(chunks: Mapping[str, Mapping[str, Any]]) -> set[str]:
    return {i for c in chunks.values() for i in str(c["msg_ids"]).split(",") if i}


# --- exchange units converge ---------------------------------------------------------------


async def test_a_user_turn_redelivered_after_its_reply_keeps_the_reply(
    any_settings: Settings,
) -> None:
    """The issue's repro: a worker writes the user turn to the ledger and dies; the reply
    is ingested; the user turn's job is claimed and ingested again. The unit must still
    hold the reply (it used to be rewritten with the user turn alone)."""
    mem = await AsyncMemory.open(any_settings.model_copy(update={"ingest_claim_idle_ms": 200}))
    try:
        u, s = new_id("u"), new_id("s")
        q = await mem.remember(u, s, "user", "Which laptop is lightest?", ts=T0)
        [job] = await mem.queue.read("crashed-worker", 10)
        async with mem.db_sessions.begin() as sess:  # it got as far as the ledger
            await ledger.insert_messages(sess, [message_from_job(job)])
        a = await mem.remember(u, s, "assistant", "The 980 g model.", ts=T0 + timedelta(seconds=1))
        # The reply first; the user turn once its dead consumer has been idle long enough
        # (in the same drain or the next).
        report = await mem.drain()
        await asyncio.sleep(0.3)
        report.add(await mem.drain())
        assert report.processed == 2
        chunks = await dialogue_chunks(mem, u)
        assert set(chunks) == {f"{q}#0"}
        assert chunks[f"{q}#0"]["msg_ids"] == f"{q},{a}"
        assert "980 g" in chunks[f"{q}#0"]["text"]
    finally:
        await mem.close()


async def test_a_reply_ingested_before_its_user_turn_is_folded_into_its_unit(
    mem: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    q = await mem.remember(u, s, "user", "Where do I live?", ts=T0)
    a = await mem.remember(u, s, "assistant", "In Lisbon.", ts=T0 + timedelta(seconds=1))
    jobs = await mem.queue.read("w", 10)
    ingestor = (await mem.worker()).ingestor
    # Second job first: the reply stands alone until its user turn arrives.
    await ingestor.process([message_from_job(jobs[1])])
    assert set(await dialogue_chunks(mem, u)) == {f"{a}#0"}
    await ingestor.process([message_from_job(jobs[0])])
    chunks = await dialogue_chunks(mem, u)
    assert set(chunks) == {f"{q}#0"}, "the reply's own chunk is stale once it joins a unit"
    assert chunks == await clean_pass(mem, u)


@dataclass
class _SlowEmbedder:
    """An embedder that yields to the event loop before answering, so concurrent
    workers interleave inside their batches."""

    inner: Embedder
    rng: random.Random

    @property
    def model_version(self) -> str:
        return self.inner.model_version

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await asyncio.sleep(self.rng.random() * 0.01)
        return await self.inner.embed(texts)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.inner.embed_queries(texts)


ROLES = st.sampled_from(["user", "user", "assistant", "assistant", "tool"])
CONVERSATIONS = st.lists(st.lists(ROLES, min_size=1, max_size=12), min_size=1, max_size=3)


@pytest.mark.slow
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sessions=CONVERSATIONS,
    workers=st.integers(min_value=2, max_value=4),
    batch=st.integers(min_value=1, max_value=5),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_shuffled_duplicated_concurrent_jobs_converge_to_one_clean_pass(
    any_settings: Settings,
    sessions: list[list[str]],
    workers: int,
    batch: int,
    seed: int,
) -> None:
    """Jobs of many units, shuffled, some delivered twice, taken by 2-4 workers at once:
    the chunks end as one in-order pass over the ledger writes them, and every message,
    replies included, is in one."""
    rng = random.Random(seed)
    prefix = f"p{new_id('')}"
    asyncio.run(
        _converge(
            any_settings.model_copy(update={"key_prefix": prefix}), sessions, workers, batch, rng
        )
    )


async def _converge(
    settings_: Settings, sessions: list[list[str]], workers: int, batch: int, rng: random.Random
) -> None:
    mem = await AsyncMemory.open(settings_)
    try:
        user = new_id("u")
        sent = []
        for n, roles in enumerate(sessions):
            for i, role in enumerate(roles):
                sent.append(
                    await mem.remember(
                        user,
                        f"s{n}",
                        role,
                        f"{role} {n}.{i} says {rng.choice(['tea', 'trains', 'maps'])}",
                        ts=T0 + timedelta(seconds=i),
                    )
                )
        stream = mem.queue.stream
        jobs = [fields for _eid, fields in await mem.working.redis.xrange(stream)]
        await mem.working.redis.delete(stream)
        replay = jobs + rng.sample(jobs, k=rng.randint(0, len(jobs)))
        rng.shuffle(replay)
        for fields in replay:
            await mem.working.redis.xadd(stream, fields)
        base = (await mem.worker()).ingestor
        ingestor = Ingestor(
            base.settings,
            base.sessions,
            _SlowEmbedder(base.embedder, rng),
            base.vectors,
            base.extractor,
        )

        async def run(name: str) -> None:
            worker = Worker(mem.queue, ingestor, None, batch, consumer=name)
            while (r := await worker.run_batch(block_ms=None)).processed or r.failed:
                assert r.failed == 0, r.errors

        await asyncio.gather(*(run(f"w{i}") for i in range(workers)))
        assert await mem.queue.pending_count() == 0
        chunks = await dialogue_chunks(mem, user)
        assert chunks == await clean_pass(mem, user)
        assert covered(chunks) == set(sent)
    finally:
        keys = [k async for k in mem.working.redis.scan_iter(match=mem.working.keys.pattern())]
        if keys:
            await mem.working.redis.delete(*keys)
        await mem.close()


# --- erasure is final --------------------------------------------------------------------


@dataclass
class _Gate:
    """Holds a batch at one step until released, and says when it got there."""

    reached: asyncio.Event
    release: asyncio.Event

    async def wait(self) -> None:
        self.reached.set()
        await self.release.wait()


@dataclass
class _GatedEmbedder(_SlowEmbedder):
    gate: _Gate | None = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.gate is not None:
            await self.gate.wait()
        return await self.inner.embed(texts)


@dataclass
class _GatedExtractor:
    inner: Any
    gate: _Gate
    name: str = "gated"

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        await self.gate.wait()
        return list(await self.inner.extract(text, role=role, known=known))


@pytest.mark.parametrize("held_in", ["extraction", "embedding"])
async def test_forget_during_a_slow_batch_writes_nothing_back(
    mem: AsyncMemory, held_in: str
) -> None:
    u, s = new_id("u"), new_id("s")
    for i, text in enumerate(["My budget is at most $5,000.", "Noted.", "I live in Berlin."]):
        role = "user" if i % 2 == 0 else "assistant"
        await mem.remember(u, s, role, text, ts=T0 + timedelta(seconds=i))
    base = (await mem.worker()).ingestor
    gate = _Gate(asyncio.Event(), asyncio.Event())
    embedder: Embedder = base.embedder
    extractor = base.extractor
    if held_in == "embedding":
        embedder = _GatedEmbedder(base.embedder, random.Random(0), gate)
    else:
        extractor = _GatedExtractor(build_extractor(mem.settings), gate)
    ingestor = Ingestor(base.settings, base.sessions, embedder, base.vectors, extractor)
    batch = asyncio.create_task(Worker(mem.queue, ingestor, None, 16).run_batch(block_ms=None))
    await asyncio.wait_for(gate.reached.wait(), 10)
    await mem.forget_user(u)
    gate.release.set()
    report = await batch
    assert report.processed == 3 and report.failed == 0
    async with mem.db_sessions() as sess:
        for table in (MessageRow, FactRow):
            n = await sess.scalar(select(func.count()).select_from(table).where(table.user_id == u))
            assert n == 0, table.__tablename__
    assert await dialogue_chunks(mem, u) == {}
    store = await mem.memory_vectors()
    assert await store.count({"user_id": u}) == 0
    # What the user says after the erasure is a new memory.
    later = await mem.remember(u, s, "user", "I live in Porto.", ts=T0 + timedelta(days=1))
    await mem.drain()
    assert covered(await dialogue_chunks(mem, u)) == {later}
    assert [(f.key, f.value) for f in await mem.facts(u)] == [("city", "Porto")]


# --- the queue heals ---------------------------------------------------------------------


async def test_a_worker_recreates_a_vanished_stream_and_group(service_mem: AsyncMemory) -> None:
    mem = service_mem
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "first", ts=T0)
    assert (await mem.drain()).processed == 1
    # Redis restarted without persistence, or was flushed: stream and group are gone.
    await mem.working.redis.delete(mem.queue.stream)
    second = await mem.remember(u, s, "user", "second", ts=T0 + timedelta(seconds=1))
    report = await mem.drain()
    assert report.processed == 1 and report.failed == 0
    assert second in covered(await dialogue_chunks(mem, u))


async def test_a_worker_blocked_on_a_stream_that_is_deleted_goes_on(
    service_mem: AsyncMemory,
) -> None:
    mem = service_mem
    worker = await mem.worker()
    await mem.queue.ensure_group()
    blocked = asyncio.create_task(worker.run_batch(block_ms=3000))
    await asyncio.sleep(0.3)
    await mem.working.redis.delete(mem.queue.stream)
    u = new_id("u")
    sent = await mem.remember(u, new_id("s"), "user", "hello", ts=T0)
    report = await asyncio.wait_for(blocked, 10)
    report.add(await mem.drain())
    assert report.processed == 1
    assert sent in covered(await dialogue_chunks(mem, u))


async def test_consumers_of_dead_workers_are_removed_once_claimed_from(
    service_settings: Settings,
) -> None:
    mem = await AsyncMemory.open(service_settings.model_copy(update={"ingest_claim_idle_ms": 200}))
    try:
        await mem.remember(new_id("u"), new_id("s"), "user", "orphan", ts=T0)
        assert len(await mem.queue.read("ghost", 10)) == 1  # and then it died
        await asyncio.sleep(0.3)
        assert (await mem.drain()).processed == 1  # claimed from the ghost
        await asyncio.sleep(0.5)
        await mem.drain()
        names = {
            c["name"].decode()
            for c in await mem.working.redis.xinfo_consumers(mem.queue.stream, "ingest")
        }
        assert "ghost" not in names
    finally:
        await mem.close()


# --- reindex beside a running worker ---------------------------------------------------------


async def test_reindex_while_a_worker_ingests_loses_and_dead_letters_nothing(
    any_settings: Settings,
) -> None:
    settings_ = any_settings.model_copy(update={"ingest_max_deliveries": 2})
    serving = await AsyncMemory.open(settings_)
    maintainer = await AsyncMemory.open(settings_)
    stop = asyncio.Event()
    try:
        u = new_id("u")
        sent = []

        async def say(n: int) -> None:
            for i in range(n):
                role = "user" if i % 2 == 0 else "assistant"
                ts = T0 + timedelta(seconds=len(sent))
                sent.append(await serving.remember(u, "s1", role, f"turn {len(sent)}", ts=ts))

        await say(20)
        await serving.drain()
        worker = await serving.worker()
        running = asyncio.create_task(worker.run(stop, block_ms=50))
        writing = asyncio.create_task(say(40))
        await maintainer.reindex()  # drops the collection the worker writes to
        await writing
        await say(10)
        for _ in range(100):
            if await serving.queue.pending_count() == 0:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await running
        await serving.drain()
        assert await serving.dead_letters() == []
        assert covered(await dialogue_chunks(serving, u)) == set(sent)
    finally:
        stop.set()
        keys = [
            k async for k in serving.working.redis.scan_iter(match=serving.working.keys.pattern())
        ]
        if keys:
            await serving.working.redis.delete(*keys)
        await maintainer.close()
        await serving.close()
