"""Moving memory: export (JSON Lines) and import, through the library, HTTP and the CLI.

A round trip embedded → PostgreSQL and Redis → embedded keeps the facts (current, history
with its supersede and retraction links, archived rows), summaries, task state with its
``$ref``, the knowledge base and the context() text; an import writes nothing twice,
leaves other users alone, and a bad file changes nothing.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from memstack import AsyncMemory, Document, Memory, Settings, ValidationError
from memstack.cli import app
from memstack.core.messages import Message
from memstack.core.settings import load_settings
from memstack.stores.sql import db, ledger
from tests.conftest import PG_ADMIN_URL, make_settings, new_id
from tests.test_api import serve

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NOW = T0 + timedelta(days=2)
TRIP = [
    ("user", "I'm vegetarian and I live in Berlin."),
    ("assistant", "Noted: Berlin, vegetarian."),
    ("user", "My budget for the trip is at most $5,000."),
    ("assistant", "Got it."),
    ("user", "We want to visit Lisbon in May."),
    ("assistant", "Lisbon in May sounds lovely."),
    ("user", "Actually my budget is $8,000 now."),
    ("assistant", "Budget updated."),
    ("user", "I'm not vegetarian anymore."),
    ("assistant", "Understood."),
    ("user", "Please book a hotel near the river."),
    ("assistant", "I will look for hotels by the Tagus."),
    ("user", "And a table for dinner on Friday."),
    ("assistant", "Dinner on Friday, noted."),
]
QUERIES = ["what is my budget?", "where do I live?", "which hotel did I ask for?"]
GUIDE = (
    "Lisbon trams. Tram 28 climbs from Martim Moniz through Graça and Alfama, past the "
    "cathedral and the viewpoints; it is crowded from ten in the morning, so ride it "
    "early or late, and mind your pockets on the way up to the castle.\n\n"
    "Museums. Most museums in Lisbon close on Mondays; the tile museum opens at ten, the "
    "Gulbenkian at ten as well, and both are free on Sunday mornings for residents.\n\n"
    "Food. Pastéis de nata are best warm, with cinnamon; the places near the monastery in "
    "Belém sell thousands a day, and the queue moves faster than it looks."
)


async def _say(mem: AsyncMemory, user: str, session: str, lines: list[tuple[str, str]]) -> None:
    for i, (role, text) in enumerate(lines):
        await mem.remember(user, session, role, text, ts=T0 + timedelta(minutes=i))


async def build_source(mem: AsyncMemory, alice: str, bob: str) -> None:
    """Two users sharing a session id; a supersede, a retraction, an archived row, a
    summary, a named author, task state with a $ref, a knowledge-base document."""
    await _say(mem, alice, "s1", TRIP)
    await mem.remember(alice, "s2", "user", "I moved to Porto.", ts=T0, name="Tim")
    await _say(mem, bob, "s1", [("user", "I live in Madrid."), ("assistant", "Hola.")])
    # Quiet for long enough after the last message: the trip is summarised.
    await mem.drain(now=T0 + timedelta(minutes=len(TRIP), seconds=31))
    await mem.set_state(alice, "s1", {"step": 3, "plan": {"city": "Lisbon"}, "log": "x" * 5000})
    await mem.set_state(bob, "s1", {"step": 1})
    await mem.kb_add(Document(GUIDE, doc_id="lisbon", title="Lisbon guide", source="guide.md"))
    # Superseded and retracted rows move to the archive (current ones stay served).
    await mem.maintain(dry_run=False, now=T0 + timedelta(days=1))


def _value(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


async def picture(mem: AsyncMemory, user: str) -> dict[str, Any]:
    """What a user's memory says, without this deployment's own fact ids."""
    history = await mem.fact_history(user)
    by_id = {f.id: f for f in history}
    sessions = await mem.sessions(user)
    state = {s.session_id: (await mem.get_state(user, s.session_id)).fields for s in sessions}
    refs = {
        name: await mem.get_tool_result(user, value["$ref"])
        for fields in state.values()
        for name, value in fields.items()
        if isinstance(value, dict) and "$ref" in value
    }
    return {
        "current": sorted((f.key, _value(f.value), f.msg_id) for f in await mem.facts(user)),
        "history": sorted(
            (
                f.msg_id,
                f.key,
                _value(f.value),
                f.type,
                f.confidence,
                f.source,
                f.valid_from,
                f.valid_until,
                f.ended_by_msg_id,
                None
                if f.supersedes_id is None
                else (by_id[f.supersedes_id].msg_id, by_id[f.supersedes_id].key),
            )
            for f in history
        ),
        "summaries": await mem.summaries(user),
        "sessions": [(s.session_id, s.messages, s.first_message_at) for s in sessions],
        "messages": [m for s in sessions for m in await mem.messages(user, s.session_id)],
        "state": state,
        "refs": refs,
    }


async def contexts(mem: AsyncMemory, user: str) -> list[str]:
    return [(await mem.context(user, "s1", q, now=NOW)).text for q in QUERIES]


async def knowledge(mem: AsyncMemory) -> list[tuple[str, ...]]:
    """The knowledge base's documents, and the chunks a search finds, best first."""
    docs = [
        (d.doc_id, d.title, d.source, d.content_hash, str(d.chunk_count))
        for d in await mem.kb_list()
    ]
    kb = await mem.knowledge_base()
    hits = await kb.search("When do the museums close?", 5, min_score=-1.0)
    return [*docs, tuple(f"{h.doc_id}#{h.chunk_idx}: {h.text}" for h in hits)]


