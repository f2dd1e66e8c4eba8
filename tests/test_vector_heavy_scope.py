"""One user who owns most of a collection, beside a few others: Chroma searches such a
scope with the unfiltered query, over-fetched and checked hit by hit
(``memstack.stores.vectors.chroma_wide``). Its hits must be exactly that user's, the
same as an exact cosine ranking of the user's own vectors, with every ``where``
honoured, and the filtered query must answer whenever too few fetched rows survive.
Qdrant (local mode, qdrant-edge) filters inside its search and is held to the same
reference.

The collections are small enough (under 2,000 16-d vectors, top 10) that Chroma's HNSW
with its default ``ef_search`` of 100 returns the exact neighbours, so the reference is
compared id for id rather than with a tolerance.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings as ChromaSettings

from memstack.core.errors import ConfigError
from memstack.stores.vectors.base import MetaValue, VectorHit, VectorRecord
from memstack.stores.vectors.chroma import ChromaStore
from memstack.stores.vectors.chroma_shards import Shard, shard_of
from memstack.stores.vectors.chroma_wide import WIDE_SHARE_MIN, matches
from memstack.stores.vectors.overfetch import REPROBE_EVERY
from memstack.stores.vectors.qdrant import QdrantStore
from memstack.stores.vectors.qdrant_edge import QdrantEdgeStore
from tests.test_vectorstores import start_chroma_server

DIM = 16
TOP_K = 10
HEAVY = "alice"
OTHERS = ("bob", "carol", "dave")

MakeChroma = Callable[..., Awaitable[ChromaStore]]


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_chroma_server(tmp_path_factory.mktemp("heavy-scope-server"))
    yield server.url
    server.stop()


@pytest.fixture(params=["chroma-embedded", "chroma-server"])
async def make_chroma(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeChroma]:
    """Opens one unsharded Chroma store per test (the same name is the same store)."""
    url = request.getfixturevalue("chroma_url") if request.param == "chroma-server" else None
    name = f"heavy{random.getrandbits(40):010x}"
    opened: list[ChromaStore] = []

    async def make(**options: Any) -> ChromaStore:
        location: dict[str, Any] = {"url": url} if url else {"path": tmp_path / "c"}
        store = await ChromaStore.open(name, model_version="m", dim=DIM, **location, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


def unit(rng: np.random.Generator, centre: np.ndarray | None = None, spread: float = 1.0) -> Any:
    v = rng.standard_normal(DIM) * spread + (0 if centre is None else centre)
    return v / np.linalg.norm(v)


def heavy_records(rng: np.random.Generator, heavy: int, others: int) -> list[VectorRecord]:
    """``heavy`` vectors of alice's and ``others`` each of bob's, carol's and dave's, with
    metadata that a ``where`` can pick: role, pinned (a bool), flag (a bool or an int)."""
    records = []
    for i in range(heavy):
        meta: dict[str, MetaValue] = {
            "user_id": HEAVY,
            "role": "user" if i % 2 else "assistant",
            "pinned": i % 10 == 0,
            "flag": True if i % 3 == 0 else 1,
            "turn": i,
        }
        records.append(VectorRecord(f"{HEAVY}:{i}", f"a{i}", unit(rng).tolist(), meta))
    for user in OTHERS:
        for i in range(others):
            meta = {"user_id": user, "role": "user", "pinned": True, "flag": 1, "turn": i}
            records.append(VectorRecord(f"{user}:{i}", f"{user}{i}", unit(rng).tolist(), meta))
    return records


def exact(
    records: list[VectorRecord], query: Any, pairs: dict[str, MetaValue], top_k: int = TOP_K
) -> list[str]:
    """The ids of the exact cosine top ``top_k`` of the records matching ``pairs``."""
    kept = [r for r in records if matches(r.metadata, tuple(pairs.items()))]
    if not kept:
        return []
    matrix = np.asarray([r.vector for r in kept])
    sims = matrix @ query / np.linalg.norm(matrix, axis=1) / np.linalg.norm(query)
    return [kept[k].id for k in np.argsort(-sims, kind="stable")[:top_k]]


def only_shard(store: ChromaStore) -> Shard:
    assert store._layout is not None
    shard: Shard = store._layout.shards[0]
    return shard


class FilteredQueries:
    """Counts the queries that a shard sends to Chroma's filtered query."""

    def __init__(self, shard: Shard, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[int] = []
        real = shard.hnsw

        def hnsw(queries: list[list[float]], *args: Any) -> list[list[VectorHit]]:
            self.calls.append(len(queries))
            return real(queries, *args)

        monkeypatch.setattr(shard, "hnsw", hnsw)


async def test_heavy_user_gets_exactly_their_own_nearest_vectors(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_chroma()
    rng = np.random.default_rng(1)
    records = heavy_records(rng, 1200, 60)
    await store.upsert(records)
    scope = {"user_id": HEAVY}
    await store.search(unit(rng).tolist(), scope=scope, top_k=TOP_K)
    filtered = FilteredQueries(only_shard(store), monkeypatch)
    # Random queries, and queries sitting on other users' vectors: their nearest rows
    # are someone else's, which the check on each hit must drop.
    queries = [unit(rng) for _ in range(20)] + [np.asarray(r.vector) for r in records[-30:]]
    for q in queries:
        expected = exact(records, q, scope)
        hits = await store.search(q.tolist(), scope=scope, top_k=TOP_K)
        assert [h.id for h in hits] == expected
        assert all(h.metadata["user_id"] == HEAVY and h.text for h in hits)
        sims = [float(q @ np.asarray(records[int(h.id.split(":")[1])].vector)) for h in hits]
        assert [h.score for h in hits] == pytest.approx(sims, abs=1e-5)
    pair = [queries[0].tolist(), queries[-1].tolist()]
    bare = await store.search_many(pair, scope=scope, top_k=TOP_K, fields="ids")
    for got, q in zip(bare, pair, strict=True):
        assert [h.id for h in got] == exact(records, np.asarray(q), scope)
        assert all(not h.text and not h.metadata for h in got)
    # Every one of these went unfiltered: alice is ~87 % of the collection.
    assert filtered.calls == []
    share = only_shard(store).shares.share((("user_id", HEAVY),))
    assert share is not None and 0.6 < share <= 1.0


async def test_where_conditions_hold_on_the_unfiltered_path(make_chroma: MakeChroma) -> None:
    store = await make_chroma()
    rng = np.random.default_rng(2)
    records = heavy_records(rng, 1200, 60)
    await store.upsert(records)
    cases: list[dict[str, MetaValue]] = [
        {"role": "user"},  # half of alice's: still unfiltered
        {"role": "user", "flag": 1},  # an int 1 matches ints, never the bool True
        {"flag": True},  # and True matches only bools
        {"pinned": True},  # a tenth: the learnt share sends it to the filtered query
        {"turn": 7},
        {"turn": 7.0},  # numbers compare by value, as Chroma's where does
        {"user_id": "bob"},  # contradicts the scope: nothing
        {"role": "nobody"},
    ]
    for where in cases:
        for q in [unit(rng) for _ in range(3)] + [np.asarray(records[7].vector)]:
            pairs = {"user_id": HEAVY, **where} if "user_id" not in where else {"x": "never"}
            hits = await store.search(
                q.tolist(), scope={"user_id": HEAVY}, top_k=TOP_K, where=where
            )
            assert [h.id for h in hits] == exact(records, q, pairs), where
            for h in hits:
                assert h.metadata["user_id"] == HEAVY
                assert matches(h.metadata, tuple(where.items()))


async def test_too_few_survivors_fall_back_to_the_filtered_query(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    # alice owns 89 % of the collection, but bob's 150 vectors sit in one tight cluster:
    # a query there fetches only bob's rows unfiltered, and must still get alice's.
    store = await make_chroma()
    rng = np.random.default_rng(3)
    centre = unit(rng) * 4
    records = [
        VectorRecord(f"alice:{i}", "", unit(rng).tolist(), {"user_id": HEAVY}) for i in range(1200)
    ] + [
        VectorRecord(f"bob:{i}", "", unit(rng, centre, 0.3).tolist(), {"user_id": "bob"})
        for i in range(150)
    ]
    await store.upsert(records)
    scope = {"user_id": HEAVY}
    shard_ready = await store.search(unit(rng).tolist(), scope=scope, top_k=TOP_K)
    assert len(shard_ready) == TOP_K
    filtered = FilteredQueries(only_shard(store), monkeypatch)
    in_cluster, elsewhere = unit(rng, centre, 0.3), unit(rng)
    got = await store.search_many(
        [in_cluster.tolist(), elsewhere.tolist()], scope=scope, top_k=TOP_K
    )
    assert [h.id for h in got[0]] == exact(records, in_cluster, scope)
    assert [h.id for h in got[1]] == exact(records, elsewhere, scope)
    # Only the query that fell short went to the filtered query.
    assert filtered.calls == [1]
    # bob's search learns a small share from his first (unfiltered) try; then his
    # searches go straight to the filtered query, but for a new try every few searches
    # (a heavy scope misjudged once must not stay on the slow path).
    bob = await store.search(unit(rng).tolist(), scope={"user_id": "bob"}, top_k=TOP_K)
    assert all(h.metadata["user_id"] == "bob" for h in bob) and len(bob) == TOP_K
    bob_share = only_shard(store).shares.share((("user_id", "bob"),))
    assert bob_share is not None and bob_share < WIDE_SHARE_MIN
    filtered.calls.clear()
    for _ in range(REPROBE_EVERY):
        q = unit(rng)
        got = await store.search_many([q.tolist()], scope={"user_id": "bob"}, top_k=TOP_K)
        assert [h.id for h in got[0]] == exact(records, q, {"user_id": "bob"})
    # Each search went filtered: the 8th tried unfiltered first and fell short.
    assert filtered.calls == [1] * REPROBE_EVERY
    bob_share = only_shard(store).shares.share((("user_id", "bob"),))
    assert bob_share is not None and bob_share < WIDE_SHARE_MIN


async def test_a_search_sees_the_writes_that_completed_before_it(make_chroma: MakeChroma) -> None:
    store = await make_chroma()
    rng = np.random.default_rng(4)
    records = heavy_records(rng, 800, 50)
    await store.upsert(records)
    scope = {"user_id": HEAVY}
    await store.search(unit(rng).tolist(), scope=scope, top_k=TOP_K)
    q = unit(rng)
    mine = VectorRecord("alice:new", "new", q.tolist(), {"user_id": HEAVY})
    theirs = VectorRecord("bob:new", "new", q.tolist(), {"user_id": "bob"})
    await store.upsert([mine, theirs])
    hits = await store.search(q.tolist(), scope=scope, top_k=TOP_K)
    assert hits[0].id == "alice:new" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert "bob:new" not in {h.id for h in hits}
    await store.delete(scope=scope, ids=["alice:new"])
    hits = await store.search(q.tolist(), scope=scope, top_k=TOP_K)
    assert [h.id for h in hits] == exact(records, q, scope)
    # A row moved to another user since it was written is not alice's any more.
    moved = records[int(hits[0].id.split(":")[1])]
    await store.upsert([VectorRecord(moved.id, "", list(moved.vector), {"user_id": "bob"})])
    hits = await store.search(q.tolist(), scope=scope, top_k=TOP_K)
    assert moved.id not in {h.id for h in hits}
    assert all(h.metadata["user_id"] == HEAVY for h in hits)


async def test_tiny_collection_is_answered_whole_by_one_unfiltered_query(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 % of 23 vectors is no brute force at all; asking for more rows than exist
    # returns the whole collection, so carol's one survivor is all she has.
    store = await make_chroma()
    rng = np.random.default_rng(5)
    records = heavy_records(rng, 20, 1)
    await store.upsert(records)
    await store.search(unit(rng).tolist(), scope={"user_id": HEAVY}, top_k=TOP_K)
    filtered = FilteredQueries(only_shard(store), monkeypatch)
    q = unit(rng)
    for user, n in ((HEAVY, TOP_K), ("carol", 1)):
        hits = await store.search(q.tolist(), scope={"user_id": user}, top_k=TOP_K)
        assert len(hits) == n and [h.id for h in hits] == exact(records, q, {"user_id": user})
    assert filtered.calls == []


async def test_overfetch_max_zero_keeps_the_filtered_query(
    make_chroma: MakeChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_chroma(overfetch_max=0)
    rng = np.random.default_rng(6)
    records = heavy_records(rng, 300, 20)
    await store.upsert(records)
    await store.search(unit(rng).tolist(), scope={"user_id": HEAVY}, top_k=TOP_K)
    filtered = FilteredQueries(only_shard(store), monkeypatch)
    q = unit(rng)
    hits = await store.search(q.tolist(), scope={"user_id": HEAVY}, top_k=TOP_K)
    assert [h.id for h in hits] == exact(records, q, {"user_id": HEAVY})
    assert filtered.calls == [1] and not only_shard(store).shares.seen
    with pytest.raises(ConfigError, match="overfetch_max"):
        ChromaStore("x_memory", model_version="m", dim=DIM, path="/nonexistent", overfetch_max=-1)


async def test_heavy_user_in_a_shard_shared_with_others(tmp_path: Path) -> None:
    shards = 4
    home = shard_of(HEAVY, shards)
    neighbours = [u for u in (f"user{i}" for i in range(50)) if shard_of(u, shards) == home][:3]
    store = await ChromaStore.open(
        "sharded_memory",
        model_version="m",
        dim=DIM,
        path=tmp_path,
        shards=shards,
        shard_key="user_id",
    )
    rng = np.random.default_rng(7)
    records = [
        VectorRecord(f"{u}:{i}", "", unit(rng).tolist(), {"user_id": u})
        for u, n in [(HEAVY, 1000), *((u, 80) for u in neighbours)]
        for i in range(n)
    ]
    await store.upsert(records)
    for user in (HEAVY, *neighbours):
        for q in [unit(rng) for _ in range(5)] + [np.asarray(records[-1].vector)]:
            hits = await store.search(q.tolist(), scope={"user_id": user}, top_k=TOP_K)
            assert [h.id for h in hits] == exact(records, q, {"user_id": user})
    assert store._layout is not None
    assert store._layout.shards[home].shares.share((("user_id", HEAVY),)) is not None
    await store.close()


def test_matches_judges_types_as_chromas_where_does(tmp_path: Path) -> None:
    client = chromadb.PersistentClient(
        path=str(tmp_path), settings=ChromaSettings(anonymized_telemetry=False)
    )
    collection = client.create_collection("types", embedding_function=None)
    values: list[MetaValue] = [True, False, 1, 0, 1.0, 2.5, "1", "True", ""]
    ids = [f"v{i}" for i in range(len(values))]
    collection.add(
        ids=ids,
        embeddings=[[1.0, float(i)] for i in range(len(values))],
        metadatas=[{"v": v, "w": "x"} for v in values],
    )
    for value in [*values, 2, -1.0, "x"]:
        expected = sorted(collection.get(where={"v": value})["ids"])
        got = sorted(
            i for i, v in zip(ids, values, strict=True) if matches({"v": v}, (("v", value),))
        )
        assert got == expected, value
    assert not matches({"w": "x"}, (("v", 1),))


@pytest.mark.parametrize("backend", ["qdrant-local", "qdrant-edge"])
async def test_qdrant_heavy_user_gets_exactly_their_own_nearest_vectors(
    backend: str, tmp_path: Path
) -> None:
    # Local mode searches alice unfiltered and checks each hit with its own filter
    # function; edge filters inside its search (below its indexing threshold, a scan).
    # Both are exact here: the same reference.
    store: QdrantStore | QdrantEdgeStore
    if backend == "qdrant-local":
        # Local mode has no payload indexes: asking for them must change nothing.
        store = await QdrantStore.open(
            "heavy_memory", model_version="m", dim=DIM, path=tmp_path, index_keys=("user_id",)
        )
    else:
        store = await QdrantEdgeStore.open(
            "heavy_memory", model_version="m", dim=DIM, path=tmp_path
        )
    rng = np.random.default_rng(8)
    records = heavy_records(rng, 1200, 60)
    await store.upsert(records)
    for where in (None, {"role": "user"}, {"pinned": True}):
        pairs = {"user_id": HEAVY, **(where or {})}
        for q in [unit(rng) for _ in range(5)] + [np.asarray(records[-1].vector)]:
            got = await store.search_many(
                [q.tolist()], scope={"user_id": HEAVY}, top_k=TOP_K, where=where, fields="ids"
            )
            assert [h.id for h in got[0]] == exact(records, q, pairs)
            assert not got[0][0].metadata and not got[0][0].text
    if isinstance(store, QdrantStore):
        # Local mode searched alice unfiltered; her pinned tenth fell back to the filter.
        heavy = store._shares.share((("user_id", HEAVY),))
        pinned = store._shares.share((("user_id", HEAVY), ("pinned", True)))
        assert heavy is not None and heavy > 0.6
        assert pinned is not None and pinned < WIDE_SHARE_MIN
        full = await store.search(records[0].vector, scope={"user_id": HEAVY}, top_k=TOP_K)
        assert full[0].id == records[0].id and full[0].text == records[0].text
        assert full[0].metadata == records[0].metadata
    await store.close()
