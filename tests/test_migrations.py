"""Alembic migrations on a database that already holds data, on PostgreSQL and SQLite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command

from memstack.core.errors import SchemaMismatch
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.ops import doctor
from memstack.stores.sql import db, lexical, term_index
from tests.conftest import PG_ADMIN_URL, make_settings

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def fresh_pg_settings(tmp_path: Path, pg_url: str) -> Iterator[Settings]:
    """An empty PostgreSQL database of its own (``pg_url`` is already at head)."""
    name = f"memstack_mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{pg_url.rsplit('/', 1)[0]}/{name}"
    yield make_settings(tmp_path, database_url=url, auto_migrate=False)
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["postgresql", "sqlite"])
def fresh_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "postgresql":
        settings: Settings = request.getfixturevalue("fresh_pg_settings")
        return settings
    return make_settings(tmp_path, auto_migrate=False)


def _columns(engine: sa.Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns("memory_message")}


def _insert(engine: sa.Engine, msg_id: str, **extra: str) -> None:
    row = {
        "msg_id": msg_id,
        "user_id": "u1",
        "session_id": "s1",
        "role": "user",
        "content": f"content of {msg_id}",
        "created_at": T0,
        "search_terms": "content",
        **extra,
    }
    cols = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    with engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO memory_message ({cols}) VALUES ({marks})"), row)


def _names(engine: sa.Engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT msg_id, name FROM memory_message ORDER BY msg_id"))
        return {r.msg_id: r.name for r in rows}


async def test_0003_adds_the_name_column_to_a_filled_ledger_and_downgrade_drops_it(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    try:
        db.upgrade(settings, "0002")
        assert "name" not in _columns(engine)
        _insert(engine, "before")
        # A server at 0002 is refused by a memstack that needs the head, naming the fix.
        with pytest.raises(SchemaMismatch, match=f"needs {db.head_revision()}"):
            await AsyncMemory.open(settings)

        db.upgrade(settings)
        assert "name" in _columns(engine)
        _insert(engine, "after", name="Tim")
        assert _names(engine) == {"after": "Tim", "before": None}
        if engine.dialect.name == "postgresql":
            # SQLite ignores VARCHAR lengths; PostgreSQL holds the column to 64 as well.
            with pytest.raises(sa.exc.DBAPIError):
                _insert(engine, "too-long", name="T" * 65)

        command.downgrade(cfg, "0002")
        assert "name" not in _columns(engine)
        with engine.connect() as conn:
            kept = conn.execute(sa.text("SELECT msg_id FROM memory_message ORDER BY msg_id"))
            assert [r.msg_id for r in kept] == ["after", "before"]

        db.upgrade(settings)
        assert _names(engine) == {"after": None, "before": None}
        mem = await AsyncMemory.open(settings)
        await mem.close()
    finally:
        engine.dispose()


def _indexes(engine: sa.Engine) -> dict[str, list[str]]:
    return {
        i["name"]: [str(c) for c in i["column_names"]]
        for i in sa.inspect(engine).get_indexes("memory_message")
        if i["name"]
    }


async def test_0004_orders_messages_within_a_session_by_time_then_id(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    try:
        db.upgrade(settings, "0003")
        _insert(engine, "kept")
        assert _indexes(engine)["ix_message_session_time"] == ["session_id", "created_at"]

        db.upgrade(settings, "0004")
        indexes = _indexes(engine)
        assert indexes["ix_message_session_order"] == ["session_id", "created_at", "msg_id"]
        assert "ix_message_session_time" not in indexes
        if engine.dialect.name == "postgresql":
            # The point of the index: "the message before" is a backward index step.
            with engine.begin() as conn:
                conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
                plan = "\n".join(
                    r[0]
                    for r in conn.execute(
                        sa.text(
                            "EXPLAIN SELECT msg_id FROM memory_message WHERE session_id = 's1'"
                            " AND (created_at, msg_id) < (:t, 'zz')"
                            " ORDER BY created_at DESC, msg_id DESC LIMIT 1"
                        ),
                        {"t": T0},
                    )
                )
            assert "Scan Backward using ix_message_session_order" in plan

        command.downgrade(cfg, "0003")
        indexes = _indexes(engine)
        assert "ix_message_session_order" not in indexes
        assert indexes["ix_message_session_time"] == ["session_id", "created_at"]
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM memory_message")).scalar() == 1
    finally:
        engine.dispose()


async def test_0005_scopes_sessions_by_user_on_a_populated_ledger(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    try:
        db.upgrade(settings, "0004")
        _insert(engine, "s1:a")
        _insert(engine, "s1:b", user_id="u2", session_id="s9")
        db.upgrade(settings)
        indexes = _indexes(engine)
        assert indexes["ix_message_user_session_order"] == [
            "user_id",
            "session_id",
            "created_at",
            "msg_id",
        ]
        assert "ix_message_session_order" not in indexes
        with engine.begin() as conn:
            users = conn.execute(
                sa.text("SELECT user_id, forgotten_before FROM memory_user ORDER BY user_id")
            ).all()
            assert [tuple(u) for u in users] == [("u1", None), ("u2", None)]
            accepted = conn.execute(sa.text("SELECT accepted_at FROM memory_message")).all()
            assert [a[0] for a in accepted] == [None, None]
            # A message id of the new form with three ids at their longest fits.
            longest = f"{'u' * 128}/{'s' * 128}:{'m' * 128}"
            conn.execute(
                sa.text(
                    "INSERT INTO memory_message (msg_id, user_id, session_id, role, content,"
                    " created_at, search_terms) VALUES (:m, 'u1', 's1', 'user', 'x', :t, 'x')"
                ),
                {"m": longest, "t": T0},
            )
            conn.execute(sa.text("DELETE FROM memory_message WHERE msg_id = :m"), {"m": longest})
        command.downgrade(cfg, "0004")
        assert "ix_message_session_order" in _indexes(engine)
        if engine.dialect.name == "postgresql":
            [column] = [
                c for c in sa.inspect(engine).get_columns("memory_message") if c["name"] == "msg_id"
            ]
            assert column["type"].length == 300
        assert "memory_user" not in sa.inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM memory_message")).scalar() == 2
    finally:
        engine.dispose()


async def test_doctor_says_how_a_missing_schema_is_made(
    tmp_path: Path, fresh_pg_settings: Settings
) -> None:
    # Embedded, the first Memory() migrates; a server is never migrated implicitly.
    embedded = await doctor.run_checks(make_settings(tmp_path / "new"))
    assert embedded[1].detail.endswith("schema not created (migrated on first use)")
    server = await doctor.run_checks(fresh_pg_settings)
    assert server[1].detail.endswith("schema not created (run `memstack db upgrade`)")


def _fact_columns(engine: sa.Engine, table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(table)}


def _insert_fact(engine: sa.Engine, table: str, fid: int, **extra: object) -> None:
    row: dict[str, object] = {
        "id": fid,
        "user_id": "u1",
        "session_id": "s1",
        "msg_id": f"m{fid}",
        "fact_type": "preference",
        "fact_key": "diet",
        "fact_value": '"vegetarian"',
        "confidence": 0.9,
        "source": "user_stated",
        "valid_from": T0,
        "created_at": T0,
        "hit_count": 0,
        **extra,
    }
    cols = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    with engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {table} ({cols}) VALUES ({marks})"), row)


FACT_TABLES = ("agent_memory_fact", "agent_memory_fact_archive")


async def test_0006_records_what_ended_a_fact_and_downgrade_keeps_one_current_row(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    archived = {"valid_until": T0, "archived_at": T0}
    try:
        db.upgrade(settings, "0005")
        _insert_fact(engine, "agent_memory_fact", 1)
        _insert_fact(engine, "agent_memory_fact_archive", 2, **archived)
        db.upgrade(settings)
        assert db.head_revision() is not None and db.head_revision() >= "0006"
        for table in FACT_TABLES:
            assert "ended_by_msg_id" in _fact_columns(engine, table)
            with engine.connect() as conn:
                ended = conn.execute(sa.text(f"SELECT ended_by_msg_id FROM {table}")).all()
            assert [e[0] for e in ended] == [None]
        longest = f"{'u' * 128}/{'s' * 128}:{'m' * 128}"
        _insert_fact(engine, "agent_memory_fact", 3, valid_until=T0, ended_by_msg_id=longest)
        _insert_fact(engine, "agent_memory_fact_archive", 4, ended_by_msg_id=longest, **archived)

        command.downgrade(cfg, "0005")
        for table in FACT_TABLES:
            assert "ended_by_msg_id" not in _fact_columns(engine, table)
        with engine.connect() as conn:
            ids = conn.execute(sa.text("SELECT id FROM agent_memory_fact ORDER BY id")).all()
            assert [i[0] for i in ids] == [1, 3]
        # The index that allows one current row per (user, key) is still partial and unique.
        [index] = [
            i
            for i in sa.inspect(engine).get_indexes("agent_memory_fact")
            if i["name"] == "idx_fact_user_key"
        ]
        assert index["unique"]
        _insert_fact(engine, "agent_memory_fact", 5, valid_until=T0)
        with pytest.raises(sa.exc.IntegrityError):
            _insert_fact(engine, "agent_memory_fact", 6)

        db.upgrade(settings)
        mem = await AsyncMemory.open(settings)
        try:
            [current] = await mem.facts("u1")
            assert current.id == 1 and current.ended_by_msg_id is None
            assert len(await mem.fact_history("u1")) == 5
        finally:
            await mem.close()
    finally:
        engine.dispose()


async def test_0007_adds_the_api_key_table_and_downgrade_drops_it(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    try:
        db.upgrade(settings, "0006")
        _insert(engine, "kept")
        assert "memory_api_key" not in sa.inspect(engine).get_table_names()

        db.upgrade(settings, "0007")
        columns = {c["name"]: c for c in sa.inspect(engine).get_columns("memory_api_key")}
        assert set(columns) == {
            "key_id",
            "deployment",
            "user_id",
            "scopes",
            "secret_sha256",
            "created_at",
            "revoked_at",
        }
        assert columns["user_id"]["nullable"] and columns["revoked_at"]["nullable"]
        assert not columns["secret_sha256"]["nullable"]
        [index] = sa.inspect(engine).get_indexes("memory_api_key")
        assert index["column_names"] == ["deployment", "revoked_at"]
        db.upgrade(settings)  # memstack opens a database at head only
        async with await AsyncMemory.open(settings) as mem:
            key, secret = await mem.create_key("u1")
            assert await mem.authenticate(secret) == key and await mem.has_keys()

        command.downgrade(cfg, "0006")
        assert "memory_api_key" not in sa.inspect(engine).get_table_names()
        with engine.connect() as conn:
            kept = conn.execute(sa.text("SELECT msg_id FROM memory_message")).all()
        assert [r.msg_id for r in kept] == ["kept"]

        db.upgrade(settings)
        async with await AsyncMemory.open(settings) as mem:
            assert await mem.list_keys() == [] and not await mem.has_keys()
    finally:
        engine.dispose()


async def test_0008_adds_the_erasure_marks_and_downgrade_drops_them(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    try:
        db.upgrade(settings, "0007")
        _insert(engine, "kept")
        assert "memory_erasure" not in sa.inspect(engine).get_table_names()

        db.upgrade(settings, "0008")
        pk = sa.inspect(engine).get_pk_constraint("memory_erasure")["constrained_columns"]
        assert pk == ["user_id", "scope", "target"]
        db.upgrade(settings)  # memstack opens a database at head only
        async with await AsyncMemory.open(settings) as mem:
            await mem.remember("u9", "s9", "user", "to be forgotten")
            await mem.drain(summarize=False)
            assert (await mem.forget_session("u9", "s9"))["messages"] == 1
            # Accepted after the mark: a new memory, which the mark does not cover.
            await mem.remember("u9", "s9", "user", "said afterwards")
            await mem.drain(summarize=False)
            assert [m.content for m in await mem.messages("u9", "s9")] == ["said afterwards"]
        with engine.connect() as conn:
            marks = conn.execute(sa.text("SELECT user_id, scope, target FROM memory_erasure"))
            assert [tuple(r) for r in marks] == [("u9", "session", "s9")]

        command.downgrade(cfg, "0007")
        assert "memory_erasure" not in sa.inspect(engine).get_table_names()
        with engine.connect() as conn:
            kept = conn.execute(sa.text("SELECT content FROM memory_message")).all()
        assert sorted(r.content for r in kept) == ["content of kept", "said afterwards"]
    finally:
        engine.dispose()


async def test_0009_adds_candidates_and_names_and_downgrade_drops_them(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    try:
        db.upgrade(settings, "0008")
        _insert(engine, "kept")
        assert "memory_fact_candidate" not in sa.inspect(engine).get_table_names()

        db.upgrade(settings, "0009")
        inspector = sa.inspect(engine)
        assert "memory_fact_candidate" in inspector.get_table_names()
        for table in ("agent_memory_fact", "agent_memory_fact_archive"):
            assert "candidate_id" in {c["name"] for c in inspector.get_columns(table)}
        users = {c["name"] for c in inspector.get_columns("memory_user")}
        assert {"display_name", "aliases"} <= users
        db.upgrade(settings)
        async with await AsyncMemory.open(settings) as mem:
            await mem.remember("u9", "s9", "user", "hello")
            await mem.drain(summarize=False)
            await mem.set_identity("u9", display_name="Nine", aliases=["N"])
            assert (await mem.identity("u9")).aliases == ("N",)

        command.downgrade(cfg, "0008")
        inspector = sa.inspect(engine)
        assert "memory_fact_candidate" not in inspector.get_table_names()
        assert "display_name" not in {c["name"] for c in inspector.get_columns("memory_user")}
        with engine.connect() as conn:
            kept = conn.execute(sa.text("SELECT content FROM memory_message")).all()
        assert sorted(r.content for r in kept) == ["content of kept", "hello"]
    finally:
        engine.dispose()


async def test_0011_indexes_the_ledger_it_finds_and_downgrade_drops_the_index(
    fresh_settings: Settings,
) -> None:
    settings = fresh_settings
    cfg = db.alembic_config(db.sync_url(settings))
    engine = sa.create_engine(db.sync_url(settings))
    try:
        db.upgrade(settings, "0010")
        _insert(engine, "one", search_terms="garden kyoto garden")
        _insert(engine, "two", search_terms="garden")
        _insert(engine, "other", user_id="u2", search_terms="kyoto")
        db.upgrade(settings)
        async with await AsyncMemory.open(settings) as mem:
            async with mem.db_sessions() as s:
                assert await term_index.statistics(s, "u1", ["garden", "kyoto", "x"]) == (
                    2,
                    4,
                    {"garden": 2, "kyoto": 1},
                )
                hits = await lexical.search(s, "u1", {"kyoto": 1.0})
            assert [h.msg_id for h in hits] == ["one"]
            # What the worker writes after the upgrade adds to the backfilled totals.
            await mem.remember("u1", "s1", "user", "kyoto again")
            await mem.drain(summarize=False)
            async with mem.db_sessions() as s:
                assert (await term_index.statistics(s, "u1", ["kyoto"]))[2] == {"kyoto": 2}

        command.downgrade(cfg, "0010")
        assert "memory_term" not in sa.inspect(engine).get_table_names()
        db.upgrade(settings)
    finally:
        engine.dispose()
