"""Many processes on one deployment: ``memstack serve --workers N``, the
worker's progress line and metrics, and ``memstack worker --metrics-port``.

Several ``memstack worker`` processes on one stream, one of them killed, are checked by
the fault suite (tests/faults, ``test_a_dead_worker_s_jobs_are_taken_by_the_others``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from memstack import AsyncMemory
from memstack.cli import app
from memstack.core.settings import Settings
from memstack.ingest.worker import Progress
from tests.conftest import make_settings, new_id
from tests.test_client import MEMSTACK, _free_port
from tests.test_vectorstores import start_chroma_server

runner = CliRunner()


# --- refusals --------------------------------------------------------------------------


def test_serve_workers_is_refused_on_the_embedded_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.delenv("MEMSTACK_REDIS_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "1000")
    result = runner.invoke(app, ["serve", "--workers", "2"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "MEMSTACK_REDIS_URL" in result.output and "one process" in result.output


def test_serve_workers_is_refused_without_a_vector_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_REDIS_URL", redis_url)
    monkeypatch.delenv("MEMSTACK_VECTOR_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "1000")
    result = runner.invoke(app, ["serve", "--workers", "2"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "MEMSTACK_VECTOR_URL" in result.output


def test_serve_workers_below_one_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    result = runner.invoke(app, ["serve", "--workers", "0"])
    assert result.exit_code == 2
    assert "workers" in result.output


# --- live processes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_chroma_server(tmp_path_factory.mktemp("scale-chroma"))
    yield server.url
    server.stop()


def _env(settings: Settings, home: Path, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    env = {
        "MEMSTACK_REDIS_URL": str(settings.redis_url),
        "MEMSTACK_DATABASE_URL": str(settings.database_url),
        "MEMSTACK_KEY_PREFIX": settings.key_prefix,
        "MEMSTACK_EMBEDDER": "hashing",
        "MEMSTACK_AUTO_MIGRATE": "false",
        "MEMSTACK_HOME": str(home),
        # The shared Redis keeps nothing on disk, which serve and worker refuse otherwise.
        "MEMSTACK_ALLOW_UNSAFE": "1",
    }
    if settings.vector_url:
        env["MEMSTACK_VECTOR_URL"] = settings.vector_url
    return {**clean, **env, **extra}


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _children(pid: int) -> list[int]:
    """The API processes uvicorn started (not multiprocessing's resource tracker)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    out = []
    for child in path.read_text().split() if path.exists() else []:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in cmdline:
            out.append(int(child))
    return out


def _established(pid: int, port: int) -> int:
    """Established TCP connections on local ``port`` that process ``pid`` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port and cols[3] == "01" and cols[9] in inodes:
                count += 1
    return count


@pytest.fixture
def servers(
    tmp_path: Path, redis_url: str, pg_url: str, chroma_url: str
) -> Iterator[tuple[str, subprocess.Popen[bytes], Settings]]:
    """``memstack serve --workers 2`` on a free port, once /healthz answers."""
    settings = make_settings(
        tmp_path / "lib",
        redis_url=redis_url,
        database_url=pg_url,
        vector_url=chroma_url,
        auto_migrate=False,
    )
    port = _free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(MEMSTACK), "serve", "--port", str(port), "--workers", "2"],
            cwd=tmp_path,
            env=_env(settings, tmp_path / "server-home"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while len(_children(proc.pid)) < 2 or not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"memstack serve --workers 2 did not start: {log_path.read_text()}")
            time.sleep(0.2)
        yield url, proc, settings
    finally:
        _stop(proc)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


async def _turn(client: httpx.AsyncClient, user: str, session: str, i: int) -> list[str]:
    """One agent turn: remember the user message, ask for context, remember the reply."""
    base = f"/v1/users/{user}/sessions/{session}"
    ids = []
    r = await client.post(f"{base}/messages", json={"role": "user", "content": f"I like tea {i}"})
    assert r.status_code == 201, r.text
    ids.append(r.json()["msg_id"])
    r = await client.post(f"{base}/context", json={"query": f"what do I like {i}?"})
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{base}/messages", json={"role": "assistant", "content": f"Tea, noted {i}."}
    )
    assert r.status_code == 201, r.text
    ids.append(r.json()["msg_id"])
    return ids


async def test_serve_workers_two_processes_share_the_stores(
    servers: tuple[str, subprocess.Popen[bytes], Settings],
) -> None:
    url, proc, settings = servers
    port = int(url.rsplit(":", 1)[1])
    children = _children(proc.pid)
    assert len(children) == 2
    user = new_id("u")
    sessions = [new_id("s") for _ in range(6)]
    sent: dict[str, list[str]] = {s: [] for s in sessions}
    served_by: set[int] = set()
    # Rounds of fresh connections, each held open until the round's turns are done: a
    # connection belongs to the process that accepted it, which /proc shows.
    for round_ in range(10):
        clients = [httpx.AsyncClient(base_url=url, timeout=60) for _ in range(8)]
        try:
            results = await asyncio.gather(
                *(
                    _turn(c, user, sessions[k % len(sessions)], round_ * 8 + k)
                    for k, c in enumerate(clients)
                )
            )
            served_by |= {pid for pid in children if _established(pid, port) > 0}
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
        for k, ids in enumerate(results):
            sent[sessions[k % len(sessions)]] += ids
        if len(served_by) == 2 and round_ >= 2:
            break
    assert served_by == set(children), "every request landed on one process"
    assert all(pid in _children(proc.pid) for pid in children), "a worker process died"
    # Every message reached the one queue exactly once, whichever process took it.
    async with await AsyncMemory.open(settings) as mem:
        await mem.drain()
        for session, ids in sent.items():
            stored = await mem.messages(user, session, limit=500)
            assert sorted(m.msg_id for m in stored) == sorted(ids)
            assert len(ids) == len(set(ids))


# --- the worker's progress line and metrics -----------------------------------------------


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_progress_line_counts_batches_messages_and_backlog(
    service_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstack.ingest.worker")
    async with await AsyncMemory.open(service_settings) as mem:
        user, session = new_id("u"), new_id("s")
        for i in range(10):
            await mem.remember(user, session, "user", f"message number {i}")
        worker = await mem.worker()
        worker.batch_size = 4
        processed_before = _sample("memstack_ingest_messages_total", outcome="processed")
        batches_before = _sample("memstack_ingest_batch_seconds_count")

        await worker._log_progress(Progress())
        assert _sample("memstack_ingest_backlog") == 10
        progress = Progress()
        for _ in range(2):
            progress.add(await worker.run_batch())
        await worker._log_progress(progress)

        lines = [r.getMessage() for r in caplog.records if "backlog" in r.getMessage()]
        assert lines[0].endswith("0 batches, 0 messages in 0 s (0.0 msg/s), 0 failed, backlog 10")
        assert re.search(
            r": 2 batches, 8 messages in \d+ s \([\d.]+ msg/s\), 0 failed, backlog 2$", lines[1]
        )
        assert _sample("memstack_ingest_backlog") == 2
        assert (
            _sample("memstack_ingest_messages_total", outcome="processed") == processed_before + 8
        )
        assert _sample("memstack_ingest_batch_seconds_count") == batches_before + 2
        await mem.drain()


async def test_a_running_worker_logs_its_progress_at_the_interval(
    service_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstack.ingest.worker")
    async with await AsyncMemory.open(service_settings) as mem:
        user, session = new_id("u"), new_id("s")
        for i in range(6):
            await mem.remember(user, session, "user", f"message number {i}")
        worker = await mem.worker()
        worker.log_interval_s = 0.2
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop, block_ms=50))
        try:
            deadline = time.monotonic() + 30
            while True:
                lines = [r.getMessage() for r in caplog.records if "backlog" in r.getMessage()]
                done = sum(int(n) for x in lines for n in re.findall(r"(\d+) messages", x))
                if done == 6 and lines[-1].endswith("backlog 0"):
                    break
                assert time.monotonic() < deadline, lines
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await task
        assert len(await mem.messages(user, session)) == 6


def test_worker_metrics_port_serves_its_progress(
    tmp_path: Path, service_settings: Settings
) -> None:
    port = _free_port()
    env = _env(service_settings, tmp_path / "worker-home", MEMSTACK_WORKER_LOG_INTERVAL_S="0.3")
    user, session = new_id("u"), new_id("s")

    async def fill() -> None:
        async with await AsyncMemory.open(service_settings) as mem:
            for i in range(12):
                await mem.remember(user, session, "user", f"message number {i}")

    asyncio.run(fill())
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(MEMSTACK), "worker", "--metrics-port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log_path.read_text()
            text = ""
            with contextlib.suppress(httpx.TransportError):
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            logged = re.findall(
                r"batches, (\d+) messages in .* backlog (\d+)", log_path.read_text()
            )
            if (
                'memstack_ingest_messages_total{outcome="processed"} 12.0' in text
                and sum(int(n) for n, _ in logged) == 12
                and logged[-1][1] == "0"
            ):
                break
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        _stop(proc)
    assert re.search(r"memstack_ingest_batch_seconds_count [1-9]", text), text
    assert "memstack_ingest_backlog 0.0" in text
    out = log_path.read_text()
    assert re.search(r"INFO memstack\.ingest\.worker: worker \S+: \d+ batches", out), out
