"""Archive, prune, reindex and dead-letter handling, on the real stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from memstack.core.errors import SchemaMismatch
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.stores.sql.models import FactArchiveRow, FactRow
from tests.conftest import new_id

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


async def _count(mem: AsyncMemory, table: type, user: str) -> int:
    async with mem.db_sessions() as s:
        return int(
            await s.scalar(select(func.count()).select_from(table).where(table.user_id == user))
            or 0
        )


async def test_archive_moves_superseded_and_cold_facts_and_keeps_history(
    mem: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "我预算不超过五千", ts=T0)
    await mem.remember(u, s, "user", "我住在上海", ts=T0)
    await mem.remember(u, s, "user", "其实我可以到八千", ts=T0 + timedelta(days=200))
    await mem.drain()
    assert await _count(mem, FactRow, u) == 3
    now = T0 + timedelta(days=201)
    # The city fact is 201 days old and no context ever used it: cold.
    # (The services database is shared with other tests: their rows may count too.)
    dry = await mem.maintain(dry_run=True, now=now)
    assert dry.facts_archived >= 2
    assert await _count(mem, FactRow, u) == 3 and await _count(mem, FactArchiveRow, u) == 0
    done = await mem.maintain(dry_run=False, now=now)
    assert done.facts_archived == dry.facts_archived
    assert await _count(mem, FactRow, u) == 1 and await _count(mem, FactArchiveRow, u) == 2
    assert [(f.key, f.value["amount"]) for f in await mem.facts(u)] == [("budget_limit", 8000)]
    history = await mem.fact_history(u, "budget_limit")
    assert [h.value["amount"] for h in history] == [5000, 8000]
    assert history[1].supersedes_id == history[0].id
    city = await mem.fact_history(u, "city")
    assert len(city) == 1 and city[0].valid_until == now
    # Nothing left to archive.
    assert (await mem.maintain(dry_run=True, now=now)).facts_archived == 0


async def test_prune_drops_old_small_talk_of_inactive_users_only(mem: AsyncMemory) -> None:
    quiet, active = new_id("quiet"), new_id("active")
    for user in (quiet, active):
        s = new_id("s")
        await mem.remember(user, s, "user", "哈哈今天天气不错", ts=T0)
        await mem.remember(user, s, "user", "我喜欢轻薄的笔记本，偏好续航长的", ts=T0)
    await mem.remember(active, new_id("s"), "user", "还在吗", ts=T0 + timedelta(days=95))
    await mem.drain()
    store = await mem.memory_vectors()
    before = {u: await store.count({"user_id": u}) for u in (quiet, active)}
    now = T0 + timedelta(days=100)
    dry = await mem.maintain(dry_run=True, now=now)
    assert quiet in dry.inactive_users and active not in dry.inactive_users
    assert dry.vectors_pruned >= 1
    assert await store.count({"user_id": quiet}) == before[quiet]
    done = await mem.maintain(dry_run=False, now=now)
    assert done.vectors_pruned == dry.vectors_pruned
    assert 0 < await store.count({"user_id": quiet}) < before[quiet]
    assert await store.count({"user_id": quiet, "topic": "preference"}) >= 1
    assert await store.count({"user_id": active}) == before[active]


async def test_reindex_after_a_model_change(service_settings: Settings) -> None:
    first = await AsyncMemory.open(service_settings)
    u, s = new_id("u"), new_id("s")
    await first.remember(u, s, "user", "Which laptop is lightest?", ts=T0)
    await first.remember(u, s, "assistant", "The 980 g model.", ts=T0)
    await first.drain()
    await first.close()

    mem = await AsyncMemory.open(service_settings.model_copy(update={"embed_dim": 128}))
    try:
        await mem.remember(u, s, "user", "And the cheapest?", ts=T0 + timedelta(minutes=1))
        with pytest.raises(SchemaMismatch, match="memstack reindex"):
            await mem.drain()
        seen: list[tuple[int, int]] = []
        report = await mem.reindex(progress=lambda done, total: seen.append((done, total)))
        # The test database is shared with other tests: the whole ledger is re-embedded.
        assert report.messages >= 2 and report.chunks >= 1
        assert seen[-1][0] == seen[-1][1] == report.messages
        assert (await mem.drain()).processed == 1
        store = await mem.memory_vectors()
        [vec] = await mem.embedder.embed(["lightest laptop"])
        hits = await store.search(vec, scope={"user_id": u}, top_k=5)
        assert len(vec) == 128 and {h.metadata["model_version"] for h in hits} == {"hashing-v1-128"}
        assert len(hits) == 2
    finally:
        await mem.close()


async def test_dead_letters_can_be_requeued(any_settings: Settings) -> None:
    mem = await AsyncMemory.open(any_settings.model_copy(update={"ingest_max_deliveries": 1}))
    try:
        u, s = new_id("u"), new_id("s")
        await mem.queue.ensure_group()
        await mem.working.redis.xadd(
            mem.queue.stream,
            {
                "msg_id": f"{s}:x",
                "user_id": u,
                "session_id": s,
                "role": "robot",
                "content": "hi",
                "ts_ms": "1",
            },
        )
        assert (await mem.drain()).dead_lettered == 1
        assert await mem.queue.requeue_dead() == 1
        assert await mem.dead_letters() == []
        assert await mem.queue.pending_count() == 1
        # Still malformed: it comes back to the dead-letter stream, nothing else happens.
        assert (await mem.drain()).dead_lettered == 1
    finally:
        await mem.close()


def test_cli_maintain_is_a_dry_run_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstack.cli import app

    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    result = CliRunner().invoke(app, ["maintain"])
    assert result.exit_code == 0, result.output
    assert "would archive 0" in result.output and "0 keys without a TTL" in result.output
    result = CliRunner().invoke(app, ["reindex", "--yes"])
    assert result.exit_code == 0, result.output
    assert "reindexed 0 messages" in result.output
