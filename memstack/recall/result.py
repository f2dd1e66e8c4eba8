"""What ``context()`` returns: the assembled result and the manifest of every item.

The manifest lists each item the read path considered — its layer, ``msg_id``, score
parts, tokens — and why it was kept or dropped, so a caller can see why the model did
(or did not) get to read something.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memstack.recall.budget import Allocation
from memstack.recall.lexical import Rewrite
from memstack.recall.ranking import Candidate
from memstack.stores.vectors.base import VectorHit
from memstack.text.token_counts import count_tokens

# Manifest reasons.
KEPT = None
BUDGET = "budget"
LIMIT = "limit"
DUPLICATE = "duplicate"
STALE = "stale_value"
IN_WINDOW = "in_window"
BELOW_THRESHOLD = "below_threshold"
CURRENT_INPUT = "current_input"


@dataclass(frozen=True)
class ManifestItem:
    """One item the read path considered, and what became of it."""

    layer: str
    key: str
    msg_ids: tuple[str, ...]
    preview: str
    tokens: int
    kept: bool
    reason: str | None = None
    score: float | None = None
    relevance: float | None = None
    recency: float | None = None
    distance: float | None = None
    ranks: Mapping[str, int] = field(default_factory=dict)
    detail: str = ""


@dataclass(frozen=True)
class ContextResult:
    text: str
    messages: list[dict[str, str]]
    sections: Mapping[str, Any]
    manifest: list[ManifestItem]
    degraded: dict[str, str]
    allocation: Allocation
    rewrite: Rewrite
    window_rebuilt: bool
    timings_ms: dict[str, float]
    tokens: int

    def kept(self, layer: str | None = None) -> list[ManifestItem]:
        return [m for m in self.manifest if m.kept and (layer is None or m.layer == layer)]

    def kept_msg_ids(self, layer: str | None = None) -> set[str]:
        return {i for m in self.kept(layer) for i in m.msg_ids}


def preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 120 else flat[:119] + "…"


def make_item(
    layer: str,
    key: str,
    msg_ids: tuple[str, ...],
    text: str,
    tokens: int,
    kept: bool,
    reason: str | None,
    **kw: Any,
) -> ManifestItem:
    return ManifestItem(layer, key, msg_ids, preview(text), tokens, kept, reason, **kw)


def hit_item(
    hit: VectorHit, ids: tuple[str, ...], reason: str, distance: float, detail: str = ""
) -> ManifestItem:
    return make_item(
        "semantic",
        hit.id,
        ids,
        hit.text,
        count_tokens(hit.text),
        False,
        reason,
        distance=round(distance, 4),
        detail=detail,
    )


def candidate_item(
    c: Candidate, ids: tuple[str, ...], kept: bool, reason: str | None, detail: str
) -> ManifestItem:
    return make_item(
        "semantic",
        c.msg_id,
        ids,
        c.text,
        c.tokens,
        kept,
        reason,
        score=round(c.score, 4),
        relevance=round(c.relevance, 4),
        recency=round(c.recency, 4),
        distance=round(1.0 - c.similarity, 4) if c.similarity is not None else None,
        ranks=dict(c.ranks),
        detail=detail,
    )
