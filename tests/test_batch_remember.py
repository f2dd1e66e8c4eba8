"""Remembering many messages in one call: the library's ``remember_many``, ``POST
…/messages/batch``, both clients and the MCP tool. Each message is idempotent by its
``msg_id`` (a batch sent again changes nothing and says so per message), each gets its
own answer, a message that fails a check refuses the batch with nothing stored, and the
batch size is capped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from memstack import AsyncMemory, Conflict, InvalidContent, Remembered, ValidationError
from memstack.client import AsyncMemoryClient, MemoryClient
from memstack.core.messages import MAX_BATCH
from memstack.core.settings import Settings
from memstack.server.http import create_app
from tests.conftest import new_id
from tests.test_api import serve
from tests.test_mcp import call, connect, ok, text_of

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def batch(*lines: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [{"msg_id": i, "role": r, "content": c} for i, r, c in lines]


TRIP = batch(
    ("1", "user", "Plan a trip to Lisbon."),
    ("2", "assistant", "When would you like to go?"),
    ("3", "user", "In May; my budget is 2000 EUR."),
)


async def stored(mem: AsyncMemory, user: str, session: str) -> list[tuple[str, str]]:
    return [(m.msg_id, m.content) for m in await mem.window(user, session, 40)]


async def test_a_batch_is_stored_in_order_and_sending_it_again_changes_nothing(
    any_settings: Settings,
) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    url = f"/v1/users/{alice}/sessions/s1/messages/batch"
    async with serve(any_settings) as (client, mem):
        await mem.remember(bob, "s1", "user", "Bob's own words.", msg_id="1")
        first = await client.post(url, json={"messages": TRIP})
        assert first.status_code == 200, first.text
        ids = [f"{alice}/s1:{n}" for n in ("1", "2", "3")]
        assert first.json()["results"] == [
            {"msg_id": i, "status": "ok", "error": None, "detail": None} for i in ids
        ]
        window = await stored(mem, alice, "s1")
        assert window == [(i, m["content"]) for i, m in zip(ids, TRIP, strict=True)]
        state = await mem.get_state(alice, "s1")
        backlog = await mem.backlog()

        again = await client.post(url, json={"messages": TRIP})
        assert [r["status"] for r in again.json()["results"]] == ["duplicate"] * 3
        assert [r["msg_id"] for r in again.json()["results"]] == ids
        assert await stored(mem, alice, "s1") == window
        assert await mem.get_state(alice, "s1") == state and state.turns == 2
        assert await mem.backlog() == backlog  # no job queued twice
        # Bob's session of the same name, and his message "1", are his alone.
        assert await stored(mem, bob, "s1") == [(f"{bob}/s1:1", "Bob's own words.")]

        await mem.drain()
        assert [m.content for m in await mem.messages(alice, "s1")] == [m["content"] for m in TRIP]


async def test_each_message_answers_for_itself(any_settings: Settings) -> None:
    alice = new_id("alice")
    url = f"/v1/users/{alice}/sessions/s1/messages/batch"
    async with serve(any_settings) as (client, mem):
        await mem.remember(alice, "s1", "user", "The first message.", msg_id="a")
        mixed = batch(
            ("a", "user", "Another text under a stored id."),  # conflict
            ("b", "user", "New."),
            ("b", "user", "New."),  # the same message twice: stored once
            ("c", "user", "One text."),
            ("c", "user", "Another text, same id."),  # conflict within the batch
        )
        mixed[3]["name"] = "Tim"
        mixed[3]["ts"] = T0.isoformat()
        r = await client.post(url, json={"messages": mixed})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [x["status"] for x in results] == ["error", "ok", "duplicate", "ok", "error"]
        assert results[0]["error"] == "Conflict" and "another message" in results[0]["detail"]
        assert results[4]["msg_id"] == f"{alice}/s1:c" and results[4]["error"] == "Conflict"
        assert sorted(await stored(mem, alice, "s1")) == [
            (f"{alice}/s1:a", "The first message."),
            (f"{alice}/s1:b", "New."),
            (f"{alice}/s1:c", "One text."),
        ]
        [named] = [m for m in await mem.window(alice, "s1", 40) if m.msg_id.endswith(":c")]
        assert (named.name, named.created_at) == ("Tim", T0)


def _bad(kind: str, limit: int) -> tuple[list[Any], str]:
    good = [dict(m) for m in TRIP]
    if kind == "role":
        good[1]["role"] = "robot"
        return good, "messages.1.role"
    if kind == "nul":
        good[2]["content"] = "a\x00b"
        return good, "messages.2.content"
    if kind == "size":
        good[2]["content"] = "x" * (limit + 1)
        return good, "messages[2]: content is"
    if kind == "no id":
        del good[0]["msg_id"]
        return good, "messages.0.msg_id"
    if kind == "bad id":
        good[1]["msg_id"] = "a b"
        return good, "messages.1.msg_id"
    if kind == "unknown field":
        good[0]["colour"] = "red"
        return good, "colour"
    if kind == "future":
        good[0]["ts"] = (datetime.now(UTC) + timedelta(days=3)).isoformat()
        return good, "messages[0]: ts"
    if kind == "too many":
        return [{"msg_id": str(i), "role": "user", "content": "hi"} for i in range(101)], "100"
    assert kind == "empty"
    return [], "messages"


BAD_KINDS = ["role", "nul", "size", "no id", "bad id", "unknown field", "future", "too many"]
BAD_KINDS.append("empty")


@pytest.mark.parametrize("kind", BAD_KINDS)
async def test_a_bad_message_refuses_the_batch_and_nothing_is_stored(
    any_settings: Settings, kind: str
) -> None:
    alice = new_id("alice")
    url = f"/v1/users/{alice}/sessions/s1/messages/batch"
    async with serve(any_settings) as (client, mem):
        messages, says = _bad(kind, mem.settings.max_message_bytes)
        r = await client.post(url, json={"messages": messages})
        assert r.status_code == 422, r.text
        assert set(r.json()) == {"error", "detail"} and says in r.json()["detail"], r.text
        assert await stored(mem, alice, "s1") == [] and await mem.backlog() == 0
        assert (await mem.get_state(alice, "s1")).turns == 0


async def test_the_library_checks_every_message_first(mem: AsyncMemory) -> None:
    alice = new_id("alice")
    assert MAX_BATCH == 100
    with pytest.raises(ValidationError, match="1 to 100 messages, got 101"):
        await mem.remember_many(alice, "s1", [TRIP[0]] * 101)
    with pytest.raises(ValidationError, match=r"messages\[1\]: msg_id is required"):
        await mem.remember_many(alice, "s1", [TRIP[0], {"role": "user", "content": "x"}])
    with pytest.raises(InvalidContent, match=r"messages\[2\]: role"):
        await mem.remember_many(alice, "s1", [*TRIP[:2], {**TRIP[2], "role": "robot"}])
    with pytest.raises(ValidationError, match="a list of messages"):
        await mem.remember_many(alice, "s1", TRIP[0])  # type: ignore[arg-type]
    assert await stored(mem, alice, "s1") == []
    done = await mem.remember_many(alice, "s1", [{**TRIP[0], "ts": T0}])
    assert done == [Remembered(f"{alice}/s1:1", "ok")]
    assert (await mem.window(alice, "s1"))[0].created_at == T0


@pytest.fixture
async def app_memory(service_settings: Settings) -> AsyncIterator[tuple[Any, AsyncMemory]]:
    app = create_app(service_settings)
    async with app.router.lifespan_context(app):
        yield app, app.state.memory


async def test_both_clients_send_a_batch(app_memory: tuple[Any, AsyncMemory]) -> None:
    app, mem = app_memory
    alice = new_id("alice")
    transport = httpx.ASGITransport(app=app)
    async with AsyncMemoryClient("http://memstack", transport=transport) as client:
        first = await client.remember_many(alice, "s1", [{**TRIP[0], "ts": T0}, TRIP[1]])
        assert first == [Remembered(f"{alice}/s1:1", "ok"), Remembered(f"{alice}/s1:2", "ok")]
        again = await client.remember_many(alice, "s1", TRIP)
        assert [r.status for r in again] == ["duplicate", "duplicate", "ok"]
        with pytest.raises(InvalidContent):
            await client.remember_many(alice, "s2", [{**TRIP[0], "role": "robot"}])
        with pytest.raises(ValidationError):
            await client.remember_many(alice, "s2", [TRIP[0]] * 101)
    assert len(await stored(mem, alice, "s1")) == 3 and await stored(mem, alice, "s2") == []
    assert (await mem.window(alice, "s1"))[0].created_at == T0

    sync_transport = httpx.MockTransport(lambda _: httpx.Response(500))
    # The sync twin builds the same request; the refusal is the library's.
    with (
        MemoryClient("http://memstack", transport=sync_transport) as sync,
        pytest.raises(ValidationError, match="a list of messages"),
    ):
        sync.remember_many(alice, "s1", "hello")  # type: ignore[arg-type]


async def test_the_mcp_tool_remembers_many(service_settings: Settings) -> None:
    alice = new_id("alice")
    async with connect(service_settings) as client:
        first = await ok(client, "remember_many", user_id=alice, session_id="s1", messages=TRIP)
        assert [r["status"] for r in first["results"]] == ["ok"] * 3
        again = await ok(client, "remember_many", user_id=alice, session_id="s1", messages=TRIP)
        assert [r["status"] for r in again["results"]] == ["duplicate"] * 3
        conflict = [{**TRIP[0], "content": "Something else."}]
        said = await ok(client, "remember_many", user_id=alice, session_id="s1", messages=conflict)
        assert said["results"][0]["error"] == "Conflict"
        bad = [TRIP[0], {**TRIP[1], "role": "robot"}]
        refused = await call(client, "remember_many", user_id=alice, session_id="s2", messages=bad)
        assert refused.is_error and "role" in text_of(refused)
    async with await AsyncMemory.open(service_settings) as mem:
        assert len(await stored(mem, alice, "s1")) == 3 and await stored(mem, alice, "s2") == []


async def test_a_conflict_raised_by_remember_is_the_same_conflict(mem: AsyncMemory) -> None:
    # The batch reports what remember() raises for the same message.
    alice = new_id("alice")
    await mem.remember(alice, "s1", "user", "One.", msg_id="x")
    with pytest.raises(Conflict) as raised:
        await mem.remember(alice, "s1", "user", "Two.", msg_id="x")
    again = {"msg_id": "x", "role": "user", "content": "Two."}
    [answer] = await mem.remember_many(alice, "s1", [again])
    assert (answer.status, answer.error, answer.detail) == ("error", "Conflict", str(raised.value))