@pytest.fixture
def own_pg_url(pg_url: str) -> Iterator[str]:
    """A database of its own at head: the export of everyone from it holds this test's
    users only."""
    name = f"memstack_transfer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{pg_url.rsplit('/', 1)[0]}/{name}"
    db.upgrade(load_settings(database_url=url))
    yield url
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_round_trip_embedded_to_services_and_back(
    tmp_path: Path, redis_url: str, own_pg_url: str
) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    source = make_settings(tmp_path / "source")
    services = make_settings(
        tmp_path / "services", redis_url=redis_url, database_url=own_pg_url, auto_migrate=False
    )
    target = make_settings(tmp_path / "target")

    async with await AsyncMemory.open(source) as mem:
        await build_source(mem, alice, bob)
        before = {u: await picture(mem, u) for u in (alice, bob)}
        seen = await contexts(mem, alice)
        kb_before = await knowledge(mem)
        first = io.BytesIO()
        report = await mem.export(first)
    # The scenario holds what the round trip must keep.
    history = before[alice]["history"]
    assert any(h[-1] is not None for h in history), "a supersede link"
    assert any(h[8] is not None for h in history), "a retraction"
    assert before[alice]["summaries"] and before[alice]["refs"] == {"log": "x" * 5000}
    assert report.users == sorted([alice, bob]) and report.records["document"] == 1
    hits = kb_before[-1]
    assert len(hits) >= 2 and any("Mondays" in hit for hit in hits)  # chunks, in order

    async with await AsyncMemory.open(services) as mem:
        hop = await mem.import_file(first.getvalue())
        assert hop.written["message"] == len(TRIP) + 3 and hop.written["document"] == 1
        assert {u: await picture(mem, u) for u in (alice, bob)} == before
        second = io.BytesIO()
        try:
            await mem.export(second)
        finally:  # the database goes with the test; the shared Redis keeps nothing of it
            keys = [k async for k in mem.working.redis.scan_iter(match=f"{services.key_prefix}:*")]
            if keys:
                await mem.working.redis.delete(*keys)

    async with await AsyncMemory.open(target) as mem:
        await mem.import_file(second.getvalue())
        assert {u: await picture(mem, u) for u in (alice, bob)} == before
        assert await contexts(mem, alice) == seen
        assert await knowledge(mem) == kb_before
        third = io.StringIO()
        await mem.export(third)
    archived = first.getvalue().decode().count('"archived_at":"')
    assert archived > 0 and third.getvalue().count('"archived_at":"') == archived


async def _populated(mem: AsyncMemory, carol: str) -> None:
    await mem.remember(carol, "s1", "user", "I live in Oslo.", ts=T0)
    await mem.remember(carol, "s1", "assistant", "Oslo, noted.", ts=T0 + timedelta(minutes=1))
    await mem.set_state(carol, "s1", {"step": 7})
    await mem.drain(summarize=False)


async def _exported(settings: Settings, alice: str) -> bytes:
    async with await AsyncMemory.open(settings) as mem:
        await _say(mem, alice, "s1", TRIP[:8])
        await mem.drain(summarize=False)
        await mem.set_state(alice, "s1", {"step": 2})
        out = io.BytesIO()
        await mem.export(out, user_id=alice)
    return out.getvalue()


