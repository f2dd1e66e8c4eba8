"""Qdrant's own engine in the process (``qdrant-edge-py``) behind
:class:`~memstack.stores.vectors.base.VectorStore`.

One ``EdgeShard`` per collection in ``<path>/<collection>/shard``, with the collection's
``model_version`` and ``dim`` in ``<path>/<collection>/memstack.json`` beside it (a shard
has no collection metadata). Point ids and the id/text payload keys are
:class:`~memstack.stores.vectors.qdrant.QdrantStore`'s. A shard's WAL is locked while it
is open, so stores on one folder in this process share one handle (counted, closed by the
last user); another process holding it makes this one :class:`StoreUnavailable`.

Nothing indexes in the background: after each write the store runs ``optimize()``, which
returns at once unless a segment has grown past the engine's indexing threshold, and
then builds its HNSW graph (seconds at 10k chunks; the knowledge base writes in batches).
Until then a search scans the unindexed segment exactly, so results are right either way.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from memstack.core.errors import StoreError, ValidationError
from memstack.stores.vectors.base import HitFields, MetaValue, VectorHit, VectorRecord
from memstack.stores.vectors.filters import (
    check_schema,
    check_top_k,
    check_vector,
    conditions,
    in_thread,
    unique_records,
)
from memstack.stores.vectors.qdrant import ID_KEY, TEXT_KEY, UPSERT_BATCH, point_id

T = TypeVar("T")

META_FILE = "memstack.json"
SHARD_DIR = "shard"
# qdrant-edge 0.9 turns a bool in MatchValue into an integer, which never matches a
# stored bool: each bool is mirrored as "true"/"false" under this prefix and filtered
# there.
BOOL_PREFIX = "memstack_bool__"
_RESERVED = frozenset({ID_KEY, TEXT_KEY})


@dataclass
class _Shard:
    shard: Any
    users: int = 1


_shards: dict[Path, _Shard] = {}
_shards_lock = threading.Lock()


def _is_unreachable(exc: BaseException) -> bool:
    # Another process has the shard open: its WAL is locked.
    return "WAL" in str(exc) and "WouldBlock" in str(exc)


def _bool_key(key: str) -> str:
    return BOOL_PREFIX + key


def _filter(pairs: list[tuple[str, MetaValue]], ids: Sequence[str] | None = None) -> Any:
    import qdrant_edge as qe

    must: list[Any] = []
    for key, value in pairs:
        if isinstance(value, bool):
            match = qe.MatchValue("true" if value else "false")
            must.append(qe.FieldCondition(key=_bool_key(key), match=match))
        elif isinstance(value, float):
            # MatchValue takes str, int and bool only; a closed range is float equality.
            must.append(qe.FieldCondition(key=key, range=qe.RangeFloat(gte=value, lte=value)))
        else:
            must.append(qe.FieldCondition(key=key, match=qe.MatchValue(value)))
    if ids is not None:
        must.append(qe.HasIdCondition({point_id(i) for i in ids}))
    return qe.Filter(must=must)


def _payload(record: VectorRecord) -> dict[str, Any]:
    payload: dict[str, Any] = {**record.metadata, ID_KEY: record.id, TEXT_KEY: record.text}
    for key, value in record.metadata.items():
        if isinstance(value, bool):
            payload[_bool_key(key)] = "true" if value else "false"
    return payload


def _hit(point: Any, score: float) -> VectorHit:
    payload = {k: v for k, v in dict(point.payload or {}).items() if not k.startswith(BOOL_PREFIX)}
    record_id = str(payload.pop(ID_KEY, point.id))
    text = str(payload.pop(TEXT_KEY, ""))
    return VectorHit(id=record_id, text=text, score=score, metadata=payload)


class QdrantEdgeStore:
    """One qdrant-edge shard with cosine distance; the score is the similarity."""

    def __init__(self, collection: str, *, model_version: str, dim: int, path: str | Path) -> None:
        self.collection_name = collection
        self.model_version = model_version
        self.dim = dim
        # Resolved: one folder reached by two spellings must be one handle.
        self._folder = Path(path).resolve() / collection
        self._shard: _Shard | None = None
        self._open_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls, collection: str, *, model_version: str, dim: int, path: str | Path
    ) -> QdrantEdgeStore:
        """Open, creating or checking the collection now rather than on first use."""
        store = cls(collection, model_version=model_version, dim=dim, path=path)
        await store.ensure_open()
        return store

    @property
    def location(self) -> str:
        return str(self._folder)

    async def _wrap(self, call: Callable[[], T], what: str) -> T:
        where = f"qdrant-edge {self._folder}"
        return await in_thread(call, where=where, what=what, unreachable=_is_unreachable)

    async def _run(self, fn: Callable[[Any], T], what: str) -> T:
        await self.ensure_open()
        if _shards.get(self._folder) is not self._shard:
            # Another store on this folder dropped it (``memstack reindex``): open it
            # again, as a first use does.
            self._shard = None
            await self.ensure_open()
        shared = self._shard
        assert shared is not None
        return await self._wrap(lambda: fn(shared.shard), what)

    def _check_meta(self) -> None:
        meta_file = self._folder / META_FILE
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"qdrant-edge {self._folder}: unreadable {META_FILE}", layer="vector store"
            ) from exc
        check_schema(
            self.collection_name,
            found_version=meta.get("model_version"),
            found_dim=meta.get("dim"),
            model_version=self.model_version,
            dim=self.dim,
        )

    def _acquire(self) -> _Shard:
        import qdrant_edge as qe

        with _shards_lock:
            shared = _shards.get(self._folder)
            if shared is not None:
                self._check_meta()
                shared.users += 1
                return shared
            shard_dir = self._folder / SHARD_DIR
            if (self._folder / META_FILE).is_file():
                self._check_meta()
                shard = qe.EdgeShard.load(str(shard_dir))
            else:
                # A folder without metadata never finished its creation: start it over.
                shutil.rmtree(self._folder, ignore_errors=True)
                config = qe.EdgeConfig(
                    vectors=qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine)
                )
                shard = qe.EdgeShard.create(str(shard_dir), config)
                meta = {"model_version": self.model_version, "dim": self.dim}
                # Written last: its presence says the shard is complete.
                (self._folder / META_FILE).write_text(json.dumps(meta))
            shared = _shards[self._folder] = _Shard(shard=shard)
            return shared

    def _release(self, shared: _Shard) -> None:
        with _shards_lock:
            shared.users -= 1
            # A handle no longer registered was closed by a drop.
            if shared.users <= 0 and _shards.get(self._folder) is shared:
                del _shards[self._folder]
                shared.shard.close()

    async def ensure_open(self) -> None:
        if self._shard is not None:
            return
        async with self._open_lock:
            if self._shard is None:
                self._shard = await self._wrap(self._acquire, "open the collection")

    async def upsert(self, records: Sequence[VectorRecord]) -> None:
        import qdrant_edge as qe

        unique = unique_records(records, self.dim)
        for record in unique:
            if any(k in _RESERVED or k.startswith(BOOL_PREFIX) for k in record.metadata):
                raise ValidationError(
                    f"metadata keys {sorted(_RESERVED)} and {BOOL_PREFIX}* are reserved"
                )
        if not unique:
            return
        points = [
            qe.Point(point_id(r.id), [float(x) for x in r.vector], _payload(r)) for r in unique
        ]

        def work(shard: Any) -> None:
            for start in range(0, len(points), UPSERT_BATCH):
                batch = points[start : start + UPSERT_BATCH]
                shard.update(qe.UpdateOperation.upsert_points(batch))
            # Indexes a segment only once it is past the engine's threshold.
            shard.optimize()

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
        import qdrant_edge as qe

        query_filter = _filter(conditions(scope, where))
        check_top_k(top_k)
        requests = [
            qe.QueryRequest(
                limit=top_k,
                query=qe.Query.Nearest(check_vector(v, self.dim)),
                filter=query_filter,
                with_payload=[ID_KEY] if fields == "ids" else True,
            )
            for v in vectors
        ]
        if not requests:
            return []

        def work(shard: Any) -> list[list[Any]]:
            return list(shard.query_batch(qe.QueryBatchRequest(requests)))

        return [
            [_hit(point, float(point.score)) for point in points]
            for points in await self._run(work, "search")
        ]

    async def get(self, ids: Sequence[str], *, scope: Mapping[str, MetaValue]) -> list[VectorHit]:
        import qdrant_edge as qe

        flt = _filter(conditions(scope, None), ids)
        if not ids:
            return []
        request = qe.ScrollRequest(limit=len(set(ids)), filter=flt, with_payload=True)

        def work(shard: Any) -> list[Any]:
            points, _next = shard.scroll(request)
            return list(points)

        return [_hit(point, 1.0) for point in await self._run(work, "get")]

    async def delete(
        self, *, scope: Mapping[str, MetaValue], ids: Sequence[str] | None = None
    ) -> None:
        import qdrant_edge as qe

        pairs = conditions(scope, None)
        if ids is not None and not ids:
            return
        operation = qe.UpdateOperation.delete_points_by_filter(_filter(pairs, ids))
        await self._run(lambda shard: shard.update(operation), "delete")

    async def count(self, scope: Mapping[str, MetaValue] | None = None) -> int:
        """Number of points, all of them or those matching ``scope`` (stats, dry runs)."""
        import qdrant_edge as qe

        flt = _filter(conditions(scope, None)) if scope else None
        request = qe.CountRequest(exact=True, filter=flt)
        return await self._run(lambda shard: int(shard.count(request)), "count")

    async def drop(self) -> None:
        """Delete the collection's folder (``memstack reindex``); the next use recreates
        it. Other stores sharing the handle lose it too, as with a dropped collection."""
        shared, self._shard = self._shard, None

        def work() -> None:
            with _shards_lock:
                current = _shards.pop(self._folder, None)
                for handle in {id(h): h for h in (shared, current) if h is not None}.values():
                    handle.shard.close()
                shutil.rmtree(self._folder, ignore_errors=True)

        await self._wrap(work, "drop the collection")

    async def close(self) -> None:
        shared, self._shard = self._shard, None
        if shared is not None:
            await self._wrap(lambda: self._release(shared), "close")
