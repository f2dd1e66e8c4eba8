"""What the inspector's pages show, shaped from the public API's results: pages of a long
list, a fact's timeline of values, a window set beside the ledger, a manifest's rows, the
notice a decision leaves."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memstack import Allocation, ManifestItem, Message, StoredFact
from memstack.core.ids import BY_HAND


@dataclass(frozen=True)
class Pager:
    """One page of ``total`` items, ``size`` a page; pages count from 1."""

    page: int
    pages: int
    size: int

    @classmethod
    def of(cls, total: int, size: int, requested: int | None, *, last_first: bool = False) -> Pager:
        """``requested`` is clamped into range; with none, the first page, or the last
        when ``last_first`` (a conversation is read from its newest messages)."""
        pages = max(1, math.ceil(total / size))
        page = requested if requested is not None else (pages if last_first else 1)
        return cls(min(max(page, 1), pages), pages, size)

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size

    def window(self, around: int = 3) -> list[int]:
        """The page numbers to link: the first, the last and a few around this one."""
        near = range(max(1, self.page - around), min(self.pages, self.page + around) + 1)
        return sorted({1, self.pages, *near})


def value_text(value: Any) -> str:
    """A fact's JSON value as text, Chinese kept readable."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Version:
    """One value a fact held, from ``valid_from`` until ``valid_until`` (None: still)."""

    fact: StoredFact
    text: str

    @property
    def current(self) -> bool:
        return self.fact.valid_until is None

    @property
    def by_hand(self) -> bool:
        return self.fact.msg_id.startswith(BY_HAND)

    @property
    def has_message(self) -> bool:
        """Whether the message that stated it can be shown: not set by hand, not erased."""
        return not (self.by_hand or self.fact.source_deleted)


def timelines(history: Iterable[StoredFact]) -> list[tuple[str, list[Version]]]:
    """The history grouped by key (keys in order), each key's values oldest first, so a
    row reads old value → new value."""
    by_key: dict[str, list[Version]] = defaultdict(list)
    for fact in sorted(history, key=lambda f: (f.key, f.valid_from, f.id)):
        by_key[fact.key].append(Version(fact, value_text(fact.value)))
    return sorted(by_key.items())


@dataclass(frozen=True)
class Row:
    """A message as the session page lists it."""

    message: Message
    in_window: bool
    stored: bool


def ledger_rows(page: Sequence[Message], window: Sequence[Message]) -> list[Row]:
    in_window = {m.msg_id for m in window}
    return [Row(m, m.msg_id in in_window, True) for m in page]


def window_rows(window: Sequence[Message], stored_ids: set[str]) -> list[Row]:
    """The window, newest last; a message the ledger does not hold yet is still queued for
    the worker (or was lost with its job, which the dead letters would show)."""
    return [Row(m, True, m.msg_id in stored_ids) for m in window]


@dataclass(frozen=True)
class LayerBudget:
    layer: str
    cap: int
    used: int


def layer_budgets(allocation: Allocation) -> list[LayerBudget]:
    layers = [*allocation.caps, *(k for k in allocation.used if k not in allocation.caps)]
    return [
        LayerBudget(name, allocation.caps.get(name, 0), allocation.used.get(name, 0))
        for name in layers
    ]


def manifest_order(manifest: Iterable[ManifestItem]) -> list[ManifestItem]:
    """Kept items first, each group by layer and then by score, best first: the reader
    sees what the model got, then what it lost and why."""
    return sorted(manifest, key=lambda m: (not m.kept, m.layer, -(m.score or 0.0)))


def iso(moment: datetime | None) -> str:
    """The machine-readable time a page's script turns into the viewer's own zone."""
    return moment.isoformat() if moment is not None else ""


@dataclass(frozen=True)
class Notice:
    """What the decision that led to this page did, said once at its top."""

    kind: str  # "confirmed" or "rejected", naming the words that say it
    candidate_id: int

    @classmethod
    def of(cls, *, confirmed: int | None, rejected: int | None) -> Notice | None:
        if confirmed is not None:
            return cls("confirmed", confirmed)
        return cls("rejected", rejected) if rejected is not None else None