async def test_import_twice_into_a_populated_deployment(
    tmp_path: Path, service_mem: AsyncMemory
) -> None:
    alice, carol = new_id("alice"), new_id("carol")
    data = await _exported(make_settings(tmp_path / "source"), alice)
    mem = service_mem
    await _populated(mem, carol)
    carol_before = await picture(mem, carol)
    carol_context = await contexts(mem, carol)
    vectors = await mem.memory_vectors()
    carol_vectors = await vectors.count({"user_id": carol})

    first = await mem.import_file(data)
    assert first.written["message"] == 8 and first.written["fact"] >= 2
    alice_after = await picture(mem, alice)
    alice_vectors = await vectors.count({"user_id": alice})
    assert alice_vectors > 0 and len(alice_after["messages"]) == 8

    again = await mem.import_file(io.BytesIO(data))
    assert again.written == {k: 0 for k in again.written} | {"state": 1}
    assert await picture(mem, alice) == alice_after
    assert await vectors.count({"user_id": alice}) == alice_vectors
    # Other users untouched.
    assert await picture(mem, carol) == carol_before
    assert await contexts(mem, carol) == carol_context
    assert await vectors.count({"user_id": carol}) == carol_vectors
    # What was imported answers context().
    text = (await mem.context(alice, "s1", "what is my budget?", now=NOW)).text
    assert "8000" in text.replace(",", "")


async def test_export_of_one_user_holds_nothing_of_another(embedded_settings: Settings) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    async with await AsyncMemory.open(embedded_settings) as mem:
        await build_source(mem, alice, bob)
        out = io.StringIO()
        report = await mem.export(out, user_id=alice)
        lines = [json.loads(x) for x in out.getvalue().splitlines()]
        streamed = [line async for line in mem.export_lines(bob)]
    assert lines[0]["users"] == [alice] and lines[0]["knowledge"] is False
    assert lines[-1] == {"type": "end", "records": len(lines) - 2}
    assert {r["user_id"] for r in lines[1:-1]} == {alice}
    assert {r["type"] for r in lines[1:-1]} == {
        "message",
        "fact",
        "summary",
        "tool_result",
        "state",
    }
    assert bob not in out.getvalue() and "Madrid" not in out.getvalue()
    assert report.users == [alice] and sum(report.records.values()) == len(lines) - 2
    assert alice not in "".join(streamed) and "Madrid" in "".join(streamed)


# --- bad files ----------------------------------------------------------------------------

Lines = list[dict[str, Any]]


def _with_end(lines: Lines) -> Lines:
    return [*lines[:-1], {"type": "end", "records": len(lines) - 2}]


def _first(lines: Lines, kind: str) -> int:
    return next(i for i, r in enumerate(lines) if r.get("type") == kind)


def _insert(lines: Lines, record: dict[str, Any]) -> Lines:
    # Just before the end: every record before it is valid, and must not be written.
    return _with_end([*lines[:-1], record, lines[-1]])


def _changed(lines: Lines, kind: str, **fields: Any) -> Lines:
    i = _first(lines, kind)
    out = [dict(r) for r in lines]
    out[i] = {k: v for k, v in {**lines[i], **fields}.items() if v is not ...}
    # Moved to the end, after every valid record.
    return _insert([*out[:i], *out[i + 1 :]], out[i])


