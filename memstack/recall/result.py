"""What ``context()`` returns: the assembled result and the manifest of every item.

The manifest lists each item the read path considered — its layer, ``msg_id``, score
parts, tokens — and why it was kept or dropped, so a caller can see why the model did
(or did not) get to read something.
"""

from __future__ import annotations

from typing import Any

from memstack.recall.ranking import Candidate
from memstack.stores.vectors.base import VectorHit
from memstack.text.token_counts import count_tokens
from memstack.types import ContextResult as ContextResult
from memstack.types import ManifestItem as ManifestItem

# Manifest reasons.
KEPT = None
BUDGET = "budget"
LIMIT = "limit"
DUPLICATE = "duplicate"
STALE = "stale_value"
IN_WINDOW = "in_window"
BELOW_THRESHOLD = "below_threshold"
CURRENT_INPUT = "current_input"


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
