"""The embedded default keeps what it accepted: a process that exits without drain(),
or is killed, leaves its messages to the next one; a second process on the same home
is refused with a clear error. And the Redis key layout upgrade, on a populated store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memstack import Memory
from memstack.core.errors import HomeInUse, SchemaMismatch
from memstack.core.settings import Settings, load_settings
from memstack.memory import AsyncMemory
from memstack.ops import doctor
from memstack.stores.connect import create_redis
from memstack.stores.redis import layout as redis_layout
from memstack.stores.redis.keys import Keys
from tests.conftest import make_settings, new_id

# A process that remembers a few messages in an embedded home, says so, and then ends
# the way the test asks: a clean exit without drain(), or waiting to be killed.
WRITER = """
import sys, time
from memstack import Memory
from memstack.core.settings import load_settings

home, user, then = sys.argv[1], sys.argv[2], sys.argv[3]
mem = Memory(load_settings(home=home, embedder="hashing"))
ids = [mem.remember(user, "s1", "user" if i % 2 == 0 else "assistant", f"turn {i}")
       for i in range(6)]
print(",".join(ids), flush=True)
if then == "exit":
    mem.close()
else:
    time.sleep(600)
"""


def _writer(home: Path, user: str, then: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(home), user, then],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMSTACK_HOME": str(home)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        pytest.fail(f"the writer died: {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split(",")


async def _ledger_ids(settings: Settings, user: str) -> list[str]:
    async with await AsyncMemory.open(settings) as mem:
        report = await mem.drain()
        assert report.failed == 0 and report.dead_lettered == 0
        window = await mem.window(user, "s1", 40)
        ctx = await mem.context(user, "s1", "what was turn 3?")
        assert "turn 3" in ctx.text
        from memstack.stores.sql import ledger

        async with mem.db_sessions() as s:
            rows = await ledger.recent_messages(s, user, "s1", 100)
        assert [m.msg_id for m in window] == [m.msg_id for m in rows]
        assert mem.queue.journal is not None and mem.queue.journal.pending() == []
        return [m.msg_id for m in rows]


@pytest.mark.slow
async def test_messages_survive_an_exit_without_drain(tmp_path: Path) -> None:
    home, user = tmp_path / "home", new_id("u")
    proc, sent = _writer(home, user, "exit")
    assert proc.wait(60) == 0
    assert await _ledger_ids(make_settings(tmp_path, home=home), user) == sent


@pytest.mark.slow
async def test_messages_survive_a_kill_one_second_later_and_a_second_process_is_refused(
    tmp_path: Path,
) -> None:
    home, user = tmp_path / "home", new_id("u")
    proc, sent = _writer(home, user, "sleep")
    try:
        settings = make_settings(tmp_path, home=home)
        with pytest.raises(HomeInUse) as refused:
            await AsyncMemory.open(settings)
        message = str(refused.value)
        assert f"process {proc.pid}" in message and "MEMSTACK_REDIS_URL" in message
        # doctor says who holds the home rather than opening its stores under it.
        checks = {c.store: c for c in await doctor.run_checks(settings)}
        assert checks["vectors"].label == "in use" and f"process {proc.pid}" in (
            checks["vectors"].detail
        )
        await asyncio.sleep(1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert await _ledger_ids(settings, user) == sent


async def test_a_drained_message_leaves_the_journal_and_a_retry_adds_nothing(
    embedded_settings: Settings,
) -> None:
    async with await AsyncMemory.open(embedded_settings) as mem:
        journal = mem.queue.journal
        assert journal is not None
        u = new_id("u")
        first = await mem.remember(u, "s", "user", "hello", msg_id="m1")
        again = await mem.remember(u, "s", "user", "hello", msg_id="m1")
        assert first == again and [j["msg_id"] for j in journal.pending()] == [first]
        await mem.drain()
        assert journal.pending() == []


async def test_servers_keep_no_journal_and_take_no_home_lock(service_settings: Settings) -> None:
    settings = service_settings.model_copy(update={"vector_url": None})
    async with await AsyncMemory.open(settings) as mem:
        assert mem.queue.journal is None
        assert not (settings.home / "journal.db").exists()


# --- the Redis key layout ------------------------------------------------------------------


async def _old_layout(settings: Settings) -> tuple[str, str]:
    """Keys as memstack wrote them before sessions were scoped by user."""
    redis = create_redis(settings)
    p, sid, orphan = settings.key_prefix, new_id("s"), new_id("s")
    entry = {"msg_id": f"{sid}:m1", "user_id": "alice", "role": "user", "content": "hi"}
    await redis.rpush(f"{p}:session:{{{sid}}}:window", json.dumps({**entry, "ts_ms": "1"}))
    await redis.hset(f"{p}:session:{{{sid}}}:state", mapping={"_user_id": "alice", "_turns": 1})
    await redis.set(f"{p}:session:{{{sid}}}:idem:{sid}:m1", f"{sid}:m1", ex=300)
    await redis.set(f"{p}:session:{{{orphan}}}:idem:{orphan}:m9", f"{orphan}:m9", ex=300)
    for key in (f"{p}:session:{{{sid}}}:window", f"{p}:session:{{{sid}}}:state"):
        await redis.expire(key, 300)
    await redis.aclose()
    return sid, orphan


async def test_old_session_keys_move_under_their_owner(service_settings: Settings) -> None:
    sid, orphan = await _old_layout(service_settings)
    with pytest.raises(SchemaMismatch, match="memstack db upgrade"):
        await AsyncMemory.open(service_settings)
    redis = create_redis(service_settings)
    keys = Keys(service_settings.key_prefix)
    try:
        assert await redis_layout.upgrade(redis, keys) == 3
        names = sorted([k.decode() async for k in redis.scan_iter(match=keys.pattern())])
        tag = f"{{alice/{sid}}}"
        assert names == sorted(
            [
                keys.layout(),
                f"{keys.prefix}:session:{tag}:idem:m1",
                f"{keys.prefix}:session:{tag}:state",
                f"{keys.prefix}:session:{tag}:window",
            ]
        )
        ttls = [await redis.ttl(n) for n in names if n != keys.layout()]
        assert all(0 < t <= 300 for t in ttls), ttls
        assert orphan not in " ".join(names)
    finally:
        await redis.aclose()
    async with await AsyncMemory.open(service_settings) as mem:
        assert [m.content for m in await mem.window("alice", sid)] == ["hi"]
        assert (await mem.get_state("alice", sid)).turns == 1
        # The idempotency mark moved too: a retry of the old message is still one message.
        assert await mem.remember("alice", sid, "user", "hi", msg_id="m1") == f"{sid}:m1"
        keys_left = [k async for k in mem.working.redis.scan_iter(match=keys.pattern())]
        await mem.working.redis.delete(*keys_left)


async def test_the_embedded_default_upgrades_its_keys_at_start(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    sid, _orphan = await _old_layout(settings)
    async with await AsyncMemory.open(settings) as mem:
        assert [m.content for m in await mem.window("alice", sid)] == ["hi"]


def test_health_names_each_store_and_what_it_answered(tmp_path: Path) -> None:
    with Memory(load_settings(home=tmp_path, embedder="hashing")) as mem:
        mem.remember("u1", "s1", "user", "hello")
        mem.drain()
        health = mem.health()
    assert set(health) == {"redis", "database", "vectors"}
    assert all(s.ok for s in health.values())
    assert health["redis"].detail == "ping ok (embedded)"
    assert health["database"].detail == "sqlite ok"
    assert health["vectors"].detail == "1 vectors"
