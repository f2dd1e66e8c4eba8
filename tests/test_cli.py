"""The command line: doctor, db upgrade, demo, config."""

from __future__ import annotations

import os
import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from memstack.cli import app
from memstack.core.settings import load_settings
from memstack.ops import doctor
from tests.conftest import PG_ADMIN_URL, new_prefix
from tests.faults.servers import RedisInstance

runner = CliRunner()


def test_doctor_reports_embedded_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_CHROMA_SHARDS", "8")
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "embedded (fakeredis)" in result.output
    assert "embedded (SQLite)" in result.output
    assert "8 shards by user_id" in result.output  # the vector store's layout


def test_doctor_fails_when_a_store_is_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("MEMSTACK_STORE_TIMEOUT_S", "0.5")
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert "down" in result.output


@pytest.mark.parametrize("fsync", ["everysec", "always"])
def test_doctor_on_servers_with_a_persistent_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str, fsync: str
) -> None:
    with RedisInstance(appendonly=True, appendfsync=fsync) as own:  # type: ignore[arg-type]
        monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
        monkeypatch.setenv("MEMSTACK_REDIS_URL", own.url)
        monkeypatch.setenv("MEMSTACK_DATABASE_URL", pg_url)
        monkeypatch.setenv("COLUMNS", "400")
        result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "schema at head" in result.output
    assert re.search(r"version \d+\.\d+", result.output)
    assert f"AOF appendfsync {fsync}" in result.output


def test_doctor_fails_on_a_redis_that_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    with RedisInstance(appendonly=False) as own:
        monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
        monkeypatch.setenv("MEMSTACK_REDIS_URL", own.url)
        monkeypatch.setenv("MEMSTACK_DATABASE_URL", pg_url)
        monkeypatch.setenv("COLUMNS", "400")
        result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 1, result.output
    assert "unsafe" in result.output
    assert "keeps nothing on disk" in result.output and "CONFIG SET appendonly yes" in result.output


def test_bad_setting_exits_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_WINDOW_TTL_S", "-5")
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 2
    assert "MEMSTACK_WINDOW_TTL_S" in result.output


def test_db_upgrade_on_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "memstack.db").exists()
    tables = {
        r[0]
        for r in sqlite3.connect(tmp_path / "memstack.db").execute(
            "select name from sqlite_master where type='table'"
        )
    }
    assert {"memory_message", "agent_memory_fact", "agent_memory_fact_archive"} <= tables


def test_demo_runs_on_embedded_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "其实我可以到八千" in result.output
    assert "turns=3" in result.output


# --- doctor: schema, malformed URLs, stores each process would keep for itself ----------


@pytest.fixture
def fresh_pg_url(pg_url: str) -> Iterator[str]:
    """An empty PostgreSQL database of its own (``pg_url`` is already at head)."""
    name = f"memstack_cli_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{pg_url.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_doctor_fails_on_a_server_schema_not_at_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_pg_url: str
) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_DATABASE_URL", fresh_pg_url)
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("COLUMNS", "1000")
    before = runner.invoke(app, ["doctor"])
    assert before.exit_code == 1, before.output
    assert "needs upgrade" in before.output
    assert "schema not created (run `memstack db upgrade`)" in before.output

    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    after = runner.invoke(app, ["doctor"])
    assert after.exit_code == 0, after.output
    assert "schema at head" in after.output


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("MEMSTACK_DATABASE_URL", "postgresql://memstack:s3cret@db.internal:notaport/memstack"),
        ("MEMSTACK_DATABASE_URL", "::not a url s3cret"),
        ("MEMSTACK_DATABASE_URL", "mysql://memstack:s3cret@db.internal/memstack"),
        ("MEMSTACK_REDIS_URL", "redis://:s3cret@cache.internal:port/0"),
        ("MEMSTACK_REDIS_URL", "cache.internal:6379 s3cret"),
    ],
)
@pytest.mark.parametrize("command", [["doctor"], ["db", "upgrade"], ["serve"], ["worker"]])
def test_a_malformed_url_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, url: str, command: list[str]
) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv(variable, url)
    monkeypatch.setenv("COLUMNS", "1000")
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith(f"error: {variable}")
    assert "s3cret" not in result.output  # the URL may hold a password: never echoed