BAD: dict[str, tuple[Callable[[Lines], Lines | str], str]] = {
    "no header": (lambda ls: ls[1:], r"line 1: the first line must be the header"),
    "another format": (
        lambda ls: [{**ls[0], "format": "other-export"}, *ls[1:]],
        r"line 1: header record: format must be 'memstack-export'",
    ),
    "another version": (
        lambda ls: [{**ls[0], "version": 2}, *ls[1:]],
        r"line 1: header record: version 2 is not one this memstack reads",
    ),
    "broken JSON": (
        lambda ls: "\n".join(json.dumps(r) for r in ls[:-1]) + '\n{"type": "message", \n',
        r"line \d+: not valid JSON",
    ),
    "unknown type": (
        lambda ls: _insert(ls, {"type": "vector", "user_id": ls[0]["users"][0]}),
        r"line \d+: unknown record type 'vector'",
    ),
    "missing field": (
        lambda ls: _changed(ls, "message", content=...),
        r"line \d+: message record: missing field 'content'",
    ),
    "unknown field": (
        lambda ls: _changed(ls, "fact", colour="blue"),
        r"line \d+: fact record: unknown field 'colour'",
    ),
    "user not in the header": (
        lambda ls: _changed(ls, "message", user_id="mallory"),
        r"line \d+: message record: user_id 'mallory' is not one of the header's users",
    ),
    "message id of another user": (
        lambda ls: _changed(ls, "message", msg_id="1772442000000-mallory/s1-000001"),
        r"line \d+: message record: msg_id .* is not a message id of this record's user",
    ),
    "a naive time": (
        lambda ls: _changed(ls, "message", created_at="2026-03-02T09:00:00"),
        r"line \d+: message record: created_at must be an RFC 3339 time with its offset",
    ),
    "duplicate message": (
        lambda ls: _insert(ls, ls[_first(ls, "message")]),
        r"line \d+: msg_id .* appears twice in the file \(first on line 2\)",
    ),
    "dangling supersede link": (
        lambda ls: _changed(ls, "fact", supersedes_id=987654),
        r"line \d+: supersedes_id 987654 names no fact of the file",
    ),
    "cut short": (lambda ls: ls[:-1], r"without its end record: it was cut short"),
    "wrong count": (
        lambda ls: [*ls[:-1], {"type": "end", "records": 1}],
        r"the end record counts 1 records; the file holds \d+",
    ),
    "empty": (lambda ls: "", r"the file is empty"),
}


@pytest.mark.parametrize("case", list(BAD))
async def test_a_bad_file_changes_nothing(tmp_path: Path, case: str) -> None:
    alice, carol = new_id("alice"), new_id("carol")
    good = [
        json.loads(x) for x in (await _exported(make_settings(tmp_path / "a"), alice)).splitlines()
    ]
    mutate, error = BAD[case]
    bad = mutate(good)
    data = bad if isinstance(bad, str) else "".join(json.dumps(r) + "\n" for r in bad)
    async with await AsyncMemory.open(make_settings(tmp_path / "b")) as mem:
        await _populated(mem, carol)
        users, carol_before = await mem.users(), await picture(mem, carol)
        vectors = await (await mem.memory_vectors()).count()
        with pytest.raises(ValidationError, match=error):
            await mem.import_file(data.encode())
        assert await mem.users() == users and await picture(mem, carol) == carol_before
        assert await mem.fact_history(alice) == [] and await mem.sessions(alice) == []
        assert (await mem.get_state(alice, "s1")).fields == {}
        assert await (await mem.memory_vectors()).count() == vectors


async def test_an_id_another_user_holds_here_refuses_the_file(tmp_path: Path) -> None:
    """A message id of the older form names no user: one that another user's message has
    here refuses the file, rather than being skipped as already imported."""
    alice, carol = new_id("alice"), new_id("carol")
    legacy = f"1772442000000-s1-{uuid.uuid4().hex[:6]}"
    async with await AsyncMemory.open(make_settings(tmp_path / "b")) as mem:
        async with mem.db_sessions.begin() as s:
            await ledger.insert_messages(
                s, [Message(legacy, carol, "s1", "user", "Carol's secret.", T0)]
            )
        header = {"type": "header", "format": "memstack-export", "version": 1}
        header |= {"exported_at": NOW.isoformat(), "users": [alice]}
        message = {
            "type": "message",
            "msg_id": legacy,
            "user_id": alice,
            "session_id": "s1",
            "role": "user",
            "content": "Alice's words.",
            "created_at": T0.isoformat(),
        }
        data = "".join(
            json.dumps(r) + "\n" for r in (header, message, {"type": "end", "records": 1})
        )
        with pytest.raises(
            ValidationError, match=r"line 2: this msg_id .* belongs to another user"
        ):
            await mem.import_file(data.encode())
        assert await mem.sessions(alice) == []
        assert [m.content for m in await mem.messages(carol, "s1")] == ["Carol's secret."]


# --- the sync twins, HTTP and the CLI ---------------------------------------------------------


def test_the_sync_twins(tmp_path: Path) -> None:
    path = tmp_path / "alice.jsonl"
    stages: list[str] = []
    with Memory(make_settings(tmp_path / "a")) as mem:
        mem.remember("alice", "s1", "user", "I live in Berlin.", ts=T0)
        mem.drain()
        report = mem.export(path, user_id="alice", progress=lambda stage, *_: stages.append(stage))
        lines = list(mem.export_lines("alice"))
        with pytest.raises(ValidationError):
            mem.export_lines("not an id")
    # The state record carries the session's turn counter.
    assert report.records == {"message": 1, "fact": 1, "state": 1} and stages == ["exporting"]
    assert len(lines) == 5 and path.read_text().splitlines()[1:] == [x.strip() for x in lines][1:]
    with Memory(make_settings(tmp_path / "b")) as mem:
        imported = mem.import_file(path, progress=lambda stage, *_: stages.append(stage))
        assert imported.written["message"] == 1
        assert [f.value for f in mem.facts("alice")] == ["Berlin"]
    assert {"writing", "embedding"} <= set(stages)


