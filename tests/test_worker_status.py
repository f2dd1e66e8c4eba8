"""Worker liveness and ingest lag on the real Redis: heartbeats, the status read, and
where it shows (``memstack status``, ``GET /v1/admin/status``, the inspector's
operations page, the Prometheus gauges, and ``memstack serve``'s warning)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from memstack import AsyncMemory, IngestStatus, Settings
from memstack.cli import app as cli_app
from memstack.server.http import create_app
from memstack.server.http.watch import IngestWatch
from memstack.stores.redis import workers as heartbeats
from tests.conftest import _cleanup, new_id
from tests.test_api import serve
from tests.test_ui import rows


async def _until(mem: AsyncMemory, done: object, timeout_s: float = 5.0) -> IngestStatus:
    """The status once ``done(status)`` holds (polled), or the last one read."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while True:
        status = await mem.status()
        if done(status) or loop.time() > end:  # type: ignore[operator]
            return status
        await asyncio.sleep(0.05)


async def test_a_running_worker_is_listed_until_it_stops(service_mem: AsyncMemory) -> None:
    assert (await service_mem.status()).workers == ()
    worker = await service_mem.worker()
    worker.heartbeat_ttl_s = 3.0
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop, block_ms=50))
    try:
        status = await _until(service_mem, lambda s: s.workers)
        [beat] = status.workers
        assert beat.worker_id == worker.consumer
        assert (beat.host, beat.pid) == (socket.gethostname(), os.getpid())
        assert 0 <= beat.age_s < 3.0
        # It keeps beating while idle: still listed after its TTL would have run out.
        await asyncio.sleep(3.2)
        assert [w.worker_id for w in (await service_mem.status()).workers] == [worker.consumer]
    finally:
        stop.set()
        await running
    assert (await service_mem.status()).workers == ()  # gone at once, not after its TTL


async def test_a_worker_that_dies_without_a_word_drops_out_after_its_ttl(
    service_mem: AsyncMemory,
) -> None:
    redis, keys = service_mem.working.redis, service_mem.working.keys
    # A worker's beat, from a process that then died: nothing clears it.
    await heartbeats.beat(redis, keys, "ghost-1", ttl_s=0.5)
    [ghost] = (await service_mem.status()).workers
    assert ghost.worker_id == "ghost-1" and ghost.age_s < 0.5
    await asyncio.sleep(0.7)
    assert (await service_mem.status()).workers == ()


async def test_pending_jobs_and_the_oldest_age_grow_while_no_worker_runs(
    service_mem: AsyncMemory,
) -> None:
    u, s = new_id("u"), new_id("s")
    await service_mem.remember(u, s, "user", "first words, waiting for a worker")
    first = await service_mem.status()
    await asyncio.sleep(0.4)
    await service_mem.remember(u, s, "user", "second words, waiting too")
    second = await service_mem.status()
    assert (first.pending, second.pending) == (1, 2)
    assert second.oldest_age_s >= first.oldest_age_s + 0.35
    assert second.stalled and second.workers == ()
    [stream] = second.streams
    assert stream.stream == service_mem.queue.stream and stream.dead_letters == 0
    # The gauges follow each read.
    labels = {"stream": stream.stream}
    assert REGISTRY.get_sample_value("memstack_ingest_pending", labels) == 2
    oldest = REGISTRY.get_sample_value("memstack_ingest_oldest_pending_seconds", labels)
    assert oldest is not None and oldest >= 0.35
    assert REGISTRY.get_sample_value("memstack_workers_live") == 0

    await service_mem.drain(summarize=False)
    done = await service_mem.status()
    assert (done.pending, done.oldest_age_s, done.stalled) == (0, 0.0, False)


