"""Bad input gets a clear error and changes nothing; times keep their zone."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memstack.core.errors import Conflict, InvalidContent, InvalidId, ValidationError
from memstack.memory import AsyncMemory
from tests.conftest import new_id

SHANGHAI = timezone(timedelta(hours=8))
BAD_TEXT = ["a\x00b", "a\ud800b", "\udfff"]


async def _written(mem: AsyncMemory) -> tuple[int, list[str]]:
    """(jobs queued, keys under the prefix but the layout mark)."""
    r = mem.working.redis
    jobs = int(await r.xlen(mem.queue.stream)) if await r.exists(mem.queue.stream) else 0
    keys = [k.decode() async for k in r.scan_iter(match=mem.working.keys.pattern())]
    return jobs, [k for k in keys if k != mem.working.keys.layout()]


@pytest.mark.parametrize("bad", BAD_TEXT)
async def test_unstorable_text_is_refused_everywhere_and_writes_nothing(
    mem: AsyncMemory, bad: str
) -> None:
    u, s = new_id("u"), new_id("s")
    calls = [
        lambda: mem.remember(u, s, "user", bad),
        lambda: mem.remember(u, s, "user", "fine", name=bad),
        lambda: mem.context(u, s, bad),
        lambda: mem.set_state(u, s, {"step": bad}),
        lambda: mem.set_state(u, s, {bad: 1}),
        lambda: mem.set_state(u, s, {"rows": [{"text": bad}]}),
        lambda: mem.set_state(u, s, {"big": "x" * 5000 + bad}),
    ]
    for call in calls:
        with pytest.raises(InvalidContent):
            await call()
    assert await _written(mem) == (0, [])
    if mem.queue.journal is not None:
        assert mem.queue.journal.pending() == []


async def test_ids_of_lookups_are_checked(mem: AsyncMemory) -> None:
    u = new_id("u")
    with pytest.raises(InvalidId):
        await mem.get_tool_result(u, "a\x00b")
    with pytest.raises(InvalidId):
        await mem.fact_history(u, "budget\x00")


async def test_state_values_are_bounded_in_size_and_depth(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    deep: object = "leaf"
    for _ in range(100):
        deep = [deep]
    with pytest.raises(InvalidContent, match="nested"):
        await mem.set_state(u, s, {"deep": deep})
    huge = "x" * (mem.settings.max_state_value_bytes + 1)
    with pytest.raises(InvalidContent, match="bytes"):
        await mem.set_state(u, s, {"ok": 1, "huge": huge})
    with pytest.raises(InvalidContent):
        await mem.set_state(u, s, {"nan": math.nan})
    # Nothing of a refused call is written, not even its valid fields.
    assert (await mem.get_state(u, s)).fields == {}
    assert await _written(mem) == (0, [])


@pytest.mark.parametrize("n", [0, -1, 41, 10**20, True, 2.5])
async def test_a_window_size_out_of_range_is_refused(mem: AsyncMemory, n: object) -> None:
    with pytest.raises(ValidationError, match="n must be"):
        await mem.window(new_id("u"), new_id("s"), n)  # type: ignore[arg-type]


async def test_a_msg_id_retried_with_another_message_is_a_conflict(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    first = await mem.remember(u, s, "user", "my budget is 5000", msg_id="m1")
    assert await mem.remember(u, s, "user", "my budget is 5000", msg_id="m1") == first
    for role, content, name in [
        ("user", "my budget is 9000", None),
        ("assistant", "my budget is 5000", None),
        ("user", "my budget is 5000", "Tim"),
    ]:
        with pytest.raises(Conflict):
            await mem.remember(u, s, role, content, msg_id="m1", name=name)
    assert [m.content for m in await mem.window(u, s)] == ["my budget is 5000"]
    assert (await _written(mem))[0] == 1
    # The same caller id in another session (or another user's) is another message.
    assert await mem.remember(u, new_id("s"), "user", "other", msg_id="m1") != first


@pytest.mark.parametrize(
    "ts",
    [
        datetime(9999, 1, 1, tzinfo=UTC),
        datetime.now(UTC) + timedelta(days=3),
        -5.0,
        math.inf,
        math.nan,
        True,
        "2024-01-01",
    ],
)
async def test_a_message_time_out_of_range_is_refused(mem: AsyncMemory, ts: object) -> None:
    with pytest.raises(ValidationError):
        await mem.remember(new_id("u"), new_id("s"), "user", "hi", ts=ts)  # type: ignore[arg-type]
    assert await _written(mem) == (0, [])


async def test_a_naive_time_is_refused_alike_everywhere(mem: AsyncMemory) -> None:
    naive = datetime(2026, 3, 16, 2, 0)
    u, s = new_id("u"), new_id("s")
    with pytest.raises(ValidationError, match="timezone-aware"):
        await mem.remember(u, s, "user", "hi", ts=naive)
    with pytest.raises(ValidationError, match="timezone-aware"):
        await mem.context(u, s, "hi", now=naive)
    with pytest.raises(ValidationError, match="timezone-aware"):
        await mem.drain(now=naive)


async def test_yesterday_is_read_in_the_time_zone_of_now(mem: AsyncMemory) -> None:
    """At 02:00 on 16 March in Shanghai, "yesterday" is 15 March in Shanghai, not
    14 March in UTC (now used to lose its zone on the way to the read path)."""
    user, asked = new_id("u"), new_id("s")
    now = datetime(2026, 3, 16, 2, 0, tzinfo=SHANGHAI)
    in_shanghai = datetime(2026, 3, 15, 12, 0, tzinfo=SHANGHAI)  # 15 March 04:00 UTC
    in_utc = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)  # 14 March 20:00 in Shanghai
    ids = {}
    for label, ts in (("shanghai", in_shanghai), ("utc", in_utc)):
        session = new_id("s")
        ids[label] = await mem.remember(
            user, session, "user", "We planned the garden beds and bought seeds.", ts=ts
        )
        await mem.remember(user, session, "assistant", "Sounds good.", ts=ts + timedelta(minutes=1))
    await mem.drain(summarize=False)
    result = await mem.context(
        user, asked, "What did we plan for the garden yesterday?", now=now, locale="en"
    )
    kept = result.kept("semantic")
    assert kept and kept[0].msg_ids[0] == ids["shanghai"], [k.msg_ids for k in kept]
