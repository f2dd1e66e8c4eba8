"""An export carries each session's counters (the turn count, the last message and its
time) with its task state, and an import restores them: a fresh deployment answers
``get_state`` as the source did, an import run twice or into a session that went on
changes nothing it should not, and a bad counter refuses the file."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memstack import AsyncMemory, ValidationError
from tests.conftest import make_settings, new_id

T0 = datetime(2025, 3, 1, 9, 0, 0, 123000, tzinfo=UTC)


async def _source(tmp_path: Path, alice: str) -> bytes:
    async with await AsyncMemory.open(make_settings(tmp_path / "source")) as mem:
        lines = ["Plan a trip.", "Where to?", "Lisbon, in May.", "Noted.", "Budget 8000."]
        for i, text in enumerate(lines):
            role = "user" if i % 2 == 0 else "assistant"
            await mem.remember(alice, "s1", role, text, ts=T0 + timedelta(seconds=i))
        await mem.remember(alice, "s2", "user", "Another thing.", ts=T0)
        await mem.set_state(alice, "s1", {"step": 2})
        await mem.drain(summarize=False)
        out = io.BytesIO()
        await mem.export(out, user_id=alice)
        s1, s2 = await mem.get_state(alice, "s1"), await mem.get_state(alice, "s2")
    assert (s1.turns, s2.turns) == (3, 1) and s2.fields == {}
    return out.getvalue()


async def test_import_restores_turn_counters_in_a_fresh_deployment(
    tmp_path: Path, service_mem: AsyncMemory
) -> None:
    alice = new_id("alice")
    data = await _source(tmp_path, alice)
    records = [json.loads(x) for x in data.decode().splitlines()]
    states = {r["session_id"]: r for r in records if r["type"] == "state"}
    assert states["s1"]["turns"] == 3 and states["s2"]["turns"] == 1
    assert states["s2"]["fields"] == {}  # counters alone are worth a record

    mem = service_mem
    await mem.import_file(data)
    s1, s2 = await mem.get_state(alice, "s1"), await mem.get_state(alice, "s2")
    assert (s1.fields, s1.turns, s2.turns) == ({"step": 2}, 3, 1)
    assert s1.last_msg_at == T0 + timedelta(seconds=4)
    assert s1.last_msg_id == states["s1"]["last_msg_id"] and s1.last_msg_id
    assert s2.last_msg_id == states["s2"]["last_msg_id"] and s2.last_msg_at == T0

    # Run again: nothing doubles.
    await mem.import_file(data)
    assert await mem.get_state(alice, "s1") == s1 and await mem.get_state(alice, "s2") == s2
    # The session goes on here; importing the old file again does not take it back.
    later = await mem.remember(alice, "s1", "user", "And a hotel.", ts=T0 + timedelta(hours=1))
    await mem.import_file(data)
    now = await mem.get_state(alice, "s1")
    assert (now.turns, now.last_msg_id) == (4, later)


async def test_a_file_without_counters_still_imports(
    tmp_path: Path, service_mem: AsyncMemory
) -> None:
    alice = new_id("alice")
    data = await _source(tmp_path, alice)
    lines = []
    for raw in data.decode().splitlines():
        r = json.loads(raw)
        if r["type"] == "state":
            if not r["fields"]:
                continue  # a file from before counters had no record for this session
            r = {k: v for k, v in r.items() if k not in ("turns", "last_msg_id", "last_msg_at")}
        lines.append(r)
    lines[-1] = {"type": "end", "records": len(lines) - 2}
    old = "".join(json.dumps(r) + "\n" for r in lines).encode()
    await service_mem.import_file(old)
    state = await service_mem.get_state(alice, "s1")
    assert (state.fields, state.turns, state.last_msg_id) == ({"step": 2}, 0, None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"turns": -1}, "turns must be a whole number"),
        ({"turns": "3"}, "turns must be a whole number"),
        ({"last_msg_id": "1700000000000-mallory/s1-000001"}, "last_msg_id"),
        ({"last_msg_at": None}, "come together"),
        ({"fields": {}, "turns": 0, "last_msg_id": None, "last_msg_at": None}, "non-empty"),
    ],
)
async def test_a_bad_counter_refuses_the_file_and_writes_nothing(
    tmp_path: Path, service_mem: AsyncMemory, change: dict[str, object], message: str
) -> None:
    alice = new_id("alice")
    data = await _source(tmp_path, alice)
    lines = [json.loads(x) for x in data.decode().splitlines()]
    for r in lines:
        if r["type"] == "state" and r["session_id"] == "s1":
            r.update(change)
    bad = "".join(json.dumps(r) + "\n" for r in lines).encode()
    with pytest.raises(ValidationError, match=message):
        await service_mem.import_file(bad)
    assert await service_mem.sessions(alice) == []
    assert (await service_mem.get_state(alice, "s1")).turns == 0
