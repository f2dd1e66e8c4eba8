"""memstack.integrations.langgraph.MemstackStore: LangGraph's BaseStore on memstack.

LangGraph ships no store conformance suite, so the behavioural tests below encode the
semantics of its reference InMemoryStore and run against it as well as against
MemstackStore (on the real Redis and PostgreSQL, and embedded): a test that passes on
both states LangGraph's behaviour, not memstack's reading of it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import zlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from memstack import AsyncMemory, Conflict, InvalidContent, InvalidId, Memory, NotFound
from memstack import ValidationError as MemstackValidationError
from memstack.core.settings import Settings
from memstack.integrations.langgraph import MAX_KEY_LEN, MemstackStore
from tests.conftest import _cleanup, make_settings, new_id

DIMS = 256


def _bag_of_words(texts: Sequence[str]) -> list[list[float]]:
    """A deterministic embedding for InMemoryStore: words hashed into DIMS buckets."""
    out = []
    for text in texts:
        v = [0.0] * DIMS
        for word in json.dumps(text).lower().replace('"', " ").replace(",", " ").split():
            v[zlib.crc32(word.strip(".:{}").encode()) % DIMS] += 1.0
        out.append(v)
    return out


@pytest.fixture
def memory(any_settings: Settings) -> Iterator[Memory]:
    yield from _open(any_settings)


def _open(settings: Settings) -> Iterator[Memory]:
    m = Memory(settings)
    yield m
    m._run(_cleanup(m.aio))
    m.close()


@pytest.fixture(params=["memstack-services", "memstack-embedded", "langgraph-inmemory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    """MemstackStore (services and embedded) or LangGraph's own InMemoryStore.

    Each MemstackStore gets its own marker, so in the shared test database it sees
    only the namespaces of its test."""
    if request.param == "langgraph-inmemory":
        yield InMemoryStore(index=IndexConfig(dims=DIMS, embed=_bag_of_words))
        return
    if request.param == "memstack-services":
        settings = make_settings(
            tmp_path,
            redis_url=request.getfixturevalue("redis_url"),
            database_url=request.getfixturevalue("pg_url"),
            auto_migrate=False,
        )
    else:
        settings = make_settings(tmp_path)
    for m in _open(settings):
        yield MemstackStore(m, marker=new_id("lg"))


def _keys(items: list[Any]) -> list[str]:
    return [i.key for i in items]


# --- behaviour shared with LangGraph's InMemoryStore ----------------------------------
def test_put_get_update_delete(store: BaseStore) -> None:
    ns = (new_id("u"), "memories")
    assert store.get(ns, "k1") is None
    store.put(ns, "k1", {"text": "likes tea", "tags": ["a", 1, None], "deep": {"x": 1.5}})
    item = store.get(ns, "k1")
    assert isinstance(item, Item)
    assert (item.namespace, item.key) == (ns, "k1")
    assert item.value == {"text": "likes tea", "tags": ["a", 1, None], "deep": {"x": 1.5}}
    assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
    assert item.updated_at >= item.created_at

    store.put(ns, "k1", {"text": "likes coffee"})  # an update replaces the whole value
    updated = store.get(ns, "k1")
    assert updated is not None and updated.value == {"text": "likes coffee"}
    assert updated.updated_at >= item.updated_at

    store.delete(ns, "k1")
    assert store.get(ns, "k1") is None
    store.delete(ns, "k1")  # deleting what is not there is no error
    store.delete(ns, "never-there")

    store.put(ns, "k1", {"text": "likes coffee"})  # the same key and value again, after delete
    again = store.get(ns, "k1")
    assert again is not None and again.value == {"text": "likes coffee"}
    assert len(store.search(ns)) == 1


def test_namespaces_and_users_are_separate(store: BaseStore) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    store.put((alice, "m"), "k", {"text": "alice's secret: the blue door"})
    store.put((alice, "other"), "k", {"text": "alice's other"})
    store.put((bob, "m"), "k", {"text": "bob's note about lunch"})
    a, b = store.get((alice, "m"), "k"), store.get((bob, "m"), "k")
    assert a is not None and a.value == {"text": "alice's secret: the blue door"}
    assert b is not None and b.value == {"text": "bob's note about lunch"}
    assert [i.value for i in store.search((bob,))] == [{"text": "bob's note about lunch"}]
    assert all(i.namespace[0] == bob for i in store.search((bob,), query="secret blue door"))
    assert store.list_namespaces(prefix=(bob,)) == [(bob, "m")]
    assert store.list_namespaces(prefix=(alice,)) == [(alice, "m"), (alice, "other")]
    store.delete((bob, "m"), "k")
    assert store.get((alice, "m"), "k") is not None


def test_search_filter_limit_offset(store: BaseStore) -> None:
    user = new_id("u")
    for i in range(5):
        kind = "even" if i % 2 == 0 else "odd"
        store.put((user, "items"), f"k{i}", {"i": i, "kind": kind, "meta": {"n": i}})
    store.put((user, "elsewhere"), "x", {"i": 99, "kind": "even"})

    assert sorted(_keys(store.search((user, "items")))) == [f"k{i}" for i in range(5)]
    assert len(store.search((user,))) == 6
    even = store.search((user, "items"), filter={"kind": "even"})
    assert sorted(_keys(even)) == ["k0", "k2", "k4"]
    assert all(i.score is None for i in even)
    assert sorted(_keys(store.search((user,), filter={"i": {"$gte": 3}}))) == ["k3", "k4", "x"]
    assert _keys(store.search((user,), filter={"i": {"$lt": 1}})) == ["k0"]
    assert _keys(store.search((user,), filter={"kind": {"$ne": "even"}, "i": 3})) == ["k3"]
    assert _keys(store.search((user,), filter={"meta": {"n": 2}})) == ["k2"]
    assert store.search((user,), filter={"kind": "none"}) == []

    assert len(store.search((user, "items"), limit=2)) == 2
    pages = [store.search((user, "items"), limit=2, offset=o) for o in (0, 2, 4)]
    assert [len(p) for p in pages] == [2, 2, 1]
    assert sorted(k for p in pages for k in _keys(p)) == [f"k{i}" for i in range(5)]
    assert store.search((user, "items"), offset=5) == []


def test_search_by_query(store: BaseStore) -> None:
    user = new_id("u")
    ns = (user, "memories")
    store.put(ns, "pizza", {"text": "Alice loves pizza with mushrooms", "kind": "food"})
    store.put(ns, "dog", {"text": "Alice walks her dog Rex every morning", "kind": "pet"})
    store.put(ns, "job", {"text": "Alice works as a nurse in Lisbon", "kind": "work"})
    store.put((new_id("other"), "memories"), "pizza", {"text": "Bob loves pizza too"})

    hits = store.search((user,), query="pizza mushrooms")
    assert hits and hits[0].key == "pizza" and hits[0].namespace == ns
    assert hits[0].score is not None
    assert all(h.namespace[0] == user for h in hits)
    assert _keys(store.search((user,), query="dog Rex", limit=1)) == ["dog"]
    assert _keys(store.search((user,), query="pizza", filter={"kind": "work"})) == ["job"]


def test_list_namespaces(store: BaseStore) -> None:
    u1, u2 = sorted([new_id("a"), new_id("b")])
    spaces = [(u1, "a", "b"), (u1, "a", "c"), (u1, "d"), (u2, "a", "b")]
    for ns in spaces:
        store.put(ns, "k", {"ns": list(ns)})
    assert store.list_namespaces() == sorted(spaces)
    assert store.list_namespaces(prefix=(u1,)) == sorted(spaces[:3])
    assert store.list_namespaces(prefix=(u1, "a")) == [(u1, "a", "b"), (u1, "a", "c")]
    assert store.list_namespaces(suffix=("b",)) == [(u1, "a", "b"), (u2, "a", "b")]
    assert store.list_namespaces(prefix=("*", "a")) == [
        (u1, "a", "b"),
        (u1, "a", "c"),
        (u2, "a", "b"),
    ]
    assert store.list_namespaces(prefix=(u1,), suffix=("c",)) == [(u1, "a", "c")]
    assert store.list_namespaces(max_depth=2) == [(u1, "a"), (u1, "d"), (u2, "a")]
    assert store.list_namespaces(max_depth=1) == [(u1,), (u2,)]
    assert store.list_namespaces(limit=2, offset=1) == sorted(spaces)[1:3]
    assert store.list_namespaces(prefix=(new_id("nobody"),)) == []
    store.delete((u1, "d"), "k")
    if isinstance(store, MemstackStore):
        # A namespace with no item left is not listed (as in LangGraph's PostgresStore;
        # InMemoryStore keeps the emptied dict of its namespace and lists it).
        assert (u1, "d") not in store.list_namespaces()


def _mixed_ops(ns: tuple[str, ...]) -> list[Any]:
    return [
        PutOp(ns, "a", {"v": 1}),
        # Listed before the get: InMemoryStore's get leaves an empty namespace behind.
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ns),), limit=10),
        GetOp(ns, "a"),
        SearchOp(ns, filter=None, limit=10, offset=0),
        PutOp(ns, "b", {"v": 2}),
        PutOp(ns, "a", {"v": 3}),
    ]


def _check_mixed(store: BaseStore, ns: tuple[str, ...], results: list[Any]) -> None:
    # One result per op, in order; the reads see the store as it was before the batch,
    # and of two puts of one key the last wins.
    assert len(results) == 6
    assert results[0] is None and results[4] is None and results[5] is None
    assert results[1] == [] and results[2] is None and results[3] == []
    a, b = store.get(ns, "a"), store.get(ns, "b")
    assert a is not None and a.value == {"v": 3}
    assert b is not None and b.value == {"v": 2}
    again = store.batch([GetOp(ns, "a"), GetOp(ns, "missing"), PutOp(ns, "b", None)])
    assert isinstance(again[0], Item) and again[0].value == {"v": 3}
    assert again[1:] == [None, None]
    assert store.get(ns, "b") is None


def test_batch_mixed_ops(store: BaseStore) -> None:
    ns = (new_id("u"), "batch")
    _check_mixed(store, ns, store.batch(_mixed_ops(ns)))


async def test_abatch_mixed_ops(store: BaseStore) -> None:
    ns = (new_id("u"), "abatch")
    results = await store.abatch(_mixed_ops(ns))
    await asyncio.to_thread(_check_mixed, store, ns, results)
    await store.aput(ns, "c", {"v": 4})
    got = await store.aget(ns, "c")
    assert got is not None and got.value == {"v": 4}
    assert [i.key for i in await store.asearch(ns, filter={"v": 4})] == ["c"]
    assert await store.alist_namespaces(prefix=ns) == [ns]
    await store.adelete(ns, "c")
    assert await store.aget(ns, "c") is None


def test_invalid_namespaces_are_refused(store: BaseStore) -> None:
    for bad in [(), ("a.b", "x"), ("u", ""), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"v": 1})
    with pytest.raises(NotImplementedError):
        store.put((new_id("u"),), "k", {"v": 1}, ttl=5)


# --- MemstackStore only -----------------------------------------------------------
def test_without_langgraph_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.store.base", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "memstack.integrations.langgraph")
    with pytest.raises(ImportError, match=r"pip install 'memstack\[langgraph\]'"):
        importlib.import_module("memstack.integrations.langgraph")


def test_bad_input_raises_and_changes_nothing(memory: Memory) -> None:
    store = MemstackStore(memory, marker=new_id("lg"))
    user = new_id("u")
    ns = (user, "m")
    good = PutOp(ns, "ok", {"v": 1})
    bad_ops: list[tuple[PutOp, type[Exception]]] = [
        (PutOp(ns, "has space", {"v": 1}), InvalidId),
        (PutOp(ns, "k" * (MAX_KEY_LEN + 1), {"v": 1}), InvalidId),
        (PutOp((user, "not allowed!"), "k", {"v": 1}), InvalidNamespaceError),
        (PutOp(("user with space",), "k", {"v": 1}), InvalidNamespaceError),
        (PutOp(ns, "k", {"v": {1, 2}}), MemstackValidationError),
        (PutOp(ns, "k", {"v": float("nan")}), MemstackValidationError),
        (PutOp(ns, "k", {"v": "x" * 70_000}), InvalidContent),
        (PutOp(ns, "k", {"v": 1}, ttl=1.0), NotImplementedError),
        # Raw ops get LangGraph's label rules too: "a.b" would read back as ("a", "b").
        (PutOp((user, "a.b"), "k", {"v": 1}), InvalidNamespaceError),
    ]
    for bad, error in bad_ops:
        with pytest.raises(error):
            store.batch([good, bad])
    assert store.get(ns, "ok") is None
    assert memory.sessions(user) == []
    with pytest.raises(InvalidNamespaceError, match="user_label"):
        MemstackStore(memory, user_label=2).put(("only", "two"), "k", {"v": 1})
    with pytest.raises(InvalidId):
        MemstackStore(memory, marker="a.b")
    with pytest.raises(MemstackValidationError):
        MemstackStore(memory, role="robot")


def test_memstack_ids_cannot_be_reused_so_updates_are_versions(memory: Memory) -> None:
    """Why an update writes a new message: remember()'s idempotency mark outlives
    delete_message(), so the same msg_id cannot be written again."""
    user = new_id("u")
    stored = memory.remember(user, "s", "assistant", "first", msg_id="k")
    memory.drain(summarize=False)
    memory.delete_message(user, stored)
    assert memory.remember(user, "s", "assistant", "first", msg_id="k") == stored
    with pytest.raises(NotFound):
        memory.get_message(user, stored)  # the duplicate wrote nothing
    with pytest.raises(Conflict):
        memory.remember(user, "s", "assistant", "second", msg_id="k")


def test_items_are_messages_of_the_users_session(memory: Memory) -> None:
    user = new_id("u")
    store = MemstackStore(memory)
    store.put((user, "prefs"), "tea", {"text": "prefers green tea"})
    first = store.get((user, "prefs"), "tea")
    store.put((user, "prefs"), "tea", {"text": "prefers black tea"})
    second = store.get((user, "prefs"), "tea")
    assert first is not None and second is not None
    assert second.created_at == first.created_at  # kept across updates
    assert second.updated_at > first.updated_at
    # One message: the older version is erased from every layer memstack has.
    [msg] = memory.messages(user, "langgraph.prefs")
    assert json.loads(msg.content) == {"text": "prefers black tea"}
    assert [h.text for h in memory.search(user, "green tea")] == [msg.content]
    # The user's own conversations are not store items.
    memory.remember(user, "chat", "user", "I prefer green tea, actually")
    memory.drain(summarize=False)
    assert store.list_namespaces(prefix=(user,)) == [(user, "prefs")]
    assert [i.key for i in store.search((user,), query="green tea")] == ["tea"]


def test_user_label_and_drain_false(memory: Memory) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    store = MemstackStore(memory, user_label=1, drain=False, marker=new_id("lg"))
    store.put(("memories", alice), "k", {"text": "alice likes chess"})
    store.put(("memories", bob), "k", {"text": "bob likes go"})
    # Not ingested yet: get reads the window, search and listing the ledger.
    got = store.get(("memories", alice), "k")
    assert got is not None and got.value == {"text": "alice likes chess"}
    assert store.search(("memories",)) == []
    memory.drain(summarize=False)
    assert sorted(i.namespace for i in store.search(("memories",))) == sorted(
        [("memories", alice), ("memories", bob)]
    )
    assert [i.value["text"] for i in store.search(("memories", alice), query="chess")] == [
        "alice likes chess"
    ]
    assert store.list_namespaces(prefix=("memories", bob)) == [("memories", bob)]
    assert {s.session_id for s in memory.sessions(alice)} == {store._layout.marker + ".memories"}


async def test_over_an_async_memory(mem: AsyncMemory) -> None:
    store = MemstackStore(mem)
    ns = (new_id("u"), "notes")
    await store.aput(ns, "k", {"text": "the meeting moved to Friday"})
    got = await store.aget(ns, "k")
    assert got is not None and got.value == {"text": "the meeting moved to Friday"}
    assert [i.key for i in await store.asearch(ns, query="meeting Friday")] == ["k"]
    with pytest.raises(RuntimeError, match="deadlock"):
        store.get(ns, "k")
    # From another thread a sync call runs on the memory's loop.
    from_thread = await asyncio.to_thread(store.get, ns, "k")
    assert from_thread is not None and from_thread.value == got.value
    await asyncio.to_thread(store.put, ns, "k2", {"text": "from a thread"})
    assert sorted(i.key for i in await store.asearch(ns)) == ["k", "k2"]
    # Reading namespaces (their windows) leaves no Redis key without a TTL.
    await store.aget((new_id("u"), "never"), "k")
    assert await mem.keys_without_ttl() == []


def test_sync_use_of_an_async_memory_outside_its_loop_is_refused(
    embedded_settings: Settings,
) -> None:
    async def build() -> MemstackStore:
        async with await AsyncMemory.open(embedded_settings) as mem:
            return MemstackStore(mem)

    loop = asyncio.new_event_loop()
    try:
        store = loop.run_until_complete(build())
    finally:
        loop.close()
    with pytest.raises(RuntimeError, match=r"pass a memstack\.Memory"):
        store.get(("u", "x"), "k")


# --- a LangGraph graph that remembers across threads -------------------------------
class _State(TypedDict):
    said: str
    answer: str


def _remembering_node(state: _State, config: RunnableConfig, *, store: BaseStore) -> _State:
    """Stores what the user says after "remember:"; otherwise answers from memory."""
    user = config["configurable"]["user_id"]
    ns = (user, "memories")
    said = state["said"]
    if said.startswith("remember:"):
        fact = said.removeprefix("remember:").strip()
        store.put(ns, new_id("m"), {"text": fact})
        return {"said": said, "answer": "noted"}
    hits = store.search(ns, query=said, limit=1)
    return {"said": said, "answer": hits[0].value["text"] if hits else "I don't know"}


def _graph(store: BaseStore) -> Any:
    builder = StateGraph(_State)
    builder.add_node("remember", _remembering_node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def test_graph_remembers_across_threads(memory: Memory) -> None:
    graph = _graph(MemstackStore(memory))
    user, other = new_id("u"), new_id("u")

    def run(thread: str, who: str, said: str) -> str:
        config: RunnableConfig = {"configurable": {"thread_id": thread, "user_id": who}}
        return str(graph.invoke({"said": said, "answer": ""}, config)["answer"])

    assert run("1", user, "remember: my sister Ana lives in Porto") == "noted"
    assert run("2", user, "where does my sister live?") == "my sister Ana lives in Porto"
    assert run("3", other, "where does my sister live?") == "I don't know"


async def test_async_graph_remembers_across_threads(mem: AsyncMemory) -> None:
    graph = _graph(MemstackStore(mem))
    user = new_id("u")
    for thread, said in [("1", "remember: the wifi password is hunter2"), ("2", "wifi password")]:
        config: RunnableConfig = {"configurable": {"thread_id": thread, "user_id": user}}
        out = await graph.ainvoke({"said": said, "answer": ""}, config)
    assert out["answer"] == "the wifi password is hunter2"
