"""Scale: sustained agent-like load through the HTTP API, per count of API and worker
processes.

For each configuration ``A×W`` (A API processes under ``memstack serve --workers A``, W
``memstack worker`` processes) it starts, on this machine's Redis and PostgreSQL with a
fresh database and key prefix, a ``chroma run`` on a temporary folder, the API and the
workers; then a load generator in its own process offers a fixed rate of agent turns
(per turn: remember the user message, ask for context, remember the reply; many users,
one session each) for a warm-up and a steady phase. Reported per configuration:
requests/s served, remember and context p50/p99 under load, errors, the ingest backlog
at the start and the end of the steady phase (flat: the workers keep up with the rate;
growing: they do not), messages ingested per second over the steady phase, and CPU
seconds per request of the API and worker processes (from /proc; Redis, PostgreSQL and
Chroma not counted). The last line is JSON.

Run: ``.venv/bin/python benchmarks/scale.py [--rate 8] [--steady-s 30] [--configs 1x1,2x1,1x2,2x2]
[--embedder hashing|minilm]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.load import free_port, fresh_stores, stop, wait_http  # noqa: E402
from memstack import AsyncMemory  # noqa: E402
from memstack.core.settings import load_settings  # noqa: E402

BIN = Path(sys.executable).parent
USER_LINES = [
    "I live in Porto and I work as a nurse.",
    "My budget is at most $1200 for the new laptop.",
    "我预算不超过五千，想要轻薄一点的。",
    "Can you remind me what we said about the trip?",
    "I prefer window seats and vegetarian meals.",
    "My daughter starts school in September.",
]
QUERIES = ["Where do I live?", "What is my budget?", "我预算多少？", "What do I eat?"]
TICK = os.sysconf("SC_CLK_TCK")


# --- the load generator (its own process) -----------------------------------------------


async def _turn(
    client: httpx.AsyncClient, user: int, i: int, out: list[tuple[str, float, float, int]]
) -> None:
    """One agent turn; each request recorded as (kind, started, ms, status)."""
    base = f"/v1/users/u{user}/sessions/s{user}"
    rnd = random.Random(i)
    steps = [
        ("remember", f"{base}/messages", {"role": "user", "content": rnd.choice(USER_LINES)}),
        ("context", f"{base}/context", {"query": rnd.choice(QUERIES)}),
        ("remember", f"{base}/messages", {"role": "assistant", "content": f"Noted, turn {i}."}),
    ]
    for kind, path, body in steps:
        t0 = time.time()
        try:
            status = (await client.post(path, json=body)).status_code
        except httpx.HTTPError:
            status = 0
        out.append((kind, t0, (time.time() - t0) * 1000, status))


async def generate(
    url: str, rate: float, seconds: float, users: int
) -> list[tuple[str, float, float, int]]:
    """Open loop: turn i starts at t0 + i / rate whatever the answers' speed, so a slow
    server shows as latency and backlog, not as a lower offered rate."""
    out: list[tuple[str, float, float, int]] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        tasks = []
        t0 = time.monotonic()
        out.append(("start", time.time(), 0.0, 0))  # where the offered schedule began
        for i in range(int(rate * seconds)):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_turn(client, i % users, i, out)))
        await asyncio.gather(*tasks)
    return out


# --- the processes under test -----------------------------------------------------------


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its living children (uvicorn workers)."""
    total = 0.0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


@dataclass
class Stack:
    api_port: int
    api: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]]
    env: dict[str, str] = field(default_factory=dict)

    def cpu(self) -> tuple[float, float]:
        return cpu_s(self.api.pid), sum(cpu_s(w.pid) for w in self.workers)