async def test_the_watch_warns_once_while_jobs_wait_without_a_worker(
    service_mem: AsyncMemory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memstack.server.watch")
    watch = IngestWatch(interval_s=0.05, repeat_s=3600)
    await watch.check(service_mem)
    assert caplog.records == []  # nothing waits: nothing to say
    await service_mem.remember(new_id("u"), new_id("s"), "user", "is anyone ingesting this?")
    for _ in range(3):
        await watch.check(service_mem)
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    assert "1 ingest jobs wait" in warning.message and "no worker is alive" in warning.message

    worker = await service_mem.worker()
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop, block_ms=50))
    try:
        await _until(service_mem, lambda st: st.workers and not st.pending)
        await watch.check(service_mem)
        await watch.check(service_mem)
    finally:
        stop.set()
        await running
    assert [r.message.split(":")[0] for r in caplog.records[1:]] == ["ingest resumed"]


async def test_serve_logs_the_warning_by_itself(
    service_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memstack.server.watch")
    app = create_app(service_settings, watch_interval_s=0.05)
    async with app.router.lifespan_context(app):
        mem: AsyncMemory = app.state.memory
        try:
            await mem.remember(new_id("u"), new_id("s"), "user", "accepted, never ingested")
            for _ in range(100):
                if caplog.records:
                    break
                await asyncio.sleep(0.02)
        finally:
            await _cleanup(mem)
    assert any("no worker is alive" in r.message for r in caplog.records)


async def test_the_status_over_rest_and_the_operations_page(service_settings: Settings) -> None:
    async with serve(service_settings) as (client, mem):
        await mem.remember(new_id("u"), new_id("s"), "user", "waiting")
        body = (await client.get("/v1/admin/status")).json()
        page = (await client.get("/ui/operations")).text
        assert body["workers"] == [] and body["stalled"] is True
        assert [(s["stream"], s["pending"]) for s in body["streams"]] == [(mem.queue.stream, 1)]
        assert 'id="stalled"' in page
        assert rows(page, "queue")[0].split()[:2] == [mem.queue.stream, "1"]
        assert "No worker is alive." in page

        worker = await mem.worker()
        stop = asyncio.Event()
        running = asyncio.create_task(worker.run(stop, block_ms=50))
        try:
            await _until(mem, lambda st: st.workers and not st.pending)
            body = (await client.get("/v1/admin/status")).json()
            page = (await client.get("/ui/operations")).text
        finally:
            stop.set()
            await running
    assert [w["worker_id"] for w in body["workers"]] == [worker.consumer]
    assert (body["pending"], body["stalled"]) == (0, False)
    assert 'id="stalled"' not in page
    assert re.search(rf'data-worker="{re.escape(worker.consumer)}"', page)


def test_memstack_status_names_workers_and_lag(
    service_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "MEMSTACK_HOME": str(tmp_path / "cli-home"),
        "MEMSTACK_REDIS_URL": service_settings.redis_url,
        "MEMSTACK_DATABASE_URL": service_settings.database_url,
        "MEMSTACK_KEY_PREFIX": service_settings.key_prefix,
        "MEMSTACK_EMBEDDER": "hashing",
        "COLUMNS": "200",
    }.items():
        monkeypatch.setenv(name, str(value))
    runner = CliRunner()
    idle = runner.invoke(cli_app, ["status", "--json"])
    assert idle.exit_code == 0, idle.output
    assert json.loads(idle.output)["pending"] == 0

    async def queue_one() -> None:
        async with await AsyncMemory.open(service_settings) as mem:
            await mem.remember(new_id("u"), new_id("s"), "user", "waiting for the CLI")

    async def clean() -> None:
        async with await AsyncMemory.open(service_settings) as mem:
            await _cleanup(mem)

    asyncio.run(queue_one())
    try:
        stalled = runner.invoke(cli_app, ["status"])
        as_json = json.loads(runner.invoke(cli_app, ["status", "--json"]).output)
    finally:
        asyncio.run(clean())
    assert stalled.exit_code == 1, stalled.output
    assert "workers alive: 0" in stalled.output
    assert "1 jobs wait and no worker is alive" in stalled.output
    assert as_json["pending"] == 1 and as_json["streams"][0]["oldest_age_s"] >= 0
