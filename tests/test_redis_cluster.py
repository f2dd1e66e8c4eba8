"""memstack on a Redis Cluster of three masters of its own (tests/cluster.py).

Sessions are chosen to cover every ingest shard, so their keys and streams land on
every master; each test then asserts what each master holds, asked directly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from memstack.core.errors import ConfigError, Conflict, SchemaMismatch
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.ops import doctor
from memstack.ops.upgrade import upgrade as db_upgrade
from memstack.stores.redis.keys import Keys
from memstack.stores.redis.transfer_state import mark_windows_incomplete, state_sessions
from memstack.stores.sql.models import MessageRow
from tests.cluster import LocalCluster
from tests.conftest import make_settings, new_id

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def cluster_settings(tmp_path: Path, redis_cluster: LocalCluster, pg_url: str) -> Settings:
    return make_settings(
        tmp_path,
        redis_url=redis_cluster.url,
        redis_cluster=True,
        database_url=pg_url,
        auto_migrate=False,
    )


@pytest.fixture
async def cmem(cluster_settings: Settings) -> AsyncIterator[AsyncMemory]:
    mem = await AsyncMemory.open(cluster_settings)
    yield mem
    await mem.close()


def spread(keys: Keys, user_id: str | None = None) -> list[tuple[str, str]]:
    """Sessions covering every shard (so every master): of one user, or of many."""
    assert keys.shards is not None
    found: dict[int, tuple[str, str]] = {}
    while len(found) < keys.shards:
        pair = (user_id or new_id("u"), new_id("s"))
        found.setdefault(keys.shard(*pair) or 0, pair)
    return list(found.values())


def held(cluster: LocalCluster, pattern: str) -> list[set[str]]:
    """The keys matching ``pattern`` on each master, asked of the master itself."""
    out = []
    for client in cluster.node_clients():
        try:
            out.append({k.decode() for k in client.scan_iter(match=pattern, count=1000)})
        finally:
            client.close()
    return out


async def _ledger_count(mem: AsyncMemory, user_ids: set[str]) -> int:
    async with mem.db_sessions() as s:
        n = await s.scalar(
            select(func.count()).select_from(MessageRow).where(MessageRow.user_id.in_(user_ids))
        )
    return int(n or 0)


async def test_round_trip_with_sessions_on_every_master(
    cmem: AsyncMemory, redis_cluster: LocalCluster
) -> None:
    pairs = spread(cmem.working.keys)
    for u, s in pairs:
        first = await cmem.remember(u, s, "user", f"my budget for {s} is 5000", msg_id="m1", ts=T0)
        again = await cmem.remember(u, s, "user", f"my budget for {s} is 5000", msg_id="m1", ts=T0)
        assert again == first
        await cmem.remember(u, s, "assistant", "noted", ts=T0 + timedelta(seconds=1))
        await cmem.set_state(u, s, {"step": 2})
    for u, s in pairs:
        assert [m.content for m in await cmem.window(u, s)] == [
            f"my budget for {s} is 5000",
            "noted",
        ]
        state = await cmem.get_state(u, s)
        assert state.fields == {"step": 2} and state.turns == 1
    prefix = cmem.settings.key_prefix
    per_node = held(redis_cluster, f"{prefix}:session:*")
    assert all(per_node), [len(keys) for keys in per_node]  # every master holds sessions
    streams = held(redis_cluster, f"{prefix}:ingest:*")
    assert all(streams)  # and ingest shards
    assert await cmem.queue.pending_count() == 2 * len(pairs)  # the retry queued nothing

    report = await cmem.drain(summarize=False)
    assert (report.processed, report.failed, report.dead_lettered) == (2 * len(pairs), 0, 0)
    assert await cmem.queue.pending_count() == 0
    assert await _ledger_count(cmem, {u for u, _s in pairs}) == 2 * len(pairs)
    u, s = pairs[-1]
    ctx = await cmem.context(u, s, "what is my budget?")
    assert f"my budget for {s} is 5000" in ctx.text
    assert await state_sessions(cmem.working, u) == [(u, s)]


async def test_a_reused_msg_id_with_another_message_is_refused(cmem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await cmem.remember(u, s, "user", "hello", msg_id="x1")
    with pytest.raises(Conflict):
        await cmem.remember(u, s, "user", "something else", msg_id="x1")
    assert [m.content for m in await cmem.window(u, s)] == ["hello"]
    assert await cmem.queue.pending_count() == 1


async def test_a_dead_consumers_jobs_are_claimed_on_every_shard(
    cluster_settings: Settings,
) -> None:
    mem = await AsyncMemory.open(cluster_settings.model_copy(update={"ingest_claim_idle_ms": 200}))
    try:
        pairs = spread(mem.working.keys)
        for u, s in pairs:
            await mem.remember(u, s, "user", f"remember {s}", ts=T0)
        # A consumer reads every job, then dies holding them.
        taken = await mem.queue.read("dead-consumer", 100)
        assert len(taken) == len(pairs)
        assert len({job.stream for job in taken}) == len(mem.queue.pairs)
        await asyncio.sleep(0.3)  # the jobs are now idle longer than the claim time
        report = await mem.drain(summarize=False)
        assert (report.processed, report.failed) == (len(pairs), 0)
        assert await mem.queue.pending_count() == 0
        assert await _ledger_count(mem, {u for u, _s in pairs}) == len(pairs)
    finally:
        await mem.close()


async def test_dead_letters_stay_in_their_shard_and_are_requeued(
    cluster_settings: Settings,
) -> None:
    mem = await AsyncMemory.open(cluster_settings.model_copy(update={"ingest_max_deliveries": 2}))
    try:
        redis = mem.working.redis
        pairs = spread(mem.working.keys)[:3]
        await mem.queue.ensure_group()
        for u, s in pairs:
            await mem.remember(u, s, "user", "a good message", ts=T0)
            poison = {"msg_id": f"poison-{s}", "user_id": u, "session_id": s}
            await redis.xadd(mem.working.keys.session_stream(u, s), poison)  # type: ignore[arg-type]
        report = await mem.drain(summarize=False)
        assert (report.processed, report.dead_lettered) == (3, 3)
        dead = await mem.dead_letters()
        assert sorted(d.fields["msg_id"] for d in dead) == sorted(f"poison-{s}" for _u, s in pairs)
        assert all("malformed ingest job" in d.error for d in dead)
        for u, s in pairs:
            own_dead = mem.queue.dead_of[mem.working.keys.session_stream(u, s)]
            assert await redis.xlen(own_dead) == 1
        assert await mem.queue.requeue_dead() == 3
        assert await mem.dead_letters() == []
        for u, s in pairs:
            rows = await redis.xrange(mem.working.keys.session_stream(u, s))
            assert [r[1][b"msg_id"].decode() for r in rows] == [f"poison-{s}"]
    finally:
        await mem.close()


async def test_forget_session_and_forget_user_clear_every_master(
    cmem: AsyncMemory, redis_cluster: LocalCluster
) -> None:
    user, other = new_id("u"), new_id("u")
    pairs = spread(cmem.working.keys, user)
    for u, s in [*pairs, (other, pairs[0][1])]:
        await cmem.remember(u, s, "user", "secret plans", msg_id="p1")
        await cmem.set_state(u, s, {"plan": "x"})
    keys = cmem.working.keys
    assert all(held(redis_cluster, keys.user_sessions_pattern(user)))

    u, s = pairs[0]
    erased = await cmem.forget_session(u, s)
    assert erased["jobs"] == 1 and erased["redis_keys"] == 3  # window, state, idempotency
    assert not any(held(redis_cluster, keys.session_pattern(u, s)))
    assert await cmem.window(other, s) != []  # the same session id of another user stays

    erased = await cmem.forget_user(user)
    assert erased["jobs"] == len(pairs) - 1
    assert not any(held(redis_cluster, keys.user_sessions_pattern(user)))
    assert [m.content for m in await cmem.window(other, s)] == ["secret plans"]
    assert await cmem.queue.pending_count() == 1  # the other user's job only


async def test_keys_without_ttl_are_found_on_every_master(
    cmem: AsyncMemory, redis_cluster: LocalCluster
) -> None:
    keys = cmem.working.keys
    pairs = spread(keys)
    for u, s in pairs:
        await cmem.remember(u, s, "user", "hi")
    assert await cmem.keys_without_ttl() == []  # streams and the layout mark are exempt
    forever = sorted(keys.state(u, s) + ":stray" for u, s in pairs)
    for name in forever:
        await cmem.working.redis.set(name, "1")
    assert all(held(redis_cluster, f"{keys.prefix}:session:*:stray"))
    assert await cmem.keys_without_ttl() == forever


async def test_another_shard_count_is_refused(
    cmem: AsyncMemory, cluster_settings: Settings
) -> None:
    await cmem.remember(new_id("u"), new_id("s"), "user", "written with 16 shards")
    with pytest.raises(SchemaMismatch, match="MEMSTACK_INGEST_SHARDS"):
        await AsyncMemory.open(cluster_settings.model_copy(update={"ingest_shards": 8}))
    report = await asyncio.to_thread(db_upgrade, cluster_settings)
    assert report.redis_keys_moved == 0 and report.redis_layout == "cluster-1 shards=16"


async def test_doctor_checks_every_primary(cluster_settings: Settings) -> None:
    check = await doctor._redis(cluster_settings)
    assert check.mode == "cluster" and "Redis Cluster of 3 primaries" in check.detail
    # The test cluster keeps nothing on disk: doctor must say so, not call it safe.
    assert (check.ok, check.label) == (False, "unsafe")


async def test_an_idle_read_returns_within_the_shard_wait(cmem: AsyncMemory) -> None:
    started = time.monotonic()
    assert await cmem.queue.read("idle", 16, block_ms=5000) == []
    assert time.monotonic() - started < 5  # it waited on one shard, not 16 x 5 s


async def test_windows_marked_incomplete_on_every_master_take_the_ledger_in(
    cmem: AsyncMemory,
) -> None:
    pairs = spread(cmem.working.keys)
    for u, s in pairs:
        await cmem.remember(u, s, "user", f"hello from {s}")
        await cmem.window(u, s)  # a read of a new session's window repairs and completes it
    await cmem.drain(summarize=False)
    await mark_windows_incomplete(cmem.working, pairs)
    for u, s in pairs:
        assert not (await cmem.working.window(u, s)).complete
        assert [m.content for m in await cmem.window(u, s)] == [f"hello from {s}"]
        assert (await cmem.working.window(u, s)).complete


def test_cluster_mode_needs_a_redis_url(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="redis_cluster needs redis_url"):
        make_settings(tmp_path, redis_cluster=True)


async def test_session_locks_on_every_master(cmem: AsyncMemory) -> None:
    working = cmem.working
    pairs = spread(working.keys)
    tokens = [await working.acquire_lock(u, s, ttl_s=30) for u, s in pairs]
    assert all(tokens)
    assert [await working.acquire_lock(u, s) for u, s in pairs] == [None] * len(pairs)
    for (u, s), token in zip(pairs, tokens, strict=True):
        assert token is not None and await working.release_lock(u, s, token)
    assert all([await working.acquire_lock(u, s) for u, s in pairs])


async def test_a_cluster_error_outside_redis_error_is_store_unavailable(
    cmem: AsyncMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py raises a slot no node serves as SlotNotCoveredError, which is no
    RedisError: it must still reach the caller as Redis being unavailable (503 over
    HTTP), not as an unexpected error."""
    from redis.exceptions import SlotNotCoveredError

    from memstack.core.errors import StoreUnavailable

    async def uncovered(*args: object, **kwargs: object) -> object:
        raise SlotNotCoveredError("Slot 7 is not covered by the cluster")

    monkeypatch.setattr(cmem.working.redis, "execute_command", uncovered)
    with pytest.raises(StoreUnavailable, match="Redis"):
        await cmem.remember(new_id("u"), new_id("s"), "user", "hello")
    with pytest.raises(StoreUnavailable, match="Redis"):
        await cmem.window(new_id("u"), new_id("s"))
