"""Moving a user's review: fact candidates (every status, with their decisions), the
facts confirmed from them (``candidate_id``, archived rows too) and the names the user
speaks under travel in an export and come back with this deployment's own ids.

The source is each of the ``mem`` fixture's deployments (services and embedded); the
target is a fresh deployment of the other kind. A bad candidate or identity record is
refused with its line and changes nothing; a file of the previous format still imports;
``forget_user`` after an import leaves no candidate row.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import func, select

from memstack import AsyncMemory, Settings, UserIdentity, ValidationError
from memstack.core.settings import load_settings
from memstack.ingest.extraction.rules import confidence
from memstack.stores.sql import db
from memstack.stores.sql.ledger import dialect_insert
from memstack.stores.sql.models import CandidateRow
from tests.conftest import PG_ADMIN_URL, make_settings, new_id

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
# Above the rules' own 0.85 for a city or an occupation, below their 0.95 for a budget:
# cities and jobs become candidates, the budget a fact.
REVIEW = {"fact_min_confidence": 0.9}


@pytest.fixture(scope="module", autouse=True)
def rule_priors() -> Iterator[None]:
    """The rules' own confidences, not the shipped model's, which move with each fit."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(confidence, "shipped_model", lambda: None)
        yield


DISPLAY_NAME, ALIASES = "Alice Smith", ["Al", "アリス"]


async def _say(mem: AsyncMemory, user: str, session: str, *lines: str, minute: int = 0) -> None:
    for i, text in enumerate(lines):
        await mem.remember(user, session, "user", text, ts=T0 + timedelta(minutes=minute + i))
    await mem.drain(summarize=False)


async def build_review(mem: AsyncMemory, user: str) -> None:
    """A candidate of each status, a fact confirmed from one (then superseded by hand and
    archived, its ``candidate_id`` kept), a fact stated outright, and bound names."""
    await _say(mem, user, "s1", "I work as a teacher.", "I live in Berlin.")
    await _say(mem, user, "s1", "My budget is at most $5,000.", "I moved to Paris.", minute=5)
    await _say(mem, user, "s2", "I'm a nurse.", minute=10)
    found = {c.value: c for c in await mem.candidates(user, status="all")}
    assert {v: c.status for v, c in found.items()} == {
        "teacher": "superseded",
        "Berlin": "superseded",
        "Paris": "pending",
        "nurse": "pending",
    }
    await mem.reject_candidate(user, found["nurse"].id)
    await mem.confirm_candidate(user, found["Paris"].id)
    await _say(mem, user, "s2", "I work as a pilot.", minute=20)  # stays pending
    await mem.set_fact(user, "city", "Lisbon")
    # Superseded rows move to the archive; the budget, unused but recent, stays.
    await mem.maintain(dry_run=False, now=T0 + timedelta(days=1))
    await mem.set_identity(user, display_name=DISPLAY_NAME, aliases=ALIASES)


def _value(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


async def review(mem: AsyncMemory, user: str) -> dict[str, Any]:
    """The user's candidates, facts and names, every id replaced by what it names."""
    candidates = await mem.candidates(user, status="all")
    history = await mem.fact_history(user)
    by_candidate = {c.id: (c.msg_id, c.key) for c in candidates}
    by_fact = {f.id: (f.msg_id, f.key) for f in history}

    def fact(f: Any) -> tuple[Any, ...]:
        named = None if f.candidate_id is None else by_candidate[f.candidate_id]
        return (f.msg_id, f.key, _value(f.value), f.confidence, f.valid_from, f.valid_until, named)

    return {
        "candidates": [
            (
                c.msg_id,
                c.session_id,
                c.key,
                _value(c.value),
                c.type,
                c.confidence,
                c.source,
                c.said_at,
                c.status,
                c.decided_at,
                None if c.fact_id is None else by_fact[c.fact_id],
            )
            for c in candidates
        ],
        "current": sorted(fact(f) for f in await mem.facts(user)),
        "history": sorted(fact(f) for f in history),
        "identity": await mem.identity(user),
    }


@pytest.fixture
def fresh_pg_url(pg_url: str) -> Iterator[str]:
    """A database of its own, at head: a fresh deployment on the services."""
    name = f"memstack_review_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{pg_url.rsplit('/', 1)[0]}/{name}"
    db.upgrade(load_settings(database_url=url))
    yield url
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["services", "embedded"])
def source_and_target(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str
) -> tuple[Settings, Settings]:
    """The source on the services or embedded, the target a fresh deployment of the
    other kind."""

    def services(home: Path, database_url: str) -> Settings:
        return make_settings(
            home, redis_url=redis_url, database_url=database_url, auto_migrate=False, **REVIEW
        )

    if request.param == "services":
        source = services(tmp_path / "source", request.getfixturevalue("pg_url"))
        return source, make_settings(tmp_path / "target", **REVIEW)
    target = services(tmp_path / "target", request.getfixturevalue("fresh_pg_url"))
    return make_settings(tmp_path / "source", **REVIEW), target


@asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[AsyncMemory]:
    """A deployment whose Redis keys go with it (the services' Redis is shared)."""
    async with await AsyncMemory.open(settings) as mem:
        try:
            yield mem
        finally:
            redis = mem.working.redis
            keys = [k async for k in redis.scan_iter(match=f"{settings.key_prefix}:*")]
            if keys:
                await redis.delete(*keys)


async def _rows_of(mem: AsyncMemory, user: str) -> int:
    async with mem.db_sessions() as s:
        stmt = select(func.count()).select_from(CandidateRow).where(CandidateRow.user_id == user)
        return int(await s.scalar(stmt) or 0)


async def test_round_trip_keeps_candidates_confirmed_facts_and_names(
    source_and_target: tuple[Settings, Settings],
) -> None:
    source, target = source_and_target
    alice, carol = new_id("alice"), new_id("carol")
    async with opened(source) as mem:
        await build_review(mem, alice)
        before = await review(mem, alice)
        out = io.BytesIO()
        report = await mem.export(out, user_id=alice)
    assert report.records["candidate"] == 5 and report.records["identity"] == 1
    statuses = sorted(c[8] for c in before["candidates"])
    assert statuses == ["confirmed", "pending", "rejected", "superseded", "superseded"]
    archived = [h for h in before["history"] if h[-1] is not None and h[5] is not None]
    assert archived, "the confirmed fact, superseded by hand and archived, names its candidate"

    async with opened(target) as mem:
        # Ids are taken here first: the imported rows cannot keep the file's.
        await _say(mem, carol, "s1", "I live in Oslo.", "I work as a baker.")
        await mem.set_identity(carol, display_name="Carol")
        carol_before = await review(mem, carol)
        assert len(carol_before["candidates"]) == 2

        first = await mem.import_file(out.getvalue())
        assert first.written["candidate"] == 5 and first.written["identity"] == 1
        after = await review(mem, alice)
        assert after == before
        ids = {c.id for c in await mem.candidates(alice, status="all")}
        exported = [json.loads(x) for x in out.getvalue().splitlines()]
        assert ids != {r["id"] for r in exported if r["type"] == "candidate"}

        again = await mem.import_file(io.BytesIO(out.getvalue()))
        assert again.written["candidate"] == 0 and again.written["identity"] == 0
        assert await review(mem, alice) == after and await review(mem, carol) == carol_before

        erased = await mem.forget_user(alice)
        assert erased["candidates"] == 5 and await _rows_of(mem, alice) == 0
        assert await mem.candidates(alice, status="all") == []
        assert await review(mem, carol) == carol_before


async def test_a_link_to_a_deleted_candidate_is_left_out(
    source_and_target: tuple[Settings, Settings],
) -> None:
    """Deleting a message deletes its candidates and keeps the facts it stated: the
    confirmed fact's candidate_id then names nothing, and the export carries none."""
    source, target = source_and_target
    alice = new_id("alice")
    async with opened(source) as mem:
        await _say(mem, alice, "s1", "I live in Berlin.")
        (pending,) = await mem.candidates(alice)
        confirmed = await mem.confirm_candidate(alice, pending.id)
        assert confirmed.candidate_id == pending.id
        await mem.delete_message(alice, pending.msg_id)
        out = io.StringIO()
        await mem.export(out, user_id=alice)
    (fact,) = [r for r in map(json.loads, out.getvalue().splitlines()) if r["type"] == "fact"]
    assert fact["candidate_id"] is None and '"candidate"' not in out.getvalue()
    async with opened(target) as mem:
        await mem.import_file(out.getvalue().encode())
        (fact_here,) = await mem.facts(alice)
        assert fact_here.value == "Berlin" and fact_here.candidate_id is None


