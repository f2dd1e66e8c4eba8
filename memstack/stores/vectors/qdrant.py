"""Qdrant behind :class:`~memstack.stores.vectors.base.VectorStore`.

Three locations: a server ``url``, local mode on a ``path`` (qdrant-client's pure-Python
engine: a brute-force scan, fine for tests and small data; a scope that is most of the
collection is searched unfiltered, see :mod:`~memstack.stores.vectors.qdrant_wide`), or
``":memory:"``.
Qdrant point ids must be UUIDs or integers, so the point id is a UUID5 of our string id
and the string id travels in the payload, next to the text.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from memstack.core.errors import ConfigError, StoreError, ValidationError
from memstack.stores.vectors.base import HitFields, MetaValue, VectorHit, VectorRecord
from memstack.stores.vectors.filters import (
    check_schema,
    check_top_k,
    check_vector,
    conditions,
    in_thread,
    unique_records,
)
from memstack.stores.vectors.overfetch import Shares
from memstack.stores.vectors.qdrant_wide import search_local

T = TypeVar("T")

MEMORY = ":memory:"
ID_KEY = "memstack_id"
TEXT_KEY = "memstack_text"
_RESERVED = frozenset({ID_KEY, TEXT_KEY})
_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://memstack/vector-id")
UPSERT_BATCH = 500


def point_id(record_id: str) -> str:
    """Stable UUID of a string id: re-upserting the same id replaces the same point."""
    return str(uuid.uuid5(_ID_NAMESPACE, record_id))


@dataclass
class _Client:
    client: Any
    local: bool
    users: int = 1
    # Local mode is plain Python over SQLite and not thread-safe; a server client is.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def guard(self) -> AbstractContextManager[object]:
        return self.lock if self.local else nullcontext()


# Local mode locks its folder: a second client on the same path in this process would
# fail, so stores on one path share one client (counted, closed by the last user).
_local_clients: dict[Path, _Client] = {}
_local_clients_lock = threading.Lock()


def _acquire_local(path: Path) -> _Client:
    from qdrant_client import QdrantClient

    key = path.resolve()
    with _local_clients_lock:
        shared = _local_clients.get(key)
        if shared is not None:
            shared.users += 1
            return shared
        key.mkdir(parents=True, exist_ok=True)
        # Calls arrive from worker threads; the lock in _Client serialises them.
        client = QdrantClient(path=str(key), force_disable_check_same_thread=True)
        shared = _local_clients[key] = _Client(client=client, local=True)
        return shared


def _release_local(path: Path, shared: _Client) -> None:
    key = path.resolve()
    with _local_clients_lock:
        shared.users -= 1
        if shared.users <= 0:
            _local_clients.pop(key, None)
            shared.client.close()


def _is_unreachable(exc: BaseException) -> bool:
    import httpx
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        return (exc.status_code or 0) >= 500
    if isinstance(
        exc, ResponseHandlingException | httpx.TransportError | ConnectionError | TimeoutError
    ):
        return True
    # Another process holds the local folder's lock.
    return isinstance(exc, RuntimeError) and "already accessed" in str(exc)


def _collection_missing(exc: BaseException | None) -> bool:
    from qdrant_client.http.exceptions import UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        return exc.status_code == 404
    # Local mode says so with a ValueError.
    return isinstance(exc, ValueError) and "not found" in str(exc).lower()


def _filter(pairs: list[tuple[str, MetaValue]], ids: Sequence[str] | None = None) -> Any:
    from qdrant_client import models

    must: list[Any] = []
    for key, value in pairs:
        if isinstance(value, float):
            # MatchValue takes str, int and bool only; a closed range is float equality.
            must.append(models.FieldCondition(key=key, range=models.Range(gte=value, lte=value)))
        else:
            must.append(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
    if ids is not None:
        must.append(models.HasIdCondition(has_id=[point_id(i) for i in ids]))
    return models.Filter(must=must)


class QdrantStore:
    """One Qdrant collection with cosine distance; Qdrant's score is the similarity."""

    def __init__(
        self,
        collection: str,
        *,
        model_version: str,
        dim: int,
        path: str | Path | None = None,
        url: str | None = None,
        location: str | None = None,
        api_key: str | None = None,
        timeout_s: int = 10,
        index_keys: Sequence[str] = (),
    ) -> None:
        given = [x for x in (path, url, location) if x is not None]
        if len(given) != 1:
            raise ConfigError("QdrantStore needs exactly one of path, url or location=':memory:'")
        if location is not None and location != MEMORY:
            raise ConfigError(f"QdrantStore location must be {MEMORY!r}, got {location!r}")
        self.collection_name = collection
        self.model_version = model_version
        self.dim = dim
        self._path = Path(path) if path is not None else None
        self._url = url
        self._api_key = api_key
        self._timeout_s = timeout_s
        # Payload indexes speed up the scope filter on a server (the first key is the
        # tenant: semantic memory's user_id, the knowledge base's kb); local mode has none.
        self._index_keys = tuple(index_keys)
        self._shared: _Client | None = None
        self._open_lock = asyncio.Lock()
        # Local mode: the learnt share of each scope searched unfiltered (qdrant_wide).
        self._shares = Shares()

    @classmethod
    async def open(
        cls,
        collection: str,
        *,
        model_version: str,
        dim: int,
        path: str | Path | None = None,
        url: str | None = None,
        location: str | None = None,
        api_key: str | None = None,
        timeout_s: int = 10,
        index_keys: Sequence[str] = (),
    ) -> QdrantStore:
        """Connect and create or check the collection now, rather than on first use."""
        store = cls(
            collection,
            model_version=model_version,
            dim=dim,
            path=path,
            url=url,
            location=location,
            api_key=api_key,
            timeout_s=timeout_s,
            index_keys=index_keys,
        )
        await store.ensure_open()
        return store

    @property
    def location(self) -> str:
        return self._url or (str(self._path) if self._path is not None else MEMORY)

    async def _run(self, fn: Callable[[Any], T], what: str) -> T:
        await self.ensure_open()
        shared = self._shared
        assert shared is not None

        def call() -> T:
            with shared.guard():
                return fn(shared.client)

        try:
            return await self._wrap(call, what)
        except StoreError as exc:
            if not _collection_missing(exc.__cause__):
                raise
        # Another client dropped the collection (``memstack reindex`` in another
        # process): make it again, as opening does, and retry once.
        await self._wrap(lambda: self._create_or_check(shared), "open the collection")
        return await self._wrap(call, what)

    async def _wrap(self, call: Callable[[], T], what: str) -> T:
        where = f"qdrant {self.location} collection {self.collection_name!r}"
        return await in_thread(call, where=where, what=what, unreachable=_is_unreachable)

    def _connect(self) -> _Client:
        if self._path is not None:
            return _acquire_local(self._path)
        from qdrant_client import QdrantClient

        if self._url is not None:
            # check_compatibility would cost a request (and a warning) per client.
            client = QdrantClient(
                url=self._url,
                api_key=self._api_key,
                timeout=self._timeout_s,
                check_compatibility=False,
            )
            return _Client(client=client, local=False)
        return _Client(client=QdrantClient(location=MEMORY), local=True)

    def _disconnect(self, shared: _Client) -> None:
        if self._path is not None:
            _release_local(self._path, shared)
        else:
            shared.client.close()

    def _create_or_check(self, shared: _Client) -> None:
        from qdrant_client import models

        client = shared.client
        name = self.collection_name
        with shared.guard():
            if not client.collection_exists(name):
                try:
                    client.create_collection(
                        name,
                        vectors_config=models.VectorParams(
                            size=self.dim, distance=models.Distance.COSINE
                        ),
                        metadata={"model_version": self.model_version, "dim": self.dim},
                    )
                except Exception:
                    # Another process may have created it in the meantime; check below.
                    if not client.collection_exists(name):
                        raise
            info = client.get_collection(name)
            if not shared.local:
                self._ensure_indexes(client, info.payload_schema or {})
            config = info.config
        meta = config.metadata or {}
        vectors = config.params.vectors
        size = getattr(vectors, "size", None)
        check_schema(
            name,
            found_version=meta.get("model_version"),
            # The vector size is authoritative; the metadata only says who wrote it.
            found_dim=size if size is not None else meta.get("dim"),
            model_version=self.model_version,
            dim=self.dim,
        )

    def _ensure_indexes(self, client: Any, schema: Mapping[str, Any]) -> None:
        """Create the keyword indexes the collection lacks, on a server. Without one, a
        filter is checked point by point, and a filtered search of a user who owns
        most of the collection walks the HNSW graph testing each point it meets. The
        first key is the tenant (``is_tenant``: the server keeps each value's points
        together on disk); a server older than 1.11 refuses it and gets a plain index.
        An existing index is left as it is: replacing it would rebuild it on open."""
        from qdrant_client import models
        from qdrant_client.http.exceptions import UnexpectedResponse

        for n, key in enumerate(self._index_keys):
            if key in schema:
                continue
            plain = models.PayloadSchemaType.KEYWORD
            if n == 0:
                tenant = models.KeywordIndexParams(
                    type=models.KeywordIndexType.KEYWORD, is_tenant=True
                )
                try:
                    client.create_payload_index(self.collection_name, key, field_schema=tenant)
                    continue
                except UnexpectedResponse as exc:
                    if exc.status_code not in (400, 422):
                        raise
            client.create_payload_index(self.collection_name, key, field_schema=plain)

    async def ensure_open(self) -> None:
        if self._shared is not None:
            return
        async with self._open_lock:
            if self._shared is not None:
                return

            def work() -> _Client:
                shared = self._connect()
                try:
                    self._create_or_check(shared)
                except BaseException:
                    self._disconnect(shared)
                    raise
                return shared

            self._shared = await self._wrap(work, "open the collection")

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        from qdrant_client import models

        unique = unique_records(records, self.dim)
        for record in unique:
            if _RESERVED & record.metadata.keys():
                raise ValidationError(f"metadata keys {sorted(_RESERVED)} are reserved")
        if not unique:
            return
        points = [
            models.PointStruct(
                id=point_id(r.id),
                vector=[float(x) for x in r.vector],
                payload={**r.metadata, ID_KEY: r.id, TEXT_KEY: r.text},
            )
            for r in unique
        ]

        def work(client: Any) -> None:
            for start in range(0, len(points), UPSERT_BATCH):
                client.upsert(self.collection_name, points=points[start : start + UPSERT_BATCH])

        await self._run(work, "upsert")

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
        from qdrant_client import models

        pairs = conditions(scope, where)
        query_filter = _filter(pairs)
        check_top_k(top_k)
        requests = [
            models.QueryRequest(
                query=check_vector(v, self.dim),
                filter=query_filter,
                limit=top_k,
                # The original id sits in the payload: the one field "ids" reads.
                with_payload=[ID_KEY] if fields == "ids" else True,
            )
            for v in vectors
        ]
        if not requests:
            return []

        def work(client: Any) -> list[list[Any]]:
            if self._shared is not None and self._shared.local:
                return search_local(
                    client, self.collection_name, requests, tuple(pairs), self._shares
                )
            responses = client.query_batch_points(self.collection_name, requests=requests)
            return [response.points for response in responses]

        out: list[list[VectorHit]] = []
        for points in await self._run(work, "search"):
            hits = []
            for point in points:
                payload = dict(point.payload or {})
                record_id = str(payload.pop(ID_KEY, point.id))
                text = str(payload.pop(TEXT_KEY, ""))
                hits.append(
                    VectorHit(id=record_id, text=text, score=float(point.score), metadata=payload)
                )
            out.append(hits)
        return out

    async def get(self, ids: Sequence[str], *, scope: Mapping[str, MetaValue]) -> list[VectorHit]:
        flt = _filter(conditions(scope, None), ids)
        if not ids:
            return []

        def work(client: Any) -> list[Any]:
            points, _next = client.scroll(
                self.collection_name, scroll_filter=flt, limit=len(ids), with_payload=True
            )
            return list(points)

        hits = []
        for point in await self._run(work, "get"):
            payload = dict(point.payload or {})
            record_id = str(payload.pop(ID_KEY, point.id))
            text = str(payload.pop(TEXT_KEY, ""))
            hits.append(VectorHit(id=record_id, text=text, score=1.0, metadata=payload))
        return hits

    async def delete(
        self, *, scope: Mapping[str, MetaValue], ids: Sequence[str] | None = None
    ) -> None:
        from qdrant_client import models

        pairs = conditions(scope, None)
        if ids is not None and not ids:
            return
        selector = models.FilterSelector(filter=_filter(pairs, ids))

        def work(client: Any) -> None:
            client.delete(self.collection_name, points_selector=selector)

        await self._run(work, "delete")
        # A delete can change a scope's share of the collection.
        self._shares.clear()

    async def count(self, scope: Mapping[str, MetaValue] | None = None) -> int:
        """Number of points, all of them or those matching ``scope`` (stats, dry runs)."""
        flt = _filter(conditions(scope, None)) if scope else None
        return await self._run(
            lambda client: int(
                client.count(self.collection_name, count_filter=flt, exact=True).count
            ),
            "count",
        )

    async def drop(self) -> None:
        """Delete the whole collection (``memstack reindex``); the next use recreates it."""
        shared, self._shared = self._shared, None

        def work() -> None:
            conn = shared or self._connect()
            try:
                with conn.guard():
                    conn.client.delete_collection(self.collection_name)
            finally:
                self._disconnect(conn)

        await self._wrap(work, "drop the collection")

    async def close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            await asyncio.to_thread(self._disconnect, shared)
