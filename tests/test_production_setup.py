"""The README's production block, followed as a new user would: a Redis with the
append-only file and a ``chroma run`` of its own (free ports), a database of its own on
the shared PostgreSQL, the env file ``memstack init --servers`` writes, and ``memstack
serve`` and ``memstack worker`` started from different folders with it. What the API
remembers the worker ingests into the vectors the API reads: the split of an API and a
worker on two vector stores cannot happen."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from dotenv import dotenv_values

from tests.conftest import PG_ADMIN_URL
from tests.faults.processes import clean_env, free_port
from tests.faults.servers import ChromaServer, RedisInstance

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"


def _readme_block() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("Production uses servers")
    block = readme[readme.index("```bash\n", start) + 8 :]
    return block[: block.index("```")].splitlines()


def _line(block: list[str], needle: str) -> str:
    [found] = [line for line in block if needle in line]
    return found.split("  #")[0].strip()


def test_readme_block_is_the_setup_tested_here() -> None:
    block = _readme_block()
    redis = _line(block, "redis-server")
    assert "--appendonly yes" in redis and "--port 6380" in redis
    assert "chroma run" in _line(block, "chroma run")
    assert _line(block, "createdb") == "createdb -h 127.0.0.1 -U postgres memstack"
    assert _line(block, "init --servers") == (
        ".venv/bin/memstack init --servers --redis-url redis://127.0.0.1:6380/0 "
        "--database-url postgresql://postgres@127.0.0.1:5432/memstack "
        "--vector-url http://127.0.0.1:8000"
    )
    assert _line(block, "set -a") == "set -a; . ./memstack.env; set +a"
    commands = [line.split("  #")[0].strip() for line in block if "/memstack " in line]
    assert commands[1:] == [
        ".venv/bin/memstack db upgrade",
        ".venv/bin/memstack doctor",
        ".venv/bin/memstack serve --port 8080 &",
        ".venv/bin/memstack worker &",
    ]


@pytest.fixture
def database() -> Iterator[tuple[str, str]]:
    """A database of its own on the shared PostgreSQL (as ``createdb``): its name and URL."""
    name = f"memstack_prod_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable: {exc}")
    yield name, f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sh(line: str, env_file: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``line`` in bash after the README's ``set -a; . memstack.env; set +a``."""
    script = f"set -a; . {shlex.quote(str(env_file))}; set +a; {line}"
    env = {**clean_env(), "PATH": f"{BIN}:{clean_env()['PATH']}", "COLUMNS": "200"}
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _start(line: str, env_file: Path, cwd: Path) -> subprocess.Popen[bytes]:
    cwd.mkdir(parents=True, exist_ok=True)
    script = f"set -a; . {shlex.quote(str(env_file))}; set +a; exec {line}"
    env = {**clean_env(), "PATH": f"{BIN}:{clean_env()['PATH']}"}
    with (cwd / "out.log").open("wb") as log:
        return subprocess.Popen(
            ["bash", "-c", script], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait(
    what: str, ready: Callable[[], bool], procs: list[subprocess.Popen[bytes]], logs: Path
) -> None:
    deadline = time.monotonic() + 180
    while not ready():
        for proc in procs:
            assert proc.poll() is None, f"{what}: a process exited\n{_logs(logs)}"
        assert time.monotonic() < deadline, f"{what}: timed out\n{_logs(logs)}"
        time.sleep(0.5)


def _logs(root: Path) -> str:
    return "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in root.glob("*/out.log"))


@pytest.mark.slow
def test_readme_production_block_shares_every_store(
    tmp_path: Path, database: tuple[str, str]
) -> None:
    block = _readme_block()
    name, url = database
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    with RedisInstance(appendonly=True) as redis, ChromaServer() as chroma:
        api_port = free_port()
        # The README's init line, on this test's ports and database.
        init = _line(block, "init --servers").removeprefix(".venv/bin/")
        init = init.replace("redis://127.0.0.1:6380/0", redis.url)
        init = init.replace("http://127.0.0.1:8000", chroma.url)
        init = init.replace("postgresql://postgres@127.0.0.1:5432/memstack", url)
        done = subprocess.run(
            ["bash", "-c", f"PATH={BIN}:$PATH {init}"], cwd=deploy, env=clean_env(), text=True,
            capture_output=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        env_file = deploy / "memstack.env"
        values = dotenv_values(env_file)
        assert values["MEMSTACK_DATABASE_URL"] == url and name in url
        for line in ("memstack db upgrade", "memstack doctor"):
            done = _sh(line, env_file, deploy)
            assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
        assert "unsafe" not in done.stdout
        # Two other folders, as a service manager starts them: one file, the same stores.
        api = _start(f"memstack serve --port {api_port}", env_file, tmp_path / "api")
        worker = _start("memstack worker", env_file, tmp_path / "worker")
        try:
            _remember_and_recall(f"http://127.0.0.1:{api_port}", values, [api, worker], tmp_path)
        finally:
            _stop(worker)
            _stop(api)
        logs = _logs(tmp_path)
        assert "warning:" not in logs and "error:" not in logs, logs
    # Nothing of the stores landed in either folder a process started in.
    assert not list((tmp_path / "api").glob(".memstack*"))
    assert not list((tmp_path / "worker").glob(".memstack*"))


def _remember_and_recall(
    base: str, values: dict[str, str | None], procs: list[subprocess.Popen[bytes]], root: Path
) -> None:
    auth = {"Authorization": f"Bearer {values['MEMSTACK_API_TOKEN']}"}

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    _wait("serve", healthy, procs, root)
    assert httpx.get(f"{base}/v1/admin/status", timeout=10).status_code == 401  # the token
    session = f"{base}/v1/users/alice/sessions"
    said = [
        "My dog is called Biscuit and he loves the beach at Brighton.",
        "I am planning a trip to Lisbon in May with my sister.",
        "The quarterly report is due on Friday afternoon.",
    ]
    for text in said:
        r = httpx.post(
            f"{session}/s1/messages", json={"role": "user", "content": text}, headers=auth
        )
        assert r.status_code == 201, r.text

    def ingested() -> bool:
        status = httpx.get(f"{base}/v1/admin/status", headers=auth, timeout=10).json()
        return bool(status["workers"]) and status["pending"] == 0

    _wait("ingest", ingested, procs, root)
    r = httpx.post(
        f"{session}/s2/context", json={"query": "What is my dog called?"}, headers=auth, timeout=60
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["degraded"] == {}
    vector_hits = [m for m in body["manifest"] if "vector" in m["ranks"]]
    assert vector_hits, body["manifest"]
    assert re.search("Biscuit", body["text"])
