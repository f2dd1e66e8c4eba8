"""What the vector stores share: argument checks, so both backends reject the same
inputs, and the thread hop that turns a client's errors into ours."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from memstack.core.errors import (
    MemstackError,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
    ValidationError,
)
from memstack.stores.vectors.base import MetaValue, VectorRecord

T = TypeVar("T")


async def in_thread(
    call: Callable[[], T],
    *,
    where: str,
    what: str,
    unreachable: Callable[[BaseException], bool],
) -> T:
    """Run a blocking client call off the loop: a connection failure becomes
    :class:`StoreUnavailable`, any other failure :class:`StoreError`."""
    try:
        return await asyncio.to_thread(call)
    except MemstackError:
        raise
    except Exception as exc:
        if unreachable(exc):
            raise StoreUnavailable(f"{where}: cannot {what}: {exc}", layer="vector store") from exc
        raise StoreError(f"{where}: {what} failed: {exc}", layer="vector store") from exc


_META_TYPES = (str, int, float, bool)


def conditions(
    scope: Mapping[str, MetaValue], where: Mapping[str, MetaValue] | None
) -> list[tuple[str, MetaValue]]:
    """Equality conditions of ``scope`` AND ``where``; raises if ``scope`` is missing.

    A key in both with different values is kept twice: the backends AND them, so the
    search matches nothing, which is what the caller asked for.
    """
    if not isinstance(scope, Mapping) or not scope:
        raise ValidationError("scope must be a non-empty mapping, e.g. {'user_id': ...}")
    pairs = list(scope.items()) + list((where or {}).items())
    for key, value in pairs:
        if not isinstance(key, str) or not key:
            raise ValidationError(f"filter keys must be non-empty strings, got {key!r}")
        if not isinstance(value, _META_TYPES):
            raise ValidationError(
                f"filter {key!r} must be str, int, float or bool, got {type(value).__name__}"
            )
    return pairs


def check_vector(vector: Sequence[float], dim: int) -> list[float]:
    if len(vector) != dim:
        raise ValidationError(f"vector has {len(vector)} dimensions; the collection has {dim}")
    return [float(x) for x in vector]


def check_top_k(top_k: int) -> None:
    if top_k <= 0:
        raise ValidationError(f"top_k must be positive, got {top_k}")


def unique_records(records: Sequence[VectorRecord], dim: int) -> list[VectorRecord]:
    """Validated records, the last one winning when an id repeats (upsert semantics)."""
    by_id: dict[str, VectorRecord] = {}
    for record in records:
        if not record.id:
            raise ValidationError("vector record id must not be empty")
        check_vector(record.vector, dim)
        for key, value in record.metadata.items():
            if not isinstance(value, _META_TYPES):
                raise ValidationError(
                    f"metadata {key!r} of {record.id!r} must be str, int, float or bool, "
                    f"got {type(value).__name__}"
                )
        by_id[record.id] = record
    return list(by_id.values())


def check_schema(
    collection: str,
    *,
    found_version: object,
    found_dim: object,
    model_version: str,
    dim: int,
) -> None:
    """Raise :class:`SchemaMismatch` unless the collection was built by this embedder."""
    if found_version == model_version and found_dim == dim:
        return
    raise SchemaMismatch(
        f"collection {collection!r} holds vectors of {found_version!r} (dim {found_dim}), "
        f"but the embedder is {model_version!r} (dim {dim}); run `memstack reindex` "
        "to rebuild it with the current embedder, or set MEMSTACK_EMBEDDER back to the "
        "one that wrote it",
        layer="vector store",
    )
