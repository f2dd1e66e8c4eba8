"""Load: 1,000 concurrent mixed requests against a real ``memstack serve``.

Starts, on free ports, a ``chroma run`` (the vectors), ``memstack serve`` and one
``memstack worker`` on this machine's Redis and PostgreSQL, with a fresh database, a fresh
key prefix and the hashing embedder; seeds a few turns per user and lets the worker
ingest them; then fires every request at once (remember, context, window, facts,
healthz) and prints one table: per kind, the requests, the errors by status, p50 and p99
(each request timed from the moment all were fired). Everything it started is stopped
by PID, the keys deleted and the database dropped.

Run: ``.venv/bin/python benchmarks/load.py [--requests 1000] [--users 50]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import redis

from memstack.core.settings import load_settings
from memstack.stores.sql import db

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MIX = {"remember": 0.30, "context": 0.25, "window": 0.20, "facts": 0.15, "healthz": 0.10}
LINES = [
    "I live in Porto and I work as a nurse.",
    "My budget is at most $1200 for the new laptop.",
    "我预算不超过五千，想要轻薄一点的。",
    "Can you remind me what we said about the trip?",
    "I prefer window seats and vegetarian meals.",
]
QUERIES = ["Where do I live?", "What is my budget?", "我预算多少？", "What do I eat?"]


@dataclass
class Sample:
    kind: str
    status: str  # the HTTP status, or the exception's name
    ms: float
    degraded: bool = False  # a context answered without a layer whose store timed out
    body: str = ""  # of an error


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come up (see its log)")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def fresh_stores(pg_admin: str, redis_url: str) -> Iterator[tuple[str, str]]:
    """A migrated throw-away database and an unused key prefix; both removed after."""
    name = f"memstack_load_{uuid.uuid4().hex[:10]}"
    prefix = f"load{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{pg_admin.rsplit('/', 1)[0]}/{name}"
    try:
        db.upgrade(load_settings(database_url=url))
        yield url, prefix
    finally:
        r = redis.Redis.from_url(redis_url)
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            r.delete(*keys)
        r.close()
        with psycopg.connect(pg_admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def running_stack(
    database_url: str, redis_url: str, prefix: str, logs: Path | None
) -> Iterator[tuple[int, dict[str, int]]]:
    """chroma run, memstack serve and memstack worker; yields the API's port and their
    PIDs. Their logs are kept in ``logs`` when given."""
    work = Path(tempfile.mkdtemp(prefix="memstack-load-"))
    chroma_port, api_port = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(work),
        "PYTHONPATH": str(ROOT),
        "MEMSTACK_REDIS_URL": redis_url,
        # A benchmark's Redis (the shared one) may keep nothing on disk: measured anyway.
        "MEMSTACK_ALLOW_UNSAFE": "1",
        "MEMSTACK_DATABASE_URL": database_url,
        "MEMSTACK_KEY_PREFIX": prefix,
        "MEMSTACK_EMBEDDER": "hashing",
        "MEMSTACK_VECTOR_URL": f"http://127.0.0.1:{chroma_port}",
    }
    chroma = ["run", "--path", str(work / "chroma"), "--host", "127.0.0.1"]
    commands = {
        "chroma": [str(BIN / "chroma"), *chroma, "--port", str(chroma_port)],
        "api": [str(BIN / "memstack"), "serve", "--port", str(api_port)],
        "worker": [str(BIN / "memstack"), "worker"],
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, cmd in commands.items():
            home = {"MEMSTACK_HOME": str(work / f"home-{name}")}
            with (work / f"{name}.log").open("ab") as log:
                proc = subprocess.Popen(
                    cmd, env={**env, **home}, cwd=work, stdout=log, stderr=subprocess.STDOUT
                )
            procs.append(proc)
            if name == "chroma":
                wait_http(f"http://127.0.0.1:{chroma_port}/api/v2/heartbeat", proc, name)
            if name == "api":
                wait_http(f"http://127.0.0.1:{api_port}/healthz", proc, name)
        pids = {name: proc.pid for name, proc in zip(commands, procs, strict=True)}
        yield api_port, pids
    finally:
        for proc in reversed(procs):
            stop(proc)
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for log in work.glob("*.log"):
                shutil.copy(log, logs / log.name)
        shutil.rmtree(work, ignore_errors=True)


async def seed(client: httpx.AsyncClient, users: int) -> None:
    """A few turns per user, then wait until the worker has made them facts."""
    for u in range(users):
        url = f"/v1/users/u{u}/sessions/s0/messages"
        for i, line in enumerate(LINES[:4]):
            role = "user" if i % 2 == 0 else "assistant"
            r = await client.post(url, json={"role": role, "content": line})
            r.raise_for_status()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        facts = (await client.get(f"/v1/users/u{users - 1}/facts")).json()["facts"]
        if facts:
            return
        await asyncio.sleep(0.5)
    raise SystemExit("the worker did not ingest the seed messages in 120 s")


async def http(port: int, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    """One request on its own connection, as a thousand separate clients would send it.
    A few lines of asyncio rather than an HTTP library: the load generator shares the
    machine's two cores with the server, and must spend as little of them as it can."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        await writer.drain()
        status_line = await reader.readline()
        answer = await reader.read()  # to the close
        return int(status_line.split()[1]), answer.split(b"\r\n\r\n", 1)[-1]
    finally:
        writer.close()


