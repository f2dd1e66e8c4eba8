"""The layers as they print: per-layer token budgets, packing, then assembly.

Each layer gets a share of the budget (:func:`memstack.recall.budget.allocate`), which hands
what a layer leaves unused to the layers still hungry; the packers of
:mod:`memstack.recall.packing` choose what fits each cap."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.recall.assembly import (
    Assembled,
    Labels,
    assemble,
    render_fact,
    render_history_groups,
)
from memstack.recall.budget import Allocation, Fit, allocate
from memstack.recall.gather import _Gathered
from memstack.recall.packing import pack_history, pack_lines, pack_window
from memstack.recall.ranking import Candidate
from memstack.recall.request import Request
from memstack.stores.sql.facts import StoredFact


@dataclass(frozen=True)
class Offered:
    """What each layer could print, in its order of preference."""

    fact_lines: list[tuple[StoredFact, str]]
    knowledge_items: list[Any]
    knowledge_lines: list[str]
    eligible: list[Candidate]
    window: list[Message]
    window_turns: list[Message]


@dataclass(frozen=True)
class Packed:
    """What fits: indices into the offered facts and knowledge, the history items, and
    the window turns by index (the text, which the packer may have cut)."""

    allocation: Allocation
    facts: set[int]
    knowledge: set[int]
    semantic: list[Candidate]
    window: dict[int, str]


def _knowledge_line(item: Any, labels: Labels) -> str:
    from memstack.knowledge.cache import render

    return render([item], labels.locale)


def offered(
    g: _Gathered, window: list[Message], eligible: list[Candidate], labels: Labels
) -> Offered:
    knowledge_items = list(getattr(g.knowledge, "items", ()) or ())
    return Offered(
        fact_lines=[(f, render_fact(f.key, f.value, f.source, labels)) for f in g.facts],
        knowledge_items=knowledge_items,
        knowledge_lines=[_knowledge_line(i, labels) for i in knowledge_items],
        eligible=eligible,
        window=window,
        window_turns=list(window),
    )


def _recorded(
    packs: dict[str, Any], name: str, pack: Callable[[int], tuple[Any, Fit]], cap: int
) -> Fit:
    """Runs a packer for allocate(), which sees only the fit; what the last run for
    ``name`` chose is kept in ``packs``."""
    packs[name], fit = pack(cap)
    return fit


def pack(layers: Offered, req: Request, settings: Settings) -> Packed:
    labels = req.labels
    packs: dict[str, Any] = {}
    packers: dict[str, Callable[[int], tuple[Any, Fit]]] = {
        "facts": partial(pack_lines, labels.facts, [ln for _, ln in layers.fact_lines]),
        "knowledge": partial(pack_lines, labels.knowledge, layers.knowledge_lines),
        "semantic": partial(
            pack_history, labels.history, layers.eligible, keep=settings.vector_keep
        ),
        "window": partial(pack_window, labels, layers.window_turns),
    }
    allocation = allocate(
        req.total,
        reserved=req.reserved,
        shares={
            "facts": settings.share_facts,
            "knowledge": settings.share_knowledge,
            "semantic": settings.share_semantic,
            "window": settings.share_window,
        },
        packers={name: partial(_recorded, packs, name, p) for name, p in packers.items()},
    )
    return Packed(
        allocation=allocation,
        facts=set(packs.get("facts", [])),
        knowledge=set(packs.get("knowledge", [])),
        semantic=packs.get("semantic", []),
        window=dict(packs.get("window", [])),
    )


def assemble_layers(layers: Offered, packed: Packed, req: Request) -> Assembled:
    # History in time order, so the model reads it as a story.
    history = render_history_groups(
        [
            (c.header, c.body)
            for c in sorted(packed.semantic, key=lambda c: (c.created_at or 0, c.msg_id))
        ]
    )
    window = layers.window
    return assemble(
        labels=req.labels,
        system=req.system_text,
        facts=[layers.fact_lines[i][1] for i in sorted(packed.facts)],
        knowledge=[layers.knowledge_lines[i] for i in sorted(packed.knowledge)],
        history=history,
        recent=[replace(window[i], content=text) for i, text in sorted(packed.window.items())],
        query=req.query,
    )
