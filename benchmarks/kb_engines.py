"""Knowledge-base engines: qdrant-client's local mode against qdrant-edge, in process.

memstack's embedded knowledge base was qdrant-client's local mode (``QdrantClient(path=…)``,
a pure-Python brute-force scan; still so in a home that had one). qdrant-edge-py runs
Qdrant's own engine (Rust, HNSW and payload indexes) in the process. Both get the same
data: ``--sizes`` points of 384-d unit vectors (clustered: ``--clusters`` random centres
plus noise, closer to text embeddings than uniform noise and harder on HNSW than uniform
would be in practice for recall), a payload like a knowledge-base chunk (``kb``
namespace, ``doc_id``, ``memstack_id``, a 300-character ``memstack_text``) split over
three namespaces (80 / 15 / 5 %). Then ``--queries`` filtered top-10 searches (a stored
vector plus noise, the namespace cycling), with the payload, as ``QdrantStore.search``
asks for it.

Each engine and size runs in a fresh process, so ``rss_mb`` (resident memory after the
searches, less the process's before the build) is that engine's alone. ``recall`` is
recall@10 against an exact numpy scan of the same namespace.

Not a test. It was run in a venv of its own (below); memstack's venv now has qdrant-edge-py
and qdrant-client, so ``.venv/bin/python benchmarks/kb_engines.py`` works too.

    python3 -m venv /tmp/qe-venv
    /tmp/qe-venv/bin/pip install qdrant-edge-py qdrant-client numpy
    /tmp/qe-venv/bin/python benchmarks/kb_engines.py --sizes 10000,50000

The last line is JSON: one object per engine and size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

DIM = 384
TOP_K = 10
BATCH = 500  # QdrantStore.UPSERT_BATCH
NAMESPACES = (("default", 0.80), ("manuals", 0.15), ("legal", 0.05))
ENGINES = ("client-local", "edge-hnsw", "edge-exact")


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


def unit(rows: np.ndarray) -> np.ndarray:
    out: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out.astype(np.float32)


def dataset(n: int, clusters: int, queries: int, seed: int) -> dict[str, Any]:
    """Vectors, namespaces and queries; the same for every engine of a size and seed."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((clusters, DIM)))
    vectors = unit(centres[rng.integers(0, clusters, n)] + 0.08 * rng.standard_normal((n, DIM)))
    names = [name for name, _ in NAMESPACES]
    shares = [share for _, share in NAMESPACES]
    ns = rng.choice(len(names), size=n, p=shares)
    picks = rng.integers(0, n, queries)
    qvecs = unit(vectors[picks] + 0.05 * rng.standard_normal((queries, DIM)))
    qns = [names[i % len(names)] for i in range(queries)]
    return {"vectors": vectors, "ns": [names[i] for i in ns], "qvecs": qvecs, "qns": qns}


def payload(i: int, ns: str) -> dict[str, Any]:
    doc = i // 20
    return {
        "kb": ns,
        "doc_id": f"doc{doc}",
        "chunk_idx": i % 20,
        "memstack_id": f"doc{doc}#{i % 20}",
        "memstack_text": (f"chunk {i} of document {doc}: " + "lorem ipsum dolor " * 18)[:300],
    }


