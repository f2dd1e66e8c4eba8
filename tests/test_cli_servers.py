"""A server setup that cannot split: ``memstack init --servers`` writes it, and ``serve``,
``worker`` and ``mcp`` refuse what ``memstack doctor`` calls unsafe (one line, exit 2)
unless ``MEMSTACK_ALLOW_UNSAFE`` is set, which they then say."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from dotenv import dotenv_values
from typer.testing import CliRunner

from memstack.cli import app
from memstack.core.settings import load_settings
from memstack.ops.safety import kept_per_process, unsafe_settings
from tests.conftest import make_settings
from tests.faults.processes import clean_env, free_port
from tests.faults.servers import RedisInstance

runner = CliRunner()
MEMSTACK = Path(sys.executable).parent / "memstack"
NEEDED = {
    "MEMSTACK_REDIS_URL",
    "MEMSTACK_DATABASE_URL",
    "MEMSTACK_VECTOR_STORE",
    "MEMSTACK_VECTOR_URL",
    "MEMSTACK_KB_STORE",
    "MEMSTACK_KB_URL",
    "MEMSTACK_HOME",
    "MEMSTACK_API_TOKEN",
}


# --- memstack init --servers ------------------------------------------------------------


def test_init_servers_writes_every_shared_setting(tmp_path: Path) -> None:
    path = tmp_path / "memstack.env"
    result = runner.invoke(
        app,
        [
            *("init", "--servers", "-o", str(path), "--redis-url", "redis://10.0.0.5:6380/0"),
            *("--vector-store", "qdrant", "--vector-url", "http://10.0.0.6:6333"),
        ],
    )
    assert result.exit_code == 0, result.output
    values = dotenv_values(path)
    assert set(values) == NEEDED
    assert values["MEMSTACK_REDIS_URL"] == "redis://10.0.0.5:6380/0"
    assert values["MEMSTACK_VECTOR_STORE"] == values["MEMSTACK_KB_STORE"] == "qdrant"
    assert values["MEMSTACK_VECTOR_URL"] == values["MEMSTACK_KB_URL"] == "http://10.0.0.6:6333"
    assert values["MEMSTACK_HOME"] == str(tmp_path / ".memstack")
    assert len(values["MEMSTACK_API_TOKEN"] or "") >= 32
    # Only the URL not given is a placeholder, marked on the line above it.
    text = path.read_text()
    assert text.count("# PLACEHOLDER") == 1
    assert (
        "# PLACEHOLDER: replace with your server's URL (an option of init)\n"
        + ("MEMSTACK_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/memstack")
        in text
    )
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the API token
    settings = load_settings(**{k[9:].lower(): v for k, v in values.items()})
    assert settings.home.is_absolute() and settings.kb_url and settings.vector_url
    # A second file has a token of its own.
    other = tmp_path / "other.env"
    assert runner.invoke(app, ["init", "--servers", "-o", str(other)]).exit_code == 0
    assert dotenv_values(other)["MEMSTACK_API_TOKEN"] != values["MEMSTACK_API_TOKEN"]


def test_init_servers_keeps_an_existing_file_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "memstack.env"
    path.write_text("MEMSTACK_REDIS_URL=redis://mine:6379/0\n")
    kept = runner.invoke(app, ["init", "--servers", "-o", str(path)])
    assert kept.exit_code == 2
    assert kept.output.strip().splitlines() == [f"error: {path} exists; --force overwrites it"]
    assert path.read_text() == "MEMSTACK_REDIS_URL=redis://mine:6379/0\n"
    forced = runner.invoke(app, ["init", "--servers", "-o", str(path), "--force"])
    assert forced.exit_code == 0, forced.output
    assert set(dotenv_values(path)) == NEEDED


def test_init_servers_checks_what_it_would_write(tmp_path: Path) -> None:
    path = tmp_path / "memstack.env"
    result = runner.invoke(
        app, ["init", "--servers", "-o", str(path), "--database-url", "mysql://db/memstack"]
    )
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "MEMSTACK_DATABASE_URL" in result.output
    assert not path.exists()


def test_init_without_servers_says_what_it_is_for(tmp_path: Path) -> None:
    result = runner.invoke(app, ["init", "-o", str(tmp_path / "x.env")])
    assert result.exit_code == 2
    assert "--servers" in result.output and not (tmp_path / "x.env").exists()


# --- refusals -----------------------------------------------------------------------------


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MEMSTACK), *command],
        env={**clean_env(), "COLUMNS": "80", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def volatile_redis() -> Iterator[RedisInstance]:
    """A Redis of its own that keeps nothing on disk (appendonly no, no save)."""
    with RedisInstance(appendonly=False) as server:
        yield server


@pytest.fixture(scope="module")
def durable_redis() -> Iterator[RedisInstance]:
    with RedisInstance(appendonly=True) as server:
        yield server


COMMANDS = [["serve", "--port", "1"], ["worker"], ["mcp"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_redis_that_keeps_nothing_is_refused(
    tmp_path: Path, volatile_redis: RedisInstance, pg_url: str, command: list[str]
) -> None:
    env = {
        "MEMSTACK_REDIS_URL": volatile_redis.url,
        "MEMSTACK_DATABASE_URL": pg_url,
        "MEMSTACK_HOME": str(tmp_path / "home"),  # absolute: no store is per process
        "MEMSTACK_EMBEDDER": "hashing",
    }
    done = _run(command, env, tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: unsafe configuration, MEMSTACK_REDIS_URL: the Redis keeps")
    assert "CONFIG SET appendonly yes" in line and "MEMSTACK_ALLOW_UNSAFE=1" in line
    assert done.stdout == ""


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("missing", ["MEMSTACK_VECTOR_URL", "MEMSTACK_DATABASE_URL"])
def test_a_store_kept_per_process_is_refused(
    tmp_path: Path, durable_redis: RedisInstance, pg_url: str, command: list[str], missing: str
) -> None:
    # A relative home is another folder for each working directory: the split itself.
    env = {
        "MEMSTACK_REDIS_URL": durable_redis.url,
        "MEMSTACK_DATABASE_URL": pg_url,
        "MEMSTACK_VECTOR_URL": "http://127.0.0.1:1",
        "MEMSTACK_EMBEDDER": "hashing",
    }
    del env[missing]
    done = _run(command, env, tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: unsafe configuration, {missing}: server mode")
    assert f"set {missing} to" in line and "memstack init --servers" in line
    assert not (tmp_path / ".memstack").exists()  # refused before anything was opened


def test_a_knowledge_base_kept_per_process_is_refused(
    tmp_path: Path, durable_redis: RedisInstance, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = make_settings(tmp_path).key_prefix
    env = {
        "MEMSTACK_REDIS_URL": durable_redis.url,
        "MEMSTACK_DATABASE_URL": pg_url,
        "MEMSTACK_VECTOR_URL": "http://127.0.0.1:1",
        "MEMSTACK_KEY_PREFIX": prefix,
        "MEMSTACK_EMBEDDER": "hashing",
    }
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "routing.md").write_text("Routing picks the cheapest bank.")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MEMSTACK_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    # As doctor: a knowledge base kept per process matters once there is one.
    assert asyncio.run(unsafe_settings(load_settings())) == []
    assert runner.invoke(app, ["kb", "add", "docs"]).exit_code == 0
    done = _run(["serve", "--port", "1"], env, tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: unsafe configuration, MEMSTACK_KB_URL: server mode")


async def test_the_embedded_default_is_never_unsafe(tmp_path: Path) -> None:
    # The demo and the README's quick start: no URL, a relative home, one process.
    settings = load_settings(home=Path(".memstack"), embedder="hashing")
    assert await unsafe_settings(settings) == []


# --- the override -------------------------------------------------------------------------


def _warning(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("warning:")]


def _start(
    command: list[str], env: dict[str, str], cwd: Path
) -> tuple[subprocess.Popen[str], Path]:
    log = cwd / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [str(MEMSTACK), *command],
            env={**clean_env(), "COLUMNS": "80", **env},
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
    return proc, log


def _stop(proc: subprocess.Popen[str]) -> int:
    proc.terminate()
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _until(ready: Callable[[], bool], proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 90
    while not ready():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("command", ["serve", "worker", "mcp"])
def test_the_override_starts_and_says_what_is_unsafe(
    tmp_path: Path, volatile_redis: RedisInstance, pg_url: str, command: str
) -> None:
    env = {
        "MEMSTACK_REDIS_URL": volatile_redis.url,
        "MEMSTACK_DATABASE_URL": pg_url,
        "MEMSTACK_HOME": str(tmp_path / "home"),
        "MEMSTACK_KEY_PREFIX": make_settings(tmp_path).key_prefix,
        "MEMSTACK_EMBEDDER": "hashing",
        "MEMSTACK_ALLOW_UNSAFE": "1",
    }
    port = free_port()
    args = {"serve": ["serve", "--port", str(port)], "worker": ["worker"], "mcp": ["mcp"]}
    proc, log = _start(args[command], env, tmp_path)
    try:
        if command == "serve":
            _until(lambda: _healthy(f"http://127.0.0.1:{port}"), proc, log)
        else:
            # The worker reads its stream, the MCP server its stdin: alive past the check.
            _until(lambda: bool(_warning(log)), proc, log)
            time.sleep(3)
            assert proc.poll() is None, log.read_text()
    finally:
        _stop(proc)
    [line] = _warning(log)
    assert line.startswith("warning: MEMSTACK_ALLOW_UNSAFE is set: starting in an unsafe")
    assert "MEMSTACK_REDIS_URL: the Redis keeps nothing on disk" in line
    assert os.environ.get("MEMSTACK_ALLOW_UNSAFE") is None  # the run's own env untouched
    assert "error:" not in log.read_text()


def test_safe_settings_have_nothing_to_say(tmp_path: Path) -> None:
    path = tmp_path / "memstack.env"
    assert runner.invoke(app, ["init", "--servers", "-o", str(path)]).exit_code == 0
    values = dotenv_values(stream=io.StringIO(path.read_text()))
    settings = load_settings(**{k[9:].lower(): v for k, v in values.items()})
    assert kept_per_process(settings) == []
