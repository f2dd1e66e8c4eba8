"""The keyword index kept beside the ledger (PostgreSQL and SQLite): its totals follow
every write and delete, and search over it ranks as BM25 over all the user's rows."""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from memstack.core.messages import Message
from memstack.memory import AsyncMemory
from memstack.stores.sql import ledger, term_index
from memstack.stores.sql import lexical as ledger_search
from memstack.stores.sql.models import MessageRow, TermCountRow, TermRow
from tests.conftest import new_id

T0 = datetime(2024, 5, 1, tzinfo=UTC)
WORDS = "garden laptop budget kyoto violin marathon roof tent phone bike".split()


def _messages(user: str, session: str, texts: list[str]) -> list[Message]:
    return [
        Message(f"{user}/{session}:{i}", user, session, "user", t, T0 + timedelta(minutes=i))
        for i, t in enumerate(texts)
    ]


async def _recount(mem: AsyncMemory, user: str) -> tuple[int, int, dict[str, int], set[str]]:
    """The index's figures recomputed from the ledger rows themselves."""
    async with mem.db_sessions() as s:
        rows = (
            await s.execute(
                select(MessageRow.msg_id, MessageRow.search_terms).where(MessageRow.user_id == user)
            )
        ).all()
    df: Counter[str] = Counter()
    postings: set[str] = set()
    for r in rows:
        tf, _ = term_index.term_frequencies(r.search_terms)
        df.update(tf.keys())
        postings.update(f"{t}@{r.msg_id}" for t in tf)
    return len(rows), sum(len(r.search_terms.split()) for r in rows), dict(df), postings


async def _indexed(mem: AsyncMemory, user: str) -> tuple[int, int, dict[str, int], set[str]]:
    async with mem.db_sessions() as s:
        counted = await s.execute(select(TermCountRow.term).where(TermCountRow.user_id == user))
        docs, terms, df = await term_index.statistics(s, user, [r.term for r in counted])
        rows = (
            await s.execute(select(TermRow.term, TermRow.msg_id).where(TermRow.user_id == user))
        ).all()
    return docs, terms, df, {f"{r.term}@{r.msg_id}" for r in rows}


async def test_the_index_follows_every_write_redelivery_and_delete(mem: AsyncMemory) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    first = _messages(alice, "s1", ["garden garden budget", "laptop budget 8000 yuan", "kyoto"])
    second = _messages(alice, "s2", ["violin roof", "tent phone bike garden"])
    second.append(Message(f"{alice}/s2:tim", alice, "s2", "user", "the bike", T0, name="Tim"))
    async with mem.db_sessions.begin() as s:
        assert await ledger.insert_messages(s, first + second) == 6
        await ledger.insert_messages(s, _messages(bob, "s1", ["garden budget laptop"]))
        # A redelivery changes nothing: its terms are not counted twice.
        assert await ledger.insert_messages(s, first[:2]) == 0
    assert await _indexed(mem, alice) == await _recount(mem, alice)
    assert (await _indexed(mem, alice))[2]["garden"] == 2

    async with mem.db_sessions.begin() as s:
        assert await ledger.delete_message(s, alice, first[0].msg_id) == 1
        assert await ledger.delete_message(s, alice, "absent") == 0
    assert await _indexed(mem, alice) == await _recount(mem, alice)
    async with mem.db_sessions.begin() as s:
        assert await ledger.delete_session(s, alice, "s2") == 3
    indexed = await _indexed(mem, alice)
    assert indexed == await _recount(mem, alice)
    assert "garden" not in indexed[2] and indexed[0] == 2  # no count left at zero

    bob_before = await _indexed(mem, bob)
    async with mem.db_sessions.begin() as s:
        await ledger.delete_user(s, alice)
    assert await _indexed(mem, alice) == (0, 0, {}, set())
    assert await _indexed(mem, bob) == bob_before == await _recount(mem, bob)
    await mem.forget_user(bob)


def _reference(
    rows: list[Message], weights: dict[str, float], limit: int
) -> list[tuple[str, float]]:
    """Okapi BM25 (k1 1.2, b 0.75, idf with +1) over every row, newest first among
    equal scores: what the search should return."""
    docs = [Counter(ledger.search_terms(m).split()) for m in rows]
    avgdl = sum(sum(d.values()) for d in docs) / len(docs)
    scores = []
    for m, d in zip(rows, docs, strict=True):
        score = 0.0
        for term, w in weights.items():
            df = sum(1 for other in docs if term in other)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            tf = d[term]
            norm = 1.2 * (0.25 + 0.75 * sum(d.values()) / avgdl)
            score += w * idf * tf * 2.2 / (tf + norm)
        scores.append((m, score))
    ranked = sorted(
        (p for p in scores if p[1] > 0), key=lambda p: (-p[1], -p[0].created_at.timestamp())
    )
    return [(m.msg_id, s) for m, s in ranked[:limit]]


async def test_search_ranks_as_bm25_over_all_the_users_rows(mem: AsyncMemory) -> None:
    rng = random.Random(7)
    user = new_id("u")
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 9))) for _ in range(300)]
    rows = _messages(user, "s", texts)
    async with mem.db_sessions.begin() as s:
        await ledger.insert_messages(s, rows)
    try:
        for _ in range(8):
            weights = {w: rng.choice([1.0, 1.5]) for w in rng.sample(WORDS, rng.randint(1, 3))}
            async with mem.db_sessions() as s:
                hits = await ledger_search.search(s, user, weights, limit=10)
            want = _reference(rows, weights, 10)
            assert [h.msg_id for h in hits] == [m for m, _ in want]
            assert [h.score for h in hits] == pytest.approx([s for _, s in want])
    finally:
        await mem.forget_user(user)


async def test_a_rare_term_wins_past_the_postings_read_of_a_common_one(
    mem: AsyncMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the top postings of each term are read: the message holding the rare term
    # is found through that term however many messages hold the common one.
    monkeypatch.setattr(ledger_search, "POSTINGS_PER_TERM", 5)
    user, other = new_id("u"), new_id("other")
    texts = [f"garden turn {i}" for i in range(200)]
    texts[17] = "garden kyoto and a long line of words after it about the trip"
    rows = _messages(user, "s", texts)
    async with mem.db_sessions.begin() as s:
        await ledger.insert_messages(s, rows)
        await ledger.insert_messages(s, _messages(other, "s", ["garden kyoto"] * 3))
    try:
        async with mem.db_sessions() as s:
            hits = await ledger_search.search(s, user, {"garden": 1.0, "kyoto": 1.0}, limit=3)
        assert hits[0].msg_id == rows[17].msg_id
        assert {h.msg_id for h in hits} <= {m.msg_id for m in rows}
    finally:
        await mem.forget_user(user)
        await mem.forget_user(other)