async def test_the_export_of_everyone_carries_a_user_known_only_by_names(
    mem: AsyncMemory, tmp_path: Path
) -> None:
    alice = new_id("alice")
    async with opened(make_settings(tmp_path / "source", **REVIEW)) as source:
        await _say(source, alice, "s1", "Hello there.")
        await source.set_identity(alice, display_name=DISPLAY_NAME, aliases=ALIASES)
        await source.forget_session(alice, "s1")
        out = io.BytesIO()
        report = await source.export(out)
    assert report.users == [alice] and report.records == {"identity": 1}
    imported = await mem.import_file(out.getvalue())
    assert imported.written["identity"] == 1 and imported.written["message"] == 0
    assert await mem.identity(alice) == UserIdentity(alice, DISPLAY_NAME, tuple(ALIASES))


# --- files of the previous format, and bad records ----------------------------------------

Lines = list[dict[str, Any]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Lines]:
    """One user's export with every status of candidate and bound names (built once)."""
    alice = new_id("alice")
    settings = make_settings(tmp_path_factory.mktemp("review"), **REVIEW)

    async def build() -> str:
        async with opened(settings) as mem:
            await build_review(mem, alice)
            out = io.StringIO()
            await mem.export(out, user_id=alice)
        return out.getvalue()

    # A loop of its own, in a thread of its own: the tests' loops are not disturbed.
    with ThreadPoolExecutor(1) as pool:
        text = pool.submit(asyncio.run, build()).result()
    return alice, [json.loads(x) for x in text.splitlines()]


def _file(lines: Lines) -> bytes:
    body = [r for r in lines[1:] if r["type"] != "end"]
    whole = [lines[0], *body, {"type": "end", "records": len(body)}]
    return "".join(json.dumps(r) + "\n" for r in whole).encode()


def _previous(lines: Lines) -> Lines:
    """As the previous version wrote it: no candidates, no names, no candidate_id."""
    kept = [r for r in lines if r["type"] not in ("candidate", "identity")]
    return [{k: v for k, v in r.items() if k != "candidate_id"} for r in kept]


async def test_a_file_of_the_previous_format_imports(
    mem: AsyncMemory, exported: tuple[str, Lines]
) -> None:
    alice, lines = exported
    report = await mem.import_file(_file(_previous(lines)))
    assert "candidate" not in report.records and report.written["fact"] == 3
    assert await mem.candidates(alice, status="all") == []
    assert [f.candidate_id for f in await mem.fact_history(alice)] == [None, None, None]
    current = sorted(_value(f.value) for f in await mem.facts(alice))
    assert current == sorted(map(_value, ["Lisbon", {"amount": 5000, "currency": "USD"}]))
    assert (await mem.identity(alice)).display_name is None
    await mem.forget_user(alice)


def _first(lines: Lines, kind: str, **match: Any) -> int:
    return next(
        i
        for i, r in enumerate(lines)
        if r["type"] == kind and all(r.get(k) == v for k, v in match.items())
    )


def _changed(kind: str, match: dict[str, Any], **fields: Any) -> Callable[[Lines], Lines]:
    """The record moved to the end, changed: every record before it is valid."""

    def change(lines: Lines) -> Lines:
        i = _first(lines, kind, **match)
        record = {k: v for k, v in {**lines[i], **fields}.items() if v is not ...}
        return [*lines[:i], *lines[i + 1 : -1], record, lines[-1]]

    return change


def _added(kind: str, match: dict[str, Any], **fields: Any) -> Callable[[Lines], Lines]:
    def add(lines: Lines) -> Lines:
        record = {**lines[_first(lines, kind, **match)], **fields}
        return [*lines[:-1], record, lines[-1]]

    return add


