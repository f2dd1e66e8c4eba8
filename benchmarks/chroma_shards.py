"""Search latency and memory of an embedded Chroma store split into 1, 16, 64 … shards.

Builds one store per shard count (random 384-d unit vectors, ``--users`` users owning
the same number of vectors each, memstack's chunk metadata), then, in a fresh process
so that memory is the reader's and not the builder's, measures per user:

- ``get``: the scope read of the brute-force path, ``get(where={"user_id": u},
  include=["embeddings"], limit=1001)`` on the user's shard;
- ``hnsw``: ``ChromaStore.search`` with brute force off (the filtered HNSW query);
- ``search``: ``ChromaStore.search`` as configured (brute force for small scopes);
- ``first``: the first search that touches each shard (opening its segments);
- ``rss``: resident memory after every shard has been searched.

Not a test: a 100k store takes one to four minutes to build and ~400 MB of disk.

    .venv/bin/python benchmarks/chroma_shards.py --shards 1,16,32,64

The last line is JSON: one object per shard count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memstack.stores.vectors.base import VectorRecord
from memstack.stores.vectors.chroma import ChromaStore
from memstack.stores.vectors.chroma_shards import shard_of

COLLECTION = "bench_memory"
MODEL = "bench-v1"
BUILD_BATCH = 5000
TOP_K = 20


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered) * 1000, 2),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
    }


async def build(path: Path, shards: int, vectors: int, users: int, dim: int) -> float:
    store = await ChromaStore.open(
        COLLECTION, model_version=MODEL, dim=dim, path=path, shards=shards, shard_key="user_id"
    )
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for start in range(0, vectors, BUILD_BATCH):
        n = min(BUILD_BATCH, vectors - start)
        matrix = rng.standard_normal((n, dim)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        records = []
        for k in range(n):
            i = start + k
            user = f"u{i % users}"
            records.append(
                VectorRecord(
                    id=f"{user}:s{i % 7}:m{i}#0",
                    text=f"chunk {i} of {user}: " + "some remembered dialogue " * 6,
                    vector=matrix[k].tolist(),
                    metadata={
                        "user_id": user,
                        "session_id": f"{user}:s{i % 7}",
                        "msg_id": f"{user}:s{i % 7}:m{i}",
                        "msg_ids": f"{user}:s{i % 7}:m{i}",
                        "role": "user" if i % 2 else "assistant",
                        "chunk_idx": 0,
                        "created_at": 1_700_000_000 + i,
                        "topic": "",
                        "source_layer": "dialogue",
                        "model_version": MODEL,
                    },
                )
            )
        await store.upsert(records)
    elapsed = time.perf_counter() - t0
    await store.close()
    return elapsed


async def measure(path: Path, shards: int, users: int, calls: int, dim: int) -> dict[str, Any]:
    store = await ChromaStore.open(
        COLLECTION, model_version=MODEL, dim=dim, path=path, shards=shards, shard_key="user_id"
    )
    hnsw = await ChromaStore.open(
        COLLECTION,
        model_version=MODEL,
        dim=dim,
        path=path,
        shards=shards,
        shard_key="user_id",
        brute_force_max=0,
    )
    rng = random.Random(1)

    def query() -> list[float]:
        v = [rng.gauss(0, 1) for _ in range(dim)]
        norm = sum(x * x for x in v) ** 0.5
        return [x / norm for x in v]

    rss_open = rss_mb()
    # Touch every shard once, through both stores, timing the first search of each.
    first: list[float] = []
    seen: set[int] = set()
    for u in range(users):
        user = f"u{u}"
        index = shard_of(user, shards)
        t = time.perf_counter()
        await store.search(query(), scope={"user_id": user}, top_k=TOP_K)
        if index not in seen:
            first.append(time.perf_counter() - t)
            seen.add(index)
        await hnsw.search(query(), scope={"user_id": user}, top_k=TOP_K)
    rss_warm = rss_mb()

    get_s: list[float] = []
    hnsw_s: list[float] = []
    search_s: list[float] = []
    for _ in range(calls):
        user = f"u{rng.randrange(users)}"
        layout = store._layout
        assert layout is not None
        shard = store._shard(layout, shard_of(user, shards))
        assert shard is not None
        t = time.perf_counter()
        got = shard.collection.get(where={"user_id": user}, include=["embeddings"], limit=1001)
        get_s.append(time.perf_counter() - t)
        assert len(got["ids"]) == 0 or got["ids"][0].startswith(f"{user}:")
        q = query()
        t = time.perf_counter()
        await hnsw.search(q, scope={"user_id": user}, top_k=TOP_K)
        hnsw_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        await store.search(q, scope={"user_id": user}, top_k=TOP_K)
        search_s.append(time.perf_counter() - t)
    result = {
        "shards": shards,
        "layout": store.layout,
        "get_ms": ms(get_s),
        "hnsw_ms": ms(hnsw_s),
        "search_ms": ms(search_s),
        "first_touch_ms": ms(first),
        "rss_open_mb": round(rss_open),
        "rss_warm_mb": round(rss_warm),
        "rss_end_mb": round(rss_mb()),
    }
    await store.close()
    await hnsw.close()
    return result


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default="1,16,64", help="comma-separated shard counts")
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--path", type=Path, default=None, help="scratch folder (default: a tmp)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the stores under --path and measure them again"
    )
    parser.add_argument("--child", choices=["build", "measure"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        [shards] = [int(s) for s in args.shards.split(",")]
        if args.child == "build":
            out: Any = asyncio.run(build(args.path, shards, args.vectors, args.users, args.dim))
        else:
            out = asyncio.run(measure(args.path, shards, args.users, args.calls, args.dim))
        print(json.dumps(out))
        return

    base = args.path or Path(tempfile.mkdtemp(prefix="memstack-shards-"))
    results = []
    for shards in [int(s) for s in args.shards.split(",")]:
        path = base / f"s{shards}"
        reuse = args.keep and path.is_dir()
        if not reuse:
            shutil.rmtree(path, ignore_errors=True)

        def child(kind: str, path: Path = path, shards: int = shards) -> Any:
            cmd = [sys.executable, __file__, "--child", kind, "--shards", str(shards)]
            cmd += ["--path", str(path), "--vectors", str(args.vectors)]
            cmd += ["--users", str(args.users), "--calls", str(args.calls), "--dim", str(args.dim)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{kind} of {shards} shards failed:\n{done.stderr}")
            return json.loads(done.stdout.strip().splitlines()[-1])

        built = None if reuse else round(child("build"), 1)
        row = {"build_s": built, "disk_mb": round(du_mb(path)), **child("measure")}
        results.append(row)
        print(
            f"{shards:>4} shards: build {row['build_s']} s, disk {row['disk_mb']} MB, "
            f"get {row['get_ms']['p50']}/{row['get_ms']['p99']} ms, "
            f"hnsw {row['hnsw_ms']['p50']}/{row['hnsw_ms']['p99']} ms, "
            f"search {row['search_ms']['p50']}/{row['search_ms']['p99']} ms (p50/p99), "
            f"first touch {row['first_touch_ms']['p50']} ms, "
            f"rss {row['rss_open_mb']} → {row['rss_warm_mb']} MB",
            flush=True,
        )
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    if args.path is None and not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"vectors": args.vectors, "users": args.users, "results": results}))


if __name__ == "__main__":
    main()
