"""Manifest items for the current input and the packed layers: what each layer offered
and whether it fits (filter drops are recorded where they happen)."""

from __future__ import annotations

from memstack.core.messages import Message
from memstack.recall.filters import covered_ids
from memstack.recall.layers import Offered, Packed
from memstack.recall.result import (
    BUDGET,
    CURRENT_INPUT,
    KEPT,
    LIMIT,
    ManifestItem,
    candidate_item,
    make_item,
)
from memstack.text.token_counts import count_tokens


def without_current_input(
    window: list[Message], query: str
) -> tuple[list[Message], list[ManifestItem]]:
    """The recent window without its last message if that is the query itself, which
    the context prints as the current input; the manifest item saying so."""
    window = list(window)
    if not (window and window[-1].role == "user" and window[-1].content.strip() == query):
        return window, []
    current = window.pop()
    item = make_item(
        "window", current.msg_id, (current.msg_id,), current.content, 0, False, CURRENT_INPUT
    )
    return window, [item]


def _fact_items(layers: Offered, kept: set[int]) -> list[ManifestItem]:
    return [
        make_item(
            "facts",
            f"fact:{f.id}",
            (f.msg_id,),
            line,
            count_tokens(line),
            i in kept,
            None if i in kept else BUDGET,
            score=f.confidence,
            detail=f.key,
        )
        for i, (f, line) in enumerate(layers.fact_lines)
    ]


def _knowledge_items(layers: Offered, kept: set[int]) -> list[ManifestItem]:
    pairs = zip(layers.knowledge_items, layers.knowledge_lines, strict=True)
    return [
        make_item(
            "knowledge",
            str(getattr(item, "chunk_id", "") or i),
            (),
            line,
            count_tokens(line),
            i in kept,
            None if i in kept else BUDGET,
            score=float(getattr(item, "score", 0.0)),
            detail=str(getattr(item, "origin", "")),
        )
        for i, (item, line) in enumerate(pairs)
    ]


def _semantic_items(layers: Offered, packed: Packed, keep: int) -> list[ManifestItem]:
    chosen_ids = {c.msg_id for c in packed.semantic}
    items = []
    for rank, c in enumerate(layers.eligible):
        ids = covered_ids(c)
        if c.msg_id in chosen_ids:
            items.append(candidate_item(c, ids, True, KEPT, ""))
        else:
            why = LIMIT if rank >= keep else BUDGET
            items.append(candidate_item(c, ids, False, why, ""))
    return items


def _window_items(layers: Offered, kept: dict[int, str]) -> list[ManifestItem]:
    items = []
    for i, wm in enumerate(layers.window):
        fits = i in kept
        items.append(
            make_item(
                "window",
                wm.msg_id,
                (wm.msg_id,),
                wm.content,
                count_tokens(wm.content),
                fits,
                None if fits else BUDGET,
                detail="truncated" if fits and kept[i] != wm.content else "",
            )
        )
    return items


def packed_items(layers: Offered, packed: Packed, keep: int) -> list[ManifestItem]:
    """Every offered item of each layer, kept or dropped for the budget (or, in the
    history, for ``keep``), in the order facts, knowledge, history, window."""
    return [
        *_fact_items(layers, packed.facts),
        *_knowledge_items(layers, packed.knowledge),
        *_semantic_items(layers, packed, keep),
        *_window_items(layers, packed.window),
    ]
