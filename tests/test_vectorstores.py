"""The same behaviour over Chroma embedded, a real ``chroma run`` server, Qdrant local and
qdrant-edge."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memstack.core.errors import (
    ConfigError,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
    ValidationError,
)
from memstack.core.settings import load_settings
from memstack.ml.embedders import HashingEmbedder
from memstack.stores.vectors.base import VectorHit, VectorRecord, VectorStore
from memstack.stores.vectors.chroma import ChromaStore
from memstack.stores.vectors.chroma_shards import DIM_KEY, VERSION_KEY, shard_name, shard_of
from memstack.stores.vectors.qdrant import QdrantStore, point_id
from memstack.stores.vectors.qdrant_edge import QdrantEdgeStore
from memstack.wiring import build_kb_store, build_memory_store

DIM = 16
# chroma-sharded: embedded, the vectors hashed by user into SHARDS collections.
BACKENDS = ["chroma-embedded", "chroma-server", "chroma-sharded", "qdrant-local", "qdrant-edge"]
SHARDS = 4

Store = ChromaStore | QdrantStore | QdrantEdgeStore
MakeStore = Callable[..., Awaitable[Store]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def unit(rng: random.Random) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(DIM)]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def record(rid: str, vector: list[float], user: str, **meta: Any) -> VectorRecord:
    return VectorRecord(
        id=rid, text=f"text of {rid}", vector=vector, metadata={"user_id": user, **meta}
    )


@dataclass
class ChromaServer:
    url: str
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_chroma_server(path: Path) -> ChromaServer:
    """``chroma run`` on a free loopback port, returned once its heartbeat answers."""
    # Beside this interpreter first: `.venv/bin/python -m pytest` need not have it on PATH.
    chroma = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    if chroma is None:
        pytest.fail("the chroma CLI (shipped by chromadb) is not on PATH")
    port = _free_port()
    args = ["run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([chroma, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = ChromaServer(f"http://127.0.0.1:{port}", proc)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/api/v2/heartbeat", timeout=1) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"chroma run did not come up (exit code {proc.returncode})")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_chroma_server(tmp_path_factory.mktemp("chroma-server"))
    yield server.url
    server.stop()


@pytest.fixture
def doomed_chroma_server(tmp_path: Path) -> Iterator[ChromaServer]:
    """A server of its own, which the test may stop while a store is connected."""
    server = start_chroma_server(tmp_path / "doomed")
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeStore]:
    """Opens stores of one backend; same collection name = same collection (reopen)."""
    backend: str = request.param
    server = request.getfixturevalue("chroma_server") if backend == "chroma-server" else None
    # The server outlives a test: a unique name per test keeps tests independent.
    prefix = f"t{uuid.uuid4().hex[:12]}"
    opened: list[Store] = []

    async def make(
        name: str = "memory", *, model_version: str = "test-v1", dim: int = DIM
    ) -> Store:
        collection = f"{prefix}_{name}"
        store: Store
        if backend == "chroma-embedded":
            store = await ChromaStore.open(
                collection, model_version=model_version, dim=dim, path=tmp_path / "c"
            )
        elif backend == "chroma-sharded":
            store = await ChromaStore.open(
                collection,
                model_version=model_version,
                dim=dim,
                path=tmp_path / "c",
                shards=SHARDS,
                shard_key="user_id",
            )
        elif backend == "chroma-server":
            store = await ChromaStore.open(
                collection, model_version=model_version, dim=dim, url=server
            )
        elif backend == "qdrant-edge":
            store = await QdrantEdgeStore.open(
                collection, model_version=model_version, dim=dim, path=tmp_path / "e"
            )
        else:
            store = await QdrantStore.open(
                collection, model_version=model_version, dim=dim, path=tmp_path / "q"
            )
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


async def test_identical_vector_is_the_top_hit_with_score_one(make_store: MakeStore) -> None:
    store = await make_store()
    rng = random.Random(1)
    records = [
        record(
            f"m{i}#0", unit(rng), "alice", role="user", chunk_idx=i, weight=0.5, pinned=i % 2 == 0
        )
        for i in range(30)
    ]
    await store.upsert(records)
    target = records[7]
    hits = await store.search(target.vector, scope={"user_id": "alice"}, top_k=5)

    assert len(hits) == 5
    assert hits[0].id == "m7#0"
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert hits[0].text == "text of m7#0"
    assert dict(hits[0].metadata) == {
        "user_id": "alice",
        "role": "user",
        "chunk_idx": 7,
        "weight": 0.5,
        "pinned": False,
    }
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and scores[1] < 0.99


async def test_search_many_answers_each_vector_as_search_does(make_store: MakeStore) -> None:
    store = await make_store()
    rng = random.Random(3)
    await store.upsert(
        [record(f"a{i}#0", unit(rng), "alice", turn=i) for i in range(40)]
        + [record(f"b{i}#0", unit(rng), "bob", turn=i) for i in range(20)]
    )
    queries = [unit(rng) for _ in range(3)]
    for where in (None, {"turn": 3}):
        one_by_one = [
            await store.search(q, scope={"user_id": "alice"}, where=where, top_k=7) for q in queries
        ]
        batched = await store.search_many(queries, scope={"user_id": "alice"}, where=where, top_k=7)
        assert len(batched) == 3
        for got, expected in zip(batched, one_by_one, strict=True):
            same_hits(got, expected)
        # Ids only: the same ids and scores, nothing else, and still only alice's.
        ids_only = await store.search_many(
            queries, scope={"user_id": "alice"}, where=where, top_k=7, fields="ids"
        )
        for got, expected in zip(ids_only, one_by_one, strict=True):
            assert [h.id for h in got] == [h.id for h in expected]
            assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-5)
            assert all(h.text == "" and not h.metadata for h in got)
            assert all(h.id.startswith("a") for h in got)
    assert all(h.id.startswith("a") for hits in batched + ids_only for h in hits)
    assert await store.search_many([], scope={"user_id": "alice"}, top_k=5) == []
    with pytest.raises(ValidationError):
        await store.search_many([queries[0], [1.0, 2.0]], scope={"user_id": "alice"}, top_k=5)


async def test_opposite_vector_scores_minus_one(make_store: MakeStore) -> None:
    store = await make_store()
    v = unit(random.Random(2))
    await store.upsert([record("a#0", v, "u")])
    hits = await store.search([-x for x in v], scope={"user_id": "u"}, top_k=1)
    assert hits[0].score == pytest.approx(-1.0, abs=1e-4)


async def test_user_scope_never_leaks_other_users(make_store: MakeStore) -> None:
    store = await make_store()
    rng = random.Random(3)
    owners: dict[str, str] = {}
    records = []
    for i in range(300):
        user = rng.choice(["alice", "bob", "carol"])
        owners[f"r{i}"] = user
        records.append(record(f"r{i}", unit(rng), user))
    await store.upsert(records)

    for user in ("alice", "bob", "carol"):
        own = {rid for rid, owner in owners.items() if owner == user}
        for _ in range(5):
            hits = await store.search(unit(rng), scope={"user_id": user}, top_k=40)
            assert len(hits) == 40
            assert {h.id for h in hits} <= own
            assert all(h.metadata["user_id"] == user for h in hits)
    assert await store.search(unit(rng), scope={"user_id": "mallory"}, top_k=10) == []


async def test_where_is_anded_with_scope(make_store: MakeStore) -> None:
    store = await make_store()
    rng = random.Random(4)
    await store.upsert(
        [
            record(f"a{i}", unit(rng), "alice", role="user" if i % 2 else "assistant", score=1.5)
            for i in range(10)
        ]
        + [record(f"b{i}", unit(rng), "bob", role="user", score=1.5) for i in range(10)]
    )
    hits = await store.search(
        unit(rng), scope={"user_id": "alice"}, where={"role": "user"}, top_k=20
    )
    assert sorted(h.id for h in hits) == [f"a{i}" for i in range(1, 10, 2)]
    floats = await store.search(unit(rng), scope={"user_id": "bob"}, where={"score": 1.5}, top_k=20)
    assert len(floats) == 10
    clash = await store.search(
        unit(rng), scope={"user_id": "alice"}, where={"user_id": "bob"}, top_k=20
    )
    assert clash == []


async def test_upsert_is_idempotent_by_id(make_store: MakeStore) -> None:
    store = await make_store()
    rng = random.Random(5)
    first, second = unit(rng), unit(rng)
    await store.upsert([record("m1#0", first, "alice")])
    await store.upsert([VectorRecord("m1#0", "replaced", second, {"user_id": "alice"})])
    # A repeated id inside one batch is not an error either: the last one wins.
    await store.upsert([record("m2#0", first, "alice"), record("m2#0", second, "alice")])

    hits = await store.search(second, scope={"user_id": "alice"}, top_k=10)
    assert sorted(h.id for h in hits) == ["m1#0", "m2#0"]
    assert {h.id: h.text for h in hits}["m1#0"] == "replaced"
    assert all(h.score == pytest.approx(1.0, abs=1e-4) for h in hits)
    assert await store.count() == 2


async def test_delete_by_scope_and_ids(make_store: MakeStore) -> None:
    store = await make_store()
    rng = random.Random(6)
    await store.upsert(
        [record(f"a{i}", unit(rng), "alice") for i in range(5)]
        + [record(f"b{i}", unit(rng), "bob") for i in range(5)]
    )
    # ids outside the scope are not touched: scope guards every delete.
    await store.delete(scope={"user_id": "alice"}, ids=["b0"])
    await store.delete(scope={"user_id": "bob"}, ids=["b1", "b2"])
    await store.delete(scope={"user_id": "bob"}, ids=[])
    bob = await store.search(unit(rng), scope={"user_id": "bob"}, top_k=10)
    assert sorted(h.id for h in bob) == ["b0", "b3", "b4"]

    await store.delete(scope={"user_id": "alice"})
    assert await store.search(unit(rng), scope={"user_id": "alice"}, top_k=10) == []
    assert len(await store.search(unit(rng), scope={"user_id": "bob"}, top_k=10)) == 3


async def test_empty_collection_returns_no_hits(make_store: MakeStore) -> None:
    store = await make_store()
    assert await store.search(unit(random.Random(7)), scope={"user_id": "alice"}, top_k=20) == []


@pytest.mark.parametrize("scope", [{}, None])
async def test_search_and_delete_without_scope_raise(make_store: MakeStore, scope: Any) -> None:
    store = await make_store()
    await store.upsert([record("a", unit(random.Random(8)), "alice")])
    with pytest.raises(ValidationError, match="scope"):
        await store.search(unit(random.Random(8)), scope=scope, top_k=5)
    with pytest.raises(ValidationError, match="scope"):
        await store.delete(scope=scope)
    assert await store.count() == 1


async def test_bad_vectors_and_metadata_are_rejected(make_store: MakeStore) -> None:
    store = await make_store()
    with pytest.raises(ValidationError, match="dimensions"):
        await store.search([1.0, 0.0], scope={"user_id": "a"}, top_k=5)
    with pytest.raises(ValidationError, match="top_k"):
        await store.search(unit(random.Random(9)), scope={"user_id": "a"}, top_k=0)
    with pytest.raises(ValidationError):
        await store.upsert([VectorRecord("x", "t", [1.0], {"user_id": "a"})])
    with pytest.raises(ValidationError):
        await store.upsert([VectorRecord("x", "t", unit(random.Random(9)), {"tags": ["a"]})])  # type: ignore[dict-item]


async def test_reopen_keeps_data(make_store: MakeStore) -> None:
    store = await make_store("kept")
    v = unit(random.Random(10))
    await store.upsert([record("a", v, "alice")])
    await store.close()
    again = await make_store("kept")
    hits = await again.search(v, scope={"user_id": "alice"}, top_k=1)
    assert [h.id for h in hits] == ["a"]


@pytest.mark.parametrize(("model_version", "dim"), [("other-model", DIM), ("test-v1", DIM * 2)])
async def test_other_embedder_on_reopen_is_a_schema_mismatch(
    make_store: MakeStore, model_version: str, dim: int
) -> None:
    store = await make_store("schema")
    await store.upsert([record("a", unit(random.Random(11)), "alice")])
    await store.close()
    with pytest.raises(SchemaMismatch, match="memstack reindex"):
        await make_store("schema", model_version=model_version, dim=dim)
    # The failed open left the collection as it was.
    same = await make_store("schema")
    assert await same.count() == 1


@pytest.mark.parametrize("kind", ["chroma", "qdrant"])
async def test_unreachable_server_is_store_unavailable(kind: str) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    store: Store
    if kind == "chroma":
        store = ChromaStore("agent_memory", model_version="m", dim=DIM, url=url)
    else:
        store = QdrantStore("agent_memory", model_version="m", dim=DIM, url=url, timeout_s=2)
    with pytest.raises(StoreUnavailable) as info:
        await store.search(unit(random.Random(12)), scope={"user_id": "a"}, top_k=5)
    assert info.value.__cause__ is not None
    await store.close()


async def test_chroma_server_that_went_away_is_store_unavailable(
    doomed_chroma_server: ChromaServer,
) -> None:
    url = doomed_chroma_server.url
    store = await ChromaStore.open("agent_memory", model_version="m", dim=DIM, url=url)
    await store.upsert([record("a", unit(random.Random(13)), "alice")])
    await asyncio.to_thread(doomed_chroma_server.stop)
    with pytest.raises(StoreUnavailable):
        await store.search(unit(random.Random(13)), scope={"user_id": "alice"}, top_k=5)


# --- Chroma: brute force for small scopes ------------------------------------------------

MakeChroma = Callable[..., Awaitable[ChromaStore]]


@pytest.fixture(params=["chroma-embedded", "chroma-server"])
async def make_chroma(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeChroma]:
    """Stores on one collection that differ only in their brute-force limits; the share
    of the collection defaults to 1 so that tiny test collections can take either path."""
    server = request.getfixturevalue("chroma_server") if request.param == "chroma-server" else None
    collection = f"t{uuid.uuid4().hex[:12]}_memory"
    opened: list[ChromaStore] = []

    async def make(brute_force_max: int, brute_force_share: float = 1.0) -> ChromaStore:
        location: dict[str, Any] = {"url": server} if server else {"path": tmp_path / "c"}
        store = await ChromaStore.open(
            collection,
            model_version="m",
            dim=DIM,
            brute_force_max=brute_force_max,
            brute_force_share=brute_force_share,
            **location,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


def open_shards(store: ChromaStore) -> dict[int, Any]:
    """The shards ``store`` has opened so far, by index."""
    assert store._layout is not None
    return store._layout.shards


def only_shard(store: ChromaStore) -> Any:
    """The one collection, with its search state, of an unsharded store."""
    assert store._layout is not None and store._layout.count == 1
    return store._layout.shards[0]


def large_scopes(store: ChromaStore) -> dict[Any, int]:
    """The scopes every open shard of ``store`` remembers as too large for brute force."""
    return {
        key: limit
        for shard in open_shards(store).values()
        for key, limit in shard.large_scopes.items()
    }


def same_hits(a: list[VectorHit], b: list[VectorHit]) -> None:
    assert [h.id for h in a] == [h.id for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
    assert [h.text for h in a] == [h.text for h in b]
    assert [dict(h.metadata) for h in a] == [dict(h.metadata) for h in b]


async def test_chroma_brute_force_and_hnsw_agree(make_chroma: MakeChroma) -> None:
    # alice (40 vectors) is below the threshold of 100, bob (150) above it.
    threshold = await make_chroma(100)
    hnsw = await make_chroma(0)
    brute = await make_chroma(10_000)
    rng = random.Random(20)

    def vector() -> list[float]:
        # Not unit length: cosine must normalise, as Chroma's space does.
        length = rng.uniform(0.1, 10)
        return [x * length for x in unit(rng)]

    await threshold.upsert(
        [record(f"a{i}", vector(), "alice", role="user", turn=i) for i in range(40)]
        + [record(f"b{i}", vector(), "bob", role="user", turn=i) for i in range(150)]
    )
    for user in ("alice", "bob"):
        for top_k in (1, 10, 200):
            for _ in range(5):
                q = vector()
                expected = await hnsw.search(q, scope={"user_id": user}, top_k=top_k)
                assert len(expected) == min(top_k, 40 if user == "alice" else 150)
                same_hits(await threshold.search(q, scope={"user_id": user}, top_k=top_k), expected)
                same_hits(await brute.search(q, scope={"user_id": user}, top_k=top_k), expected)
            # Both queries of one call, as context() sends them, on each path.
            pair = [vector(), vector()]
            expected_pair = [await hnsw.search(q, scope={"user_id": user}, top_k=10) for q in pair]
            for store in (threshold, hnsw, brute):
                got_pair = await store.search_many(pair, scope={"user_id": user}, top_k=10)
                for got, expected in zip(got_pair, expected_pair, strict=True):
                    same_hits(got, expected)
                # Ids only (context()'s search): the same ids and scores on each path.
                bare = await store.search_many(
                    pair, scope={"user_id": user}, top_k=10, fields="ids"
                )
                for got, expected in zip(bare, expected_pair, strict=True):
                    assert [h.id for h in got] == [h.id for h in expected]
                    assert [h.score for h in got] == pytest.approx(
                        [h.score for h in expected], abs=1e-5
                    )
                    assert all(not h.metadata and not h.text for h in got)
    # bob went to HNSW on the threshold store, and is remembered as too large for a get.
    assert large_scopes(threshold) == {(("user_id", "bob"),): 100}
    assert large_scopes(brute) == {}


async def test_chroma_brute_force_never_returns_another_users_vectors(
    make_chroma: MakeChroma,
) -> None:
    store = await make_chroma(50)
    rng = random.Random(21)
    records = [
        record(f"{user}{i}", unit(rng), user)
        for user in ("alice", "bob", "carol")
        for i in range(20)
    ]
    await store.upsert(records)
    for target in records:
        for user in ("alice", "bob", "carol"):
            hits = await store.search(target.vector, scope={"user_id": user}, top_k=100)
            assert len(hits) == 20
            assert all(h.id.startswith(user) and h.metadata["user_id"] == user for h in hits)
            bare = await store.search_many(
                [target.vector], scope={"user_id": user}, top_k=100, fields="ids"
            )
            assert [h.id for h in bare[0]] == [h.id for h in hits]
            if target.metadata["user_id"] == user:
                assert hits[0].id == target.id
                assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert await store.search(unit(rng), scope={"user_id": "mallory"}, top_k=10) == []
    assert large_scopes(store) == {}


async def test_chroma_brute_force_honours_where(make_chroma: MakeChroma) -> None:
    # bob's 60 vectors exceed the threshold of 30, but those matching the where do not:
    # the where is part of what the brute-force get selects.
    store = await make_chroma(30)
    hnsw = await make_chroma(0)
    rng = random.Random(22)
    await store.upsert(
        [
            record(f"a{i}", unit(rng), "alice", role="user" if i % 2 else "assistant", weight=0.5)
            for i in range(20)
        ]
        + [
            record(f"b{i}", unit(rng), "bob", role="user", pinned=i % 6 == 0, chunk_idx=i % 3)
            for i in range(60)
        ]
    )
    cases: list[tuple[str, dict[str, Any], list[str]]] = [
        ("alice", {"role": "user"}, [f"a{i}" for i in range(1, 20, 2)]),
        ("alice", {"role": "user", "weight": 0.5}, [f"a{i}" for i in range(1, 20, 2)]),
        ("alice", {"weight": 0.25}, []),
        ("bob", {"pinned": True}, [f"b{i}" for i in range(0, 60, 6)]),
        ("bob", {"chunk_idx": 2}, [f"b{i}" for i in range(2, 60, 3)]),
        ("alice", {"user_id": "bob"}, []),
    ]
    for user, where, expected_ids in cases:
        q = unit(rng)
        hits = await store.search(q, scope={"user_id": user}, where=where, top_k=50)
        assert sorted(h.id for h in hits) == sorted(expected_ids)
        assert all(h.metadata["user_id"] == user for h in hits)
        same_hits(hits, await hnsw.search(q, scope={"user_id": user}, where=where, top_k=50))
    assert large_scopes(store) == {}
    # Without the where, bob is too large and takes the HNSW path.
    q = unit(rng)
    same_hits(
        await store.search(q, scope={"user_id": "bob"}, top_k=5),
        await hnsw.search(q, scope={"user_id": "bob"}, top_k=5),
    )
    assert large_scopes(store) == {(("user_id", "bob"),): 30}


async def test_chroma_scope_shrunk_by_delete_goes_back_to_brute_force(
    make_chroma: MakeChroma,
) -> None:
    store = await make_chroma(10)
    hnsw = await make_chroma(0)
    rng = random.Random(23)
    await store.upsert([record(f"a{i}", unit(rng), "alice") for i in range(15)])
    q = unit(rng)
    same_hits(
        await store.search(q, scope={"user_id": "alice"}, top_k=15),
        await hnsw.search(q, scope={"user_id": "alice"}, top_k=15),
    )
    assert large_scopes(store) == {(("user_id", "alice"),): 10}

    await store.delete(scope={"user_id": "alice"}, ids=[f"a{i}" for i in range(10)])
    assert large_scopes(store) == {}
    hits = await store.search(q, scope={"user_id": "alice"}, top_k=15)
    assert sorted(h.id for h in hits) == [f"a{i}" for i in range(10, 15)]
    same_hits(hits, await hnsw.search(q, scope={"user_id": "alice"}, top_k=15))
    assert large_scopes(store) == {}


async def test_chroma_brute_force_drops_rows_changed_between_its_two_reads(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_chroma(100)
    rng = random.Random(25)
    records = [record(f"a{i}", unit(rng), "alice") for i in range(10)]
    await store.upsert(records)
    collection = only_shard(store).collection
    real_get = collection.get

    def get_then_race(*args: Any, **kwargs: Any) -> Any:
        # Another writer acts between the embeddings read and the documents read.
        result = real_get(*args, **kwargs)
        if kwargs.get("include") == ["embeddings"]:
            collection.upsert(
                ids=["a0"],
                embeddings=[records[0].vector],
                documents=["bob's"],
                metadatas=[{"user_id": "bob"}],
            )
            collection.delete(ids=["a1"])
        return result

    monkeypatch.setattr(collection, "get", get_then_race)
    hits = await store.search(records[0].vector, scope={"user_id": "alice"}, top_k=10)
    assert sorted(h.id for h in hits) == [f"a{i}" for i in range(2, 10)]
    assert all(h.metadata["user_id"] == "alice" for h in hits)


class HeldScopeReads:
    """Wraps a real collection's ``get`` so scope reads (embeddings only) read, then
    wait for :meth:`release` before returning, to line concurrent searches up."""

    def __init__(self, collection: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = 0
        self.gate = threading.Event()
        real_get = collection.get

        def get(*args: Any, **kwargs: Any) -> Any:
            result = real_get(*args, **kwargs)
            if kwargs.get("include") == ["embeddings"]:
                self.started += 1
                assert self.gate.wait(timeout=30)
            return result

        monkeypatch.setattr(collection, "get", get)

    async def wait_started(self, n: int) -> None:
        for _ in range(500):
            if self.started >= n:
                return
            await asyncio.sleep(0.01)
        self.release()  # let the held threads finish before failing
        raise AssertionError(f"{n} scope reads never started")

    def release(self) -> None:
        self.gate.set()


async def test_chroma_concurrent_searches_of_one_scope_share_one_read(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_chroma(100)
    rng = random.Random(29)
    await store.upsert(
        [record(f"a{i}", unit(rng), "alice") for i in range(20)]
        + [record(f"b{i}", unit(rng), "bob") for i in range(20)]
    )
    q1, q2 = unit(rng), unit(rng)
    expected = [await store.search(q, scope={"user_id": "alice"}, top_k=5) for q in (q1, q2)]

    held = HeldScopeReads(only_shard(store).collection, monkeypatch)
    first = asyncio.create_task(store.search(q1, scope={"user_id": "alice"}, top_k=5))
    await held.wait_started(1)
    second = asyncio.create_task(store.search(q2, scope={"user_id": "alice"}, top_k=5))
    other = asyncio.create_task(store.search(q2, scope={"user_id": "bob"}, top_k=5))
    await held.wait_started(2)  # bob's read: a different scope is never shared
    await asyncio.sleep(0.3)  # time for alice's second search to join the first read
    held.release()
    same_hits(await first, expected[0])
    same_hits(await second, expected[1])
    assert all(h.metadata["user_id"] == "bob" for h in await other)
    assert held.started == 2


async def test_chroma_search_after_our_write_does_not_join_an_earlier_read(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_chroma(100)
    rng = random.Random(30)
    # bob's rows keep the limit at 100 across the upsert below, so only the write
    # itself can keep the late search from joining the early read.
    await store.upsert(
        [record(f"a{i}", unit(rng), "alice") for i in range(20)]
        + [record(f"b{i}", unit(rng), "bob") for i in range(200)]
    )
    held = HeldScopeReads(only_shard(store).collection, monkeypatch)
    early = asyncio.create_task(store.search(unit(rng), scope={"user_id": "alice"}, top_k=5))
    await held.wait_started(1)

    new = record("new", unit(rng), "alice")
    await store.upsert([new])
    late = asyncio.create_task(store.search(new.vector, scope={"user_id": "alice"}, top_k=5))
    await held.wait_started(2)
    held.release()
    await early
    assert (await late)[0].id == "new"


@pytest.mark.parametrize("brute_force_max", [0, 1, 2000])
async def test_chroma_empty_collection_on_either_path(
    make_chroma: MakeChroma, brute_force_max: int
) -> None:
    store = await make_chroma(brute_force_max)
    assert await store.search(unit(random.Random(24)), scope={"user_id": "a"}, top_k=5) == []


async def test_chroma_scope_that_is_a_large_share_of_the_collection_uses_hnsw(
    make_chroma: MakeChroma,
) -> None:
    # 190 vectors and a share of 0.5: alice (40) is scored by brute force, bob (150) by
    # HNSW, although both are below brute_force_max.
    store = await make_chroma(1000, 0.5)
    hnsw = await make_chroma(0)
    rng = random.Random(26)
    await store.upsert(
        [record(f"a{i}", unit(rng), "alice") for i in range(40)]
        + [record(f"b{i}", unit(rng), "bob") for i in range(150)]
    )
    for user in ("alice", "bob"):
        q = unit(rng)
        same_hits(
            await store.search(q, scope={"user_id": user}, top_k=10),
            await hnsw.search(q, scope={"user_id": user}, top_k=10),
        )
    assert large_scopes(store) == {(("user_id", "bob"),): 95}


async def test_chroma_defaults_keep_hnsw_for_a_user_who_owns_the_collection(
    tmp_path: Path,
) -> None:
    store = await ChromaStore.open("agent_memory", model_version="m", dim=DIM, path=tmp_path)
    rng = random.Random(27)
    await store.upsert([record(f"a{i}", unit(rng), "alice") for i in range(30)])
    assert len(await store.search(unit(rng), scope={"user_id": "alice"}, top_k=5)) == 5
    # 2% of 30 vectors is a limit of 0: not even a probe, so nothing is remembered.
    assert only_shard(store).brute_force_limit(store.brute_force_max, store.brute_force_share) == 0
    assert large_scopes(store) == {}
    await store.close()


async def test_chroma_large_scope_is_probed_again_when_the_collection_grows(
    make_chroma: MakeChroma,
) -> None:
    store = await make_chroma(100, 0.5)
    hnsw = await make_chroma(0)
    rng = random.Random(28)
    await store.upsert(
        [record(f"a{i}", unit(rng), "alice") for i in range(30)]
        + [record(f"b{i}", unit(rng), "bob") for i in range(10)]
    )
    q = unit(rng)
    await store.search(q, scope={"user_id": "alice"}, top_k=5)
    assert large_scopes(store) == {(("user_id", "alice"),): 20}

    await store.upsert([record(f"c{i}", unit(rng), "carol") for i in range(100)])
    same_hits(
        await store.search(q, scope={"user_id": "alice"}, top_k=5),
        await hnsw.search(q, scope={"user_id": "alice"}, top_k=5),
    )
    assert large_scopes(store) == {}


@pytest.mark.parametrize(("option", "value"), [("brute_force_max", -1), ("brute_force_share", 1.5)])
def test_chroma_bad_brute_force_limits_are_a_config_error(
    tmp_path: Path, option: str, value: float
) -> None:
    with pytest.raises(ConfigError, match=option):
        ChromaStore("agent_memory", model_version="m", dim=DIM, path=tmp_path, **{option: value})


# --- Chroma: shards -----------------------------------------------------------------------

MakeSharded = Callable[..., Awaitable[ChromaStore]]


@pytest.fixture(params=["chroma-embedded", "chroma-server"])
async def make_sharded(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MakeSharded]:
    """Opens Chroma stores sharded by user_id; the same name is the same store."""
    server = request.getfixturevalue("chroma_server") if request.param == "chroma-server" else None
    prefix = f"t{uuid.uuid4().hex[:12]}"
    opened: list[ChromaStore] = []

    async def make(
        shards: int = 8,
        *,
        name: str = "memory",
        model_version: str = "m",
        brute_force_max: int = 1000,
        brute_force_share: float = 1.0,
    ) -> ChromaStore:
        location: dict[str, Any] = {"url": server} if server else {"path": tmp_path / "c"}
        store = await ChromaStore.open(
            f"{prefix}_{name}",
            model_version=model_version,
            dim=DIM,
            brute_force_max=brute_force_max,
            brute_force_share=brute_force_share,
            shards=shards,
            shard_key="user_id" if shards > 1 else None,
            **location,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


def random_users(rng: random.Random, n: int) -> dict[str, list[VectorRecord]]:
    """``n`` users with random ids, each owning 5-30 records over two sessions."""
    users: dict[str, list[VectorRecord]] = {}
    for _ in range(n):
        user = f"user-{rng.getrandbits(48):012x}"
        users[user] = [
            record(f"{user}:m{i}#0", unit(rng), user, session_id=f"s{i % 2}", turn=i)
            for i in range(rng.randint(5, 30))
        ]
    return users


def collection_names(store: ChromaStore) -> set[str]:
    return {c.name for c in store._connect().list_collections()}


def shard_collections(store: ChromaStore) -> set[str]:
    """Names of the shard collections of ``store`` (the server holds other tests' too)."""
    return {n for n in collection_names(store) if n.startswith(f"{store.collection_name}.")}


async def test_chroma_shards_route_users_apart_and_search_only_the_users_own_vectors(
    make_sharded: MakeSharded,
) -> None:
    store = await make_sharded(8)
    rng = random.Random(40)
    users = random_users(rng, 60)
    await store.upsert([r for records in users.values() for r in records])

    # Every shard collection holds exactly the users that hash to it.
    assert len(open_shards(store)) == 8
    for index, shard in open_shards(store).items():
        rows = shard.collection.get(include=["metadatas"])
        owners = {m["user_id"] for m in rows["metadatas"]}
        assert owners == {u for u in users if shard_of(u, 8) == index}
    assert shard_collections(store) == {shard_name(store.collection_name, i, 8) for i in range(8)}

    for user in rng.sample(sorted(users), 30):
        own = {r.id for r in users[user]}
        for top_k in (3, 100):
            hits = await store.search(unit(rng), scope={"user_id": user}, top_k=top_k)
            assert len(hits) == min(top_k, len(own))
            assert {h.id for h in hits} <= own
            assert all(h.metadata["user_id"] == user for h in hits)
    assert await store.search(unit(rng), scope={"user_id": "mallory"}, top_k=10) == []


@pytest.mark.parametrize("brute_force_max", [0, 1000])
async def test_chroma_sharded_store_returns_the_hits_of_a_single_collection(
    make_sharded: MakeSharded, brute_force_max: int
) -> None:
    sharded = await make_sharded(8, brute_force_max=brute_force_max)
    single = await make_sharded(1, name="single", brute_force_max=brute_force_max)
    rng = random.Random(41)
    users = random_users(rng, 20)
    records = [r for rs in users.values() for r in rs]
    await sharded.upsert(records)
    await single.upsert(records)
    assert single.layout == "single collection" and sharded.layout == "8 shards by user_id"

    for user in users:
        q = unit(rng)
        for where in (None, {"session_id": "s1"}):
            same_hits(
                await sharded.search(q, scope={"user_id": user}, where=where, top_k=10),
                await single.search(q, scope={"user_id": user}, where=where, top_k=10),
            )
    # Without the shard key in the filter the search fans out over the shards and
    # merges by score: slower, same answer.
    for scope in ({"session_id": "s0"}, {"role": "missing"}):
        q = unit(rng)
        same_hits(
            await sharded.search(q, scope=scope, top_k=25),
            await single.search(q, scope=scope, top_k=25),
        )
        pair = [q, unit(rng)]
        fanned = await sharded.search_many(pair, scope=scope, top_k=25)
        for got, expected in zip(
            fanned, await single.search_many(pair, scope=scope, top_k=25), strict=True
        ):
            same_hits(got, expected)


async def test_chroma_sharded_brute_force_and_hnsw_agree_with_limits_per_shard(
    make_sharded: MakeSharded,
) -> None:
    # A share of 0.5 of each shard: alice's 20 vectors fit her shard's limit, bob's 90
    # do not, though both would fit half of the whole store.
    store = await make_sharded(4, brute_force_max=1000, brute_force_share=0.5)
    hnsw = await make_sharded(4, brute_force_max=0)
    rng = random.Random(42)
    alice, bob = "alice", "bob"
    assert shard_of(alice, 4) != shard_of(bob, 4)
    filler = [u for u in (f"f{i}" for i in range(100)) if shard_of(u, 4) == shard_of(alice, 4)]
    await store.upsert(
        [record(f"a{i}", unit(rng), alice) for i in range(20)]
        + [record(f"b{i}", unit(rng), bob) for i in range(90)]
        + [record(f"{u}#0", unit(rng), u) for u in filler[:30]]
        + [record(f"x{i}", unit(rng), f"x{i}") for i in range(200)]
    )
    for user in (alice, bob):
        for top_k in (1, 10, 100):
            q = unit(rng)
            same_hits(
                await store.search(q, scope={"user_id": user}, top_k=top_k),
                await hnsw.search(q, scope={"user_id": user}, top_k=top_k),
            )
    bob_shard = open_shards(store)[shard_of(bob, 4)]
    bob_count = bob_shard.collection.count()
    assert bob_count < (await store.count()) / 2
    assert bob_shard.brute_force_limit(1000, 0.5) == bob_count // 2
    assert bob_shard.large_scopes == {(("user_id", bob),): bob_count // 2}
    assert open_shards(store)[shard_of(alice, 4)].large_scopes == {}


async def test_chroma_sharded_search_sees_the_write_that_completed_before_it(
    make_sharded: MakeSharded,
) -> None:
    store = await make_sharded(4)
    rng = random.Random(43)
    for i in range(10):
        new = record(f"n{i}", unit(rng), f"user{i % 3}")
        await store.upsert([new])
        hits = await store.search(new.vector, scope={"user_id": f"user{i % 3}"}, top_k=1)
        assert hits[0].id == f"n{i}"


async def test_chroma_concurrent_searches_open_each_shard_once(
    make_sharded: MakeSharded, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await make_sharded(8)
    rng = random.Random(44)
    users = random_users(rng, 40)
    await writer.upsert([r for rs in users.values() for r in rs])
    await writer.close()

    reader = await make_sharded(8)
    assert open_shards(reader) == {}  # shards open on first use, not with the root
    opened: list[str] = []
    real_collection = reader._collection

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(name)
        return real_collection(name, *args, **kwargs)

    monkeypatch.setattr(reader, "_collection", counted)
    targets = [rng.choice(users[u]) for u in users for _ in range(3)]
    results = await asyncio.gather(
        *[
            reader.search(t.vector, scope={"user_id": str(t.metadata["user_id"])}, top_k=5)
            for t in targets
        ]
    )
    for target, hits in zip(targets, results, strict=True):
        assert hits[0].id == target.id
        assert all(h.metadata["user_id"] == target.metadata["user_id"] for h in hits)
    assert sorted(open_shards(reader)) == sorted({shard_of(u, 8) for u in users})
    assert sorted(opened) == sorted(
        shard_name(reader.collection_name, i, 8) for i in open_shards(reader)
    )


async def test_chroma_shard_layout_persists_across_reopen_with_another_shard_count(
    make_sharded: MakeSharded, caplog: pytest.LogCaptureFixture
) -> None:
    store = await make_sharded(4)
    rng = random.Random(45)
    users = random_users(rng, 10)
    await store.upsert([r for rs in users.values() for r in rs])
    total = await store.count()
    await store.close()

    with caplog.at_level(logging.WARNING, logger="memstack.stores.vectors"):
        again = await make_sharded(16)
        await make_sharded(16)
    assert again.layout == "4 shards by user_id"
    assert again.shards == 16  # the setting, overruled by the layout on disk
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "4 shard(s), not the configured 16" in warnings[0]
    assert await again.count() == total
    for user, records in users.items():
        hits = await again.search(records[0].vector, scope={"user_id": user}, top_k=3)
        assert hits[0].id == records[0].id
    # New records follow the old layout too.
    await again.upsert([record("late", unit(rng), "late-user")])
    assert await again.count({"user_id": "late-user"}) == 1
    assert {n.rsplit("-of-", 1)[1] for n in shard_collections(again)} == {"4"}


async def test_chroma_legacy_single_collection_with_data_keeps_being_read(
    make_sharded: MakeSharded, caplog: pytest.LogCaptureFixture
) -> None:
    old = await make_sharded(1)
    rng = random.Random(46)
    users = random_users(rng, 5)
    await old.upsert([r for rs in users.values() for r in rs])
    # What memstack wrote before sharding: the same collection, without a shard count.
    only_shard(old).collection.modify(metadata={VERSION_KEY: "m", DIM_KEY: DIM})
    await old.close()

    with caplog.at_level(logging.WARNING, logger="memstack.stores.vectors"):
        store = await make_sharded(8)
    assert store.layout.startswith("single collection (written before sharding")
    assert "memstack reindex" in caplog.text
    for user, records in users.items():
        hits = await store.search(records[-1].vector, scope={"user_id": user}, top_k=40)
        assert hits[0].id == records[-1].id and len(hits) == len(records)
    await store.upsert([record("new", unit(rng), "newcomer")])
    assert await store.count({"user_id": "newcomer"}) == 1
    assert shard_collections(store) == set()


async def test_chroma_empty_legacy_collection_takes_the_configured_layout(
    make_sharded: MakeSharded,
) -> None:
    old = await make_sharded(1)
    only_shard(old).collection.modify(metadata={VERSION_KEY: "m", DIM_KEY: DIM})
    await old.close()
    store = await make_sharded(8)
    assert store.layout == "8 shards by user_id"
    await store.close()
    assert (await make_sharded(2)).layout == "8 shards by user_id"


async def test_chroma_drop_removes_every_shard_and_the_next_open_takes_the_setting(
    make_sharded: MakeSharded,
) -> None:
    store = await make_sharded(4)
    rng = random.Random(47)
    await store.upsert([r for rs in random_users(rng, 10).values() for r in rs])
    root = store.collection_name
    other = await make_sharded(4, name="neighbour")
    await other.upsert([record("n", unit(rng), "u")])

    await store.drop()
    names = collection_names(store)
    assert not any(n == root or n.startswith(f"{root}.") for n in names)
    assert other.collection_name in names  # only this store's collections go

    again = await make_sharded(16)
    assert again.layout == "16 shards by user_id"
    assert await again.count() == 0
    # Dropping a legacy single collection re-shards it the same way.
    legacy = await make_sharded(1, name="legacy")
    await legacy.upsert([record("a", unit(rng), "u")])
    only_shard(legacy).collection.modify(metadata={VERSION_KEY: "m", DIM_KEY: DIM})
    await legacy.close()
    reopened = await make_sharded(4, name="legacy")
    assert reopened.layout.startswith("single collection (written before")
    await reopened.drop()
    await reopened.close()
    assert (await make_sharded(4, name="legacy")).layout == "4 shards by user_id"
    assert await other.count() == 1


async def test_chroma_sharded_count_with_and_without_the_shard_key(
    make_sharded: MakeSharded,
) -> None:
    store = await make_sharded(8)
    rng = random.Random(48)
    users = random_users(rng, 25)
    await store.upsert([r for rs in users.values() for r in rs])
    await store.close()
    store = await make_sharded(8)

    assert await store.count() == sum(len(rs) for rs in users.values())
    for user, records in users.items():
        assert await store.count({"user_id": user}) == len(records)
        assert await store.count({"user_id": user, "session_id": "s0"}) == len(
            [r for r in records if r.metadata["session_id"] == "s0"]
        )
    assert await store.count({"session_id": "s1"}) == sum(
        1 for rs in users.values() for r in rs if r.metadata["session_id"] == "s1"
    )
    # A user of a shard nobody wrote to: counted as 0, and no empty shard is created.
    empty = await make_sharded(64, name="sparse")
    await empty.upsert([record("a", unit(rng), "alice")])
    absent = next(
        u for u in (f"u{i}" for i in range(1000)) if shard_of(u, 64) != shard_of("alice", 64)
    )
    assert await empty.count({"user_id": absent}) == 0
    assert await empty.search(unit(rng), scope={"user_id": absent}, top_k=5) == []
    await empty.delete(scope={"user_id": absent})
    assert await empty.count() == 1
    assert shard_collections(empty) == {
        shard_name(empty.collection_name, shard_of("alice", 64), 64)
    }


async def test_chroma_sharded_delete_by_scope_only_touches_that_user(
    make_sharded: MakeSharded,
) -> None:
    store = await make_sharded(4)
    rng = random.Random(49)
    users = random_users(rng, 12)
    await store.upsert([r for rs in users.values() for r in rs])
    victim, *others = sorted(users)
    neighbour = next((u for u in others if shard_of(u, 4) == shard_of(victim, 4)), None)

    await store.delete(scope={"user_id": victim})
    assert await store.count({"user_id": victim}) == 0
    assert await store.search(users[victim][0].vector, scope={"user_id": victim}, top_k=5) == []
    for user in others:
        assert await store.count({"user_id": user}) == len(users[user])
    assert neighbour is None or await store.count({"user_id": neighbour}) > 0

    # ids outside the scope are not touched, in this user's shard or any other.
    target = others[0]
    foreign = [users[u][0].id for u in others[1:]]
    await store.delete(scope={"user_id": target}, ids=[users[target][0].id, *foreign])
    assert await store.count({"user_id": target}) == len(users[target]) - 1
    for user in others[1:]:
        assert await store.count({"user_id": user}) == len(users[user])

    # Without the shard key the delete fans out over every shard.
    await store.delete(scope={"session_id": "s0"})
    assert await store.count({"session_id": "s0"}) == 0
    assert await store.count({"session_id": "s1"}) == sum(
        1 for u in others for r in users[u] if r.metadata["session_id"] == "s1"
    )


@pytest.mark.parametrize(
    "bad_metadata", [{}, {"session_id": "s"}, {"user_id": 7}, {"user_id": True}]
)
async def test_chroma_sharded_record_without_a_string_shard_key_raises_and_writes_nothing(
    make_sharded: MakeSharded, bad_metadata: dict[str, Any]
) -> None:
    store = await make_sharded(4)
    rng = random.Random(50)
    good = [record(f"g{i}", unit(rng), f"user{i}") for i in range(10)]
    bad = VectorRecord("bad", "text", unit(rng), bad_metadata)
    with pytest.raises(ValidationError, match="'user_id'"):
        await store.upsert([*good, bad])
    assert await store.count() == 0


async def test_chroma_sharded_schema_mismatch_is_detected_on_the_root_and_on_shards(
    make_sharded: MakeSharded,
) -> None:
    store = await make_sharded(4)
    rng = random.Random(51)
    await store.upsert([record("a", unit(rng), "alice")])
    await store.close()
    with pytest.raises(SchemaMismatch, match="memstack reindex"):
        await make_sharded(4, model_version="other-model")

    # A shard written by another embedder (e.g. left over a failed drop) is refused
    # when it is first touched.
    shard = shard_name(store.collection_name, shard_of("alice", 4), 4)
    store._connect().get_collection(shard).modify(metadata={VERSION_KEY: "other", DIM_KEY: DIM})
    again = await make_sharded(4)
    with pytest.raises(SchemaMismatch, match="memstack reindex"):
        await again.search(unit(rng), scope={"user_id": "alice"}, top_k=1)


async def test_chroma_call_in_flight_across_a_drop_creates_no_orphan_shard(
    make_sharded: MakeSharded,
) -> None:
    store = await make_sharded(4)
    before = store._layout
    assert before is not None
    await store.drop()
    # A call that routed by the dropped layout must not recreate one of its shards: a
    # new root of the same count would adopt it.
    with pytest.raises(StoreError, match="dropped or closed"):
        store._shard(before, 0)
    assert shard_collections(store) == set()


def test_chroma_shard_routing_is_stable_across_processes() -> None:
    # A changed hash would strand every stored vector in a shard nobody reads: these
    # values are CRC-32 of the UTF-8 bytes, the same in every process and version.
    assert [shard_of(u, 64) for u in ("alice", "bob", "用户", "")] == [7, 0, 29, 0]
    assert shard_name("agent_memory", 3, 64) == "agent_memory.3-of-64"


@pytest.mark.parametrize(
    ("shards", "shard_key", "match"),
    [(0, "user_id", "shards"), (2000, "user_id", "shards"), (4, None, "shard_key")],
)
def test_chroma_bad_shard_settings_are_a_config_error(
    tmp_path: Path, shards: int, shard_key: str | None, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        ChromaStore(
            "agent_memory",
            model_version="m",
            dim=DIM,
            path=tmp_path,
            shards=shards,
            shard_key=shard_key,
        )


# --- Qdrant specifics ---------------------------------------------------------------------


async def test_qdrant_stores_on_one_path_share_a_client(tmp_path: Path) -> None:
    v = unit(random.Random(14))
    first = await QdrantStore.open("agent_memory", model_version="m", dim=DIM, path=tmp_path)
    second = await QdrantStore.open("agent_memory", model_version="m", dim=DIM, path=tmp_path)
    kb = await QdrantStore.open("agent_kb", model_version="m", dim=DIM, path=tmp_path)
    await first.upsert([record("a", v, "alice")])
    assert [h.id for h in await second.search(v, scope={"user_id": "alice"}, top_k=3)] == ["a"]
    assert await kb.search(v, scope={"user_id": "alice"}, top_k=3) == []
    await first.close()
    # The client stays open for the remaining users of the path.
    assert [h.id for h in await second.search(v, scope={"user_id": "alice"}, top_k=3)] == ["a"]
    await second.close()
    await kb.close()
    # ...and is released with the last one: a fresh open works.
    third = await QdrantStore.open("agent_memory", model_version="m", dim=DIM, path=tmp_path)
    assert await third.count() == 1
    await third.close()


async def test_qdrant_keeps_string_ids_and_text_out_of_metadata() -> None:
    store = await QdrantStore.open("agent_memory", model_version="m", dim=DIM, location=":memory:")
    v = unit(random.Random(15))
    await store.upsert(
        [VectorRecord("2024-01-01T00:00:00Z:s1:7#3", "预算八千", v, {"user_id": "u"})]
    )
    [hit] = await store.search(v, scope={"user_id": "u"}, top_k=1)
    assert hit.id == "2024-01-01T00:00:00Z:s1:7#3"
    assert hit.text == "预算八千"
    assert dict(hit.metadata) == {"user_id": "u"}
    assert point_id(hit.id) == point_id("2024-01-01T00:00:00Z:s1:7#3") != point_id("other")
    await store.close()


def test_constructing_a_store_connects_to_nothing() -> None:
    # Port 9 is discard: nothing listens there, so any connection attempt would fail.
    ChromaStore("agent_memory", model_version="m", dim=DIM, url="http://127.0.0.1:9")
    QdrantStore("agent_memory", model_version="m", dim=DIM, url="http://127.0.0.1:9")


# --- factory ---------------------------------------------------------------------------------


async def test_factory_builds_embedded_stores_under_home(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path, embedder="hashing", embed_dim=DIM, key_prefix="mx")
    embedder = HashingEmbedder(DIM)
    memory: VectorStore = await build_memory_store(settings, embedder)
    kb: VectorStore = await build_kb_store(settings, embedder)
    assert isinstance(memory, ChromaStore) and memory.collection_name == "mx_memory"
    # A new home's embedded knowledge base is qdrant-edge.
    assert isinstance(kb, QdrantEdgeStore) and kb.collection_name == "mx_kb"
    assert memory.model_version == kb.model_version == "hashing-v1-16"

    [vector] = await embedder.embed(["预算八千"])
    await memory.upsert([VectorRecord("m#0", "预算八千", vector, {"user_id": "u"})])
    await kb.upsert([VectorRecord("d#0", "预算八千", vector, {"kb": "default"})])
    assert (tmp_path / "chroma").is_dir() and (tmp_path / "qdrant-edge" / "mx_kb").is_dir()
    assert not (tmp_path / "qdrant").exists()
    assert (await memory.search(vector, scope={"user_id": "u"}, top_k=1))[0].id == "m#0"
    assert (await kb.search(vector, scope={"kb": "default"}, top_k=1))[0].id == "d#0"
    await memory.close()
    await kb.close()


async def test_factory_shards_semantic_memory_by_user_and_never_the_knowledge_base(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        home=tmp_path, embedder="hashing", embed_dim=DIM, kb_store="chroma", chroma_shards=4
    )
    memory = await build_memory_store(settings, HashingEmbedder(DIM))
    kb = await build_kb_store(settings, HashingEmbedder(DIM))
    assert isinstance(memory, ChromaStore) and isinstance(kb, ChromaStore)
    await memory.ensure_open()
    await kb.ensure_open()
    assert memory.layout == "4 shards by user_id"
    assert kb.layout == "single collection"
    await memory.close()
    await kb.close()


async def test_factory_uses_server_urls(tmp_path: Path, chroma_server: str) -> None:
    settings = load_settings(
        home=tmp_path,
        vector_store="chroma",
        vector_url=chroma_server,
        kb_store="qdrant",
        kb_url="http://127.0.0.1:9",
        key_prefix=f"f{uuid.uuid4().hex[:8]}",
    )
    memory = await build_memory_store(settings, HashingEmbedder(DIM))
    kb = await build_kb_store(settings, HashingEmbedder(DIM))
    assert isinstance(memory, ChromaStore) and memory.location == chroma_server
    assert isinstance(kb, QdrantStore) and kb.location == "http://127.0.0.1:9"
    await memory.upsert([record("a", unit(random.Random(16)), "u")])
    assert await memory.count() == 1
    assert memory.layout == f"{settings.chroma_shards} shards by user_id"
    assert not (tmp_path / "chroma").exists()
    await memory.close()
    await kb.close()


# --- qdrant-edge specifics -------------------------------------------------------------------


async def test_factory_keeps_an_existing_local_mode_knowledge_base(tmp_path: Path) -> None:
    """A home from before qdrant-edge keeps its knowledge base in local mode: upgrading
    loses no document; a new home (or another key prefix) gets qdrant-edge."""
    v = unit(random.Random(20))
    old = await QdrantStore.open(
        "mx_kb", model_version="hashing-v1-16", dim=DIM, path=tmp_path / "qdrant"
    )
    await old.upsert([VectorRecord("doc#0", "old document", v, {"kb": "default"})])
    await old.close()
    settings = load_settings(home=tmp_path, embedder="hashing", embed_dim=DIM, key_prefix="mx")
    kb = await build_kb_store(settings, HashingEmbedder(DIM))
    assert isinstance(kb, QdrantStore)
    [hit] = await kb.search(v, scope={"kb": "default"}, top_k=3)
    assert (hit.id, hit.text) == ("doc#0", "old document")
    await kb.close()
    other = load_settings(home=tmp_path, embedder="hashing", embed_dim=DIM, key_prefix="my")
    fresh = await build_kb_store(other, HashingEmbedder(DIM))
    assert isinstance(fresh, QdrantEdgeStore) and await fresh.count() == 0
    await fresh.close()
    # Asked for by name, qdrant-edge is used even beside an old local-mode one.
    chosen = load_settings(
        home=tmp_path, embedder="hashing", embed_dim=DIM, key_prefix="mx", kb_store="qdrant-edge"
    )
    edge = await build_kb_store(chosen, HashingEmbedder(DIM))
    assert isinstance(edge, QdrantEdgeStore) and await edge.count() == 0
    await edge.close()


async def test_factory_rejects_a_url_for_qdrant_edge(tmp_path: Path) -> None:
    settings = load_settings(
        home=tmp_path, embedder="hashing", embed_dim=DIM, kb_store="qdrant-edge", kb_url="http://x"
    )
    with pytest.raises(ConfigError, match="qdrant-edge"):
        await build_kb_store(settings, HashingEmbedder(DIM))


async def test_qdrant_edge_bool_metadata_round_trips_and_filters(tmp_path: Path) -> None:
    store = await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path)
    rng = random.Random(21)
    await store.upsert([record(f"p{i}", unit(rng), "u", pinned=i % 2 == 0, n=i) for i in range(6)])
    pinned = await store.search(unit(rng), scope={"user_id": "u"}, where={"pinned": True}, top_k=10)
    assert sorted(h.id for h in pinned) == ["p0", "p2", "p4"]
    assert all(h.metadata["pinned"] is True for h in pinned)
    assert "memstack_bool__pinned" not in pinned[0].metadata
    unpinned = await store.count({"user_id": "u", "pinned": False})
    assert unpinned == 3
    with pytest.raises(ValidationError, match="reserved"):
        await store.upsert([record("x", unit(rng), "u", **{"memstack_bool__a": "true"})])
    await store.close()


async def test_qdrant_edge_stores_on_one_folder_share_a_handle(tmp_path: Path) -> None:
    v = unit(random.Random(22))
    first = await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path)
    second = await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path / ".")
    await first.upsert([record("a", v, "alice")])
    await first.close()
    assert [h.id for h in await second.search(v, scope={"user_id": "alice"}, top_k=3)] == ["a"]
    # A drop by one store is seen by the other, which starts an empty collection.
    await second.drop()
    third = await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path)
    assert await third.count() == 0
    await third.upsert([record("b", v, "alice")])
    await third.close()
    again = await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path)
    assert await again.count() == 1
    await again.close()


async def test_qdrant_edge_folder_held_elsewhere_is_store_unavailable(tmp_path: Path) -> None:
    import qdrant_edge

    store = await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path)
    await store.close()
    # Another process's open locks the WAL the same way a second load does.
    holder = qdrant_edge.EdgeShard.load(str(tmp_path / "kb" / "shard"))
    try:
        with pytest.raises(StoreUnavailable, match="qdrant-edge"):
            await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path)
    finally:
        holder.close()
    reopened = await QdrantEdgeStore.open("kb", model_version="m", dim=DIM, path=tmp_path)
    assert await reopened.count() == 0
    await reopened.close()
