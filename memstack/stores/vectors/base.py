"""The vector-store protocol shared by semantic memory and the knowledge base."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

MetaValue = str | int | float | bool

# What a search returns of each hit: "all" (text and metadata) or "ids" (id and score;
# text and metadata left empty).
HitFields = Literal["all", "ids"]


@dataclass(frozen=True)
class VectorRecord:
    """One chunk to upsert: id ``msg_id#chunk_idx`` (or ``doc_id#chunk_idx``)."""

    id: str
    text: str
    vector: Sequence[float]
    metadata: Mapping[str, MetaValue] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorHit:
    """One search result. ``score`` is cosine similarity (1 = identical)."""

    id: str
    text: str
    score: float
    metadata: Mapping[str, MetaValue] = field(default_factory=dict)


class VectorStore(Protocol):
    """A collection of vectors with metadata filters.

    ``scope`` is a mandatory, non-empty equality filter (semantic memory passes
    ``{"user_id": ...}``): a search without it raises, so no query path can forget it.
    """

    async def upsert(self, records: Sequence[VectorRecord]) -> None: ...

    async def search(
        self,
        vector: Sequence[float],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
    ) -> list[VectorHit]: ...

    async def search_many(
        self,
        vectors: Sequence[Sequence[float]],
        *,
        scope: Mapping[str, MetaValue],
        top_k: int,
        where: Mapping[str, MetaValue] | None = None,
        fields: HitFields = "all",
    ) -> list[list[VectorHit]]:
        """One result list per vector, each what :meth:`search` returns for it, from one
        filtered read where the store allows. ``fields="ids"`` lets the store leave out
        text and metadata, for a caller that reads them elsewhere (Chroma reads them row
        by row, which costs as much as the rest of the query). The scope holds either
        way: every hit matched it when the store read it."""
        ...

    async def get(self, ids: Sequence[str], *, scope: Mapping[str, MetaValue]) -> list[VectorHit]:
        """The records of ``ids`` that exist and match ``scope``, with text and metadata
        (score 1.0), in no particular order."""
        ...

    async def delete(
        self, *, scope: Mapping[str, MetaValue], ids: Sequence[str] | None = None
    ) -> None: ...

    async def count(self, scope: Mapping[str, MetaValue] | None = None) -> int: ...

    async def drop(self) -> None: ...

    async def close(self) -> None: ...
