"""Search latency for one heavy user: N vectors of one user beside a few other users'.

For each N, builds one collection (384-d unit vectors, memstack's chunk metadata): the
heavy user's N vectors and ``--others`` users of N/20 each, then times
``search_many`` as context() calls it (two queries, top 20, ``fields="ids"``, scope
``{"user_id": heavy}``) on:

- ``chroma-filtered``: Chroma embedded with the unfiltered path off
  (``overfetch_max=0``): the filtered HNSW query, as before;
- ``chroma``: Chroma embedded as configured (the heavy scope searched unfiltered);
- ``qdrant-local-filtered``: qdrant-client's local mode (in memory; the same scan as
  on a path) with the unfiltered path off: its filtered scan, as before;
- ``qdrant-local``: local mode as configured (the heavy scope searched unfiltered);
- ``qdrant-edge``: Qdrant's engine in process, indexed by ``optimize()``.

Vectors are ``random`` (uniform on the sphere) or ``clustered`` (100 topics shared by
every user, each vector and query a topic centre plus noise, so a query's nearest rows
are often other users' too). Each store is warmed with a few searches first. Not a
test: 100k vectors take minutes to build per store.

    .venv/bin/python benchmarks/vector_scope.py --sizes 1000,10000,100000 --data random,clustered

The last line is JSON: one object per (data, N, store).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from memstack.stores.vectors.base import VectorRecord, VectorStore
from memstack.stores.vectors.chroma import ChromaStore
from memstack.stores.vectors.qdrant import QdrantStore
from memstack.stores.vectors.qdrant_edge import QdrantEdgeStore

DIM = 384
TOP_K = 20
HEAVY = "heavy"
BATCH = 2000
TOPICS = 100


def vectors(rng: np.random.Generator, n: int, data: str, centres: np.ndarray) -> np.ndarray:
    if data == "clustered":
        m = centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, DIM)) * 0.035
    else:
        m = rng.standard_normal((n, DIM))
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m.astype(np.float32)


def owners(n: int, others: int) -> list[str]:
    users = [HEAVY] * n + [f"user{u}" for u in range(others) for _ in range(max(1, n // 20))]
    # Interleaved as a live store would hold them: written over time, not user by user.
    return [users[i] for i in np.random.default_rng(1).permutation(len(users))]


def records(users: list[str], matrix: np.ndarray, start: int) -> list[VectorRecord]:
    return [
        VectorRecord(
            id=f"{user}:s{(start + k) % 9}:{start + k}#0",
            text=f"chunk {start + k}: " + "some remembered dialogue " * 6,
            vector=matrix[k].tolist(),
            metadata={
                "user_id": user,
                "session_id": f"s{(start + k) % 9}",
                "msg_ids": f"m{start + k}",
                "role": "user",
                "chunk_idx": 0,
                "ts": 1_700_000_000 + start + k,
            },
        )
        for k, user in enumerate(users)
    ]


async def fill(store: VectorStore, users: list[str], data: str, centres: np.ndarray) -> float:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for start in range(0, len(users), BATCH):
        batch = users[start : start + BATCH]
        await store.upsert(records(batch, vectors(rng, len(batch), data, centres), start))
    return time.perf_counter() - t0


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered) * 1000, 2),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
    }


async def time_searches(
    store: VectorStore, data: str, centres: np.ndarray, calls: int
) -> dict[str, float]:
    rng = np.random.default_rng(7)
    pairs = [vectors(rng, 2, data, centres).tolist() for _ in range(calls + 5)]
    for pair in pairs[:5]:  # warm: open the segments, learn the scope
        await store.search_many(pair, scope={"user_id": HEAVY}, top_k=TOP_K, fields="ids")
    took = []
    for pair in pairs[5:]:
        t0 = time.perf_counter()
        hits = await store.search_many(pair, scope={"user_id": HEAVY}, top_k=TOP_K, fields="ids")
        took.append(time.perf_counter() - t0)
        assert all(len(h) == TOP_K for h in hits)
    return ms(took)


async def filtered_only(opening: Awaitable[QdrantStore]) -> QdrantStore:
    """A local-mode store that never searches unfiltered: the filtered scan, as before."""
    store = await opening
    store._shares.rows = lambda *_: 0  # type: ignore[method-assign]
    return store


Opener = Callable[[Path], Any]
STORES: dict[str, Opener] = {
    "chroma-filtered": lambda p: ChromaStore.open(
        "bench_memory", model_version="b", dim=DIM, path=p / "chroma", overfetch_max=0
    ),
    "chroma": lambda p: ChromaStore.open(
        "bench_memory", model_version="b", dim=DIM, path=p / "chroma"
    ),
    "qdrant-local-filtered": lambda p: filtered_only(
        QdrantStore.open("bench_memory", model_version="b", dim=DIM, location=":memory:")
    ),
    "qdrant-local": lambda p: QdrantStore.open(
        "bench_memory", model_version="b", dim=DIM, location=":memory:"
    ),
    "qdrant-edge": lambda p: QdrantEdgeStore.open(
        "bench_memory", model_version="b", dim=DIM, path=p / "edge"
    ),
}


async def run(
    data: str, n: int, stores: list[str], others: int, calls: int
) -> list[dict[str, Any]]:
    centres = vectors(np.random.default_rng(3), TOPICS, "random", np.zeros((1, DIM)))
    users = owners(n, others)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        built: set[str] = set()
        for name in stores:
            store = await STORES[name](Path(tmp))
            # Both Chroma rows read one collection: built once (local mode: in memory).
            kind = "chroma" if name.startswith("chroma") else name
            build_s = 0.0
            if kind not in built:
                build_s = await fill(store, users, data, centres)
                built.add(kind)
            row = {"data": data, "n": n, "total": len(users), "store": name}
            row |= {
                "build_s": round(build_s, 1),
                **await time_searches(store, data, centres, calls),
            }
            print(row, flush=True)
            out.append(row)
            await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--data", default="random,clustered")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--others", type=int, default=4, help="other users, N/20 vectors each")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rows = []
    for data in args.data.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            rows += asyncio.run(run(data, n, args.stores.split(","), args.others, args.calls))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