def point_id(i: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/{i}"))


def exact_top(data: dict[str, Any]) -> list[list[str]]:
    vectors, ns = data["vectors"], np.array(data["ns"])
    out = []
    for q, name in zip(data["qvecs"], data["qns"], strict=True):
        idx = np.flatnonzero(ns == name)
        scores = vectors[idx] @ q
        best = idx[np.argsort(-scores)[:TOP_K]]
        out.append([point_id(int(i)) for i in best])
    return out


def run_client_local(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(folder))
    client.create_collection(
        "kb", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    )
    started = time.perf_counter()
    vectors, ns = data["vectors"], data["ns"]
    for start in range(0, len(vectors), BATCH):
        points = [
            models.PointStruct(
                id=point_id(i), vector=vectors[i].tolist(), payload=payload(i, ns[i])
            )
            for i in range(start, min(start + BATCH, len(vectors)))
        ]
        client.upsert("kb", points=points)
    build_s = time.perf_counter() - started
    client.close()
    started = time.perf_counter()
    client = QdrantClient(path=str(folder))  # local mode reads every point back at open
    open_s = time.perf_counter() - started

    def search(q: np.ndarray, name: str) -> list[str]:
        flt = models.Filter(
            must=[models.FieldCondition(key="kb", match=models.MatchValue(value=name))]
        )
        res = client.query_points(
            "kb", query=q.tolist(), query_filter=flt, limit=TOP_K, with_payload=True
        )
        return [str(p.id) for p in res.points]

    out = timed(data, search)
    client.close()
    return {"upsert_s": round(build_s, 2), "index_s": 0.0, "open_s": round(open_s, 2), **out}


def run_edge(data: dict[str, Any], folder: Path, exact: bool) -> dict[str, Any]:
    import qdrant_edge as qe

    config = qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine),
        # Qdrant's defaults, spelled out: the constructor wants all three.
        hnsw_config=qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10000),
    )
    shard = qe.EdgeShard.create(str(folder), config)
    shard.update(qe.UpdateOperation.create_field_index("kb", qe.PayloadSchemaType.Keyword))
    started = time.perf_counter()
    vectors, ns = data["vectors"], data["ns"]
    for start in range(0, len(vectors), BATCH):
        points = [
            qe.Point(point_id(i), vectors[i].tolist(), payload(i, ns[i]))
            for i in range(start, min(start + BATCH, len(vectors)))
        ]
        shard.update(qe.UpdateOperation.upsert_points(points))
    upsert_s = time.perf_counter() - started
    started = time.perf_counter()
    shard.optimize()  # builds the HNSW graph and payload index of the full segments
    index_s = time.perf_counter() - started
    info = shard.info()
    indexed = int(info.indexed_vectors_count)
    shard.close()
    started = time.perf_counter()
    shard = qe.EdgeShard.load(str(folder))
    open_s = time.perf_counter() - started
    params = qe.SearchParams(exact=exact)

    def search(q: np.ndarray, name: str) -> list[str]:
        flt = qe.Filter(must=[qe.FieldCondition(key="kb", match=qe.MatchValue(name))])
        request = qe.QueryRequest(
            limit=TOP_K,
            query=qe.Query.Nearest(q.tolist()),
            filter=flt,
            with_payload=True,
            params=params,
        )
        return [str(p.id) for p in shard.query(request)]

    out = timed(data, search)
    shard.close()
    return {
        "upsert_s": round(upsert_s, 2),
        "index_s": round(index_s, 2),
        "open_s": round(open_s, 3),
        "indexed_vectors": indexed,
        **out,
    }


def timed(data: dict[str, Any], search: Any) -> dict[str, Any]:
    truth = exact_top(data)
    for q, name in list(zip(data["qvecs"], data["qns"], strict=True))[:5]:
        search(q, name)  # warm-up: first-touch of pages and lazy imports
    times, found = [], []
    for q, name in zip(data["qvecs"], data["qns"], strict=True):
        started = time.perf_counter()
        found.append(search(q, name))
        times.append(time.perf_counter() - started)
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    return {"search_ms": ms(times), "recall": round(hits / sum(len(t) for t in truth), 4)}


def child(engine: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    data = dataset(n, args.clusters, args.queries, args.seed)
    base = rss_mb()
    with tempfile.TemporaryDirectory(prefix="kb-engines-") as tmp:
        folder = Path(tmp) / "store"
        if engine == "client-local":
            out = run_client_local(data, folder)
        else:
            out = run_edge(data, folder, exact=engine == "edge-exact")
        disk = sum(f.stat().st_blocks * 512 for f in folder.rglob("*") if f.is_file())
    return {
        "engine": engine,
        "points": n,
        **out,
        "rss_mb": round(rss_mb() - base, 1),
        "disk_mb": round(disk / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child", default="")
    args = parser.parse_args()
    if args.child:
        engine, n = args.child.split(":")
        print(json.dumps(child(engine, int(n), args)))
        return
    results = []
    for n in (int(s) for s in args.sizes.split(",")):
        for engine in args.engines.split(","):
            cmd = [sys.executable, __file__, "--child", f"{engine}:{n}"]
            cmd += ["--queries", str(args.queries), "--clusters", str(args.clusters)]
            cmd += ["--seed", str(args.seed)]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            result = json.loads(line.strip().splitlines()[-1])
            print(
                f"{engine:>12} {n:>6}: search p50 {result['search_ms']['p50']:>7} ms "
                f"p99 {result['search_ms']['p99']:>7} ms, recall {result['recall']}, "
                f"upsert {result['upsert_s']} s, index {result['index_s']} s, "
                f"open {result['open_s']} s, rss {result['rss_mb']} MB",
                flush=True,
            )
            results.append(result)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
