"""Facts over time: a retraction ends a value with nothing in its place, and ``facts(as_of=)``
reads what was current at any moment. Through the public API (remember → drain → facts /
fact_history) on PostgreSQL and the embedded SQLite, with a scripted extractor: the rule
extractor is not the subject here, the fact store and ingest are."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from memstack import Memory
from memstack.core.errors import ValidationError
from memstack.core.facts.fact import Fact
from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.stores.sql.facts import Outcome, write_fact
from tests.conftest import new_id

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)

VEGETARIAN = "I'm vegetarian."
NOT_ANYMORE = "I'm not vegetarian anymore."
VEGAN = "I'm vegan now."
PESCATARIAN = "I eat fish again."
SMALL_TALK = "What's good around here?"


def diet(value: str) -> Fact:
    return Fact(key="diet", value=value, type="preference", confidence=0.9, source="user_stated")


def withdrawn(value: str | None = "vegetarian") -> Fact:
    return Fact(
        key="diet",
        value=value,
        type="preference",
        confidence=0.9,
        source="user_stated",
        retracts=True,
    )


SCRIPT: dict[str, list[Fact]] = {
    VEGETARIAN: [diet("vegetarian")],
    NOT_ANYMORE: [withdrawn()],
    VEGAN: [diet("vegan")],
    PESCATARIAN: [diet("pescatarian")],
}


@dataclass
class Scripted:
    """Facts by message text, and the ``known`` facts each user message was read with."""

    script: Mapping[str, Sequence[Fact]] = field(default_factory=lambda: SCRIPT)
    known: list[dict[str, Any]] = field(default_factory=list)
    name: str = "scripted"

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        if role != "user":
            return []
        self.known.append(dict(known or {}))
        return list(self.script.get(text, []))


async def scripted(mem: AsyncMemory) -> Scripted:
    extractor = Scripted()
    (await mem.worker()).ingestor.extractor = extractor
    return extractor


async def say(mem: AsyncMemory, user: str, *lines: tuple[datetime, str]) -> list[str]:
    session = new_id("s")
    return [await mem.remember(user, session, "user", text, ts=at) for at, text in lines]


def values(facts: Sequence[Any]) -> dict[str, Any]:
    return {f.key: f.value for f in facts}


# --- retraction ----------------------------------------------------------------------------


async def test_a_retraction_ends_the_value_and_history_names_the_message(
    mem: AsyncMemory,
) -> None:
    await scripted(mem)
    u = new_id("u")
    said, withdrew = await say(mem, u, (T0, VEGETARIAN), (T0 + HOUR, NOT_ANYMORE))
    report = await mem.drain(summarize=False)
    assert report.failed == 0

    assert "diet" not in values(await mem.facts(u))
    [ended] = await mem.fact_history(u, "diet")
    assert ended.value == "vegetarian" and ended.msg_id == said
    assert ended.valid_until == T0 + HOUR and not ended.current
    assert ended.ended_by_msg_id == withdrew and ended.supersedes_id is None

    # A new value after the withdrawal is a first value again, not a supersede.
    await say(mem, u, (T0 + 2 * HOUR, VEGAN))
    await mem.drain(summarize=False)
    assert values(await mem.facts(u))["diet"] == "vegan"
    old, new = await mem.fact_history(u, "diet")
    assert old.ended_by_msg_id == withdrew and new.supersedes_id is None and new.current


async def test_a_retraction_is_idempotent_and_needs_a_current_value(mem: AsyncMemory) -> None:
    ingestor = (await mem.worker()).ingestor
    ingestor.extractor = Scripted()
    u, s = new_id("u"), new_id("s")

    def message(n: int, text: str, at: datetime) -> Message:
        return Message(f"{u}/{s}:m{n}", u, s, "user", text, at)

    nothing = await ingestor.process([message(0, NOT_ANYMORE, T0)])
    assert nothing.facts == {"nothing_to_retract": 1}
    assert await mem.fact_history(u) == []

    await ingestor.process([message(1, VEGETARIAN, T0 + HOUR)])
    retraction = message(2, NOT_ANYMORE, T0 + 2 * HOUR)
    first = await ingestor.process([retraction])
    assert first.facts == {"retracted": 1}
    history = await mem.fact_history(u)
    # Redelivered (a worker died before the acknowledgement): nothing changes.
    again = await ingestor.process([retraction])
    assert again.facts == {"duplicate": 1}
    assert await mem.fact_history(u) == history
    # Still a duplicate once the ended row has moved to the archive.
    await mem.maintain(dry_run=False, now=T0 + 3 * HOUR)
    assert (await ingestor.process([retraction])).facts == {"duplicate": 1}
    assert await mem.fact_history(u) == history


async def test_a_late_retraction_never_ends_a_newer_value(mem: AsyncMemory) -> None:
    ingestor = (await mem.worker()).ingestor
    ingestor.extractor = Scripted()
    u, s = new_id("u"), new_id("s")
    msgs = [
        Message(f"{u}/{s}:m{i}", u, s, "user", text, T0 + i * HOUR)
        for i, text in enumerate([VEGETARIAN, NOT_ANYMORE, VEGAN])
    ]
    await ingestor.process([msgs[0]])
    await ingestor.process([msgs[2]])
    late = await ingestor.process([msgs[1]])
    assert late.facts == {"nothing_to_retract": 1}
    assert values(await mem.facts(u)) == {"diet": "vegan"}
    old, new = await mem.fact_history(u, "diet")
    assert old.valid_until == T0 + 2 * HOUR and old.ended_by_msg_id is None
    assert new.supersedes_id == old.id


async def test_a_late_value_cannot_undo_a_later_retraction(mem: AsyncMemory) -> None:
    ingestor = (await mem.worker()).ingestor
    ingestor.extractor = Scripted()
    u, s = new_id("u"), new_id("s")
    first = Message(f"{u}/{s}:m0", u, s, "user", VEGETARIAN, T0)
    late = Message(f"{u}/{s}:m1", u, s, "user", PESCATARIAN, T0 + HOUR)
    withdrew = Message(f"{u}/{s}:m2", u, s, "user", NOT_ANYMORE, T0 + 2 * HOUR)
    await ingestor.process([first])
    await ingestor.process([withdrew])
    report = await ingestor.process([late])
    assert report.facts == {"historical": 1}
    assert await mem.facts(u) == []
    history = await mem.fact_history(u, "diet")
    assert [(h.value, h.valid_until, h.ended_by_msg_id) for h in history] == [
        ("vegetarian", T0 + 2 * HOUR, withdrew.msg_id),
        ("pescatarian", T0 + 2 * HOUR, withdrew.msg_id),
    ]
    # What the user said last held at each moment.
    assert values(await mem.facts(u, as_of=T0 + timedelta(minutes=30))) == {"diet": "vegetarian"}
    assert values(await mem.facts(u, as_of=T0 + timedelta(minutes=90))) == {"diet": "pescatarian"}
    assert await mem.facts(u, as_of=T0 + 2 * HOUR) == []


async def test_a_batch_forgets_a_withdrawn_value_at_once(mem: AsyncMemory) -> None:
    extractor = await scripted(mem)
    u = new_id("u")
    await say(mem, u, (T0, VEGETARIAN), (T0 + HOUR, NOT_ANYMORE), (T0 + 2 * HOUR, SMALL_TALK))
    report = await mem.drain(summarize=False)
    assert report.processed == 3  # one batch: the known facts are the batch's own
    assert [k.get("diet") for k in extractor.known] == [None, "vegetarian", None]


async def test_a_retraction_nobody_stated_ends_nothing(mem: AsyncMemory) -> None:
    inferred = withdrawn().model_copy(update={"source": "inferred"})
    extractor = await scripted(mem)
    extractor.script = {**SCRIPT, NOT_ANYMORE: [inferred]}
    u = new_id("u")
    await say(mem, u, (T0, VEGETARIAN), (T0 + HOUR, NOT_ANYMORE))
    assert (await mem.drain(summarize=False)).failed == 0
    assert values(await mem.facts(u)) == {"diet": "vegetarian"}


async def test_the_store_checks_a_retractions_key_not_its_value(mem: AsyncMemory) -> None:
    u = new_id("u")

    async def write(fact: Fact, n: int) -> Outcome:
        return await write_fact(
            mem.db_sessions,
            user_id=u,
            session_id="s",
            msg_id=f"m{n}",
            fact=fact,
            at=T0 + n * HOUR,
            accepted_at=None,
        )

    assert await write(diet("vegetarian"), 0) is Outcome.INSERTED
    bad_key = withdrawn().model_copy(update={"key": "diet; drop"})
    assert await write(bad_key, 1) is Outcome.REFUSED
    # The value is not stored, so a long one costs nothing and refuses nothing.
    assert await write(withdrawn("x" * 10_000), 2) is Outcome.RETRACTED
    assert await mem.facts(u) == []


# --- as of a moment ------------------------------------------------------------------------


async def test_as_of_reads_each_interval_of_a_supersede_chain(mem: AsyncMemory) -> None:
    await scripted(mem)
    u = new_id("u")
    a, b, c = T0, T0 + HOUR, T0 + 2 * HOUR
    await say(mem, u, (a, VEGETARIAN), (b, VEGAN), (c, PESCATARIAN))
    await mem.drain(summarize=False)
    minute = timedelta(minutes=1)

    async def diet_at(t: datetime) -> Any:
        return values(await mem.facts(u, as_of=t)).get("diet")

    assert await diet_at(a - minute) is None
    assert [await diet_at(t) for t in (a, a + minute, b - minute)] == ["vegetarian"] * 3
    assert [await diet_at(t) for t in (b, b + minute, c - minute)] == ["vegan"] * 3
    assert [await diet_at(t) for t in (c, c + timedelta(days=365))] == ["pescatarian"] * 2
    # The moment is compared as a moment, whatever its zone.
    tokyo = timezone(timedelta(hours=9))
    assert await diet_at((b + minute).astimezone(tokyo)) == "vegan"
    assert await diet_at(b.timestamp() + 60) == "vegan"  # epoch seconds, as ts= takes them
    # A row that was current then says so: its valid_until is what ended it later.
    [then] = await mem.facts(u, as_of=a)
    assert then.valid_until == b and not then.current
    assert await mem.facts(u, as_of=c) == await mem.facts(u)

    # Archiving moves superseded rows out of the hot table; the past stays readable.
    await mem.maintain(dry_run=False, now=c + minute)
    assert [await diet_at(t) for t in (a, b, c)] == ["vegetarian", "vegan", "pescatarian"]


async def test_as_of_before_a_retraction_still_shows_the_value(mem: AsyncMemory) -> None:
    await scripted(mem)
    u = new_id("u")
    await say(mem, u, (T0, VEGETARIAN), (T0 + HOUR, NOT_ANYMORE))
    await mem.drain(summarize=False)
    [before] = await mem.facts(u, as_of=T0 + HOUR - timedelta(seconds=1))
    assert before.value == "vegetarian" and before.ended_by_msg_id is not None
    assert await mem.facts(u, as_of=T0 + HOUR) == []
    assert await mem.facts(u, as_of=T0 - timedelta(seconds=1)) == []


@pytest.mark.parametrize(
    "as_of",
    [datetime(2026, 11, 1, 9, 0), "2026-11-01T09:00:00+00:00", float("nan"), True],
    ids=["naive", "text", "nan", "bool"],
)
async def test_as_of_refuses_what_is_not_a_moment(mem: AsyncMemory, as_of: Any) -> None:
    with pytest.raises(ValidationError, match="as_of"):
        await mem.facts("u1", as_of=as_of)


async def test_as_of_beyond_what_a_datetime_holds_is_still_a_moment(mem: AsyncMemory) -> None:
    await scripted(mem)
    u = new_id("u")
    await say(mem, u, (T0, VEGETARIAN))
    await mem.drain(summarize=False)
    first = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    last = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-20)))
    assert await mem.facts(u, as_of=first) == []
    assert values(await mem.facts(u, as_of=last)) == {"diet": "vegetarian"}
    assert values(await mem.facts(u, as_of=1e300)) == {"diet": "vegetarian"}


@pytest.fixture
def memory(embedded_settings: Settings) -> Iterator[Memory]:
    with Memory(embedded_settings) as m:
        yield m


def test_the_sync_memory_reads_as_of_too(memory: Memory) -> None:
    memory._run(scripted(memory.aio))
    u, s = new_id("u"), new_id("s")
    memory.remember(u, s, "user", VEGETARIAN, ts=T0)
    withdrew = memory.remember(u, s, "user", NOT_ANYMORE, ts=T0 + HOUR)
    memory.drain(summarize=False)
    assert memory.facts(u) == []
    assert values(memory.facts(u, as_of=T0 + timedelta(minutes=30))) == {"diet": "vegetarian"}
    assert [h.ended_by_msg_id for h in memory.fact_history(u)] == [withdrew]
    with pytest.raises(ValidationError):
        memory.facts(u, as_of=datetime(2026, 11, 1, 9, 30))
