"""The same behaviour over Chroma embedded, a real ``chroma run`` server, and Qdrant local."""

from __future__ import annotations

import asyncio
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

from memstack.embedders import HashingEmbedder
from memstack.errors import ConfigError, SchemaMismatch, StoreUnavailable, ValidationError
from memstack.settings import load_settings
from memstack.vectorstores.base import VectorHit, VectorRecord, VectorStore
from memstack.vectorstores.chroma import ChromaStore
from memstack.vectorstores.factory import build_kb_store, build_memory_store
from memstack.vectorstores.qdrant import QdrantStore, point_id

DIM = 16
BACKENDS = ["chroma-embedded", "chroma-server", "qdrant-local"]

Store = ChromaStore | QdrantStore
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
        elif backend == "chroma-server":
            store = await ChromaStore.open(
                collection, model_version=model_version, dim=dim, url=server
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
    # bob went to HNSW on the threshold store, and is remembered as too large for a get.
    assert threshold._large_scopes == {(("user_id", "bob"),): 100}
    assert brute._large_scopes == {}


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
            if target.metadata["user_id"] == user:
                assert hits[0].id == target.id
                assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert await store.search(unit(rng), scope={"user_id": "mallory"}, top_k=10) == []
    assert store._large_scopes == {}


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
    assert store._large_scopes == {}
    # Without the where, bob is too large and takes the HNSW path.
    q = unit(rng)
    same_hits(
        await store.search(q, scope={"user_id": "bob"}, top_k=5),
        await hnsw.search(q, scope={"user_id": "bob"}, top_k=5),
    )
    assert store._large_scopes == {(("user_id", "bob"),): 30}


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
    assert store._large_scopes == {(("user_id", "alice"),): 10}

    await store.delete(scope={"user_id": "alice"}, ids=[f"a{i}" for i in range(10)])
    assert store._large_scopes == {}
    hits = await store.search(q, scope={"user_id": "alice"}, top_k=15)
    assert sorted(h.id for h in hits) == [f"a{i}" for i in range(10, 15)]
    same_hits(hits, await hnsw.search(q, scope={"user_id": "alice"}, top_k=15))
    assert store._large_scopes == {}


async def test_chroma_brute_force_drops_rows_changed_between_its_two_reads(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_chroma(100)
    rng = random.Random(25)
    records = [record(f"a{i}", unit(rng), "alice") for i in range(10)]
    await store.upsert(records)
    collection = store._collection
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

    held = HeldScopeReads(store._collection, monkeypatch)
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
    held = HeldScopeReads(store._collection, monkeypatch)
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
    assert store._large_scopes == {(("user_id", "bob"),): 95}


async def test_chroma_defaults_keep_hnsw_for_a_user_who_owns_the_collection(
    tmp_path: Path,
) -> None:
    store = await ChromaStore.open("agent_memory", model_version="m", dim=DIM, path=tmp_path)
    rng = random.Random(27)
    await store.upsert([record(f"a{i}", unit(rng), "alice") for i in range(30)])
    assert len(await store.search(unit(rng), scope={"user_id": "alice"}, top_k=5)) == 5
    # 2% of 30 vectors is a limit of 0: not even a probe, so nothing is remembered.
    assert store._brute_force_limit(store._collection) == 0
    assert store._large_scopes == {}
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
    assert store._large_scopes == {(("user_id", "alice"),): 20}

    await store.upsert([record(f"c{i}", unit(rng), "carol") for i in range(100)])
    same_hits(
        await store.search(q, scope={"user_id": "alice"}, top_k=5),
        await hnsw.search(q, scope={"user_id": "alice"}, top_k=5),
    )
    assert store._large_scopes == {}


@pytest.mark.parametrize(("option", "value"), [("brute_force_max", -1), ("brute_force_share", 1.5)])
def test_chroma_bad_brute_force_limits_are_a_config_error(
    tmp_path: Path, option: str, value: float
) -> None:
    with pytest.raises(ConfigError, match=option):
        ChromaStore("agent_memory", model_version="m", dim=DIM, path=tmp_path, **{option: value})


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
    assert isinstance(kb, QdrantStore) and kb.collection_name == "mx_kb"
    assert memory.model_version == kb.model_version == "hashing-v1-16"

    [vector] = await embedder.embed(["预算八千"])
    await memory.upsert([VectorRecord("m#0", "预算八千", vector, {"user_id": "u"})])
    await kb.upsert([VectorRecord("d#0", "预算八千", vector, {"kb": "default"})])
    assert (tmp_path / "chroma").is_dir() and (tmp_path / "qdrant").is_dir()
    assert (await memory.search(vector, scope={"user_id": "u"}, top_k=1))[0].id == "m#0"
    assert (await kb.search(vector, scope={"kb": "default"}, top_k=1))[0].id == "d#0"
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
    assert not (tmp_path / "chroma").exists()
    await memory.close()
    await kb.close()
