"""The two-level session knowledge cache (docs/knowledge_cache.md), on real Redis and on
the embedded fakeredis: the documented five-turn timeline with controlled scores, the off
switch, FIFO, same-text replacement, TTL, concurrency, and end to end over Qdrant local and
Chroma.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from memstack.core.errors import (
    InvalidContent,
    InvalidId,
    StoreUnavailable,
    ValidationError,
)
from memstack.core.ids import text_hash
from memstack.core.settings import Settings
from memstack.knowledge.base import Document
from memstack.knowledge.cache import KnowledgeCache, KnowledgeItem, KnowledgeTurn, merge_levels
from memstack.memory import AsyncMemory
from memstack.stores.connect import create_redis
from memstack.stores.redis.keys import keys_for
from memstack.sync import Memory
from tests.conftest import make_settings, new_id

# The documented business-analyst session: a fixed knowledge base with its scores.
TERMS = "清结算术语：清算是交易数据的汇总核对，结算是资金在参与方之间的实际划转。"
RULES = "支付业务规则：T+1 结算，差错交易次日人工复核。"
CHANNELS = "渠道对接：每个收单渠道有独立的报文格式与对账文件。"
COMPLIANCE = "合规知识：支付机构须报送反洗钱可疑交易报告。"
RISK = "风控知识：单笔限额与日累计限额。"

LONG_MESSAGE = "我们做支付清结算系统，痛点是结算延迟、渠道对接复杂，还要满足监管的合规要求。"
SHORT_REPLY = "B. 什么都不做，合规风险很大"
CONTINUE = "选A，继续"


class ScriptedSearch:
    """Level 2 with exact scores: each message maps to its hits."""

    def __init__(self, hits: dict[str, list[tuple[str, float]]]) -> None:
        self.hits = hits
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, query: str, top_k: int) -> list[KnowledgeItem]:
        self.calls.append((query, top_k))
        return [KnowledgeItem(text=t, score=s, doc_id="kb") for t, s in self.hits.get(query, [])]


SEED_HITS: dict[str, list[tuple[str, float]]] = {
    "你好": [],
    # Nearest neighbours of a message without content: noise under kb_min_score.
    "帮我梳理需求": [(RISK, 0.31)],
    LONG_MESSAGE: [(TERMS, 0.85), (RULES, 0.82), (CHANNELS, 0.68)],
    SHORT_REPLY: [(COMPLIANCE, 0.78), (RISK, 0.62)],
    CONTINUE: [(CHANNELS, 0.22), (RISK, 0.19)],
}


@pytest.fixture(params=["redis", "fakeredis", "cluster"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "redis":
        return make_settings(tmp_path, redis_url=request.getfixturevalue("redis_url"))
    if request.param == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        return make_settings(tmp_path, redis_url=cluster.url, redis_cluster=True)
    return make_settings(tmp_path)


_made: list[KnowledgeCache] = []


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Redis]:
    client = create_redis(settings)
    yield client
    while _made:
        await _made.pop().flush()
    keys = [k async for k in client.scan_iter(match=f"{settings.key_prefix}:*", count=1000)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


def cache_of(
    redis: Redis, settings: Settings, search: ScriptedSearch, **overrides: object
) -> KnowledgeCache:
    cache = KnowledgeCache(redis, settings.model_copy(update=overrides), search)
    _made.append(cache)
    return cache


def view(items: Sequence[KnowledgeItem]) -> list[tuple[str, float, str]]:
    return [(i.text, i.score, i.origin) for i in items]


async def prefix_keys(redis: Redis, settings: Settings) -> list[bytes]:
    return [k async for k in redis.scan_iter(match=f"{settings.key_prefix}:*")]


# --- the documented timeline ----------------------------------------------------------------


async def test_seed_timeline(redis: Redis, settings: Settings) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS), kc_inject_max=3)
    user, sid = new_id("u"), new_id("s")

    # Turns 1-2: nothing cached, nothing useful found: the section is empty.
    for message in ("你好", "帮我梳理需求"):
        turn = await cache.turn(user, sid, message)
        assert turn.items == () and turn.text == "" and turn.chars == 0
    assert await cache.cached(user, sid) == []

    # Turn 3: three hits; the two at or above 0.70 enter the cache, 0.68 does not.
    turn = await cache.turn(user, sid, LONG_MESSAGE)
    assert view(turn.items) == [
        (TERMS, 0.85, "retrieved"),
        (RULES, 0.82, "retrieved"),
        (CHANNELS, 0.68, "retrieved"),
    ]
    assert [i.text for i in await cache.cached(user, sid)] == [TERMS, RULES]

    # Turn 4: the cache is still there; the merged top 3 is the documented one.
    turn = await cache.turn(user, sid, SHORT_REPLY)
    assert view(turn.items) == [
        (TERMS, 0.85, "cached"),
        (RULES, 0.82, "cached"),
        (COMPLIANCE, 0.78, "retrieved"),
    ]
    assert (turn.cached_count, turn.retrieved_count) == (2, 1)
    assert turn.text.splitlines() == [
        f"[历史缓存] {TERMS}",
        f"[历史缓存] {RULES}",
        f"[本轮检索] {COMPLIANCE}",
    ]
    assert turn.chars == len(turn.text)
    assert [i.text for i in await cache.cached(user, sid)] == [TERMS, RULES, COMPLIANCE]

    # Turn 5: a reply without content finds nothing useful; Level 1 still injects three.
    turn = await cache.turn(user, sid, CONTINUE)
    assert view(turn.items) == [
        (TERMS, 0.85, "cached"),
        (RULES, 0.82, "cached"),
        (COMPLIANCE, 0.78, "cached"),
    ]
    assert turn.render("en").splitlines()[0] == f"[cached] {TERMS}"
    assert turn.entries() == [f"[历史缓存] {t}" for t in (TERMS, RULES, COMPLIANCE)]


async def test_seed_turn_four_merges_all_four_in_order(redis: Redis, settings: Settings) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS), kc_inject_max=15)
    user, sid = new_id("u"), new_id("s")
    await cache.turn(user, sid, LONG_MESSAGE)
    turn = await cache.turn(user, sid, SHORT_REPLY)
    assert view(turn.items) == [
        (TERMS, 0.85, "cached"),
        (RULES, 0.82, "cached"),
        (COMPLIANCE, 0.78, "retrieved"),
        (RISK, 0.62, "retrieved"),
    ]


async def test_off_switch_is_level_two_only(redis: Redis, settings: Settings) -> None:
    search = ScriptedSearch(SEED_HITS)
    cache = cache_of(redis, settings, search, kc_enabled=False, kc_inject_max=3)
    user, sid = new_id("u"), new_id("s")
    turns = [await cache.turn(user, sid, m) for m in SEED_HITS]
    assert [view(t.items) for t in turns] == [
        [],
        [],
        [(TERMS, 0.85, "retrieved"), (RULES, 0.82, "retrieved"), (CHANNELS, 0.68, "retrieved")],
        [(COMPLIANCE, 0.78, "retrieved"), (RISK, 0.62, "retrieved")],
        [],  # the old behaviour: a short reply gets no knowledge at all
    ]
    assert len(search.calls) == 5
    assert await prefix_keys(redis, settings) == []


# --- merge ----------------------------------------------------------------------------------


def test_merge_levels_is_the_seeds() -> None:
    a1 = KnowledgeItem("a", 0.80, "cached")
    a2 = KnowledgeItem("a", 0.90, "retrieved")
    b1 = KnowledgeItem("b", 0.75, "cached")
    b2 = KnowledgeItem("b", 0.75, "retrieved")
    c2 = KnowledgeItem("c", 0.95, "retrieved")
    merged = merge_levels([a1, b1], [a2, b2, c2], max_total=15)
    # Higher Level-2 score wins; an equal one does not; sorted by score.
    assert merged == [c2, a2, b1]
    assert merge_levels([a1, b1], [a2, b2, c2], max_total=2) == [c2, a2]
    assert merge_levels([], [], max_total=3) == []


# --- Level 1 rules ---------------------------------------------------------------------------


async def test_fifo_at_capacity(redis: Redis, settings: Settings) -> None:
    hits = {f"q{i}": [(f"knowledge {i}", 0.9)] for i in range(5)}
    hits["two"] = [("knowledge 5", 0.91), ("knowledge 6", 0.95)]
    cache = cache_of(redis, settings, ScriptedSearch(hits), kc_capacity=3)
    user, sid = new_id("u"), new_id("s")
    for i in range(5):
        await cache.turn(user, sid, f"q{i}")
    # Appended at the tail, evicted from the head.
    assert [i.text for i in await cache.cached(user, sid)] == [
        "knowledge 2",
        "knowledge 3",
        "knowledge 4",
    ]
    # Several hits of one turn enter best first.
    await cache.turn(user, sid, "two")
    assert [i.text for i in await cache.cached(user, sid)] == [
        "knowledge 4",
        "knowledge 6",
        "knowledge 5",
    ]


async def test_same_text_merge_keeps_higher_cache_keeps_newer(
    redis: Redis, settings: Settings
) -> None:
    hits = {
        "first": [("X", 0.90), ("Y", 0.80)],
        "lower": [("X", 0.75)],
        "higher": [("X", 0.95)],
    }
    cache = cache_of(redis, settings, ScriptedSearch(hits))
    user, sid = new_id("u"), new_id("s")
    await cache.turn(user, sid, "first")

    turn = await cache.turn(user, sid, "lower")
    # The merge keeps the cached 0.90 over this turn's 0.75 ...
    assert view(turn.items) == [("X", 0.90, "cached"), ("Y", 0.80, "cached")]
    # ... while the cache keeps the newer result, moved to the tail, once.
    assert [(i.text, i.score) for i in await cache.cached(user, sid)] == [("Y", 0.80), ("X", 0.75)]

    turn = await cache.turn(user, sid, "higher")
    assert view(turn.items) == [("X", 0.95, "retrieved"), ("Y", 0.80, "cached")]
    assert [(i.text, i.score) for i in await cache.cached(user, sid)] == [("Y", 0.80), ("X", 0.95)]


async def test_duplicate_hits_of_one_turn_enter_once(redis: Redis, settings: Settings) -> None:
    hits = {"q": [("same text", 0.72), ("same text", 0.88)]}
    cache = cache_of(redis, settings, ScriptedSearch(hits))
    user, sid = new_id("u"), new_id("s")
    turn = await cache.turn(user, sid, "q")
    assert view(turn.items) == [("same text", 0.88, "retrieved")]
    assert [(i.text, i.score) for i in await cache.cached(user, sid)] == [("same text", 0.88)]


async def test_stored_as_a_json_list_with_the_one_text_hash(
    redis: Redis, settings: Settings
) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS))
    user, sid = new_id("u"), new_id("s")
    await cache.turn(user, sid, LONG_MESSAGE)
    await cache.flush()
    key = keys_for(settings).knowledge(user, sid)
    stored = json.loads(await redis.get(key))
    assert [(d["text"], d["hash"]) for d in stored] == [
        (TERMS, text_hash(TERMS)),
        (RULES, text_hash(RULES)),
    ]


async def test_ttl_follows_the_session(redis: Redis, settings: Settings) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS), window_ttl_s=100)
    user, sid = new_id("u"), new_id("s")
    key = keys_for(settings).knowledge(user, sid)
    # No hit worth caching: no key is created (and so none without a TTL).
    await cache.turn(user, sid, CONTINUE)
    await cache.flush()
    assert await redis.exists(key) == 0

    await cache.turn(user, sid, LONG_MESSAGE)
    await cache.flush()
    assert 0 < await redis.ttl(key) <= 100
    await redis.expire(key, 5)
    # A turn without new hits still refreshes it: the cache lives as long as the session.
    await cache.turn(user, sid, CONTINUE)
    await cache.flush()
    assert 5 < await redis.ttl(key) <= 100
    assert await cache.ttl_s(user, sid) == await redis.ttl(key)
    for k in await prefix_keys(redis, settings):
        assert await redis.ttl(k) > 0


async def test_sessions_do_not_share_a_cache(redis: Redis, settings: Settings) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS))
    user = new_id("u")
    await cache.turn(user, "s-one", LONG_MESSAGE)
    turn = await cache.turn(user, "s-two", CONTINUE)
    assert turn.items == ()


# --- concurrency -----------------------------------------------------------------------------


async def test_concurrent_turns_lose_no_update(tmp_path: Path, redis_url: str) -> None:
    """Twenty turns of one session at once, each on its own connection (like separate
    API processes), each finding its own item: every item ends up in the cache."""
    settings = make_settings(tmp_path, redis_url=redis_url)
    n = 20
    rng = random.Random(7)

    class SlowSearch(ScriptedSearch):
        async def __call__(self, query: str, top_k: int) -> list[KnowledgeItem]:
            # Searches finish in random order, so the cache updates interleave.
            await asyncio.sleep(rng.random() / 50)
            return await super().__call__(query, top_k)

    search = SlowSearch({f"m{i}": [(f"item {i}", 0.9)] for i in range(n)})
    clients = [create_redis(settings) for _ in range(n)]
    try:
        caches = [KnowledgeCache(c, settings, search) for c in clients]
        user, sid = new_id("u"), new_id("s")
        await asyncio.gather(*(caches[i].turn(user, sid, f"m{i}") for i in range(n)))
        await asyncio.gather(*(c.flush() for c in caches))
        cached = await caches[0].cached(user, sid)
        assert sorted(i.text for i in cached) == sorted(f"item {i}" for i in range(n))
    finally:
        keys = [k async for k in clients[0].scan_iter(match=f"{settings.key_prefix}:*")]
        if keys:
            await clients[0].delete(*keys)
        for c in clients:
            await c.aclose()


# --- errors, ownership, degradation, observability ---------------------------------------------


async def test_bad_input_changes_nothing(redis: Redis, settings: Settings) -> None:
    search = ScriptedSearch(SEED_HITS)
    cache = cache_of(redis, settings, search)
    user, sid = new_id("u"), new_id("s")
    with pytest.raises(InvalidContent):
        await cache.turn(user, sid, "   ")
    with pytest.raises(InvalidId):
        await cache.turn(user, "bad{sid}", LONG_MESSAGE)
    with pytest.raises(InvalidId):
        await cache.turn("", sid, LONG_MESSAGE)
    with pytest.raises(ValidationError, match="locale"):
        await cache.turn(user, sid, LONG_MESSAGE, locale="fr")
    assert search.calls == []
    assert await prefix_keys(redis, settings) == []


async def test_another_users_session_of_the_same_id_has_its_own_cache(
    redis: Redis, settings: Settings
) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS))
    sid = new_id("s")
    await cache.turn("alice", sid, LONG_MESSAGE)
    assert await cache.cached("mallory", sid) == []
    turn = await cache.turn("mallory", sid, SHORT_REPLY)
    assert all(i.origin != "cached" for i in turn.items)
    assert [i.text for i in await cache.cached("alice", sid)] == [TERMS, RULES]


async def test_failed_search_serves_level_one(redis: Redis, settings: Settings) -> None:
    search = ScriptedSearch(SEED_HITS)
    cache = cache_of(redis, settings, search)
    user, sid = new_id("u"), new_id("s")
    await cache.turn(user, sid, LONG_MESSAGE)

    async def down(query: str, top_k: int) -> list[KnowledgeItem]:
        raise StoreUnavailable("qdrant: connection refused", layer="vector store")

    before = REGISTRY.get_sample_value("memstack_knowledge_search_failures_total") or 0.0
    cache.search = down
    turn = await cache.turn(user, sid, SHORT_REPLY)
    assert view(turn.items) == [(TERMS, 0.85, "cached"), (RULES, 0.82, "cached")]
    assert turn.degraded is not None and "connection refused" in turn.degraded
    assert REGISTRY.get_sample_value("memstack_knowledge_search_failures_total") == before + 1


async def test_failed_update_is_counted_not_raised(redis: Redis, settings: Settings) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS))
    user, sid = new_id("u"), new_id("s")

    async def broken(**kwargs: object) -> None:
        raise RedisConnectionError("connection reset")

    cache._turn = broken  # type: ignore[assignment]
    before = REGISTRY.get_sample_value("memstack_knowledge_cache_update_failures_total") or 0.0
    turn = await cache.turn(user, sid, LONG_MESSAGE)
    assert len(turn.items) == 3
    assert await cache.cached(user, sid) == []
    after = REGISTRY.get_sample_value("memstack_knowledge_cache_update_failures_total")
    assert after == before + 1


async def test_redis_down_raises_store_unavailable(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, redis_url="redis://127.0.0.1:1/0", store_timeout_s=0.5)
    client = create_redis(settings)
    try:
        cache = KnowledgeCache(client, settings, ScriptedSearch(SEED_HITS))
        with pytest.raises(StoreUnavailable):
            await cache.turn("u", "s", LONG_MESSAGE)
    finally:
        await client.aclose()


async def test_size_is_logged_and_exported(
    redis: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS), kc_inject_max=3)
    user, sid = new_id("u"), new_id("s")
    await cache.turn(user, sid, LONG_MESSAGE)

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    count_before = sample("memstack_knowledge_section_chars_count")
    sum_before = sample("memstack_knowledge_section_chars_sum")
    cached_before = sample("memstack_knowledge_items_total", origin="cached")
    with caplog.at_level(logging.INFO, logger="memstack.knowledge"):
        turn = await cache.turn(user, sid, SHORT_REPLY)
    assert sample("memstack_knowledge_section_chars_count") == count_before + 1
    assert sample("memstack_knowledge_section_chars_sum") == sum_before + turn.chars
    assert sample("memstack_knowledge_items_total", origin="cached") == cached_before + 2
    [record] = [r for r in caplog.records if r.name == "memstack.knowledge"]
    assert f"chars={turn.chars}" in record.getMessage()
    assert "items=3" in record.getMessage()


async def test_corrupt_cache_is_dropped_not_fatal(redis: Redis, settings: Settings) -> None:
    cache = cache_of(redis, settings, ScriptedSearch(SEED_HITS))
    user, sid = new_id("u"), new_id("s")
    key = keys_for(settings).knowledge(user, sid)
    await redis.set(key, "not json", ex=100)
    turn = await cache.turn(user, sid, LONG_MESSAGE)
    assert [i.origin for i in turn.items] == ["retrieved"] * 3
    assert [i.text for i in await cache.cached(user, sid)] == [TERMS, RULES]


# --- end to end: AsyncMemory over a real knowledge base ------------------------------------

E2E_DOCS = {
    "terms": TERMS,
    "rules": RULES,
    "compliance": COMPLIANCE,
    "routing": "Channel routing picks the cheapest acquiring bank that supports the card brand.",
}
E2E_LONG = "我们做支付清结算系统，痛点是结算延迟：" + TERMS[6:]
E2E_COMPLIANCE = "合规：支付机构须报送反洗钱可疑交易报告"


@pytest.fixture(params=["qdrant", "chroma"])
async def kb_mem(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, pg_url: str
) -> AsyncIterator[AsyncMemory]:
    settings = make_settings(
        tmp_path,
        redis_url=redis_url,
        database_url=pg_url,
        auto_migrate=False,
        kb_store=request.param,
    )
    mem = await AsyncMemory.open(settings)
    yield mem
    keys = [k async for k in mem.working.redis.scan_iter(match=f"{settings.key_prefix}:*")]
    if keys:
        await mem.working.redis.delete(*keys)
    for doc in await mem.kb_list():
        await mem.kb_remove(doc.doc_id)
    await mem.close()


async def test_end_to_end_on_real_stores(kb_mem: AsyncMemory) -> None:
    mem = kb_mem
    results = await mem.kb_add(*(Document(t, doc_id=d) for d, t in E2E_DOCS.items()))
    assert [r.status for r in results] == ["added"] * 4
    user, sid = new_id("u"), new_id("s")
    await mem.remember(user, sid, "user", E2E_LONG)

    turn = await mem.knowledge_context(user, sid, E2E_LONG)
    # Only the relevant chunk clears kb_min_score; it scores above the threshold.
    assert [(i.doc_id, i.origin) for i in turn.items] == [("terms", "retrieved")]
    assert turn.items[0].score > 0.8
    assert turn.items[0].chunk_id == "default:terms#0"

    turn = await mem.knowledge_context(user, sid, CONTINUE)
    assert [(i.doc_id, i.origin) for i in turn.items] == [("terms", "cached")]
    assert turn.text.startswith("[历史缓存] ")

    turn = await mem.knowledge_context(user, sid, E2E_COMPLIANCE, locale="en")
    assert [(i.doc_id, i.origin) for i in turn.items] == [
        ("compliance", "retrieved"),
        ("terms", "cached"),
    ]
    assert turn.text.splitlines()[1].startswith("[cached] ")
    # Titles are rendered when the knowledge base has them.
    titled = KnowledgeTurn.of([KnowledgeItem("正文", 0.9, title="手册")], "zh")
    assert titled.text == "[本轮检索] 手册：正文"
    assert titled.render("en") == "[this turn] 手册: 正文"
    cache = await mem.knowledge_cache()
    assert [i.doc_id for i in await cache.cached(user, sid)] == ["terms", "compliance"]
    other = await mem.knowledge_context("someone-else", sid, CONTINUE)
    assert other.items == ()


async def test_end_to_end_off_switch(kb_mem: AsyncMemory) -> None:
    mem = kb_mem
    mem.settings = mem.settings.model_copy(update={"kc_enabled": False})
    await mem.kb_add(*(Document(t, doc_id=d) for d, t in E2E_DOCS.items()))
    user, sid = new_id("u"), new_id("s")
    turn = await mem.knowledge_context(user, sid, E2E_LONG)
    assert [i.doc_id for i in turn.items] == ["terms"]
    turn = await mem.knowledge_context(user, sid, CONTINUE)
    assert turn.items == ()
    assert await mem.working.redis.exists(mem.working.keys.knowledge(user, sid)) == 0


def test_sync_facade_on_the_embedded_default(tmp_path: Path) -> None:
    with Memory(make_settings(tmp_path)) as mem:
        [added] = mem.kb_add(Document(TERMS, doc_id="terms"))
        assert added.status == "added"
        assert [d.doc_id for d in mem.kb_list()] == ["terms"]
        assert mem.kb_search(E2E_LONG, 1)[0].doc_id == "terms"
        assert mem.knowledge_context("u", "s", E2E_LONG).cached_count == 0
        turn = mem.knowledge_context("u", "s", CONTINUE)
        assert [(i.doc_id, i.origin) for i in turn.items] == [("terms", "cached")]
        mem.kb_remove("terms")
        assert mem.kb_list() == []
