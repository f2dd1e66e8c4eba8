"""The command line: doctor, db upgrade, demo, config."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstack.cli import app
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
