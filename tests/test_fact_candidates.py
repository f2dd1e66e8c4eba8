"""Fact candidates in the library: what below ``fact_min_confidence`` becomes, how it is
confirmed or rejected, what it does to the value it doubts, and that bad input changes
nothing. Services and embedded alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from memstack import AsyncMemory, Conflict, NotFound, Settings, ValidationError
from tests.conftest import _cleanup, new_id

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
async def doubtful(any_settings: Settings) -> AsyncIterator[AsyncMemory]:
    """Memory where every extracted fact is a candidate (no confidence reaches 1.0)."""
    m = await AsyncMemory.open(any_settings.model_copy(update={"fact_min_confidence": 1.0}))
    yield m
    await _cleanup(m)
    await m.close()


async def _say(
    mem: AsyncMemory, user: str, session: str, *texts: str, start: datetime = T0
) -> None:
    for i, text in enumerate(texts):
        await mem.remember(user, session, "user", text, ts=start + timedelta(minutes=i))
    await mem.drain(summarize=False)


async def test_a_doubtful_fact_waits_as_a_candidate_and_confirming_makes_it_a_fact(
    doubtful: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    await _say(doubtful, u, s, "I live in Porto.")
    assert [f.key for f in await doubtful.facts(u)] == []
    [c] = await doubtful.candidates(u)
    assert (c.key, c.value, c.status, c.session_id) == ("city", "Porto", "pending", s)
    assert 0 < c.confidence < 1 and c.decided_at is None and c.fact_id is None

    fact = await doubtful.confirm_candidate(u, c.id)
    assert (fact.key, fact.value, fact.confidence, fact.candidate_id) == (
        "city",
        "Porto",
        1.0,
        c.id,
    )
    assert fact.msg_id == c.msg_id  # the message that said it stays its source
    assert [(f.key, f.value) for f in await doubtful.facts(u)] == [("city", "Porto")]
    [done] = await doubtful.candidates(u, status="confirmed")
    assert done.fact_id == fact.id and done.decided_at is not None
    assert await doubtful.candidates(u) == []


async def test_a_candidate_that_replaces_a_value_puts_it_in_doubt_and_rejecting_restores_it(
    doubtful: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    await _say(doubtful, u, s, "hello")
    paris = await doubtful.set_fact(u, "city", "Paris")
    await _say(doubtful, u, s, "I live in Lyon.", start=datetime.now(UTC) + timedelta(seconds=1))
    [c] = await doubtful.candidates(u)
    assert c.value == "Lyon"
    # A stale value shown as current is worse than none: Paris ended with the message.
    assert "city" not in {f.key for f in await doubtful.facts(u)}
    [ended] = [f for f in await doubtful.fact_history(u, "city") if f.id == paris.id]
    assert ended.ended_by_msg_id == c.msg_id

    rejected = await doubtful.reject_candidate(u, c.id)
    assert rejected.status == "rejected" and rejected.decided_at is not None
    [city] = await doubtful.facts(u)
    assert (city.value, city.supersedes_id) == ("Paris", paris.id)
    with pytest.raises(Conflict):
        await doubtful.confirm_candidate(u, c.id)  # decided once and for all


async def test_a_candidate_that_only_adds_to_a_list_leaves_the_list(doubtful: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await _say(doubtful, u, s, "hi")
    await doubtful.set_fact(u, "likes", ["tea"])
    await _say(
        doubtful, u, s, "I also like coffee.", start=datetime.now(UTC) + timedelta(seconds=1)
    )
    [c] = await doubtful.candidates(u)
    assert sorted(c.value) == ["coffee", "tea"]
    assert [(f.key, f.value) for f in await doubtful.facts(u)] == [("likes", ["tea"])]


async def test_a_newer_statement_of_the_key_supersedes_a_pending_candidate(
    doubtful: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    await _say(doubtful, u, s, "I live in Porto.")
    [c] = await doubtful.candidates(u)
    await doubtful.set_fact(u, "city", "Braga")
    assert await doubtful.candidates(u) == []
    [moot] = await doubtful.candidates(u, status="superseded")
    assert moot.id == c.id and moot.decided_at is not None
    # What was pending before that moment is still answered for it.
    before = await doubtful.candidates(u, as_of=moot.decided_at - timedelta(microseconds=1))
    assert [x.id for x in before] == [c.id]
    assert await doubtful.candidates(u, as_of=moot.decided_at) == []


async def test_bad_candidate_input_is_refused_and_changes_nothing(doubtful: AsyncMemory) -> None:
    u, other, s = new_id("u"), new_id("o"), new_id("s")
    await _say(doubtful, u, s, "I live in Porto.")
    await _say(doubtful, other, s, "I live in Faro.")
    [theirs] = await doubtful.candidates(other)
    with pytest.raises(NotFound):  # another user's candidate is no candidate of u's
        await doubtful.confirm_candidate(u, theirs.id)
    with pytest.raises(NotFound):
        await doubtful.reject_candidate(u, 10**12)
    for bad in (0, -1, True, "1", 2**63):
        with pytest.raises(ValidationError):
            await doubtful.confirm_candidate(u, bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await doubtful.candidates(u, status="maybe")
    with pytest.raises(ValidationError):
        await doubtful.candidates(u, status="all", as_of=datetime.now(UTC))
    assert [c.status for c in await doubtful.candidates(other, status="all")] == ["pending"]
    assert await doubtful.facts(u) == [] and await doubtful.facts(other) == []


async def test_erasure_takes_candidates_with_their_messages(doubtful: AsyncMemory) -> None:
    u, s1, s2 = new_id("u"), new_id("s"), new_id("s")
    await _say(doubtful, u, s1, "I live in Porto.")
    await _say(doubtful, u, s2, "I'm a nurse.", "I'm vegetarian.")
    assert len(await doubtful.candidates(u)) == 3
    assert (await doubtful.forget_session(u, s1))["candidates"] == 1
    assert {c.key for c in await doubtful.candidates(u)} == {"occupation", "diet"}
    [nurse] = [c for c in await doubtful.candidates(u) if c.key == "occupation"]
    assert (await doubtful.delete_message(u, nurse.msg_id))["candidates"] == 1
    assert [c.key for c in await doubtful.candidates(u, status="all")] == ["diet"]
    assert (await doubtful.forget_user(u))["candidates"] == 1
    assert await doubtful.candidates(u, status="all") == []


async def test_confident_facts_are_served_and_withdrawals_are_never_candidates(
    mem: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    await _say(mem, u, s, "I'm vegetarian.", "I'm not vegetarian anymore.")
    assert await mem.candidates(u, status="all") == []
    assert [f.key for f in await mem.facts(u)] == []
    [row] = await mem.fact_history(u, "diet")
    assert row.value == "vegetarian" and row.ended_by_msg_id is not None
