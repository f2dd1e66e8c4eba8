"""Reading one message back and correcting memory by hand: get_message, delete_message,
search, set_fact, delete_fact and forget_session, in the library, over HTTP, as MCP tools
and on the command line."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from memstack import (
    AsyncMemory,
    InvalidId,
    Memory,
    NotFound,
    SearchHit,
    Settings,
    ValidationError,
)
from memstack.cli import app
from memstack.core.settings import load_settings
from memstack.ingest.extraction import build_extractor
from memstack.ingest.pipeline import Ingestor
from memstack.ingest.worker import Worker
from memstack.stores.sql.models import FactRow, MessageRow, SummaryRow, ToolResultRow
from tests.conftest import make_settings, new_id
from tests.test_api import say, serve, session_url
from tests.test_cli import runner
from tests.test_durability import _Gate, _GatedExtractor, covered, dialogue_chunks
from tests.test_mcp import call, connect, ok, tell, text_of

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
SECRET = "My locker code at the gym is 4711, keep it secret."
CONVERSATION = (
    ("user", "I adopted a parrot called Kiwi last spring."),
    ("assistant", "Parrots are great company."),
    ("user", SECRET),
    ("assistant", "Understood, I will keep that to myself."),
    ("user", "What should I feed Kiwi in the morning?"),
    ("assistant", "Seeds and a little fresh fruit."),
)


async def _tell(
    mem: AsyncMemory, user: str, session: str, lines: tuple[tuple[str, str], ...], start: datetime
) -> list[str]:
    return [
        await mem.remember(user, session, role, text, ts=start + timedelta(minutes=i))
        for i, (role, text) in enumerate(lines)
    ]


async def _vector_texts(mem: AsyncMemory, user: str) -> str:
    """Every stored chunk text of the user, dialogue and inferred, joined."""
    chunks = await dialogue_chunks(mem, user)
    return "\n".join(str(c["text"]) for c in chunks.values())


async def _count(mem: AsyncMemory, table: type, **where: str) -> int:
    async with mem.db_sessions() as s:
        stmt = select(func.count()).select_from(table)
        for column, value in where.items():
            stmt = stmt.where(getattr(table, column) == value)
        return int(await s.scalar(stmt) or 0)


# --- get_message -----------------------------------------------------------------------------


async def test_get_message_from_the_window_then_the_ledger_never_another_users(
    mem: AsyncMemory,
) -> None:
    u, other, s = new_id("u"), new_id("u"), new_id("s")
    ids = await _tell(mem, u, s, CONVERSATION[:2], T0)
    own = await mem.remember(u, s, "user", "with my own id", msg_id="a:b", ts=T0)
    theirs = await mem.remember(other, s, "user", "someone else's words", ts=T0)
    # Not ingested yet: read from the session's window.
    early = await mem.get_message(u, ids[0])
    assert (early.content, early.session_id, early.user_id) == (CONVERSATION[0][1], s, u)
    assert (await mem.get_message(u, own)).content == "with my own id"
    await mem.drain(summarize=False)
    stored = await mem.get_message(u, ids[1])
    assert (stored.role, stored.content, stored.created_at) == (
        "assistant",
        CONVERSATION[1][1],
        T0 + timedelta(minutes=1),
    )
    assert stored.accepted_at is not None  # the ledger's row
    for user, msg_id in ((u, theirs), (other, ids[0]), (u, f"{ids[0]}0")):
        with pytest.raises(NotFound):
            await mem.get_message(user, msg_id)
    for bad in ("", "a#0", "a/b/c", "x y", "é"):
        with pytest.raises(InvalidId):
            await mem.get_message(u, bad)


# --- delete_message --------------------------------------------------------------------------


async def test_a_deleted_message_is_never_recalled_again(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    ids = await _tell(mem, u, s, CONVERSATION, T0)
    await mem.drain(summarize=False)
    question = "What is my locker code at the gym?"
    # From another session, so the history comes from the vectors and BM25, not a window.
    assert "4711" in (await mem.context(u, new_id("s"), question)).text
    assert any("4711" in h.text for h in await mem.search(u, "locker code gym"))
    assert "4711" in await _vector_texts(mem, u)

    counts = await mem.delete_message(u, ids[2])
    assert counts["messages"] == 1 and counts["window"] == 1 and counts["jobs"] == 0

    for session in (s, new_id("s")):
        assert "4711" not in (await mem.context(u, session, question)).text
    hits = await mem.search(u, "locker code gym 4711", limit=100)
    assert all("4711" not in h.text and h.msg_id != ids[2] for h in hits)
    assert "4711" not in await _vector_texts(mem, u)
    # The unit the secret headed is gone; its reply joined the unit before it.
    chunks = await dialogue_chunks(mem, u)
    assert covered(chunks) == set(ids) - {ids[2]}
    assert CONVERSATION[3][1] in chunks[f"{ids[0]}#0"]["text"]
    store = await mem.memory_vectors()
    assert await store.count({"user_id": u, "msg_id": ids[2]}) == 0
    assert ids[2] not in [m.msg_id for m in await mem.messages(u, s)]
    assert ids[2] not in [m.msg_id for m in await mem.window(u, s)]
    with pytest.raises(NotFound):
        await mem.get_message(u, ids[2])
    with pytest.raises(NotFound):
        await mem.delete_message(u, ids[2])


async def test_deleting_a_reply_rewrites_the_unit_that_held_it(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    lines = (
        ("user", "I booked a trip to Lisbon for May."),
        ("assistant", "The wifi password there is swordfish42."),
        ("assistant", "Enjoy the trip and the custard tarts!"),
    )
    ids = await _tell(mem, u, s, lines, T0)
    await mem.drain(summarize=False)
    assert "swordfish42" in (await dialogue_chunks(mem, u))[f"{ids[0]}#0"]["text"]
    await mem.delete_message(u, ids[1])
    chunks = await dialogue_chunks(mem, u)
    assert "swordfish42" not in chunks[f"{ids[0]}#0"]["text"]
    assert "custard tarts" in chunks[f"{ids[0]}#0"]["text"]
    assert chunks[f"{ids[0]}#0"]["msg_ids"] == f"{ids[0]},{ids[2]}"
    text = (await mem.context(u, new_id("s"), "What is the wifi password in Lisbon?")).text
    assert "swordfish42" not in text and "Lisbon" in text


async def test_a_message_deleted_before_the_worker_ran_is_never_stored(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    ids = await _tell(mem, u, s, CONVERSATION[:3], T0)
    counts = await mem.delete_message(u, ids[2])
    assert counts == {
        "messages": 0,
        "summaries": 0,
        "facts_kept": 0,
        "candidates": 0,
        "jobs": 1,
        "window": 1,
        "chunks": 0,
    }
    await mem.drain(summarize=False)
    assert [m.msg_id for m in await mem.messages(u, s)] == ids[:2]
    assert "4711" not in await _vector_texts(mem, u)
    with pytest.raises(NotFound):
        await mem.get_message(u, ids[2])


async def test_facts_a_deleted_message_stated_stay_marked(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    said = await _tell(
        mem,
        u,
        s,
        (("user", "I live in Berlin."), ("assistant", "Nice."), ("user", "I am vegetarian.")),
        T0,
    )
    await mem.drain(summarize=False)
    counts = await mem.delete_message(u, said[0])
    assert counts["facts_kept"] == 1
    facts = {f.key: f for f in await mem.facts(u)}
    assert facts["city"].value == "Berlin" and facts["city"].source_deleted
    assert facts["city"].msg_id == said[0]
    assert not facts["diet"].source_deleted
    [city] = await mem.fact_history(u, "city")
    assert city.source_deleted


async def test_deleting_a_message_drops_the_summaries_that_include_it(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    ids = await _tell(mem, u, s, CONVERSATION, T0)
    await mem.drain(summarize=False)
    summarizer = (await mem.worker()).summarizer
    assert summarizer is not None and await summarizer.summarize(u, s)
    assert len(await mem.summaries(u, s)) == 1
    counts = await mem.delete_message(u, ids[2])
    assert counts["summaries"] == 1 and await mem.summaries(u, s) == []
    store = await mem.memory_vectors()
    assert await store.count({"user_id": u, "source_layer": "summary"}) == 0


async def test_a_delete_during_a_slow_batch_writes_nothing_back(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    ids = await _tell(mem, u, s, CONVERSATION[:3], T0)
    base = (await mem.worker()).ingestor
    gate = _Gate(asyncio.Event(), asyncio.Event())
    extractor = _GatedExtractor(build_extractor(mem.settings), gate)
    ingestor = Ingestor(base.settings, base.sessions, base.embedder, base.vectors, extractor)
    batch = asyncio.create_task(Worker(mem.queue, ingestor, None, 16).run_batch(block_ms=None))
    await asyncio.wait_for(gate.reached.wait(), 10)
    await mem.delete_message(u, ids[2])
    gate.release.set()
    report = await batch
    assert report.failed == 0
    assert [m.msg_id for m in await mem.messages(u, s)] == ids[:2]
    assert "4711" not in await _vector_texts(mem, u)
    assert covered(await dialogue_chunks(mem, u)) == set(ids[:2])


# --- search ----------------------------------------------------------------------------------


async def test_search_ranks_the_users_messages_within_a_time_range(mem: AsyncMemory) -> None:
    u, other, s = new_id("u"), new_id("u"), new_id("s")
    ids = await _tell(mem, u, s, CONVERSATION, T0)
    later = await mem.remember(
        u, new_id("s"), "user", "Kiwi the parrot learned a new word.", ts=T0 + timedelta(days=3)
    )
    await mem.remember(other, s, "user", "My parrot Kiwi talks all day.", ts=T0)
    await mem.drain(summarize=False)

    hits = await mem.search(u, "parrot Kiwi")
    assert hits and all(isinstance(h, SearchHit) for h in hits)
    assert {h.msg_id for h in hits} <= {*ids, later}
    assert {ids[0], later} <= {h.msg_id for h in hits}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    first = next(h for h in hits if h.msg_id == ids[0])
    assert (first.text, first.session_id, first.role) == (CONVERSATION[0][1], s, "user")
    assert first.created_at == T0 and first.created_at.tzinfo is not None
    assert first.ranks and 0 < first.relevance <= 1

    assert len(await mem.search(u, "parrot Kiwi", limit=1)) == 1
    recent = await mem.search(u, "parrot Kiwi", since=T0 + timedelta(days=1))
    assert [h.msg_id for h in recent] == [later]
    early = await mem.search(u, "parrot Kiwi", until=(T0 + timedelta(hours=1)).timestamp())
    assert later not in {h.msg_id for h in early} and ids[0] in {h.msg_id for h in early}
    assert await mem.search(new_id("nobody"), "parrot Kiwi") == []


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": True}, "limit"),
        ({"since": T0, "until": T0 - timedelta(seconds=1)}, "since"),
        ({"since": datetime(2026, 1, 1)}, "timezone"),
        ({"until": "yesterday"}, "until"),
        ({"query": "  "}, "query"),
        ({"query": "a\x00b"}, "NUL"),
    ],
)
async def test_bad_searches_are_refused(
    embedded_settings: Settings, kwargs: dict[str, object], word: str
) -> None:
    args: dict[str, object] = {"query": "parrot", **kwargs}
    query = args.pop("query")
    async with await AsyncMemory.open(embedded_settings) as mem:
        with pytest.raises(ValidationError, match=word):
            await mem.search("u1", query, **args)  # type: ignore[arg-type]
        with pytest.raises(InvalidId):
            await mem.search("bad id", "parrot")


# --- facts by hand ---------------------------------------------------------------------------


async def test_set_fact_supersedes_the_extracted_value_and_delete_ends_it(
    mem: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    [said] = await _tell(mem, u, s, (("user", "I live in Berlin."),), T0)
    await mem.drain(summarize=False)

    moved = await mem.set_fact(u, "city", "Porto")
    assert (moved.key, moved.value, moved.source, moved.confidence) == (
        "city",
        "Porto",
        "user_stated",
        1.0,
    )
    assert moved.current and moved.supersedes_id is not None and not moved.source_deleted
    assert [(f.key, f.value) for f in await mem.facts(u)] == [("city", "Porto")]
    history = await mem.fact_history(u, "city")
    assert [(f.value, f.current, f.msg_id == said) for f in history] == [
        ("Berlin", False, True),
        ("Porto", True, False),
    ]
    assert history[0].valid_until == moved.valid_from
    # The same value again changes nothing.
    again = await mem.set_fact(u, "city", "porto")
    assert again.id == moved.id and len(await mem.fact_history(u, "city")) == 2

    # Keys and values are shaped as extraction shapes them.
    budget = await mem.set_fact(u, "budget", "8000元")
    assert (budget.key, budget.value) == ("budget_limit", {"amount": 8000, "currency": "CNY"})
    likes = await mem.set_fact(u, "pet_name", "Kiwi")
    assert (likes.key, likes.value, likes.session_id) == ("pet_name", "Kiwi", "")

    ended = await mem.delete_fact(u, "city")
    assert ended.id == moved.id and ended.valid_until is not None and ended.ended_by_msg_id
    assert "city" not in {f.key for f in await mem.facts(u)}
    assert len(await mem.fact_history(u, "city")) == 2
    assert [f.value for f in await mem.facts(u, as_of=moved.valid_from) if f.key == "city"] == [
        "Porto"
    ]
    with pytest.raises(NotFound):
        await mem.delete_fact(u, "city")
    with pytest.raises(NotFound):
        await mem.delete_fact(new_id("u"), "city")


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("city", None, ValidationError),
        ("budget_limit", "no amount here", ValidationError),
        ("bad key!", "x", InvalidId),
        ("k" * 129, "x", ValidationError),
        ("city", "a\x00b", ValidationError),
        (
            "notes",
            {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}},
            ValidationError,
        ),
        ("notes", "x" * 5000, ValidationError),
    ],
)
async def test_bad_facts_are_refused_and_nothing_is_written(
    mem: AsyncMemory, key: str, value: object, error: type[Exception]
) -> None:
    u = new_id("u")
    with pytest.raises(error):
        await mem.set_fact(u, key, value)
    assert await mem.fact_history(u) == []
    with pytest.raises(InvalidId):
        await mem.set_fact("bad id", "city", "Porto")


# --- forget_session --------------------------------------------------------------------------


async def test_forget_session_erases_the_session_and_keeps_the_rest(mem: AsyncMemory) -> None:
    u, s, kept = new_id("u"), new_id("s"), new_id("s")
    await _tell(mem, u, s, CONVERSATION, T0)
    await mem.remember(u, s, "user", "I live in Berlin.", ts=T0 + timedelta(minutes=9))
    other = await _tell(mem, u, kept, (("user", "Kiwi likes apples."),), T0)
    await mem.set_state(u, s, {"step": 2, "big": "y" * (mem.settings.large_value_bytes + 10)})
    await mem.drain(summarize=False)
    summarizer = (await mem.worker()).summarizer
    assert summarizer is not None and await summarizer.summarize(u, s)
    await mem.remember(u, s, "user", "One more thing about my locker.", ts=T0 + timedelta(hours=1))

    counts = await mem.forget_session(u, s)
    assert counts["messages"] == 7 and counts["jobs"] == 1 and counts["summaries"] == 1
    assert counts["tool_results"] == 1 and counts["redis_keys"] >= 2 and counts["facts_kept"] == 2
    await mem.drain(summarize=False)

    assert await mem.messages(u, s) == [] and await mem.window(u, s) == []
    assert (await mem.get_state(u, s)).fields == {}
    assert await _count(mem, ToolResultRow, user_id=u, session_id=s) == 0
    assert await _count(mem, SummaryRow, user_id=u, session_id=s) == 0
    store = await mem.memory_vectors()
    assert await store.count({"user_id": u, "session_id": s}) == 0
    for query in ("What is my locker code?", "What is my parrot called?"):
        assert "4711" not in (await mem.context(u, new_id("s"), query)).text
    assert all(h.session_id == kept for h in await mem.search(u, "parrot Kiwi locker"))
    # The other session, and the facts, stay; the fact's source is marked.
    assert [m.msg_id for m in await mem.messages(u, kept)] == other
    facts = {f.key: f for f in await mem.facts(u)}
    assert (facts["city"].value, facts["pets"].value) == ("Berlin", ["parrot: Kiwi"])
    assert facts["city"].source_deleted and facts["pets"].source_deleted
    assert [x.session_id for x in await mem.sessions(u)] == [kept]
    # Nothing to erase: zeros, not an error; bad ids are refused.
    again = await mem.forget_session(u, s)
    assert again["messages"] == 0 and again["jobs"] == 0
    with pytest.raises(InvalidId):
        await mem.forget_session(u, "bad id")
    # The session is new again for what is said after the erasure.
    await mem.remember(u, s, "user", "A fresh start.", ts=T0 + timedelta(days=1))
    await mem.drain(summarize=False)
    assert [m.content for m in await mem.messages(u, s)] == ["A fresh start."]


async def test_forget_session_during_a_slow_batch_writes_nothing_back(mem: AsyncMemory) -> None:
    u, s = new_id("u"), new_id("s")
    await _tell(mem, u, s, (("user", "I live in Berlin."), ("assistant", "Noted.")), T0)
    base = (await mem.worker()).ingestor
    gate = _Gate(asyncio.Event(), asyncio.Event())
    extractor = _GatedExtractor(build_extractor(mem.settings), gate)
    ingestor = Ingestor(base.settings, base.sessions, base.embedder, base.vectors, extractor)
    batch = asyncio.create_task(Worker(mem.queue, ingestor, None, 16).run_batch(block_ms=None))
    await asyncio.wait_for(gate.reached.wait(), 10)
    await mem.forget_session(u, s)
    gate.release.set()
    assert (await batch).failed == 0
    for table in (MessageRow, FactRow):
        assert await _count(mem, table, user_id=u) == 0, table.__tablename__
    store = await mem.memory_vectors()
    assert await store.count({"user_id": u}) == 0


async def test_erasure_reaches_qdrant_too(tmp_path: Path) -> None:
    async with await AsyncMemory.open(make_settings(tmp_path, vector_store="qdrant")) as mem:
        u, s, kept = new_id("u"), new_id("s"), new_id("s")
        ids = await _tell(mem, u, s, CONVERSATION, T0)
        await _tell(mem, u, kept, (("user", "Kiwi likes apples."),), T0)
        await mem.drain(summarize=False)
        store = await mem.memory_vectors()
        assert await store.count({"user_id": u, "msg_id": ids[2]}) == 1
        await mem.delete_message(u, ids[2])
        assert await store.count({"user_id": u, "msg_id": ids[2]}) == 0
        assert "4711" not in await _vector_texts(mem, u)
        assert covered(await dialogue_chunks(mem, u)) >= set(ids) - {ids[2]}
        await mem.forget_session(u, s)
        assert await store.count({"user_id": u, "session_id": s}) == 0
        assert await store.count({"user_id": u, "session_id": kept}) == 1


def test_the_sync_twins_correct_memory(embedded_settings: Settings) -> None:
    with Memory(embedded_settings) as mem:
        first = mem.remember("carol", "s1", "user", "I adopted a parrot called Kiwi.")
        mem.remember("carol", "s1", "user", "I live in Berlin.")
        mem.drain()
        assert mem.get_message("carol", first).content == "I adopted a parrot called Kiwi."
        assert [h.msg_id for h in mem.search("carol", "parrot Kiwi", limit=1)] == [first]
        assert mem.set_fact("carol", "city", "Porto").value == "Porto"
        assert mem.delete_fact("carol", "city").key == "city"
        assert mem.delete_message("carol", first)["messages"] == 1
        assert mem.forget_session("carol", "s1")["messages"] == 1
        assert mem.messages("carol", "s1") == []


# --- over HTTP -------------------------------------------------------------------------------


async def test_http_reads_a_message_and_deletes_it(embedded_settings: Settings) -> None:
    async with serve(embedded_settings) as (client, _mem):
        ids = await say(client, "dora", "s1", *(text for _, text in CONVERSATION[:4]))
        assert (await client.post("/v1/admin/drain")).status_code == 200
        url = f"/v1/users/dora/messages/{ids[2]}"
        assert "/" in ids[2]  # the id's own slash travels in the path

        got = await client.get(url)
        assert got.status_code == 200, got.text
        body = got.json()
        assert (body["msg_id"], body["session_id"], body["content"]) == (ids[2], "s1", SECRET)
        for path, status, error in (
            (f"/v1/users/eve/messages/{ids[2]}", 404, "NotFound"),
            (f"{url}0", 404, "NotFound"),
            ("/v1/users/dora/messages/a/b/c", 422, "InvalidId"),
            ("/v1/users/dora/messages/a%23b", 422, "InvalidId"),
            ("/v1/users/dora/messages/..%2F..", 422, "InvalidId"),
        ):
            r = await client.get(path)
            assert (r.status_code, r.json()["error"]) == (status, error), (path, r.text)
            assert "$" not in r.json()["detail"]  # said in words, not as the regex

        assert (await client.delete(f"/v1/users/eve/messages/{ids[2]}")).status_code == 404
        gone = await client.delete(url)
        assert gone.status_code == 200, gone.text
        assert gone.json()["deleted"]["messages"] == 1
        assert (await client.get(url)).status_code == 404
        assert (await client.delete(url)).status_code == 404
        ledger = (await client.get(session_url("dora", "s1", "ledger"))).json()["messages"]
        assert [m["msg_id"] for m in ledger] == [ids[0], ids[1], ids[3]]
        hits = await client.post("/v1/users/dora/search", json={"query": "locker code 4711"})
        assert hits.status_code == 200 and "4711" not in hits.text


async def test_http_search_with_good_and_bad_input(embedded_settings: Settings) -> None:
    async with serve(embedded_settings) as (client, _mem):
        ids = await say(client, "dora", "s1", *(text for _, text in CONVERSATION))
        assert (await client.post("/v1/admin/drain")).status_code == 200
        url = "/v1/users/dora/search"
        r = await client.post(url, json={"query": "parrot Kiwi", "limit": 2})
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert 1 <= len(hits) <= 2 and hits[0]["msg_id"] in ids
        assert set(hits[0]) >= {"msg_id", "session_id", "role", "text", "created_at", "score"}
        assert hits[0]["session_id"] == "s1" and hits[0]["created_at"].endswith("Z")
        future = await client.post(url, json={"query": "parrot", "since": 4102444800})
        assert future.status_code == 200 and future.json()["hits"] == []
        ranged = await client.post(
            url,
            json={"query": "parrot", "since": "2000-01-01T00:00:00+08:00", "until": 4102444800},
        )
        assert ranged.status_code == 200 and ranged.json()["hits"]
        assert (await client.post("/v1/users/eve/search", json={"query": "parrot"})).json() == {
            "hits": []
        }
        for bad in (
            {},
            {"query": "  "},
            {"query": "parrot", "limit": 0},
            {"query": "parrot", "limit": 101},
            {"query": "parrot", "limit": "3"},
            {"query": "parrot", "since": "2026-01-01T00:00:00"},
            {"query": "parrot", "since": 4102444800, "until": 0},
        ):
            r = await client.post(url, json=bad)
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["error"] == "ValidationError" and r.json()["detail"]
        assert (
            await client.post("/v1/users/bad%20id/search", json={"query": "x"})
        ).status_code == 422


async def test_http_sets_and_deletes_facts_and_forgets_a_session(
    embedded_settings: Settings,
) -> None:
    async with serve(embedded_settings) as (client, _mem):
        await say(client, "dora", "s1", "I live in Berlin.", "Nice.")
        await say(client, "dora", "s2", "I am vegetarian.")
        assert (await client.post("/v1/admin/drain")).status_code == 200
        facts = "/v1/users/dora/facts"

        put = await client.put(f"{facts}/city", json={"value": "Porto"})
        assert put.status_code == 200, put.text
        city = put.json()
        assert (city["value"], city["current"], city["source"]) == ("Porto", True, "user_stated")
        assert city["supersedes_id"] is not None and city["source_deleted"] is False
        budget = await client.put(f"{facts}/budget", json={"value": "8000元"})
        assert budget.json()["key"] == "budget_limit"
        assert budget.json()["value"] == {"amount": 8000, "currency": "CNY"}
        listed = {f["key"]: f["value"] for f in (await client.get(facts)).json()["facts"]}
        assert listed["city"] == "Porto" and listed["diet"] == "vegetarian"
        for path, body in (
            ("city", {"value": None}),
            ("city", {}),
            ("city", {"value": "a\x00b"}),
            ("budget_limit", {"value": "no amount"}),
            ("notes", {"value": "x" * 5000}),
            ("_", {"value": "x"}),
            ("bad%20key", {"value": "x"}),
        ):
            r = await client.put(f"{facts}/{path}", json=body)
            assert r.status_code == 422, (path, body, r.text)
        assert {f["key"] for f in (await client.get(f"{facts}/history")).json()["facts"]} == {
            "city",
            "diet",
            "budget_limit",
        }

        ended = await client.delete(f"{facts}/city")
        assert ended.status_code == 200 and ended.json()["valid_until"] is not None
        assert ended.json()["current"] is False
        missing = await client.delete(f"{facts}/city")
        assert missing.status_code == 404 and missing.json()["error"] == "NotFound"

        forgot = await client.delete("/v1/users/dora/sessions/s2")
        assert forgot.status_code == 200, forgot.text
        assert forgot.json()["deleted"]["messages"] == 1
        assert forgot.json()["deleted"]["facts_kept"] == 1
        sessions = (await client.get("/v1/users/dora/sessions")).json()["sessions"]
        assert [s["session_id"] for s in sessions] == ["s1"]
        diet = {f["key"]: f for f in (await client.get(facts)).json()["facts"]}["diet"]
        assert diet["source_deleted"] is True
        bad = await client.delete("/v1/users/dora/sessions/bad%20id")
        assert bad.status_code == 422

        paths = (await client.get("/openapi.json")).json()["paths"]
        assert set(paths["/v1/users/{user_id}/messages/{msg_id}"]) == {"get", "delete"}
        assert set(paths["/v1/users/{user_id}/facts/{key}"]) == {"put", "delete"}
        assert "delete" in paths["/v1/users/{user_id}/sessions/{session_id}"]
        assert "post" in paths["/v1/users/{user_id}/search"]


# --- as MCP tools ----------------------------------------------------------------------------


async def test_mcp_searches_corrects_facts_and_forgets_a_session(
    embedded_settings: Settings,
) -> None:
    user, session = new_id("u"), new_id("s")
    async with connect(embedded_settings, inline_ingest=True) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("delete_fact", "forget_session"):
            hints = tools[name].annotations
            assert hints is not None and hints.destructive_hint
        assert tools["set_fact"].annotations and not tools["set_fact"].annotations.destructive_hint
        assert (
            tools["search_memory"].annotations and tools["search_memory"].annotations.read_only_hint
        )
        for name in ("search_memory", "set_fact", "delete_fact", "forget_session"):
            assert next(iter(tools[name].input_schema["properties"])) == "user_id"

        await tell(client, user, session, "I adopted a parrot called Kiwi.", "Lovely.")
        found = await ok(client, "search_memory", user_id=user, query="parrot Kiwi", limit=5)
        assert found["hits"][0]["text"] == "I adopted a parrot called Kiwi."
        assert found["hits"][0]["session_id"] == session
        bad = await call(
            client, "search_memory", user_id=user, query="x", since=4102444800, until=0
        )
        assert bad.is_error and "since" in text_of(bad)

        fact = await ok(client, "set_fact", user_id=user, key="city", value="Porto")
        assert (fact["key"], fact["value"], fact["current"]) == ("city", "Porto", True)
        refused = await call(client, "set_fact", user_id=user, key="budget_limit", value="none")
        assert refused.is_error and "budget_limit" in text_of(refused)
        ended = await ok(client, "delete_fact", user_id=user, key="city")
        assert ended["current"] is False
        again = await call(client, "delete_fact", user_id=user, key="city")
        assert again.is_error and "NotFound" in text_of(again)

        deleted = (await ok(client, "forget_session", user_id=user, session_id=session))["deleted"]
        assert deleted["messages"] == 2
        assert (await ok(client, "search_memory", user_id=user, query="parrot Kiwi"))["hits"] == []


# --- on the command line ---------------------------------------------------------------------


def test_cli_reads_and_corrects_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("COLUMNS", "400")
    with Memory(load_settings()) as mem:
        ids = [
            mem.remember("dora", "s1", role, text, ts=T0 + timedelta(minutes=i))
            for i, (role, text) in enumerate(CONVERSATION)
        ]
        mem.remember("dora", "s2", "user", "I live in Berlin.", ts=T0)
        mem.drain()

    def run(*args: str, code: int = 0, stdin: str | None = None) -> str:
        result = runner.invoke(app, list(args), input=stdin)
        assert result.exit_code == code, result.output
        return result.output

    assert "dora" in run("users") and "s2" in run("sessions", "dora")
    page = run("messages", "dora", "s1", "--limit", "2", "--offset", "1")
    assert CONVERSATION[1][1] in page and CONVERSATION[2][1] in page
    assert CONVERSATION[0][1] not in page
    assert SECRET in run("message", "get", "dora", ids[2])
    assert "no message" in run("message", "get", "eve", ids[2], code=1)
    assert "Kiwi" in run("search", "dora", "parrot Kiwi", "--limit", "3")
    assert "adopted" not in run("search", "dora", "parrot Kiwi", "--since", "2100-01-01T00:00:00Z")
    assert "since" in run("search", "dora", "x", "--since", "4102444800", "--until", "0", code=1)
    assert "neither" in run("search", "dora", "x", "--since", "soon", code=2)

    assert "Berlin" in run("facts", "dora")
    assert "Porto" in run("facts", "set", "dora", "city", "Porto")
    assert "8000" in run("facts", "set", "dora", "budget", '{"amount": 8000, "currency": "EUR"}')
    history = run("facts", "dora", "--history")
    assert "Berlin" in history and "Porto" in history
    assert "Berlin" in run("facts", "dora", "--as-of", (T0 + timedelta(hours=1)).isoformat())
    assert "Porto" in run("facts", "delete", "dora", "city")
    assert "no current fact" in run("facts", "delete", "dora", "city", code=1)
    assert "InvalidId" not in run("facts", "set", "dora", "bad key!", "x", code=1)

    assert "messages 1" in run("message", "delete", "dora", ids[2])
    assert "gym is 4711" not in run("search", "dora", "locker code 4711")
    assert "messages 5" in run("forget-session", "dora", "s1")
    assert "(message deleted)" in run("facts", "dora")  # the parrot's source is gone
    assert "Aborted" in run("forget-user", "dora", stdin="n\n", code=1)
    assert "dora" in run("users")
    assert "messages 1" in run("forget-user", "dora", "--yes")
    assert "dora" not in run("users")