@contextmanager
def stack(
    database_url: str, redis_url: str, prefix: str, apis: int, workers: int, embedder: str
) -> Iterator[Stack]:
    work = Path(tempfile.mkdtemp(prefix="memstack-scale-"))
    chroma_port, api_port = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(work)),  # the MiniLM model cache
        "PYTHONPATH": str(ROOT),
        "MEMSTACK_REDIS_URL": redis_url,
        # A benchmark's Redis (the shared one) may keep nothing on disk: measured anyway.
        "MEMSTACK_ALLOW_UNSAFE": "1",
        "MEMSTACK_DATABASE_URL": database_url,
        "MEMSTACK_KEY_PREFIX": prefix,
        "MEMSTACK_EMBEDDER": embedder,
        "MEMSTACK_VECTOR_URL": f"http://127.0.0.1:{chroma_port}",
        "MEMSTACK_HOME": str(work / "home"),
        "MEMSTACK_WORKER_LOG_INTERVAL_S": "10",
    }
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        with (work / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    try:
        chroma = start("chroma", [str(BIN / "chroma"), "run", "--path", str(work / "chroma"),
                                  "--host", "127.0.0.1", "--port", str(chroma_port)])  # fmt: skip
        wait_http(f"http://127.0.0.1:{chroma_port}/api/v2/heartbeat", chroma, "chroma")
        api = start("api", [str(BIN / "memstack"), "serve", "--port", str(api_port),
                            "--workers", str(apis)])  # fmt: skip
        wait_http(f"http://127.0.0.1:{api_port}/healthz", api, "memstack serve")
        ws = [start(f"worker{k}", [str(BIN / "memstack"), "worker"]) for k in range(workers)]
        # The load starts once every worker reads the stream (its start-up line).
        deadline = time.monotonic() + 120
        while not all(" reading " in (work / f"worker{k}.log").read_text() for k in range(workers)):
            if time.monotonic() > deadline or any(w.poll() is not None for w in ws):
                raise SystemExit(f"a worker did not start (logs in {work})")
            time.sleep(0.2)
        yield Stack(api_port, api, ws, env)
    finally:
        for proc in reversed(procs):
            stop(proc)
        if os.environ.get("SCALE_KEEP_LOGS"):
            print(f"logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


# --- one configuration ------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sample(
    mem: AsyncMemory, st: Stack, stop_at: float, out: list[tuple[float, int, float, float]]
) -> None:
    """Every half second: (time, backlog, API CPU s, worker CPU s)."""
    while time.time() < stop_at:
        backlog = await mem.queue.pending_count()
        out.append((time.time(), backlog, *st.cpu()))
        await asyncio.sleep(0.5)


def nearest(
    samples: list[tuple[float, int, float, float]], t: float
) -> tuple[float, int, float, float]:
    return min(samples, key=lambda s: abs(s[0] - t))


async def measure(args: argparse.Namespace, st: Stack) -> dict[str, object]:
    url = f"http://127.0.0.1:{st.api_port}"
    settings = load_settings(
        **{k[9:].lower(): v for k, v in st.env.items() if k.startswith("MEMSTACK_")}
    )
    total_s = args.warmup_s + args.steady_s
    load = subprocess.Popen(  # noqa: ASYNC220 (started once; its output read in a thread)
        [sys.executable, __file__, "--generate", url, "--rate", str(args.rate),
         "--seconds", str(total_s), "--users", str(args.users)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    started = time.time()
    samples: list[tuple[float, int, float, float]] = []
    async with await AsyncMemory.open(settings) as mem:
        sampler = asyncio.create_task(sample(mem, st, started + total_s + 30, samples))
        out, _ = await asyncio.to_thread(load.communicate)
        sampler.cancel()
        drained_at = None
        deadline = time.time() + args.drain_s
        while time.time() < deadline:
            if await mem.queue.pending_count() == 0:
                drained_at = time.time()
                break
            await asyncio.sleep(0.5)
    records = json.loads(out)
    steady_from = records[0][1] + args.warmup_s
    steady_to = steady_from + args.steady_s
    steady = [r for r in records[1:] if steady_from <= r[1] < steady_to]
    end = max(r[1] + r[2] / 1000 for r in records)
    s0, s1 = nearest(samples, steady_from), nearest(samples, steady_to)
    window = s1[0] - s0[0]
    during = [s[1] for s in samples if s0[0] <= s[0] <= s1[0]]
    msgs = sum(1 for r in steady if r[0] == "remember")
    ok = [r for r in steady if 200 <= r[3] < 300]
    return {
        "requests": len(steady),
        "errors": len(steady) - len(ok),
        # status 0: no answer (a transport error or the client's 60 s timeout)
        "error_statuses": dict(Counter(str(r[3]) for r in steady if not 200 <= r[3] < 300)),
        "req_s": len(ok) / args.steady_s,
        "remember_p50": pct([r[2] for r in ok if r[0] == "remember"], 0.50),
        "remember_p99": pct([r[2] for r in ok if r[0] == "remember"], 0.99),
        "context_p50": pct([r[2] for r in ok if r[0] == "context"], 0.50),
        "context_p99": pct([r[2] for r in ok if r[0] == "context"], 0.99),
        "backlog_start": s0[1],
        "backlog_end": s1[1],
        "backlog_max": max(during),
        "msgs_s": (msgs - (s1[1] - s0[1])) / window if window > 0 else float("nan"),
        "cpu_api_ms": 1000 * (s1[2] - s0[2]) / max(len(ok), 1),
        "cpu_worker_ms": 1000 * (s1[3] - s0[3]) / max(len(ok), 1),
        "drain_s": (drained_at - end) if drained_at else None,
    }


COLUMNS = [
    "config",
    "req/s",
    "errors",
    "remember p50/p99 ms",
    "context p50/p99 ms",
    "backlog start→end (max)",
    "ingested msg/s",
    "CPU ms/req api+worker",
    "drained after s",
]


def row(cfg: str, r: dict[str, object]) -> list[str]:
    f = {k: v for k, v in r.items()}
    drain = "—" if f["drain_s"] is None else f"{max(float(f['drain_s']), 0):.1f}"  # type: ignore[arg-type]
    return [
        cfg, f"{f['req_s']:.1f}", str(f["errors"]),
        f"{f['remember_p50']:.0f} / {f['remember_p99']:.0f}",
        f"{f['context_p50']:.0f} / {f['context_p99']:.0f}",
        f"{f['backlog_start']} → {f['backlog_end']} ({f['backlog_max']})", f"{f['msgs_s']:.1f}",
        f"{f['cpu_api_ms']:.1f} + {f['cpu_worker_ms']:.1f}", drain,
    ]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--rate", type=float, default=16.0, help="agent turns offered per second (3 requests each)"
    )
    p.add_argument("--warmup-s", type=float, default=10.0)
    p.add_argument("--steady-s", type=float, default=30.0)
    p.add_argument(
        "--drain-s", type=float, default=30.0, help="wait this long for the backlog to empty"
    )
    p.add_argument("--users", type=int, default=40)
    p.add_argument("--configs", default="1x1,2x1,1x2,2x2", help="APIxWORKERS, comma-separated")
    p.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    p.add_argument(
        "--redis", default=os.environ.get("MEMSTACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    p.add_argument(
        "--pg-admin",
        default=os.environ.get(
            "MEMSTACK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    p.add_argument("--generate", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.generate:  # the load generator's own process
        print(json.dumps(asyncio.run(generate(args.generate, args.rate, args.seconds, args.users))))
        return
    print(
        f"offered: {args.rate:g} turns/s = {3 * args.rate:g} requests/s, "
        f"{2 * args.rate:g} messages/s; warm-up {args.warmup_s:g} s, steady {args.steady_s:g} s; "
        f"embedder {args.embedder}; {os.cpu_count()} cores shared by the load generator, "
        "the API, the workers and the stores"
    )
    results: list[tuple[str, int, int, dict[str, object]]] = []
    for cfg in args.configs.split(","):
        apis, workers = (int(x) for x in cfg.split("x"))
        with fresh_stores(args.pg_admin, args.redis) as (db_url, prefix), \
                stack(db_url, args.redis, prefix, apis, workers, args.embedder) as st:  # fmt: skip
            r = asyncio.run(measure(args, st))
        results.append((cfg, apis, workers, r))
        print(f"{cfg}: {json.dumps(r)}", file=sys.stderr, flush=True)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for cfg, _a, _w, r in results:
        print("| " + " | ".join(row(cfg, r)) + " |")
    print(json.dumps({
        "workers": [w for _, _, w, _ in results],
        "api_processes": [a for _, a, _, _ in results],
        "msgs_per_s": [round(float(r["msgs_s"]), 1) for *_, r in results],  # type: ignore[arg-type]
        "context_p99_ms": [round(float(r["context_p99"]), 1) for *_, r in results],  # type: ignore[arg-type]
    }))  # fmt: skip


if __name__ == "__main__":
    main()