async def test_http_export_and_import(tmp_path: Path) -> None:
    async with serve(make_settings(tmp_path / "a")) as (client, mem):
        await mem.remember("dora", "s1", "user", "I ride a bike to work.", ts=T0)
        await mem.remember("erik", "s1", "user", "I live in Bergen.", ts=T0)
        assert (await client.post("/v1/admin/drain")).status_code == 200
        one = await client.get("/v1/users/dora/export")
        everyone = await client.get("/v1/export")
        bad_id = await client.get("/v1/users/bad%20id/export")
    assert one.status_code == 200 and one.headers["content-type"] == "application/x-ndjson"
    records = [json.loads(x) for x in one.text.splitlines()]
    assert records[0]["users"] == ["dora"] and "Bergen" not in one.text
    assert [r["type"] for r in records] == ["header", "message", "state", "end"]
    assert records[2]["turns"] == 1 and records[2]["fields"] == {}  # the turn counter
    assert "Bergen" in everyone.text and "bike" in everyone.text
    assert bad_id.status_code == 422 and bad_id.json()["error"] == "InvalidId"

    async with serve(make_settings(tmp_path / "b")) as (client, mem):
        headers = {"content-type": "application/x-ndjson"}
        first = await client.post("/v1/import", content=everyone.content, headers=headers)
        again = await client.post("/v1/import", content=everyone.content, headers=headers)
        broken = await client.post("/v1/import", content=everyone.content[:-5], headers=headers)
        garbage = await client.post("/v1/import", content=b"\xff\xfe", headers=headers)
        assert first.status_code == 200, first.text
        assert first.json()["written"]["message"] == 2 and first.json()["users"] == ["dora", "erik"]
        assert again.status_code == 200 and again.json()["written"]["message"] == 0
        assert broken.status_code == 422 and "line" in broken.json()["detail"]
        assert garbage.status_code == 422 and garbage.json()["detail"].startswith(
            "line 1: not UTF-8"
        )
        assert [m.content for m in await mem.messages("erik", "s1")] == ["I live in Bergen."]


runner = CliRunner()


def test_cli_export_and_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, target = make_settings(tmp_path / "a"), make_settings(tmp_path / "b")
    with Memory(source) as mem:
        mem.remember("alice", "s1", "user", "My budget is at most $5,000.", ts=T0)
        mem.remember("bob", "s1", "user", "I live in Madrid.", ts=T0)
        mem.drain()
    out = tmp_path / "alice.jsonl"
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("COLUMNS", "200")

    def use(settings: Settings) -> None:
        monkeypatch.setenv("MEMSTACK_HOME", str(settings.home))
        monkeypatch.setenv("MEMSTACK_KEY_PREFIX", settings.key_prefix)

    use(source)
    neither = runner.invoke(app, ["export", "--out", str(out)])
    both = runner.invoke(app, ["export", "--user", "alice", "--all", "--out", str(out)])
    assert neither.exit_code == 2 and both.exit_code == 2 and not out.exists()
    exported = runner.invoke(app, ["export", "--user", "alice", "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    assert "Madrid" not in out.read_text() and "$5,000" in out.read_text()

    use(target)
    imported = runner.invoke(app, ["import", str(out)])
    assert imported.exit_code == 0, imported.output
    assert "message" in imported.output and "1 user" in imported.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text(out.read_text().replace('"version":1', '"version":9'))
    refused = runner.invoke(app, ["import", str(broken)])
    assert refused.exit_code == 1 and "line 1" in refused.output
    missing = runner.invoke(app, ["import", str(tmp_path / "nothing.jsonl")])
    assert missing.exit_code == 2
    with Memory(target) as mem:
        assert [m.content for m in mem.messages("alice", "s1")] == ["My budget is at most $5,000."]
        assert [f.key for f in mem.facts("alice")] == ["budget_limit"]
        assert mem.users()[0].user_id == "alice" and len(mem.users()) == 1