PENDING = {"status": "pending"}
CONFIRMED = {"status": "confirmed"}
BAD: dict[str, tuple[Callable[[Lines], Lines], str]] = {
    "unknown status": (
        _changed("candidate", PENDING, status="maybe"),
        r"candidate record: status 'maybe' is not one of pending, confirmed",
    ),
    "pending yet decided": (
        _changed("candidate", PENDING, decided_at="2026-03-02T09:00:00+00:00"),
        r"candidate record: decided_at is set exactly when the status is not pending",
    ),
    "rejected with a fact": (
        _changed("candidate", {"status": "rejected"}, fact_id=1),
        r"candidate record: a rejected candidate names no fact_id",
    ),
    "a naive time": (
        _changed("candidate", PENDING, said_at="2026-03-02T09:00:00"),
        r"candidate record: said_at must be an RFC 3339 time with its offset",
    ),
    "confidence out of range": (
        _changed("candidate", PENDING, confidence=1.5),
        r"candidate record: confidence must be a number from 0 to 1",
    ),
    "missing value": (
        _changed("candidate", PENDING, fact_value=...),
        r"candidate record: missing field 'fact_value'",
    ),
    "unknown field": (
        _changed("candidate", PENDING, colour="blue"),
        r"candidate record: unknown field 'colour'",
    ),
    "message of another user": (
        _changed("candidate", PENDING, msg_id="1772442000000-mallory/s2-000001"),
        r"candidate record: msg_id .* is not a message id of this record's user",
    ),
    "the same candidate twice": (
        _added("candidate", PENDING, id=987654),
        r"the candidate 'occupation' of .* appears twice in the file",
    ),
    "a fact_id naming no fact": (
        _changed("candidate", CONFIRMED, fact_id=987654),
        r"fact_id 987654 names no fact of the file",
    ),
    "a candidate_id naming no candidate": (
        _changed("fact", {"fact_key": "budget_limit"}, candidate_id=987654),
        r"candidate_id 987654 names no candidate of the file",
    ),
    "a bad alias": (
        _changed("identity", {}, aliases=["Al", "Al: the boss"]),
        r"identity record: name must not contain ':'",
    ),
    "a repeated alias": (
        _changed("identity", {}, aliases=["Al", "al"]),
        r"identity record: name 'al' is given twice",
    ),
    "no name at all": (
        _changed("identity", {}, display_name=None, aliases=[]),
        r"identity record: an identity record binds a display_name or an alias",
    ),
    "names twice": (
        _added("identity", {}),
        r"the names of user .* appears twice in the file",
    ),
}


async def _unchanged(mem: AsyncMemory, user: str) -> tuple[Any, ...]:
    return (
        await mem.users(),
        await mem.fact_history(user),
        await mem.sessions(user),
        await _rows_of(mem, user),
    )


@pytest.mark.parametrize("case", list(BAD))
async def test_a_bad_review_record_is_refused_with_its_line(
    mem: AsyncMemory, exported: tuple[str, Lines], case: str
) -> None:
    alice, lines = exported
    mutate, error = BAD[case]
    bad = mutate(lines)
    before = await _unchanged(mem, alice)
    with pytest.raises(ValidationError, match=error) as refused:
        await mem.import_file(_file(bad))
    # The changed record is the last before the end record: line len(bad) - 1.
    assert str(refused.value).startswith(f"line {len(bad) - 1}: ")
    assert await _unchanged(mem, alice) == before
    assert alice not in {u.user_id for u in before[0]}


async def test_a_candidate_another_user_holds_here_refuses_the_file(
    mem: AsyncMemory, exported: tuple[str, Lines]
) -> None:
    """A message id of the older form names no user: a candidate of it that another user
    has here refuses the file, rather than being skipped as imported already."""
    alice, lines = exported
    carol = new_id("carol")
    legacy = f"1772442000000-s1-{uuid.uuid4().hex[:6]}"
    async with mem.db_sessions.begin() as s:
        await s.execute(
            dialect_insert(s, CandidateRow).values(
                user_id=carol,
                session_id="s1",
                msg_id=legacy,
                fact_type="profile",
                fact_key="occupation",
                fact_value="baker",
                confidence=0.85,
                source="user_stated",
                said_at=T0,
                status="pending",
            )
        )
    bad = _changed("candidate", PENDING, msg_id=legacy)(lines)
    before = await _unchanged(mem, alice)
    with pytest.raises(ValidationError, match=r"this fact candidate .* belongs to another user"):
        await mem.import_file(_file(bad))
    assert await _unchanged(mem, alice) == before
    (kept,) = await mem.candidates(carol)
    assert kept.msg_id == legacy and kept.value == "baker"
