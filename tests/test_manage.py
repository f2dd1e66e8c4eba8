"""Reading memory back: users, their sessions and a session's messages, from the ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstack import AsyncMemory, Memory, Settings, ValidationError
from tests.conftest import new_id
from tests.test_api import say, serve, session_url

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


async def _say(mem: AsyncMemory, user: str, session: str, n: int, start: datetime) -> None:
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        await mem.remember(
            user, session, role, f"{session} line {i}", ts=start + timedelta(minutes=i)
        )


async def test_sessions_and_messages_of_a_user_oldest_first(mem: AsyncMemory) -> None:
    u, other = new_id("u"), new_id("u")
    s1, s2 = new_id("s"), new_id("s")
    await _say(mem, u, s2, 3, T0 + timedelta(days=1))
    await _say(mem, u, s1, 5, T0)
    await _say(mem, other, s1, 2, T0)  # the same session id under another user
    await mem.drain(summarize=False)

    sessions = await mem.sessions(u)
    assert [(s.session_id, s.messages) for s in sessions] == [(s1, 5), (s2, 3)]
    assert sessions[0].first_message_at == T0
    assert sessions[0].last_message_at == T0 + timedelta(minutes=4)
    assert [s.messages for s in await mem.sessions(other)] == [2]
    assert await mem.sessions(new_id("nobody")) == []

    page1 = await mem.messages(u, s1, limit=3)
    page2 = await mem.messages(u, s1, limit=3, offset=3)
    assert [m.content for m in page1 + page2] == [f"{s1} line {i}" for i in range(5)]
    assert {m.user_id for m in page1 + page2} == {u}
    assert [m.role for m in page1] == ["user", "assistant", "user"]
    assert await mem.messages(u, s1, offset=5) == []


async def test_users_with_counts_and_last_message(embedded_settings: Settings) -> None:
    async with await AsyncMemory.open(embedded_settings) as mem:
        await _say(mem, "bob", "s1", 2, T0)
        await _say(mem, "alice", "s1", 3, T0)
        await _say(mem, "alice", "s2", 1, T0 + timedelta(days=2))
        assert await mem.users() == []  # nothing is in the ledger before the worker ran
        await mem.drain(summarize=False)
        users = await mem.users()
        assert [(x.user_id, x.sessions, x.messages) for x in users] == [
            ("alice", 2, 4),
            ("bob", 1, 2),
        ]
        assert users[0].last_message_at == T0 + timedelta(days=2)
        assert [x.user_id for x in await mem.users(limit=1, offset=1)] == ["bob"]


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"offset": -1}, "offset")],
)
async def test_bad_pages_are_refused(mem: AsyncMemory, kwargs: dict[str, int], word: str) -> None:
    with pytest.raises(ValidationError, match=word):
        await mem.messages(new_id("u"), new_id("s"), **kwargs)
    with pytest.raises(ValidationError, match=word):
        await mem.users(**kwargs)


def test_the_sync_twins_read_the_same(embedded_settings: Settings) -> None:
    with Memory(embedded_settings) as mem:
        mem.remember("carol", "s1", "user", "hello")
        mem.drain()
        assert [x.user_id for x in mem.users()] == ["carol"]
        assert [s.session_id for s in mem.sessions("carol")] == ["s1"]
        assert [m.content for m in mem.messages("carol", "s1")] == ["hello"]


# --- over HTTP -------------------------------------------------------------------------------


async def test_http_lists_users_sessions_and_ledger_pages(embedded_settings: Settings) -> None:
    async with serve(embedded_settings) as (client, _mem):
        await say(client, "dora", "s1", "I moved to Lisbon.", "Noted.", "And I ride a bike.")
        await say(client, "dora", "s2", "Hello again.")
        assert (await client.post("/v1/admin/drain")).status_code == 200

        users = (await client.get("/v1/users")).json()["users"]
        assert [(u["user_id"], u["sessions"], u["messages"]) for u in users] == [("dora", 2, 4)]
        sessions = (await client.get("/v1/users/dora/sessions")).json()["sessions"]
        assert [(s["session_id"], s["messages"]) for s in sessions] == [("s1", 3), ("s2", 1)]

        first = (await client.get(session_url("dora", "s1", "ledger?limit=2"))).json()
        assert [m["content"] for m in first["messages"]] == ["I moved to Lisbon.", "Noted."]
        assert first["next_offset"] == 2
        rest = (await client.get(session_url("dora", "s1", "ledger?limit=2&offset=2"))).json()
        assert [m["content"] for m in rest["messages"]] == ["And I ride a bike."]
        assert rest["next_offset"] is None

        bad = await client.get(session_url("dora", "s1", "ledger?limit=0"))
        assert bad.status_code == 422 and bad.json()["error"] == "ValidationError"
        assert (await client.get("/v1/users/bad%20id/sessions")).status_code == 422
