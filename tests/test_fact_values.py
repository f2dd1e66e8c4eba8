"""Fact values are refused at the write and bounded at the read.

Whatever extractor produced a fact, nothing unbounded reaches the fact table; and a
value stored before these checks existed (an LLM's 20 MB or 500-deep answer) never makes
``context()`` raise or take seconds.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import same_value
from memstack.memory import AsyncMemory
from memstack.recall.assembly import EN, ZH, format_value, render_fact
from memstack.recall.snippets import stale_key
from memstack.stores.sql.facts import write_fact
from tests.conftest import new_id

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def a_fact(key: str, value: Any) -> Fact:
    return Fact(key=key, value=value, type="profile", confidence=0.9, source="user_stated")


def refused(field: str) -> float:
    return REGISTRY.get_sample_value("memstack_facts_refused_total", {"field": field}) or 0.0


async def write(mem: AsyncMemory, user: str, fact: Fact, n: int = 1) -> str:
    outcome = await write_fact(
        mem.db_sessions,
        user_id=user,
        session_id="s1",
        msg_id=f"{user}/s1:{n}",
        fact=fact,
        at=T0 + timedelta(minutes=n),
        accepted_at=None,
    )
    return outcome.value


async def insert_raw(
    mem: AsyncMemory, user: str, key: str, value_json: str, *, n: int, current: bool = True
) -> None:
    """A row as an old version of memstack could have stored it, checks bypassed."""
    async with mem.db_sessions.begin() as s:
        postgres = s.get_bind().dialect.name == "postgresql"
        value = "CAST(:v AS JSONB)" if postgres else ":v"
        await s.execute(
            text(
                "INSERT INTO agent_memory_fact (user_id, session_id, msg_id, fact_type, "
                "fact_key, fact_value, confidence, source, valid_from, valid_until, "
                f"created_at, hit_count) VALUES (:u, 's1', :m, 'profile', :k, {value}, 0.9, "
                "'user_stated', :at, :until, :at, 0)"
            ),
            {
                "u": user,
                "m": f"{user}/s1:raw{n}",
                "k": key,
                "v": value_json,
                "at": T0 - timedelta(days=10 - n),
                "until": None if current else T0 - timedelta(days=9 - n),
            },
        )


# --- the write ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [nested(500), nested(9), "y" * 3000, "a\x00b", ["a\ud800b"], {"k\x00": 1}, float("nan")],
    ids=["500-deep", "9-deep", "3-KB", "nul", "surrogate", "nul-in-key", "nan"],
)
async def test_write_fact_refuses_a_bad_value(mem: AsyncMemory, value: Any) -> None:
    u = new_id("u")
    before = refused("value")
    assert await write(mem, u, a_fact("city", value)) == "refused"
    assert await mem.facts(u) == [] and await mem.fact_history(u) == []
    assert refused("value") == before + 1


@pytest.mark.parametrize(
    "key",
    ["k" * 5000, "a" * 129, "home city", "x#y", "{u}", "通勤"],
    ids=["5000-chars", "129-chars", "space", "hash", "braces", "not-ascii"],
)
async def test_write_fact_refuses_a_key_that_is_not_a_safe_id(mem: AsyncMemory, key: str) -> None:
    u = new_id("u")
    before = refused("key")
    assert await write(mem, u, a_fact(key, "x")) == "refused"
    assert await mem.fact_history(u) == []
    assert refused("key") == before + 1


async def test_write_fact_takes_values_within_the_limits(mem: AsyncMemory) -> None:
    u = new_id("u")
    assert await write(mem, u, a_fact("notes", nested(7, "y" * 1000))) == "inserted"
    assert await write(mem, u, a_fact("c" * 128, ["a", "b"]), n=2) == "inserted"
    assert {f.key for f in await mem.facts(u)} == {"notes", "c" * 128}


async def test_a_stored_value_past_the_limits_is_superseded_not_a_crash(
    mem: AsyncMemory,
) -> None:
    u = new_id("u")
    await insert_raw(mem, u, "city", "[" * 5000 + '"x"' + "]" * 5000, n=1)
    assert await write(mem, u, a_fact("city", "Berlin")) == "superseded"
    assert [f.value for f in await mem.facts(u)] == ["Berlin"]
    old, new = await mem.fact_history(u, "city")
    assert old.withheld and old.value is None and not old.current
    assert new.value == "Berlin" and new.supersedes_id == old.id


# --- the read -------------------------------------------------------------------------------


async def test_stored_values_past_the_limits_never_break_context(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await mem.remember(u, s, "user", "I live in Berlin.", ts=T0)
    await mem.drain()
    huge = json.dumps("y" * 20_000_000)
    await insert_raw(mem, u, "notes", huge, n=1)
    await insert_raw(mem, u, "tags", json.dumps([f"tag{i}" for i in range(2_000_000)]), n=2)
    await insert_raw(mem, u, "likes", json.dumps(nested(500)), n=3)
    await insert_raw(mem, u, "diary", "[" * 5000 + '"x"' + "]" * 5000, n=4)
    await insert_raw(mem, u, "city", json.dumps(nested(500, "Paris")), n=5, current=False)
    await insert_raw(mem, u, "motto", json.dumps("z" * 3000), n=6)  # over 2 KiB, stored before
    start = time.perf_counter()
    ctx = await mem.context(u, s, "Where do I live and what do I like?", locale="en")
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0, f"context() took {elapsed:.2f}s"
    facts = ctx.sections["facts"].text
    assert "City: Berlin" in facts
    assert "notes" not in facts and "tags" not in facts and "diary" not in facts
    [motto] = [line for line in facts.splitlines() if "motto" in line]
    assert len(motto) < 400 and motto.count("z") == 300
    assert {f.key for f in await mem.facts(u)} == {"city", "motto"}
    withheld = {f.key for f in await mem.fact_history(u) if f.withheld}
    assert withheld == {"notes", "tags", "likes", "diary", "city"}


def test_format_value_is_bounded_and_never_recurses() -> None:
    cases = [nested(100_000), "y" * 20_000_000, [f"t{i}" for i in range(2_000_000)], [[]] * 10**6]
    for value in cases:
        start = time.perf_counter()
        out = format_value(value, EN)
        assert len(out) <= 301 and time.perf_counter() - start < 0.1
    deep = {"a": nested(20)}
    assert format_value(deep, EN) == "a=…"
    assert len(render_fact("k" * 5000, "v", "extract", EN)) < 200


def test_format_value_prints_records_as_before() -> None:
    assert format_value({"amount": 8000.0, "currency": "CNY"}, ZH) == "8000 CNY"
    assert format_value(["续航", "重量"], ZH) == "续航、重量"
    assert format_value({"a": [1, 2], "b": {"c": True}}, EN) == "a=1, 2, b=c=true"
    assert format_value([{"amount": 5}, None, "…"], EN) == "5, None, …"
    assert format_value("x" * 400, EN) == "x" * 300 + "…"


def test_same_value_never_recurses() -> None:
    assert same_value(nested(100_000), nested(100_000)) is False
    assert same_value(nested(5, "A"), nested(5, "A")) is True
    assert same_value(["A", "b"], ["B", "a"]) is True


def test_stale_value_check_reads_an_absurd_numeral_without_recursing() -> None:
    superseded = {"budget_limit": [{"amount": 5000, "currency": "CNY"}]}
    current = {"budget_limit": {"amount": 8000, "currency": "CNY"}}
    assert stale_key("预算一" + "万" * 3000, superseded, current) is None
    assert stale_key("预算五千", superseded, current) == "budget_limit"


async def test_an_export_leaves_out_a_stored_value_past_the_limits(
    mem: AsyncMemory, tmp_path: Path
) -> None:
    """A value no read serves (here 5,000 deep: decoding it would raise RecursionError)
    does not break an export of its user either; it is left out and counted."""
    u = new_id("u")
    await insert_raw(mem, u, "city", "[" * 5000 + '"x"' + "]" * 5000, n=1)
    assert await write(mem, u, a_fact("city", "Berlin")) == "superseded"
    out = tmp_path / "export.jsonl"
    report = await mem.export(out, user_id=u)
    assert report.withheld_facts == 1
    facts = [r for r in map(json.loads, out.read_text().splitlines()) if r["type"] == "fact"]
    assert [(f["fact_key"], f["fact_value"]) for f in facts] == [("city", "Berlin")]
    assert facts[0]["supersedes_id"] is None
