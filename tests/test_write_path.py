"""The synchronous write path and working memory, on real Redis and on the embedded mode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from memstack.core.errors import (
    ConfigError,
    InvalidContent,
    InvalidId,
    LockNotAcquired,
    NotFound,
    StoreUnavailable,
)
from memstack.core.messages import Message
from memstack.core.settings import Settings, load_settings
from memstack.core.time import from_ms
from memstack.memory import AsyncMemory
from memstack.stores.sql import ledger
from tests.conftest import make_settings, new_id


async def _all_keys(mem: AsyncMemory) -> list[str]:
    """Every key under the prefix but the layout mark, which open() writes."""
    r = mem.working.redis
    keys = [k.decode() async for k in r.scan_iter(match=mem.working.keys.pattern())]
    return [k for k in keys if k != mem.working.keys.layout()]


async def _jobs(mem: AsyncMemory) -> int:
    return int(await mem.working.redis.xlen(mem.working.keys.ingest_stream()))


async def test_trim_keeps_newest(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    for i in range(55):
        await mem.remember(u, s, "user", f"message {i}")
    win = await mem.window(u, s, 40)
    limit = mem.settings.window_max_messages
    assert [m.content for m in win] == [f"message {i}" for i in range(55 - limit, 55)]
    recent = await mem.window(u, s)
    assert [m.content for m in recent] == [f"message {i}" for i in range(45, 55)]


async def test_every_key_has_ttl(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    for i in range(100):
        role = "user" if i % 2 == 0 else "assistant"
        await mem.remember(u, s, role, f"turn {i}", msg_id=f"m{i}" if i % 3 == 0 else None)
    await mem.set_state(u, s, {"current_step": 3, "pending_tool": "search"})
    async with mem.working.lock(u, s):
        keys = await _all_keys(mem)
        session_keys = [k for k in keys if k not in mem.working.keys.durable()]
        assert len(session_keys) >= 4  # window, state, lock, idempotency marks
        for key in session_keys:
            assert await mem.working.redis.ttl(key) > 0, key
        assert await mem.keys_without_ttl() == []
    state = await mem.get_state(u, s)
    assert state.turns == 50
    assert state.fields == {"current_step": 3, "pending_tool": "search"}


async def test_patrol_finds_a_key_without_ttl(mem: AsyncMemory) -> None:
    leak = f"{mem.settings.key_prefix}:session:{{x}}:leak"
    await mem.working.redis.set(leak, "1")
    assert await mem.keys_without_ttl() == [leak]


async def test_retry_with_same_msg_id_is_idempotent(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    first = await mem.remember(u, s, "user", "我预算不超过五千", msg_id="client-42")
    again = await mem.remember(u, s, "user", "我预算不超过五千", msg_id="client-42")
    assert first == again == f"{u}/{s}:client-42"
    assert [m.msg_id for m in await mem.window(u, s)] == [f"{u}/{s}:client-42"]
    assert await _jobs(mem) == 1
    assert (await mem.get_state(u, s)).turns == 1


async def test_generated_msg_id_is_timestamp_user_session_sequence(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    a = await mem.remember(u, s, "user", "one", ts=1715600000.5)
    b = await mem.remember(u, s, "assistant", "two", ts=1715600001)
    assert a == f"1715600000500-{u}/{s}-000001"
    assert b == f"1715600001000-{u}/{s}-000002"
    job = (await mem.working.redis.xrange(mem.working.keys.ingest_stream()))[0][1]
    assert job[b"msg_id"].decode() == a and job[b"user_id"].decode() == u
    assert job[b"content"].decode() == "one"


async def test_lock_excludes_second_holder_and_expires(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    token = await mem.working.acquire_lock(u, s, ttl_s=1)
    assert token is not None
    assert await mem.working.acquire_lock(u, s) is None
    assert not await mem.working.release_lock(u, s, "not-the-owner")
    assert await mem.working.acquire_lock(u, s) is None
    with pytest.raises(LockNotAcquired):
        async with mem.working.lock(u, s, wait_s=0.05):
            pass
    await asyncio.sleep(1.2)
    second = await mem.working.acquire_lock(u, s)
    assert second is not None
    # The first owner's late release must not free the second owner's lock.
    assert not await mem.working.release_lock(u, s, token)
    assert await mem.working.release_lock(u, s, second)


async def test_concurrent_writers_lose_nothing_and_keep_order(any_settings: Settings) -> None:
    settings = any_settings.model_copy(update={"window_max_messages": 400})
    mem = await AsyncMemory.open(settings)
    try:
        u, s = new_id("u"), new_id("s")

        async def writer(w: int) -> None:
            for i in range(40):
                await mem.remember(u, s, "user", f"w{w}-{i}")

        await asyncio.gather(*(writer(w) for w in range(8)))
        win = await mem.window(u, s, 400)
        assert len(win) == 320
        assert len({m.msg_id for m in win}) == 320
        for w in range(8):
            mine = [m.content for m in win if m.content.startswith(f"w{w}-")]
            assert mine == [f"w{w}-{i}" for i in range(40)]
        assert await _jobs(mem) == 320
    finally:
        keys = await _all_keys(mem)
        await mem.working.redis.delete(*keys)
        await mem.close()


@pytest.mark.parametrize(
    ("user_id", "session_id", "role", "content", "error"),
    [
        ("u{1}", "s1", "user", "hi", InvalidId),
        ("u1", "s 1", "user", "hi", InvalidId),
        ("u1", "s#1", "user", "hi", InvalidId),
        ("", "s1", "user", "hi", InvalidId),
        ("u" * 129, "s1", "user", "hi", InvalidId),
        ("u1", "s1", "user", "   ", InvalidContent),
        ("u1", "s1", "user", "", InvalidContent),
        ("u1", "s1", "user", "x" * 70000, InvalidContent),
        ("u1", "s1", "robot", "hi", InvalidContent),
        ("u1", "s1", "user", 42, InvalidContent),
    ],
)
async def test_bad_input_is_rejected_and_writes_nothing(
    mem: AsyncMemory, user_id: str, session_id: str, role: str, content: str, error: type
) -> None:
    with pytest.raises(error):
        await mem.remember(user_id, session_id, role, content)
    assert await _all_keys(mem) == []


async def test_bad_msg_id_is_rejected(mem: AsyncMemory) -> None:
    with pytest.raises(InvalidId, match="msg_id"):
        await mem.remember("u1", "s1", "user", "hi", msg_id="a#b")
    assert await _all_keys(mem) == []


async def test_oversized_content_counts_utf8_bytes(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    # 22,000 CJK characters are 66,000 bytes: over the 64 KiB default.
    with pytest.raises(InvalidContent, match="bytes"):
        await mem.remember(u, s, "user", "预" * 22000)
    await mem.remember(u, s, "user", "预" * 21000)


async def test_a_session_id_names_one_session_per_user(mem: AsyncMemory) -> None:
    s, alice, mallory = new_id("s"), new_id("alice"), new_id("mallory")
    a = await mem.remember(alice, s, "user", "secret plan", msg_id="1")
    await mem.set_state(alice, s, {"step": 1})
    assert await mem.window(mallory, s) == []
    assert (await mem.get_state(mallory, s)).fields == {}
    # mallory's s is mallory's own session: alice's is neither read nor changed.
    m = await mem.remember(mallory, s, "user", "let me in", msg_id="1")
    await mem.set_state(mallory, s, {"step": 9})
    assert a != m
    assert [w.content for w in await mem.window(alice, s)] == ["secret plan"]
    assert [w.content for w in await mem.window(mallory, s)] == ["let me in"]
    assert (await mem.get_state(alice, s)).fields == {"step": 1}
    assert await _jobs(mem) == 2
    await mem.drain()
    assert [f.content for f in await _ledger(mem, alice)] == ["secret plan"]
    assert [f.content for f in await _ledger(mem, mallory)] == ["let me in"]


async def _ledger(mem: AsyncMemory, user: str) -> list[Message]:
    async with mem.db_sessions() as sess:
        return [
            m
            for sid in await ledger.sessions_of(sess, user)
            for m in await ledger.recent_messages(sess, user, sid, 100)
        ]


async def test_large_state_value_goes_to_database(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    big = {"rows": [{"id": i, "text": "x" * 50} for i in range(200)]}
    await mem.set_state(u, s, {"tool_result": big, "current_step": 2})
    state = await mem.get_state(u, s)
    ref = state.fields["tool_result"]
    assert set(ref) == {"$ref", "summary", "bytes"} and ref["bytes"] > 4096
    raw = await mem.working.redis.hget(mem.working.keys.state(u, s), "tool_result")
    assert len(raw) < 600
    assert await mem.get_tool_result(u, ref["$ref"]) != ""
    assert json.loads(await mem.get_tool_result(u, ref["$ref"])) == big
    with pytest.raises(NotFound):
        await mem.get_tool_result("someone-else", ref["$ref"])


def test_invalid_settings_name_the_setting() -> None:
    with pytest.raises(ConfigError, match="MEMSTACK_WINDOW_TTL_S"):
        load_settings(window_ttl_s=0)
    with pytest.raises(ConfigError, match="weight_relevance"):
        load_settings(weight_relevance=0.5, weight_recency=0.2)
    with pytest.raises(ConfigError, match="MEMSTACK_KEY_PREFIX"):
        load_settings(key_prefix="bad prefix{")


def test_settings_read_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_WINDOW_TTL_S", "60")
    monkeypatch.setenv("MEMSTACK_LOCALE", "en")
    s = load_settings()
    assert s.window_ttl_s == 60 and s.locale == "en"
    monkeypatch.setenv("MEMSTACK_LOCALE", "fr")
    with pytest.raises(ConfigError, match="MEMSTACK_LOCALE"):
        load_settings()


async def test_unreachable_redis_is_a_clear_error(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, redis_url="redis://127.0.0.1:1/0", store_timeout_s=0.5)
    with pytest.raises(StoreUnavailable, match="Redis"):
        await AsyncMemory.open(settings)


# --- author names -----------------------------------------------------------------------


async def _raw_window(mem: AsyncMemory, user: str, session: str) -> list[dict[str, str]]:
    raw = await mem.working.redis.lrange(mem.working.keys.window(user, session), 0, -1)
    return [json.loads(r) for r in raw]


async def _raw_jobs(mem: AsyncMemory) -> list[dict[bytes, bytes]]:
    return [f for _eid, f in await mem.working.redis.xrange(mem.working.keys.ingest_stream())]


async def test_name_is_stored_stripped_in_window_and_job(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "I moved to Lisbon.", name="  Tim ")
    await mem.remember(u, s, "user", "Nice!", name="Joanna")
    await mem.remember(u, s, "assistant", "Noted.")
    win = await mem.window(u, s)
    assert [(m.name, m.content) for m in win] == [
        ("Tim", "I moved to Lisbon."),
        ("Joanna", "Nice!"),
        (None, "Noted."),
    ]
    raw = await _raw_window(mem, u, s)
    assert raw[0]["name"] == "Tim"
    # An unnamed message is stored exactly as before names existed.
    assert "name" not in raw[2]
    jobs = await _raw_jobs(mem)
    assert [j.get(b"name") for j in jobs] == [b"Tim", b"Joanna", None]


def test_sync_memory_remember_takes_a_name(embedded_settings: Settings) -> None:
    from memstack.sync import Memory

    u, s = new_id("u"), new_id("s")
    with Memory(embedded_settings) as m:
        m.remember(u, s, "user", "hello", name="Tim")
        assert [w.name for w in m.window(u, s)] == ["Tim"]


async def test_a_64_character_name_is_accepted(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    name = "名" * 64
    await mem.remember(u, s, "user", "hi", name=f" {name}\t")
    assert [m.name for m in await mem.window(u, s)] == [name]


@pytest.mark.parametrize(
    "name",
    [
        "",
        "   ",
        "T" * 65,
        "Tim\nJoanna",
        "Tim\rJo",
        "Ti\x00m",
        "Tim\u2028Jo",
        "Tim:",
        "Dr: Tim",
        "蒂姆：",
        42,
    ],
)
async def test_bad_name_is_rejected_and_writes_nothing(mem: AsyncMemory, name: object) -> None:
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "first")
    before_window = await mem.working.redis.llen(mem.working.keys.window(u, s))
    before_jobs = await _jobs(mem)
    with pytest.raises(InvalidContent, match="name"):
        await mem.remember(u, s, "user", "second", name=name)  # type: ignore[arg-type]
    assert await mem.working.redis.llen(mem.working.keys.window(u, s)) == before_window == 1
    assert await _jobs(mem) == before_jobs == 1
    assert (await mem.get_state(u, s)).turns == 1


async def test_window_entry_without_name_still_loads(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    old = {"msg_id": "m1", "user_id": u, "role": "user", "content": "old entry", "ts_ms": "1"}
    await mem.working.redis.rpush(mem.working.keys.window(u, s), json.dumps(old))
    await mem.working.redis.expire(mem.working.keys.window(u, s), 60)
    [m] = await mem.window(u, s)
    assert (m.msg_id, m.session_id, m.content, m.created_at, m.name) == (
        "m1",
        s,
        "old entry",
        from_ms(1),
        None,
    )


async def test_window_rebuild_keeps_names(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    rows = [
        Message("a", u, s, "user", "I moved to Lisbon.", from_ms(1000), "Tim"),
        Message("b", u, s, "assistant", "Noted.", from_ms(2000)),
    ]
    assert await mem.working.repair_window(u, s, rows) == 2
    assert await mem.window(u, s) == rows
    assert "name" not in (await _raw_window(mem, u, s))[1]
