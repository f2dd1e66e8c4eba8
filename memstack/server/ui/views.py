"""What the inspector's pages show, shaped from the public API's results: pages of a long
list, a fact's timeline of values, a window set beside the ledger, a manifest's rows, the
notice a decision leaves."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

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


def number_text(number: float) -> str:
    """``8,000``, ``2.5``: grouped thousands, no trailing zeros, no ``8000.0``."""
    if isinstance(number, float) and not number.is_integer():
        return f"{number:,.6f}".rstrip("0").rstrip(".")
    return f"{int(number):,}"


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def value_text(value: Any, lang: str = "en") -> str:
    """A fact's JSON value as a person reads it: a string as itself, a list joined, a
    number grouped, an amount with its currency (``8,000 CNY``), other objects as
    ``field: value`` pairs; never JSON's quotes and braces."""
    zh = lang == "zh"
    if value is None:
        return "—"
    if isinstance(value, bool):
        return ("是" if value else "否") if zh else ("yes" if value else "no")
    if _is_number(value):
        return number_text(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ("、" if zh else ", ").join(value_text(v, lang) for v in value)
    if isinstance(value, dict):
        amount = value.get("amount")
        if _is_number(amount) and set(value) <= {"amount", "currency"}:
            return f"{number_text(amount)} {value.get('currency') or ''}".strip()
        colon, sep = ("：", "；") if zh else (": ", "; ")
        return sep.join(f"{k}{colon}{value_text(v, lang)}" for k, v in value.items())
    return str(value)


@dataclass(frozen=True)
class Ending:
    """What ended a value: the message that replaced or withdrew it (``msg_id``), a value
    set by hand (``by_hand``), or a message since deleted (``deleted``). A value ended
    with nothing recorded (archived by retention) has none."""

    msg_id: str | None
    by_hand: bool = False
    deleted: bool = False


def endings(history: Iterable[StoredFact]) -> dict[int, Ending]:
    """Each ended fact's ending, by fact id: the message of the value that superseded it,
    else the message that withdrew it."""
    facts = list(history)
    successors = {f.supersedes_id: f for f in facts if f.supersedes_id is not None}
    ended: dict[int, Ending] = {}
    for fact in facts:
        if fact.valid_until is None:
            continue
        after = successors.get(fact.id)
        if after is not None and after.msg_id.startswith(BY_HAND):
            ended[fact.id] = Ending(None, by_hand=True)
        elif after is not None:
            ended[fact.id] = (
                Ending(None, deleted=True) if after.source_deleted else Ending(after.msg_id)
            )
        elif fact.ended_by_msg_id is not None:
            ended[fact.id] = Ending(fact.ended_by_msg_id)
    return ended


@dataclass(frozen=True)
class Version:
    """One value a fact held, from ``valid_from`` until ``valid_until`` (None: still)."""

    fact: StoredFact
    ending: Ending | None = None

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
    facts = list(history)
    ended = endings(facts)
    by_key: dict[str, list[Version]] = defaultdict(list)
    for fact in sorted(facts, key=lambda f: (f.key, f.valid_from, f.id)):
        by_key[fact.key].append(Version(fact, ended.get(fact.id)))
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
    """The exact moment behind a time the page shows in the viewer's zone, for machines
    (a ``<time datetime>``)."""
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
