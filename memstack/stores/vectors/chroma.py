"""ChromaDB behind :class:`~memstack.stores.vectors.base.VectorStore`.

Embedded (``PersistentClient`` on a folder) or a ``chroma run`` server (``HttpClient``).
The client is synchronous, so every call runs in a worker thread. Chroma evaluates a
metadata filter over every row of a collection; how a user's search is kept small
(shards, brute force for small scopes, the unfiltered query for a scope that is most
of its collection) is :mod:`~memstack.stores.vectors.chroma_shards`'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from memstack.core.errors import ConfigError, SchemaMismatch, StoreError, ValidationError
from memstack.stores.vectors.base import HitFields, MetaValue, VectorHit, VectorRecord
from memstack.stores.vectors.chroma_shards import (
    BRUTE_FORCE_MAX,
    BRUTE_FORCE_SHARE,
    DIM_KEY,
    MAX_SHARDS,
    SHARD_KEY_KEY,
    SHARDS_KEY,
    VERSION_KEY,
    Layout,
    SearchLimits,
    Shard,
    is_unreachable,
    shard_name,
    shard_of,
    warn_once,
)
from memstack.stores.vectors.chroma_wide import OVERFETCH_MAX, Pairs
from memstack.stores.vectors.filters import (
    check_schema,
    check_top_k,
    check_vector,
    conditions,
    in_thread,
    unique_records,
)

T = TypeVar("T")

log = logging.getLogger("memstack.stores.vectors")


class ChromaStore:
    """Chroma collections with cosine distance; ``score = 1 - distance``.

    ``shards`` and ``shard_key`` apply when the store is first created: an existing
    store keeps the layout recorded in its root collection (:meth:`drop` and a new open
    re-shard it). In a sharded store every record needs a string ``shard_key`` in its
    metadata, and an id must keep its shard key value: re-upserting an id under
    another value adds a row in that value's shard rather than moving it (memstack's
    ids are per session, and a session has one user).
    """

    def __init__(
        self,
        collection: str,
        *,
        model_version: str,
        dim: int,
        path: str | Path | None = None,
        url: str | None = None,
        brute_force_max: int = BRUTE_FORCE_MAX,
        brute_force_share: float = BRUTE_FORCE_SHARE,
        shards: int = 1,
        shard_key: str | None = None,
        overfetch_max: int = OVERFETCH_MAX,
    ) -> None:
        if (path is None) == (url is None):
            raise ConfigError("ChromaStore needs exactly one of path or url")
        if brute_force_max < 0:
            raise ConfigError(f"brute_force_max must be >= 0, got {brute_force_max}")
        if not 0.0 <= brute_force_share <= 1.0:
            raise ConfigError(f"brute_force_share must be in [0, 1], got {brute_force_share}")
        if overfetch_max < 0:
            raise ConfigError(f"overfetch_max must be >= 0, got {overfetch_max}")
        if not 1 <= shards <= MAX_SHARDS:
            raise ConfigError(f"shards must be in [1, {MAX_SHARDS}], got {shards}")
        if shards > 1 and not shard_key:
            raise ConfigError("shards > 1 needs a shard_key to route records by")
        self.collection_name = collection
        self.model_version = model_version
        self.dim = dim
        self.brute_force_max = brute_force_max
        self.brute_force_share = brute_force_share
        # Most rows per query the unfiltered search of a large scope fetches (0: never).
        self.overfetch_max = overfetch_max
        self.shards = shards
        self.shard_key = shard_key
        self._path = Path(path) if path is not None else None
        self._url = url
        self._client: Any = None
        self._layout: Layout | None = None
        self._open_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        collection: str,
        *,
        model_version: str,
        dim: int,
        path: str | Path | None = None,
        url: str | None = None,
        brute_force_max: int = BRUTE_FORCE_MAX,
        brute_force_share: float = BRUTE_FORCE_SHARE,
        shards: int = 1,
        shard_key: str | None = None,
        overfetch_max: int = OVERFETCH_MAX,
    ) -> ChromaStore:
        """Connect and create or check the root collection now, rather than on first use."""
        store = cls(
            collection,
            model_version=model_version,
            dim=dim,
            path=path,
            url=url,
            brute_force_max=brute_force_max,
            brute_force_share=brute_force_share,
            shards=shards,
            shard_key=shard_key,
            overfetch_max=overfetch_max,
        )
        await store.ensure_open()
        return store

    @property
    def location(self) -> str:
        return self._url or str(self._path)

    @property
    def layout(self) -> str:
        """The layout on disk, for ``memstack doctor`` (known once open)."""
        layout = self._layout
        if layout is None:
            return "not open"
        if layout.count > 1:
            return f"{layout.count} shards by {layout.key}"
        if layout.legacy:
            return "single collection (written before sharding; `memstack reindex` shards it)"
        return "single collection"

    async def _run(self, fn: Callable[[], T], what: str) -> T:
        where = f"chroma {self.location} collection {self.collection_name!r}"
        return await in_thread(fn, where=where, what=what, unreachable=is_unreachable)

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        # No telemetry: it would try the network on every start, and there may be none.
        settings = ChromaSettings(anonymized_telemetry=False)
        if self._path is not None:
            self._path.mkdir(parents=True, exist_ok=True)
            self._client = chromadb.PersistentClient(path=str(self._path), settings=settings)
            return self._client
        assert self._url is not None
        parts = urlsplit(self._url if "//" in self._url else f"http://{self._url}")
        if not parts.hostname:
            raise ConfigError(f"chroma url {self._url!r} has no host")
        self._client = chromadb.HttpClient(
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 8000),
            ssl=parts.scheme == "https",
            settings=settings,
        )
        return self._client

    def _collection(self, name: str, extra: Mapping[str, MetaValue], *, create: bool = True) -> Any:
        """Collection ``name`` checked against our embedder; created with ``extra`` in its
        metadata when missing and ``create``, else None when missing."""
        from chromadb.errors import NotFoundError

        client = self._connect()
        try:
            # get first: get_or_create would hide a collection made by another embedder.
            collection = client.get_collection(name, embedding_function=None)
        except NotFoundError:
            if not create:
                return None
            collection = client.get_or_create_collection(
                name,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={VERSION_KEY: self.model_version, DIM_KEY: self.dim, **extra},
                embedding_function=None,
            )
        meta = collection.metadata or {}
        check_schema(
            name,
            found_version=meta.get(VERSION_KEY),
            found_dim=meta.get(DIM_KEY),
            model_version=self.model_version,
            dim=self.dim,
        )
        return collection

    def _open_root(self) -> Layout:
        wanted: dict[str, MetaValue] = {SHARDS_KEY: self.shards}
        if self.shards > 1 and self.shard_key:
            wanted[SHARD_KEY_KEY] = self.shard_key
        root = self._collection(self.collection_name, wanted)
        meta = dict(root.metadata or {})
        recorded = meta.get(SHARDS_KEY)
        legacy = False
        if recorded is None:
            if root.count() > 0:
                # Written before sharding: the root holds the vectors and keeps doing so.
                legacy, layout, key = True, 1, None
                if self.shards > 1:
                    warn_once(
                        self.location,
                        self.collection_name,
                        "chroma collection %r holds its vectors in one collection, not "
                        "the configured %d shards; `memstack reindex` shards it",
                        self.collection_name,
                        self.shards,
                    )
            else:
                # Empty: nothing to keep, so it takes the configured layout.
                root.modify(metadata={**meta, **wanted})
                layout, key = self.shards, self.shard_key if self.shards > 1 else None
        elif isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 1:
            raise SchemaMismatch(
                f"collection {self.collection_name!r} records {recorded!r} shards; "
                "run `memstack reindex` to rebuild it",
                layer="vector store",
            )
        else:
            layout, key = recorded, meta.get(SHARD_KEY_KEY)
            if layout != self.shards:
                warn_once(
                    self.location,
                    self.collection_name,
                    "chroma collection %r is laid out in %d shard(s), not the configured %d; "
                    "the layout on disk is kept until `memstack reindex`",
                    self.collection_name,
                    layout,
                    self.shards,
                )
        if layout > 1:
            if not isinstance(key, str) or not key:
                raise SchemaMismatch(
                    f"collection {self.collection_name!r} records {layout} shards but no "
                    "shard key; run `memstack reindex` to rebuild it",
                    layer="vector store",
                )
            if self.shard_key is not None and key != self.shard_key:
                raise ConfigError(
                    f"collection {self.collection_name!r} is sharded by {key!r}, "
                    f"not {self.shard_key!r}"
                )
        return Layout(layout, key, legacy, root)

    async def ensure_open(self) -> None:
        await self._open()

    async def _open(self) -> Layout:
        """Connect, and create or check the root collection, once; the layout in use."""
        layout = self._layout
        if layout is not None:
            return layout
        async with self._open_lock:
            if self._layout is None:
                self._layout = await self._run(self._open_root, "open the collection")
            return self._layout

    def _shard(self, layout: Layout, index: int, *, create: bool = True) -> Shard | None:
        """Shard ``index`` of ``layout``, opened (and created if missing and ``create``)
        on first use; None when it does not exist and ``create`` is false. Runs in
        worker threads."""
        shard = layout.shards.get(index)
        if shard is not None:
            return shard
        with layout.lock:
            lock = layout.locks.setdefault(index, threading.Lock())
        with lock:
            shard = layout.shards.get(index)
            if shard is None:
                if layout.closed:
                    raise StoreError(
                        f"collection {self.collection_name!r} was dropped or closed during "
                        "the call",
                        layer="vector store",
                    )
                name = shard_name(self.collection_name, index, layout.count)
                collection = self._collection(name, {}, create=create)
                if collection is None:
                    return None
                shard = layout.shards[index] = Shard(collection)
            return shard

    def _existing_shards(self, layout: Layout) -> list[Shard]:
        """Every shard of ``layout`` that exists, for operations the shard key cannot
        route."""
        missing = [i for i in range(layout.count) if i not in layout.shards]
        if missing:
            # One listing instead of a failed get per missing shard; a shard created
            # since is opened the next time.
            names = {c.name for c in self._connect().list_collections()}
            for i in missing:
                if shard_name(self.collection_name, i, layout.count) in names:
                    self._shard(layout, i, create=False)
        return [shard for i in range(layout.count) if (shard := layout.shards.get(i))]

    async def _on_layout(self, work: Callable[[Layout], T], what: str) -> T:
        """Run ``work`` on the open layout. A collection that another client dropped
        and made again (``memstack reindex`` in another process) is opened anew and the
        call retried once, instead of failing every call until a restart."""
        layout = await self._open()
        try:
            return await self._run(lambda: work(layout), what)
        except StoreError as exc:
            from chromadb.errors import NotFoundError

            if not isinstance(exc.__cause__, NotFoundError):
                raise
            log.info("chroma collection %r was dropped elsewhere; reopening", self.collection_name)
            if self._layout is layout:
                self._forget_layout()
            layout = await self._open()
            return await self._run(lambda: work(layout), what)

    def _groups(
        self, layout: Layout, records: Sequence[VectorRecord]
    ) -> dict[int, list[VectorRecord]]:
        """``records`` by the shard they belong in; every record is checked first."""
        groups: dict[int, list[VectorRecord]] = {}
        for r in records:
            index = 0
            if layout.count > 1:
                assert layout.key is not None
                value = r.metadata.get(layout.key)
                if not isinstance(value, str):
                    raise ValidationError(
                        f"vector record {r.id!r} needs a string {layout.key!r} in its "
                        f"metadata: collection {self.collection_name!r} is sharded by it"
                    )
                index = shard_of(value, layout.count)
            groups.setdefault(index, []).append(r)
        return groups

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        unique = unique_records(records, self.dim)
        if not unique:
            return
        self._groups(await self._open(), unique)  # refuse a bad record before any call

        def work(layout: Layout) -> None:
            for index, batch in self._groups(layout, unique).items():
                shard = self._shard(layout, index)
                assert shard is not None
                shard.upsert(batch)

        await self._on_layout(work, "upsert")

    async def search(
        self,
        vector: Sequence[float],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
    ) -> list[VectorHit]:
        return (await self.search_many([vector], scope=scope, top_k=top_k, where=where))[0]

    async def search_many(
        self,
        vectors: Sequence[Sequence[float]],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
        fields: HitFields = "all",
    ) -> list[list[VectorHit]]:
        pairs = tuple(conditions(scope, where))
        check_top_k(top_k)
        queries = [check_vector(v, self.dim) for v in vectors]
        if not queries:
            return []
        limits = SearchLimits(self.brute_force_max, self.brute_force_share, self.overfetch_max)

        def work(layout: Layout) -> list[list[VectorHit]]:
            index = layout.route(pairs)
            if index is not None:
                shard = self._shard(layout, index, create=False)
                if shard is None:
                    return [[] for _ in queries]
                return shard.search(queries, pairs, top_k, limits, fields)
            # No shard key in the filter: every shard may hold matches. Each one's top
            # k contains its share of the overall top k.
            merged: list[list[VectorHit]] = [[] for _ in queries]
            for shard in self._existing_shards(layout):
                for hits, more in zip(
                    merged, shard.search(queries, pairs, top_k, limits, fields), strict=True
                ):
                    hits.extend(more)
            for hits in merged:
                hits.sort(key=lambda h: h.score, reverse=True)
                del hits[top_k:]
            return merged

        return await self._on_layout(work, "search")

    async def get(self, ids: Sequence[str], *, scope: Mapping[str, MetaValue]) -> list[VectorHit]:
        pairs = tuple(conditions(scope, None))
        if not ids:
            return []
        id_list = list(dict.fromkeys(ids))

        def work(layout: Layout) -> list[VectorHit]:
            shards = self._scoped_shards(layout, pairs)
            return [hit for shard in shards for hit in shard.get(id_list, pairs)]

        return await self._on_layout(work, "get")

    def _scoped_shards(self, layout: Layout, pairs: Pairs) -> list[Shard]:
        """The existing shards that may hold records matching ``pairs``: the routed one,
        or all of them when the filter does not name the shard key."""
        index = layout.route(pairs)
        if index is None:
            return self._existing_shards(layout)
        routed = self._shard(layout, index, create=False)
        return [] if routed is None else [routed]

    async def delete(
        self, *, scope: Mapping[str, MetaValue], ids: Sequence[str] | None = None
    ) -> None:
        pairs = tuple(conditions(scope, None))
        if ids is not None and not ids:
            return
        id_list = list(ids) if ids is not None else None

        def work(layout: Layout) -> None:
            for shard in self._scoped_shards(layout, pairs):
                shard.delete(id_list, pairs)

        await self._on_layout(work, "delete")

    async def count(self, scope: Mapping[str, MetaValue] | None = None) -> int:
        """Number of vectors, all of them or those matching ``scope`` (stats, dry runs)."""
        pairs = tuple(conditions(scope, None)) if scope else None

        def work(layout: Layout) -> int:
            index = layout.route(pairs) if pairs else None
            if index is not None:
                shard = self._shard(layout, index, create=False)
                return 0 if shard is None else shard.count(pairs)
            return sum(shard.count(pairs) for shard in self._existing_shards(layout))

        return await self._on_layout(work, "count")

    async def drop(self) -> None:
        """Delete the root and every shard (``memstack reindex``); the next use creates
        the configured layout."""
        pattern = re.compile(rf"{re.escape(self.collection_name)}\.\d+-of-\d+")

        def work() -> None:
            from chromadb.errors import NotFoundError

            client = self._connect()
            self._forget_layout()
            # Shards first: a root left by a failed drop still describes them, while
            # shards left without their root would be picked up by a new root.
            shards = [c.name for c in client.list_collections() if pattern.fullmatch(c.name)]
            for name in [*shards, self.collection_name]:
                with contextlib.suppress(NotFoundError, ValueError):
                    client.delete_collection(name)

        await self._run(work, "drop the collection")

    def _forget_layout(self) -> None:
        layout, self._layout = self._layout, None
        if layout is not None:
            with layout.lock:
                layout.closed = True

    async def close(self) -> None:
        # Embedded clients share one process-wide system per path and HttpClient holds
        # only a connection pool: dropping the references is all closing can do safely.
        self._forget_layout()
        self._client = None
