"""The ingest worker on real Redis, PostgreSQL and embedded Chroma."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import func, select

from memstack.core.facts.fact import Fact
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.stores.sql.facts import Outcome, write_fact
from memstack.stores.sql.models import FactRow, MessageRow
from tests.conftest import new_id

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


async def _snapshot(mem: AsyncMemory, user: str) -> tuple[int, list[tuple[str, object]], list[str]]:
    async with mem.db_sessions() as s:
        msgs = await s.scalar(
            select(func.count()).select_from(MessageRow).where(MessageRow.user_id == user)
        )
        facts = [
            (r.fact_key, r.fact_value)
            for r in await s.scalars(
                select(FactRow).where(FactRow.user_id == user).order_by(FactRow.id)
            )
        ]
    store = await mem.memory_vectors()
    [probe] = await mem.embedder.embed(["预算"])
    hits = await store.search(probe, scope={"user_id": user}, top_k=100)
    return int(msgs or 0), facts, sorted(h.id for h in hits)


async def test_budget_scenario_superseded(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "我预算不超过五千", ts=T0)
    await mem.remember(u, s, "assistant", "好的，五千以内。", ts=T0 + timedelta(seconds=5))
    await mem.drain()
    await mem.remember(u, s, "user", "其实我可以到八千", ts=T0 + timedelta(days=3))
    report = await mem.drain()
    assert report.processed == 1 and report.failed == 0
    current = [f for f in await mem.facts(u) if f.key == "budget_limit"]
    assert len(current) == 1
    assert current[0].value == {"amount": 8000, "currency": "CNY"}
    history = await mem.fact_history(u, "budget_limit")
    assert [h.value["amount"] for h in history] == [5000, 8000]
    old, new = history
    assert old.valid_until == T0 + timedelta(days=3)
    assert new.supersedes_id == old.id and new.valid_until is None


async def test_budget_scenario_in_english(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "My budget is at most $5,000.", ts=T0)
    await mem.remember(u, s, "user", "Actually, I can go up to $8,000.", ts=T0 + timedelta(days=3))
    await mem.drain()
    current = {f.key: f.value for f in await mem.facts(u)}
    assert current["budget_limit"] == {"amount": 8000, "currency": "USD"}
    assert len(await mem.fact_history(u, "budget_limit")) == 2


async def test_redelivered_batch_changes_nothing(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    texts = ["我预算不超过五千", "好的。", "重点关注续航和重量，不要推荐游戏本。", "明白。"]
    for i, t in enumerate(texts):
        await mem.remember(
            u, s, "user" if i % 2 == 0 else "assistant", t, ts=T0 + timedelta(minutes=i)
        )
    jobs = await mem.working.redis.xrange(mem.queue.stream)
    await mem.drain()
    first = await _snapshot(mem, u)
    assert first[0] == 4 and first[1] and first[2]
    for _eid, fields in jobs:  # the queue delivers the same batch again
        await mem.working.redis.xadd(mem.queue.stream, fields)
    report = await mem.drain()
    assert report.processed == 4 and report.failed == 0
    assert await _snapshot(mem, u) == first


async def test_exchange_unit_is_stored_under_the_user_turn(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    q = await mem.remember(u, s, "user", "Which laptop is lightest?", ts=T0)
    a = await mem.remember(u, s, "assistant", "The 980 g model is the lightest.", ts=T0)
    await mem.drain()
    store = await mem.memory_vectors()
    [vec] = await mem.embedder.embed(["lightest laptop 980 g"])
    hits = await store.search(vec, scope={"user_id": u}, top_k=10)
    assert [h.id for h in hits] == [f"{q}#0"]
    assert hits[0].metadata["msg_ids"] == f"{q},{a}"
    assert "980 g" in hits[0].text and "lightest?" in hits[0].text


async def test_two_chunks_of_one_message_have_their_own_vectors(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    p1 = "We run a payment clearing and settlement system. " * 6
    p2 = "Our second worry is compliance risk with the central bank reporting rules. " * 5
    msg = await mem.remember(u, s, "user", f"{p1.strip()}\n\n{p2.strip()}", ts=T0)
    await mem.drain()
    store = await mem.memory_vectors()
    for idx, para in enumerate((p1, p2)):
        [vec] = await mem.embedder.embed([f"user: {para.strip()}" if idx == 0 else para.strip()])
        hits = await store.search(vec, scope={"user_id": u}, top_k=2)
        assert len(hits) == 2
        assert hits[0].id == f"{msg}#{idx}"
        assert hits[0].score > hits[1].score


async def test_poison_job_is_dead_lettered_and_the_rest_flow(any_settings: Settings) -> None:
    mem = await AsyncMemory.open(any_settings.model_copy(update={"ingest_max_deliveries": 3}))
    try:
        u, s = new_id("u"), new_id("s")
        await mem.remember(u, s, "user", "first good message", ts=T0)
        await mem.queue.ensure_group()
        await mem.working.redis.xadd(
            mem.queue.stream, {"msg_id": "poison", "user_id": u, "session_id": s}
        )
        await mem.remember(u, s, "user", "second good message", ts=T0 + timedelta(seconds=1))
        report = await mem.drain()
        assert report.processed == 2
        assert report.dead_lettered == 1
        dead = await mem.dead_letters()
        assert len(dead) == 1
        assert dead[0].fields["msg_id"] == "poison"
        assert "malformed ingest job" in dead[0].error
        assert dead[0].deliveries > 3
        assert await mem.queue.pending_count() == 0
        async with mem.db_sessions() as sess:
            n = await sess.scalar(
                select(func.count()).select_from(MessageRow).where(MessageRow.user_id == u)
            )
        assert n == 2
    finally:
        await mem.close()


async def test_concurrent_fact_writers_never_leave_two_current_rows(
    service_mem: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    amounts = list(range(1000, 21000, 1000))

    async def write(i: int, amount: int) -> Outcome:
        fact = Fact(
            key="budget_limit",
            value={"amount": amount, "currency": "CNY"},
            type="constraint",
            confidence=0.95,
            source="user_stated",
        )
        return await write_fact(
            service_mem.db_sessions,
            user_id=u,
            session_id=s,
            msg_id=f"m{i}",
            fact=fact,
            at=T0 + timedelta(seconds=i),
            accepted_at=None,
        )

    outcomes = await asyncio.gather(*(write(i, a) for i, a in enumerate(amounts)))
    assert all(o in (Outcome.INSERTED, Outcome.SUPERSEDED, Outcome.HISTORICAL) for o in outcomes)
    current = await service_mem.facts(u)
    assert len(current) == 1
    # The newest statement wins, whatever order the writers committed in.
    assert current[0].value["amount"] == amounts[-1]
    history = await service_mem.fact_history(u, "budget_limit")
    assert len(history) == len(amounts)
    assert sum(h.valid_until is None for h in history) == 1


async def test_late_older_message_does_not_override(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "其实我可以到八千", ts=T0 + timedelta(days=3))
    await mem.drain()
    await mem.remember(u, s, "user", "我预算不超过五千", ts=T0)
    await mem.drain()
    assert [f.value["amount"] for f in await mem.facts(u)] == [8000]
    assert len(await mem.fact_history(u, "budget_limit")) == 2


async def test_a_late_message_is_read_with_what_was_known_when_it_was_said(
    mem: AsyncMemory,
) -> None:
    """A bare amount takes the currency of the budget known when it was said, not of
    one stated after it that happened to be ingested first."""
    u, s = new_id("u"), new_id("s")
    for minute, text in ((0, "My budget is 600 pounds."), (3, "My budget is 900 euros.")):
        await mem.remember(u, s, "user", text, ts=T0 + timedelta(minutes=minute))
        await mem.drain()
    await mem.remember(u, s, "user", "Actually make it 700.", ts=T0 + timedelta(minutes=2))
    await mem.drain()
    history = [f.value for f in await mem.fact_history(u, "budget_limit")]
    assert {"amount": 700, "currency": "GBP"} in history
    assert [f.value for f in await mem.facts(u)] == [{"amount": 900, "currency": "EUR"}]


async def test_a_session_id_reused_by_another_user_after_redis_forgot_it_is_theirs(
    any_settings: Settings,
) -> None:
    mem = await AsyncMemory.open(any_settings)
    try:
        s = new_id("s")
        await mem.remember("alice", s, "user", "my secret is 42", ts=T0)
        await mem.drain()
        # Redis forgot the session (its TTL ran out, or Redis was lost): nothing but the
        # ledger remembers alice's s, and it must neither be taken over nor leak.
        await mem.working.redis.delete(
            mem.working.keys.state("alice", s), mem.working.keys.window("alice", s)
        )
        await mem.remember("mallory", s, "user", "hello", ts=T0 + timedelta(days=2))
        report = await mem.drain()
        assert report.processed == 1 and report.dead_lettered == 0
        async with mem.db_sessions() as sess:
            rows = list(await sess.execute(select(MessageRow.user_id, MessageRow.content)))
        mine = {(u, c) for u, c in rows if u in ("alice", "mallory")}
        assert ("alice", "my secret is 42") in mine and ("mallory", "hello") in mine
        assert [m.content for m in await mem.window("alice", s)] == ["my secret is 42"]
        assert [m.content for m in await mem.window("mallory", s)] == ["hello"]
        ctx = await mem.context("mallory", s, "what is my secret?")
        assert "42" not in ctx.text
    finally:
        await mem.close()


async def test_summary_after_quiet_from_raw_messages(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    lines = [
        ("user", "我想买一台轻薄笔记本，我预算不超过五千。"),
        ("assistant", "好的。"),
        ("user", "重点关注续航和重量，不要推荐游戏本。"),
        ("assistant", "明白。"),
    ] * 3 + [("user", "其实我可以到八千。"), ("assistant", "了解，预算八千。")]
    for i, (role, text) in enumerate(lines):
        await mem.remember(u, s, role, text, ts=T0 + timedelta(seconds=i))
    last_ms = int((T0 + timedelta(seconds=len(lines) - 1)).timestamp() * 1000)
    # Not quiet yet: no summary.
    report = await mem.drain(now=(last_ms + 5_000) / 1000)
    assert report.summaries == 0 and await mem.summaries(u) == []
    report = await mem.drain(now=(last_ms + 31_000) / 1000)
    assert report.summaries == 1
    [summary] = await mem.summaries(u, s)
    assert summary["message_count"] == 14
    assert set(summary) >= {"facts", "summary", "open_questions", "topic"}
    budget = [f for f in summary["facts"] if f["key"] == "budget_limit"]
    assert budget and budget[-1]["value"]["amount"] == 8000
    # Idempotent: the same window is not summarised twice.
    assert (await mem.drain(now=(last_ms + 60_000) / 1000)).summaries == 0
    store = await mem.memory_vectors()
    [vec] = await mem.embedder.embed([summary["summary"]])
    hits = await store.search(vec, scope={"user_id": u}, top_k=3, where={"source_layer": "summary"})
    assert len(hits) == 1 and hits[0].metadata["msg_ids"] == ""


async def test_forget_user_erases_every_layer(mem: AsyncMemory) -> None:
    u, other, s, s2 = new_id("u"), new_id("u"), new_id("s"), new_id("s")
    await mem.remember(u, s, "user", "我预算不超过五千", ts=T0)
    await mem.remember(other, s2, "user", "我预算不超过九千", ts=T0)
    await mem.drain()
    await mem.remember(u, s, "user", "还有一件事：我住在上海", ts=T0 + timedelta(seconds=1))
    result = await mem.forget_user(u)
    assert result["jobs"] == 1 and result["messages"] == 1 and result["facts"] >= 1
    await mem.drain()
    assert await mem.facts(u) == []
    assert await mem.window(u, s) == []
    store = await mem.memory_vectors()
    [vec] = await mem.embedder.embed(["预算"])
    assert await store.search(vec, scope={"user_id": u}, top_k=10) == []
    # The other user is untouched.
    assert [f.value["amount"] for f in await mem.facts(other)] == [9000]
    assert await store.search(vec, scope={"user_id": other}, top_k=10)


# --- a worker process killed mid-batch --------------------------------------------------


class _HangingEmbeddings(BaseHTTPRequestHandler):
    """Answers the dimension probe, then never answers a batch: a worker stuck mid-batch."""

    calls = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        type(self).calls += 1
        if type(self).calls > 1:
            time.sleep(60)
            return
        data = [
            {"object": "embedding", "index": i, "embedding": [0.1] * 8} for i in range(len(inputs))
        ]
        payload = json.dumps({"object": "list", "data": data, "model": "m", "usage": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hanging_embeddings() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HangingEmbeddings)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.mark.slow
async def test_killed_worker_jobs_are_claimed_by_another(
    tmp_path: Path, service_settings: Settings, hanging_embeddings: str
) -> None:
    settings = service_settings.model_copy(update={"ingest_claim_idle_ms": 300})
    mem = await AsyncMemory.open(settings)
    try:
        u, s = new_id("u"), new_id("s")
        sent = [
            await mem.remember(
                u,
                s,
                "user" if i % 2 == 0 else "assistant",
                f"message {i} 预算{i}千",
                ts=T0 + timedelta(seconds=i),
            )
            for i in range(10)
        ]
        env = {
            **os.environ,
            "MEMSTACK_REDIS_URL": settings.redis_url or "",
            "MEMSTACK_DATABASE_URL": settings.database_url or "",
            "MEMSTACK_KEY_PREFIX": settings.key_prefix,
            "MEMSTACK_HOME": str(tmp_path / "worker-home"),
            # The shared Redis keeps nothing on disk, which serve and worker refuse otherwise.
            "MEMSTACK_ALLOW_UNSAFE": "1",
            "MEMSTACK_EMBEDDER": "openai",
            "MEMSTACK_EMBED_URL": hanging_embeddings,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "memstack",
            "worker",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                await mem.queue.ensure_group()
                info = await mem.working.redis.xpending(mem.queue.stream, "ingest")
                if info["pending"] == 10:
                    break
                await asyncio.sleep(0.2)
            else:
                pytest.fail("the worker process never took the batch")
            # It wrote the ledger and now hangs in the embedding call: kill it there.
            await asyncio.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        await asyncio.sleep(0.4)  # the dead consumer's jobs are now idle long enough
        report = await mem.drain()
        assert report.processed == 10 and report.failed == 0
        assert await mem.queue.pending_count() == 0
        async with mem.db_sessions() as sess:
            ids = list(await sess.scalars(select(MessageRow.msg_id).where(MessageRow.user_id == u)))
        assert sorted(ids) == sorted(sent)
        store = await mem.memory_vectors()
        [vec] = await mem.embedder.embed(["message 预算"])
        hits = await store.search(vec, scope={"user_id": u}, top_k=50)
        heads = {h.metadata["msg_id"] for h in hits}
        assert heads == {sent[i] for i in range(0, 10, 2)}
    finally:
        await mem.close()


def test_worker_refuses_embedded_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from memstack.cli import app

    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["worker"])
    assert result.exit_code == 2
    assert "MEMSTACK_REDIS_URL" in result.output


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.test_vectorstores import start_chroma_server

    server = start_chroma_server(tmp_path_factory.mktemp("ingest-chroma"))
    yield server.url
    server.stop()


@pytest.mark.parametrize("backend", ["chroma", "qdrant", "chroma-server"])
async def test_ingest_on_every_vector_store(
    request: pytest.FixtureRequest, service_settings: Settings, backend: str
) -> None:
    update: dict[str, object] = {"vector_store": "qdrant" if backend == "qdrant" else "chroma"}
    if backend == "chroma-server":
        update["vector_url"] = request.getfixturevalue("chroma_url")
    mem = await AsyncMemory.open(service_settings.model_copy(update=update))
    try:
        u, s = new_id("u"), new_id("s")
        q = await mem.remember(u, s, "user", "我预算不超过五千，想买轻薄本", ts=T0)
        a = await mem.remember(u, s, "assistant", "好的，五千以内的轻薄本。", ts=T0)
        b = await mem.remember(u, s, "user", "其实我可以到八千", ts=T0 + timedelta(days=3))
        jobs = await mem.working.redis.xrange(mem.queue.stream)
        await mem.drain()
        first = await _snapshot(mem, u)
        for _eid, fields in jobs:
            await mem.working.redis.xadd(mem.queue.stream, fields)
        await mem.drain()
        assert await _snapshot(mem, u) == first
        assert f"{q}#0" in first[2]
        assert [f.value["amount"] for f in await mem.facts(u) if f.key == "budget_limit"] == [8000]
        store = await mem.memory_vectors()
        [vec] = await mem.embedder.embed(["预算"])
        assert await store.search(vec, scope={"user_id": new_id("nobody")}, top_k=10) == []
        # The read path over this store: its one search_many call answers, texts from the ledger.
        result = await mem.context(u, new_id("s"), "轻薄本预算", now=T0 + timedelta(days=4))
        assert not result.degraded
        vector_items = [m for m in result.manifest if "vector" in m.ranks]
        assert vector_items and all(m.preview for m in vector_items)
        assert result.kept("semantic") and result.kept_msg_ids("semantic") <= {q, a, b}
    finally:
        await mem.close()


async def test_worker_process_stops_cleanly_on_sigterm(
    tmp_path: Path, service_settings: Settings
) -> None:
    mem = await AsyncMemory.open(service_settings)
    try:
        u, s = new_id("u"), new_id("s")
        env = {
            **os.environ,
            "MEMSTACK_REDIS_URL": service_settings.redis_url or "",
            "MEMSTACK_DATABASE_URL": service_settings.database_url or "",
            "MEMSTACK_KEY_PREFIX": service_settings.key_prefix,
            "MEMSTACK_HOME": str(tmp_path / "worker-home"),
            # The shared Redis keeps nothing on disk, which serve and worker refuse otherwise.
            "MEMSTACK_ALLOW_UNSAFE": "1",
            "MEMSTACK_EMBEDDER": "hashing",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memstack", "worker", env=env, stdout=asyncio.subprocess.PIPE
        )
        await mem.remember(u, s, "user", "我预算不超过五千", ts=T0)
        deadline = time.monotonic() + 60
        while not await mem.facts(u):
            assert time.monotonic() < deadline, "the worker process never ingested the message"
            await asyncio.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
        assert proc.returncode == 0
        assert b"stopped: 1 processed" in out
        assert await mem.queue.pending_count() == 0
    finally:
        await mem.close()


async def test_store_outage_keeps_jobs_pending_instead_of_dead_lettering(
    any_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstack.core.errors import StoreUnavailable

    mem = await AsyncMemory.open(any_settings.model_copy(update={"ingest_max_deliveries": 2}))
    try:
        u, s = new_id("u"), new_id("s")
        for i in range(3):
            await mem.remember(u, s, "user", f"message {i}", ts=T0 + timedelta(seconds=i))
        worker = await mem.worker()
        real_upsert = worker.ingestor.vectors.upsert

        async def down(*args: object, **kwargs: object) -> None:
            raise StoreUnavailable("chroma: connection refused (injected)", layer="vector store")

        monkeypatch.setattr(worker.ingestor.vectors, "upsert", down)
        for _ in range(6):  # far more deliveries than ingest_max_deliveries
            with pytest.raises(StoreUnavailable):
                await mem.drain()
        assert await mem.dead_letters() == []
        assert await mem.queue.pending_count() == 3
        monkeypatch.setattr(worker.ingestor.vectors, "upsert", real_upsert)
        report = await mem.drain()
        assert report.processed == 3 and report.dead_lettered == 0
        assert await mem.queue.pending_count() == 0
    finally:
        await mem.close()


async def test_vector_model_mismatch_stops_the_worker_before_any_job(
    service_settings: Settings,
) -> None:
    from memstack.core.errors import SchemaMismatch

    first = await AsyncMemory.open(service_settings)
    await first.memory_vectors()  # creates the collection for hashing-v1-384
    await first.close()
    mem = await AsyncMemory.open(service_settings.model_copy(update={"embed_dim": 128}))
    try:
        await mem.remember(new_id("u"), new_id("s"), "user", "hello there", ts=T0)
        with pytest.raises(SchemaMismatch, match="memstack reindex"):
            await mem.drain()
        assert await mem.queue.pending_count() == 1
        assert await mem.dead_letters() == []
    finally:
        await mem.close()


async def test_schema_refuses_two_current_rows(mem: AsyncMemory) -> None:
    from sqlalchemy.exc import IntegrityError

    u = new_id("u")
    row = {
        "user_id": u,
        "session_id": "s",
        "fact_type": "constraint",
        "fact_key": "budget_limit",
        "fact_value": {"amount": 1},
        "confidence": 1.0,
        "source": "user_stated",
        "valid_from": T0,
        "created_at": T0,
        "hit_count": 0,
    }
    async with mem.db_sessions.begin() as s:
        s.add(FactRow(msg_id="a", **row))
    with pytest.raises(IntegrityError):
        async with mem.db_sessions.begin() as s:
            s.add(FactRow(msg_id="b", **row))
    async with mem.db_sessions.begin() as s:  # a superseded (closed) row is fine
        s.add(FactRow(msg_id="c", valid_until=T0, **row))


async def test_database_outage_keeps_jobs_pending(service_settings: Settings) -> None:
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    from memstack.core.errors import StoreUnavailable

    mem = await AsyncMemory.open(service_settings.model_copy(update={"ingest_max_deliveries": 1}))
    dead = create_async_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    try:
        u, s = new_id("u"), new_id("s")
        await mem.remember(u, s, "user", "我预算不超过五千", ts=T0)
        worker = await mem.worker()
        alive = worker.ingestor.sessions
        worker.ingestor.sessions = async_sessionmaker(dead)
        for _ in range(4):
            with pytest.raises(StoreUnavailable, match="database unavailable"):
                await mem.drain()
        assert await mem.dead_letters() == []
        worker.ingestor.sessions = alive
        assert (await mem.drain()).processed == 1
        assert [f.key for f in await mem.facts(u)] == ["budget_limit"]
        mem.db_sessions = async_sessionmaker(dead)
        with pytest.raises(StoreUnavailable):
            await mem.facts(u)
    finally:
        await dead.dispose()
        await mem.close()


# --- author names -----------------------------------------------------------------------


async def test_a_name_travels_from_remember_to_ledger_index_chunk_and_rebuilt_window(
    mem: AsyncMemory,
) -> None:
    from memstack.recall.lexical import rewrite_query
    from memstack.stores.sql import ledger, lexical

    u, s = new_id("u"), new_id("s")
    tim = await mem.remember(u, s, "user", "I moved to Lisbon last spring.", ts=T0, name="Tim")
    reply = await mem.remember(u, s, "assistant", "Lisbon is lovely.", ts=T0 + timedelta(seconds=1))
    joanna = await mem.remember(
        u, s, "user", "I moved to Porto.", ts=T0 + timedelta(seconds=2), name=" Joanna "
    )
    report = await mem.drain(summarize=False)
    assert report.processed == 3 and report.failed == 0

    async with mem.db_sessions() as sess:
        rows = {
            r.msg_id: r
            for r in await sess.scalars(select(MessageRow).where(MessageRow.user_id == u))
        }
        assert {m: rows[m].name for m in (tim, reply, joanna)} == {
            tim: "Tim",
            reply: None,
            joanna: "Joanna",
        }
        assert "tim" in rows[tim].search_terms.split()
        assert "tim" not in rows[joanna].search_terms.split()
        # "What did Tim say" finds Tim's message although its text never names him.
        hits = await lexical.search(sess, u, rewrite_query("Tim").weights)
        assert [h.msg_id for h in hits] == [tim]
        recent = await ledger.recent_messages(sess, u, s, 10)
    assert [(m.msg_id, m.name) for m in recent] == [(tim, "Tim"), (reply, None), (joanna, "Joanna")]

    store = await mem.memory_vectors()
    [vec] = await mem.embedder.embed(["Lisbon"])
    chunks = {h.id: h.text for h in await store.search(vec, scope={"user_id": u}, top_k=10)}
    assert chunks[f"{tim}#0"] == "Tim: I moved to Lisbon last spring.\nassistant: Lisbon is lovely."
    assert chunks[f"{joanna}#0"] == "Joanna: I moved to Porto."

    # Redis loses the session; the window comes back from the ledger with its authors.
    await mem.working.redis.delete(mem.working.keys.window(u, s), mem.working.keys.state(u, s))
    assert [(m.msg_id, m.name) for m in await mem.window(u, s)] == [
        (tim, "Tim"),
        (reply, None),
        (joanna, "Joanna"),
    ]


async def test_old_job_without_a_name_and_an_empty_name_are_ingested_unnamed(
    mem: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    base = {"user_id": u, "session_id": s, "role": "user", "ts_ms": str(int(T0.timestamp() * 1000))}
    # The fields a job had before names existed, and one with the "" of "no name".
    await mem.working.redis.xadd(
        mem.queue.stream, {**base, "msg_id": f"{s}:old", "content": "old job"}
    )
    await mem.working.redis.xadd(
        mem.queue.stream, {**base, "msg_id": f"{s}:empty", "content": "empty name", "name": ""}
    )
    report = await mem.drain(summarize=False)
    assert report.processed == 2 and report.failed == 0 and report.dead_lettered == 0
    async with mem.db_sessions() as sess:
        rows = list(await sess.scalars(select(MessageRow).where(MessageRow.user_id == u)))
    assert sorted((r.msg_id, r.name) for r in rows) == [(f"{s}:empty", None), (f"{s}:old", None)]


def test_a_job_with_a_bad_name_is_malformed() -> None:
    from memstack.core.errors import ValidationError
    from memstack.stores.redis.queue import Job, message_from_job

    fields = {
        "msg_id": "s1:m1",
        "user_id": "u1",
        "session_id": "s1",
        "role": "user",
        "content": "hi",
        "ts_ms": "1000",
    }
    assert message_from_job(Job("1-0", {**fields, "name": "Tim"})).name == "Tim"
    with pytest.raises(ValidationError, match="1-0"):
        message_from_job(Job("1-0", {**fields, "name": "Tim: the boss"}))


async def test_quiet_is_judged_on_the_instant_whatever_the_zone_of_now(mem: AsyncMemory) -> None:
    # drain(now=...) in another zone than the messages' must compare instants: 5 s after
    # the last message is not quiet, 31 s is, in Shanghai time as in UTC.
    u, s = new_id("u"), new_id("s")
    lines = [("user", f"我预算不超过{5000 + i}元，重点关注续航。") for i in range(14)]
    for i, (role, text) in enumerate(lines):
        await mem.remember(u, s, role, text, ts=T0 + timedelta(seconds=i))
    last = T0 + timedelta(seconds=len(lines) - 1)
    shanghai = timezone(timedelta(hours=8))
    assert (await mem.drain(now=(last + timedelta(seconds=5)).astimezone(shanghai))).summaries == 0
    assert (await mem.drain(now=(last + timedelta(seconds=31)).astimezone(shanghai))).summaries == 1