async def one(port: int, kind: str, user: str, rng: random.Random) -> Sample:
    session = f"/v1/users/{user}/sessions/s{rng.randrange(3)}"
    request: tuple[str, str, object] = {
        "remember": ("POST", f"{session}/messages", {"role": "user", "content": rng.choice(LINES)}),
        "context": ("POST", f"{session}/context", {"query": rng.choice(QUERIES)}),
        "window": ("GET", f"{session}/messages?n=10", None),
        "facts": ("GET", f"/v1/users/{user}/facts", None),
        "healthz": ("GET", "/healthz", None),
    }[kind]
    started = time.perf_counter()
    try:
        status, body = await http(port, *request)
    except OSError as exc:
        return Sample(kind, type(exc).__name__, (time.perf_counter() - started) * 1000)
    ms = (time.perf_counter() - started) * 1000
    if status >= 300:
        return Sample(kind, str(status), ms, body=body[:300].decode(errors="replace"))
    degraded = kind == "context" and bool(json.loads(body)["degraded"])
    return Sample(kind, str(status), ms, degraded)


async def alone(port: int, users: int, rng: random.Random) -> dict[str, float]:
    """Each kind's median latency one request at a time: the cost without a queue."""
    medians = {}
    for kind in MIX:
        runs = [await one(port, kind, f"u{rng.randrange(users)}", rng) for _ in range(20)]
        medians[kind] = statistics.median(s.ms for s in runs)
    return medians


def probe(port: int, done: threading.Event, samples: list[Sample]) -> None:
    """/healthz every 0.25 s while the burst runs, as a load balancer would call it: in
    a thread of its own, so that its timings are not the burst's client's."""
    while not done.is_set():
        samples.append(asyncio.run(one(port, "healthz", "u0", random.Random(0))))
        done.wait(0.25)


async def fire(
    port: int, requests: int, users: int, seed_: int, pids: dict[str, int]
) -> tuple[list[Sample], float, dict[str, float], list[Sample], dict[str, float]]:
    rng = random.Random(seed_)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
        await seed(client, users)
    baseline = await alone(port, users, rng)
    kinds = rng.choices(list(MIX), weights=list(MIX.values()), k=requests)
    calls = [one(port, k, f"u{rng.randrange(users)}", rng) for k in kinds]
    done, probes = threading.Event(), list[Sample]()
    prober = threading.Thread(target=probe, args=(port, done, probes))
    cpu_before = cpu_seconds(pids)
    prober.start()
    started = time.perf_counter()
    samples = await asyncio.gather(*calls)
    wall_s = time.perf_counter() - started
    cpu = {k: v - cpu_before[k] for k, v in cpu_seconds(pids).items()}
    done.set()
    prober.join()
    return samples, wall_s, baseline, probes, cpu


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system) each process has used so far, and this one's."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[name] = (int(fields[11]) + int(fields[12])) / tick
    me = os.times()
    used["this client"] = me.user + me.system
    return used


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def table(
    samples: list[Sample],
    wall_s: float,
    baseline: dict[str, float],
    probes: list[Sample],
    cpu: dict[str, float],
) -> str:
    head = "kind     | requests | 2xx  | errors by status | p50 ms | p99 ms | alone p50 ms"
    rows = [head]
    for kind in [*MIX, "all"]:
        mine = [s for s in samples if kind in (s.kind, "all")]
        ok = sum(1 for s in mine if s.status.startswith("2"))
        bad = Counter(s.status for s in mine if not s.status.startswith("2"))
        errors = ", ".join(f"{n} x {status}" for status, n in sorted(bad.items())) or "-"
        ms = [s.ms for s in mine]
        solo = f"{baseline[kind]:12.1f}" if kind in baseline else " " * 12
        rows.append(
            f"{kind:8} | {len(mine):8} | {ok:4} | {errors:16} | {statistics.median(ms):6.0f} | "
            f"{percentile(ms, 0.99):6.0f} | {solo}"
        )
    for body, n in Counter(s.body for s in samples if s.body).most_common(3):
        rows.append(f"{n} x {body}")
    degraded = sum(s.degraded for s in samples)
    contexts = sum(s.kind == "context" for s in samples)
    rows.append(f"context answered with a layer left out (store timeout): {degraded} of {contexts}")
    rows.append(f"{len(samples)} requests fired at once, the last answered after {wall_s:.1f} s")
    ms = [p.ms for p in probes]
    statuses = Counter(p.status for p in probes)
    rows.append(
        f"/healthz every 0.25 s meanwhile: {len(probes)} probes, "
        f"{', '.join(f'{n} x {s}' for s, n in sorted(statuses.items()))}, "
        f"p50 {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms"
    )
    rows.append("CPU seconds used meanwhile: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--logs", type=Path, help="keep the servers' logs in this folder")
    args = ap.parse_args()
    with (
        fresh_stores(args.pg_admin_url, args.redis_url) as (database_url, prefix),
        running_stack(database_url, args.redis_url, prefix, args.logs) as (port, pids),
    ):
        samples, wall_s, baseline, probes, cpu = asyncio.run(
            fire(port, args.requests, args.users, args.seed, pids)
        )
    print(table(samples, wall_s, baseline, probes, cpu))


if __name__ == "__main__":
    main()