def test_doctor_in_server_mode_names_stores_kept_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """With MEMSTACK_REDIS_URL set, a vector store (or a knowledge base, once one exists)
    left in a relative MEMSTACK_HOME is a different one for each working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMSTACK_HOME", raising=False)
    monkeypatch.setenv("MEMSTACK_DATABASE_URL", pg_url)
    monkeypatch.setenv("MEMSTACK_KEY_PREFIX", new_prefix())
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("COLUMNS", "1000")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "routing.md").write_text("Routing picks the cheapest bank.")
    with RedisInstance(appendonly=True) as own:
        monkeypatch.setenv("MEMSTACK_REDIS_URL", own.url)
        no_kb = runner.invoke(app, ["doctor"])
        assert runner.invoke(app, ["kb", "add", "docs"]).exit_code == 0
        with_kb = runner.invoke(app, ["doctor"])
        monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "shared"))
        absolute = runner.invoke(app, ["doctor"])
    assert no_kb.exit_code == 1, no_kb.output
    [vectors] = [line for line in no_kb.output.splitlines() if line.startswith("│ vectors")]
    assert "unsafe" in vectors and "MEMSTACK_VECTOR_URL unset" in vectors
    assert f"(here {tmp_path / '.memstack'})" in vectors and "MEMSTACK_HOME" in vectors
    assert "MEMSTACK_KB_URL" not in no_kb.output  # no knowledge base yet
    assert with_kb.exit_code == 1, with_kb.output
    [kb] = [line for line in with_kb.output.splitlines() if line.startswith("│ knowledge base")]
    assert "unsafe" in kb and "MEMSTACK_KB_URL unset" in kb
    # One absolute home: every process finds the same stores (one at a time).
    assert absolute.exit_code == 0, absolute.output
    assert "unsafe" not in absolute.output


async def test_doctor_in_server_mode_with_sqlite_in_a_relative_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Qdrant: chromadb caches its clients by path, and this relative path names two
    # folders here (and one of the test above).
    settings = load_settings(
        home=Path(".memstack"),
        redis_url="redis://127.0.0.1:1/0",
        embedder="hashing",
        vector_store="qdrant",
    )
    (tmp_path / "server").mkdir()
    monkeypatch.chdir(tmp_path / "server")
    checks = {c.store: c for c in await doctor.run_checks(settings)}
    assert checks["database"].label == "unsafe" and not checks["database"].ok
    assert "MEMSTACK_DATABASE_URL unset" in checks["database"].detail
    # The embedded default is one process: a relative home is its own business.
    (tmp_path / "embedded").mkdir()
    monkeypatch.chdir(tmp_path / "embedded")
    embedded = await doctor.run_checks(settings.model_copy(update={"redis_url": None}))
    assert all(c.ok for c in embedded), embedded


# --- version, config, licence ------------------------------------------------------------


def test_version_is_the_installed_distribution() -> None:
    from importlib.metadata import version

    import memstack

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"memstack {version('memstack')}"
    assert memstack.__version__ == version("memstack")


def _only_our_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # The harness's own (MEMSTACK_REQUIRE_SERVICES, MEMSTACK_TEST_PG_URL) are not
    # settings either: config would rightly name them.
    for name in [n for n in os.environ if n.upper().startswith("MEMSTACK_")]:
        monkeypatch.delenv(name)


def test_config_shows_values_in_effect_with_secrets_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _only_our_variables(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_BUDGET_TOKENS", "3210")
    monkeypatch.setenv("MEMSTACK_API_TOKEN", "s3cret-token-0123456789")
    monkeypatch.setenv("MEMSTACK_LLM_API_KEY", "sk-live-key")
    monkeypatch.setenv("MEMSTACK_REDIS_URL", "redis://:hunter2pass@127.0.0.1:6379/0")
    (tmp_path / ".env").write_text("MEMSTACK_KB_TOP_K=7\n")
    result = runner.invoke(app, ["config"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "3210" in lines["MEMSTACK_BUDGET_TOKENS"] and "env" in lines["MEMSTACK_BUDGET_TOKENS"]
    assert " 7 " in lines["MEMSTACK_KB_TOP_K"] and ".env" in lines["MEMSTACK_KB_TOP_K"]
    assert "default" in lines["MEMSTACK_WINDOW_TURNS"]
    for secret in ("s3cret-token", "sk-live-key", "hunter2pass"):
        assert secret not in result.output
    assert "redis://:****@127.0.0.1:6379/0" in lines["MEMSTACK_REDIS_URL"]


def test_config_warns_about_an_unknown_variable_and_suggests_the_near_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _only_our_variables(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_LOCAL", "en")
    monkeypatch.setenv("MEMSTACK_SOMETHING_ELSE", "1")
    result = runner.invoke(app, ["config"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "MEMSTACK_LOCAL (env) is not a setting; did you mean MEMSTACK_LOCALE?" in result.output
    assert "MEMSTACK_SOMETHING_ELSE (env) is not a setting" in result.output


def test_licence_file_matches_the_package_metadata() -> None:
    import tomllib

    root = Path(__file__).parent.parent
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["license"]
    assert declared == "MIT"
    assert (root / "LICENSE").read_text().startswith("MIT License")
